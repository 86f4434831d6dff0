// SPDX-License-Identifier: MIT
#pragma once
/// @file target.hpp
/// Which node an action is about, from what Pacemaker (or a person) passes.
///
/// Pacemaker runs a fence agent for target node T with `nodename=T`,
/// `plug=` (or `port=`) T's alias from `pcmk_host_map` (T itself without a
/// map) and, in some versions, `nodeid=` T's corosync node id. fence_scsi
/// lets `nodename` override `plug`; the fence-agents API prefers `plug`.
/// fence_nvfence accepts either and refuses when they disagree, so neither
/// convention can make it act on the wrong node:
///
///  1. `key` (-k) names the node id directly; plug, nodename and nodeid are
///     then not looked up (as fence_scsi's -k).
///  2. `plug` is the target when given: a node name of the node map (or its
///     short name, the part before the first dot), else a decimal node id
///     that the map gives to a node (so `pcmk_host_map="a:1;b:2"` works with
///     `node_ids="a:1;b:2"`). Anything else is an unknown plug: exit 1.
///  3. `nodename` is looked up by name only. Without a plug it is the
///     target (unknown: exit 1); with one it must name the same node, or the
///     action fails (exit 1: pcmk_host_map and node_ids disagree). A
///     nodename the map does not know is ignored when a plug is given.
///  4. `nodeid` is a corosync node id: it is used only when the map is
///     corosync's nodelist (no node_ids), as the target when nothing else
///     names one and as a check (it must be the same node) otherwise. With
///     node_ids it is ignored, because node_ids' ids are not corosync's.
/// The node map is `node_ids` when given, else corosync's nodelist.

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "nvfence/result.hpp"

namespace nvfence::fence_agent {

/// The cluster's nodes by name.
struct NodeMap {
    std::map<std::string, uint32_t> ids;  ///< name -> node id
    bool from_corosync = false;           ///< ids are corosync's nodeids (no node_ids given)
};

/// What names the target.
struct TargetArgs {
    std::string plug;                ///< plug or port ("" = none)
    std::string nodename;            ///< nodename ("" = none)
    std::optional<uint32_t> nodeid;  ///< nodeid (corosync's)
};

/// The node an action is about.
struct Target {
    uint8_t id = 0;     ///< the node field of its keys (1..255)
    std::string label;  ///< for messages: "b (node 2)"
};

/// A node of @p m by name: exact, then the short name of @p name.
std::optional<std::pair<std::string, uint32_t>> find_node_by_name(const NodeMap& m, const std::string& name);

/// A plug of @p m: a node name (find_node_by_name), else a decimal node id
/// that @p m gives to a node.
std::optional<std::pair<std::string, uint32_t>> find_plug(const NodeMap& m, const std::string& plug);

/// The target named by @p a in @p m, by the rule above (without `key`).
/// Errc::not_found with @p why when nothing names a known node,
/// Errc::invalid_argument when the names disagree or the id does not fit a
/// key's node field (1..255).
Result<Target> resolve_target(const TargetArgs& a, const NodeMap& m, std::string& why);

}  // namespace nvfence::fence_agent
