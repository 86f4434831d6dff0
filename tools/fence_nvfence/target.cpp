// SPDX-License-Identifier: MIT
#include "target.hpp"

#include "nvfence/error.hpp"
#include "nvfence/key.hpp"
#include "internal/list.hpp"

namespace nvfence::fence_agent {
namespace {

std::string label_of(const std::string& name, uint32_t id) { return name + " (node " + std::to_string(id) + ")"; }

std::string known_nodes(const NodeMap& m) {
    std::string s;
    for (const auto& [n, id] : m.ids) s += (s.empty() ? "" : ", ") + n + ":" + std::to_string(id);
    return s.empty() ? "none" : s;
}

std::string map_name(const NodeMap& m) { return m.from_corosync ? "corosync's nodelist" : "node_ids"; }

Result<Target> make_target(const NodeMap& m, const std::string& name, uint32_t id, std::string& why) {
    if (id < 1 || id > kMaxNode) {
        why = "node '" + name + "' has id " + std::to_string(id) + " in " + map_name(m) +
              ", which does not fit the node field of an nvfence key (1-255): give node_ids=name:id;...";
        return make_error_code(Errc::invalid_argument);
    }
    return Target{static_cast<uint8_t>(id), label_of(name, id)};
}

// nodeid (corosync's) checked against, or standing in for, the target.
Result<Target> apply_nodeid(const TargetArgs& a, const NodeMap& m, std::optional<Target> t, std::string& why) {
    if (!a.nodeid || !m.from_corosync) {
        if (t) return *t;
        why = "the node to act on is missing (plug, port or nodename; -n on the command line)";
        return make_error_code(Errc::not_found);
    }
    if (t) {
        if (*a.nodeid == t->id) return *t;
        why = "nodeid " + std::to_string(*a.nodeid) + " and " + t->label +
              " name different nodes: the cluster's node ids and its names disagree";
        return make_error_code(Errc::invalid_argument);
    }
    for (const auto& [n, id] : m.ids)
        if (id == *a.nodeid) return make_target(m, n, id, why);
    why = "nodeid " + std::to_string(*a.nodeid) + " is not in corosync's nodelist (" + known_nodes(m) + ")";
    return make_error_code(Errc::not_found);
}

}  // namespace

std::optional<std::pair<std::string, uint32_t>> find_node_by_name(const NodeMap& m, const std::string& name) {
    if (name.empty()) return std::nullopt;
    if (auto it = m.ids.find(name); it != m.ids.end()) return *it;
    const std::string short_name = name.substr(0, name.find('.'));
    if (auto it = m.ids.find(short_name); it != m.ids.end()) return *it;
    return std::nullopt;
}

std::optional<std::pair<std::string, uint32_t>> find_plug(const NodeMap& m, const std::string& plug) {
    if (auto n = find_node_by_name(m, plug)) return n;
    auto id = parse_uint(plug, 1, UINT32_MAX);
    if (!id) return std::nullopt;
    for (const auto& [n, nid] : m.ids)
        if (nid == *id) return std::make_pair(n, nid);
    return std::nullopt;
}

Result<Target> resolve_target(const TargetArgs& a, const NodeMap& m, std::string& why) {
    std::optional<Target> t;
    if (!a.plug.empty()) {
        auto p = find_plug(m, a.plug);
        if (!p) {
            why = "unknown plug '" + a.plug + "': neither a node name nor a node id of " + map_name(m) + " (" +
                  known_nodes(m) + ")";
            return make_error_code(Errc::not_found);
        }
        auto pt = make_target(m, p->first, p->second, why);
        if (!pt) return pt.error();
        t = *pt;
        if (auto n = find_node_by_name(m, a.nodename); n && n->second != p->second) {
            why = "plug '" + a.plug + "' is " + t->label + " but nodename '" + a.nodename + "' is " +
                  label_of(n->first, n->second) + ": pcmk_host_map and " + map_name(m) + " disagree";
            return make_error_code(Errc::invalid_argument);
        }
    } else if (!a.nodename.empty()) {
        auto n = find_node_by_name(m, a.nodename);
        if (!n) {
            why = "node '" + a.nodename + "' is not in " + map_name(m) + " (" + known_nodes(m) + ")";
            return make_error_code(Errc::not_found);
        }
        auto nt = make_target(m, n->first, n->second, why);
        if (!nt) return nt.error();
        t = *nt;
    }
    return apply_nodeid(a, m, t, why);
}

}  // namespace nvfence::fence_agent
