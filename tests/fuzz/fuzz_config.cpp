// SPDX-License-Identifier: MIT
// Fuzzes nvfenced's configuration: the file (CLI11's INI/TOML reader, as
// nvfenced uses it) and the validation of its keys (parse_agent_settings).
// Properties: no exception escapes but CLI11's documented ones; a
// configuration that validates gives AgentOptions inside every bound; one
// that does not names the offending key in its message.

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "fuzz_check.hpp"
#include "agent/agent.hpp"
#include "agent/agent_config.hpp"
#include "nvfence/error.hpp"

using namespace nvfence;

namespace {

void validate(const SettingsMap& kv) {
    std::string why;
    auto s = parse_agent_settings(kv, why);
    if (!s) {
        FUZZ_CHECK(s.error() == Errc::invalid_argument);
        FUZZ_CHECK(!why.empty());
        return;
    }
    for (const auto& [k, v] : kv) {
        bool known = false;
        for (const auto& key : agent_setting_keys()) known = known || key == k;
        FUZZ_CHECK(known);
    }
    const AgentOptions o = agent_options(*s, 1);
    FUZZ_CHECK(o.interval_ms >= kMinIntervalMs && o.interval_ms <= kMaxIntervalMs);
    FUZZ_CHECK(o.device_timeout_ms >= kMinDeviceTimeoutMs && o.device_timeout_ms <= kMaxDeviceTimeoutMs);
    FUZZ_CHECK(o.type == ResvType::write_exclusive || o.type == ResvType::write_exclusive_reg_only);
    FUZZ_CHECK(o.view_timeout_ms == 0 || (o.view_timeout_ms >= 1000 && o.view_timeout_ms <= 600000));
    FUZZ_CHECK(!s->state_dir.empty() && s->state_dir[0] == '/');
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    // The file, through CLI11's reader.
    std::istringstream in(text);
    std::vector<CLI::ConfigItem> items;
    try {
        items = CLI::ConfigINI().from_config(in);
    } catch (const CLI::Error&) {
        items.clear();
    }
    SettingsMap kv;
    for (const auto& it : items) {
        std::string joined;
        for (const auto& v : it.inputs) joined += (joined.empty() ? "" : " ") + v;
        kv[it.name] = joined;
    }
    validate(kv);
    // The validation alone, on `key=value` lines taken as they are.
    SettingsMap raw;
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line) && raw.size() < 64) {
        const size_t eq = line.find('=');
        if (eq != std::string::npos) raw[line.substr(0, eq)] = line.substr(eq + 1);
    }
    validate(raw);
    return 0;
}
