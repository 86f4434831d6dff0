// SPDX-License-Identifier: MIT
#pragma once
/// @file watcher_setup.hpp
/// fence_nvfence's two actions for the watcher of each node (nvfenced with
/// role = watch, docs/PACEMAKER.md), beside the fence-agents API:
///
///  - `setup-watcher`: from the stonith parameters (given as options, or
///    read from the CIB's fence_nvfence resource when neither devices nor
///    node_ids are given) and this node's name, writes one nvfenced
///    configuration per device (<conf dir>/<volume>.conf), enables and
///    (re)starts nvfenced@<volume>.service, and records what it wrote as
///    the node attribute `nvfence-watcher` in the CIB.
///  - `check-config`: reads the CIB once (the fence_nvfence resource and
///    every node's `nvfence-watcher`) and reports, node by node, whether its
///    node id, cluster tag, devices and timeouts agree with the stonith
///    configuration; on this node it also compares the files themselves.
///
/// Exit codes: setup-watcher 0 done, 1 failed (nothing half-written: each
/// file is replaced atomically); check-config 0 every node agrees, 1 the
/// check could not run (no CIB, no or several fence_nvfence resources),
/// 2 a node differs or recorded no watcher.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fence_agent.hpp"
#include "options.hpp"

namespace nvfence::fence_agent {

/// check-config's exit code when a node differs.
inline constexpr int kExitDiffers = 2;

/// The node attribute setup-watcher records and check-config reads.
inline constexpr const char* kWatcherAttribute = "nvfence-watcher";

/// The first line of every file setup-watcher writes; a file without it is
/// never replaced.
inline constexpr const char* kWatcherHeader =
    "# Written by 'fence_nvfence -o setup-watcher' from the stonith parameters; run it again to change.";

/// What one node's watcher is: the values check-config compares.
struct WatcherSettings {
    uint8_t node = 0;                      ///< node_id
    uint8_t tag = 0;                       ///< cluster_tag
    std::vector<std::string> devices;      ///< the devices, as the stonith resource names them
    uint32_t interval_ms = 0;              ///< interval_ms
    uint32_t device_timeout_ms = 0;        ///< device_timeout_ms
    std::string state_dir;                 ///< state_dir (where fence_nvfence -o on records unfencing)
};

/// The watcher the stonith options @p o ask of node @p node.
WatcherSettings watcher_for(const Options& o, uint8_t node, std::vector<std::string> devices);

/// The nvfenced configuration of @p w for @p device.
std::string watcher_conf_text(const WatcherSettings& w, const std::string& device);

/// The node attribute's value: "node_id=2 cluster_tag=7 interval_ms=500 ...".
std::string watcher_record(const WatcherSettings& w);

/// Parses watcher_record()'s text; nullopt (with @p why) when malformed.
std::optional<WatcherSettings> parse_watcher_record(std::string_view text, std::string& why);

/// "what differs" lines between @p want and @p have, empty when they agree.
std::vector<std::string> watcher_differences(const WatcherSettings& want, const WatcherSettings& have);

/// One primitive of the CIB: its id and instance attributes.
struct CibPrimitive {
    std::string id;
    std::map<std::string, std::string> params;
};

/// Every `<primitive class="stonith" type="fence_nvfence">` of @p cib_xml
/// (cibadmin --query output), with its instance attributes (XML entities
/// decoded).
std::vector<CibPrimitive> cib_fence_nvfence_resources(std::string_view cib_xml);

/// node uname -> value of the node attribute @p name, from the
/// configuration's `<nodes>` of @p cib_xml.
std::map<std::string, std::string> cib_node_attribute(std::string_view cib_xml, const std::string& name);

/// The options of @p r as Pacemaker's fencer would give them (key=value
/// lines through parse_stdin), with @p action.
Parsed stonith_options(const CibPrimitive& r, const std::string& action);

/// `setup-watcher`.
int action_setup_watcher(const Options& o, Host& host, std::string& out);

/// `check-config`.
int action_check_config(Host& host, std::string& out);

}  // namespace nvfence::fence_agent
