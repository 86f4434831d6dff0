// SPDX-License-Identifier: MIT
#pragma once
/// @file options.hpp
/// fence_nvfence's options, read the way Pacemaker's fencer and the
/// fence-agents library pass them: from argv when there are arguments,
/// otherwise from stdin as `key=value` lines.
///
/// stdin rules (fence-agents' fencing.py behaves the same):
///  - blank lines and lines starting with `#` are skipped;
///  - `-` and `_` in a name are equivalent; a value in double quotes loses
///    them; the last value of an option wins;
///  - an unknown name is warned about and ignored (Pacemaker passes every
///    parameter of the stonith resource);
///  - booleans take 1/yes/on/true and 0/no/off/false (any case); anything
///    else is warned about and ignored;
///  - `option` is the deprecated name of `action` (FenceAgentAPI);
///  - `port` is the deprecated name of `plug` (the same option: the last
///    line of either wins); `nodename` and `nodeid` (which Pacemaker sends
///    with the target's name and corosync node id) are kept as given: how
///    they name the target is target.hpp's rule;
///  - a `nodeid` that is not a number is warned about and ignored.
/// argv rules: GNU getopt style (`-o off`, `-ooff`, `--action=off`,
/// `--action off`, `-vv`); an unknown option is an error (exit 1, as
/// fence-agents); the last occurrence of an option wins.

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "nvfence/result.hpp"

namespace nvfence::fence_agent {

/// The actions of the fence-agents API that fence_nvfence implements.
enum class Action { on, off, status, monitor, list, list_status, metadata, manpage, validate_all,
                    setup_watcher,  ///< not in the metadata: an administrator's action (watcher_setup.hpp)
                    check_config }; ///< not in the metadata: an administrator's action (watcher_setup.hpp)

/// The action's name as fence-agents spells it ("validate-all", ...).
const char* action_name(Action a);

/// Which reservation the fenced devices carry.
enum class Mode {
    registrants_only,  ///< Write Exclusive - Registrants Only (NVMe RTYPE 3).
    exclusive,         ///< Write Exclusive (NVMe RTYPE 1).
};

/// "registrants-only" or "exclusive".
const char* mode_name(Mode m);

/// Every option, after parsing. Defaults are the metadata's defaults.
struct Options {
    Action action = Action::off;             ///< -o/--action (default off).
    std::string plug;                        ///< -n/--plug (or port): the target node.
    std::string nodename;                    ///< nodename: the target's node name (Pacemaker).
    std::optional<uint32_t> nodeid;          ///< nodeid: the target's corosync node id (Pacemaker).
    std::vector<std::string> devices;        ///< -d/--devices, comma or space separated.
    std::optional<uint8_t> key_node;         ///< -k/--key: the target's node id, overriding the map.
    std::string node_ids;                    ///< --node-ids: "n1:1;n2:2" (kept as text, see parse_node_map).
    Mode mode = Mode::registrants_only;      ///< --reservation-type.
    uint8_t tag = 0;                         ///< --cluster-tag: the key's cluster tag.
    bool tag_given = false;                  ///< cluster_tag was given (else derived: agent/cluster_tag.hpp).
    bool tag_from_name = false;              ///< set by run(): tag derived from corosync's cluster name.
    uint32_t delay_s = 0;                    ///< --delay: seconds before off (0..3600).
    bool aptpl = false;                      ///< -a/--aptpl: 'on' makes the reservation persist through power loss.
    unsigned verbose = 0;                    ///< -v (counted) / verbose=1.
    bool quiet = false;                      ///< -q/--quiet: nothing on stderr.
    std::string debug_file;                  ///< -D/--debug-file: log lines appended here too.
    std::string corosync_cmap_path = "/usr/sbin/corosync-cmapctl";  ///< --corosync-cmap-path.
    std::string state_dir = "/var/lib/nvfence";  ///< --state-dir: epoch files (shared with nvfence).
    std::string agent_socket;                ///< --agent-socket: nvfenced's socket ("" = search /run/nvfence).
    std::string separator = ",";             ///< -C/--separator: between the fields of list and list-status.
    uint32_t watcher_interval_ms = 500;      ///< --watcher-interval-ms: the watchers' interval_ms.
    uint32_t watcher_device_timeout_ms = 5000;  ///< --watcher-device-timeout-ms: the watchers' device_timeout_ms.
    bool help = false;                       ///< -h/--help.
    bool version = false;                    ///< -V/--version.

    /// True when anything names a target (plug, nodename, nodeid or key).
    bool has_target() const { return !plug.empty() || !nodename.empty() || nodeid || key_node; }
};

/// The result of parsing: options plus what was wrong, for people.
struct Parsed {
    Options opts;                        ///< Options (defaults where not given).
    std::vector<std::string> warnings;   ///< Ignored input (unknown keys, bad booleans).
    std::vector<std::string> errors;     ///< Invalid input; any error means exit 1.
    /// True without errors.
    bool ok() const { return errors.empty(); }
};

/// Parses argv without the program name.
Parsed parse_argv(std::span<const std::string> args);

/// Parses stdin text (`key=value` lines).
Parsed parse_stdin(std::string_view text);

/// Splits a device list on commas and white space; empty items dropped.
std::vector<std::string> split_devices(std::string_view text);

/// Parses a node map `name:id` items separated by `;`, `,` or white space
/// (`=` is accepted for `:`). Ids 1..255 (the node field of the key);
/// names and ids unique. Errc::invalid_argument with @p why set otherwise.
Result<std::map<std::string, uint8_t>> parse_node_map(std::string_view text, std::string& why);

/// The node id of corosync's node @p name in `corosync-cmapctl nodelist`
/// output (the entry whose `name` or `ring0_addr` is @p name), or of this
/// node from `runtime.votequorum.this_node_id` when @p name is empty.
/// Errc::not_found when absent; Errc::invalid_argument (with @p why) when
/// the id does not fit a key's node field (1..255).
Result<uint8_t> parse_cmap_nodeid(std::string_view cmap_output, const std::string& name, std::string& why);

/// Every `name -> nodeid` of `corosync-cmapctl nodelist` output, by the
/// entry's `name` (or `ring0_addr` when it has no name).
std::map<std::string, uint32_t> parse_cmap_nodelist(std::string_view cmap_output);

}  // namespace nvfence::fence_agent
