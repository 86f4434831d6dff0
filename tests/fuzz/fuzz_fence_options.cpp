// SPDX-License-Identifier: MIT
// Fuzzes fence_nvfence's parsers of user input (tools/fence_nvfence/
// options.cpp): stdin key=value text, argv, the node map and
// corosync-cmapctl output. Properties: nothing crashes; a parsed map has
// unique names and ids in 1..255 and prints back to a text that parses to
// the same map; a node id from corosync fits a key's node field.

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.hpp"
#include "options.hpp"

using namespace nvfence::fence_agent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);

    const Parsed s = parse_stdin(text);
    if (s.ok()) FUZZ_CHECK(s.opts.delay_s <= 3600);

    std::vector<std::string> args;
    std::string cur;
    for (char c : text) {
        if (c == '\0' || c == '\n') {
            args.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    args.push_back(cur);
    const Parsed a = parse_argv(args);
    if (a.ok() && a.opts.key_node) FUZZ_CHECK(*a.opts.key_node >= 1);

    std::string why;
    if (auto m = parse_node_map(text, why)) {
        FUZZ_CHECK(!m->empty());
        std::set<uint8_t> ids;
        std::string again;
        for (const auto& [name, id] : *m) {
            FUZZ_CHECK(!name.empty() && id >= 1);
            FUZZ_CHECK(ids.insert(id).second);
            again += name + ":" + std::to_string(id) + ";";
        }
        auto m2 = parse_node_map(again, why);
        FUZZ_CHECK(m2 && *m2 == *m);
    } else {
        FUZZ_CHECK(!why.empty());
    }

    for (const auto& [name, id] : parse_cmap_nodelist(text)) FUZZ_CHECK(id >= 1 && !name.empty());
    if (auto id = parse_cmap_nodeid(text, "", why)) FUZZ_CHECK(*id >= 1);
    if (auto id = parse_cmap_nodeid(text, "n1", why)) FUZZ_CHECK(*id >= 1);
    for (const auto& d : split_devices(text)) FUZZ_CHECK(!d.empty());
    return 0;
}
