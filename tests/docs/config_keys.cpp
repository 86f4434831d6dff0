// SPDX-License-Identifier: MIT
// Prints every key nvfenced's configuration parsers accept, one per line:
// agent_setting_keys() then elector_setting_keys(). The doc tests
// (config_keys_test.py) compare this list with nvfenced.conf(5), the
// example configuration and the key tables of docs/AGENT.md and
// docs/ETCD.md, so the list comes from the parsers' own tables.
#include <iostream>

#include "agent/agent_config.hpp"
#include "elector/elector_config.hpp"

int main() {
    for (const auto& k : nvfence::agent_setting_keys()) std::cout << k << '\n';
    for (const auto& k : nvfence::elector_setting_keys()) std::cout << k << '\n';
    return std::cout.good() ? 0 : 1;
}
