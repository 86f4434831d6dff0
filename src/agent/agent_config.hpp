// SPDX-License-Identifier: MIT
#pragma once
/// @file agent_config.hpp
/// nvfenced's configuration: the keys of its config file (and flags), their
/// validation with the offending key named, and resolving the `device` key
/// (a path, a /dev/disk/by-id link, or an EBS volume id) to a namespace.
///
/// Keys (config file `key = value`, INI or TOML; the same names as flags
/// `--key`; agent_setting_keys() is the list, man/nvfenced.conf.5 the
/// user's reference, and tests/docs checks that they agree):
///
/// | key               | values                                  | default |
/// |-------------------|-----------------------------------------|---------|
/// | device            | /dev/nvmeXnY, /dev/disk/by-id/..., vol-…| required|
/// | node_id           | 1..255                                  | persisted|
/// | cluster_tag       | 0..255                                  | 0; watch: from corosync's cluster name |
/// | mode              | exclusive (WE) \| shared (WERO)         | exclusive|
/// | role              | standby \| acquire \| watch (check-only) | standby |
/// | interval_ms       | 50..60000                               | 1000    |
/// | device_timeout_ms | 100..120000                             | 5000    |
/// | fence_action      | none \| command \| stop-unit \| reboot  | none    |
/// | fence_command     | shell command (fence_action=command)    |         |
/// | fence_unit        | systemd unit (fence_action=stop-unit)   |         |
/// | reboot_method     | sysrq \| force                          | sysrq   |
/// | fence_timeout_ms  | 100..600000                             | 30000   |
/// | writer_units      | systemd units stopped when fenced       | (none)  |
/// | control_socket    | absolute path                           | /run/nvfence/NAME.sock |
/// | socket_group      | group name or gid (socket mode 0660)    | (none)  |
/// | socket_mode       | 0600 \| 0660 (needs socket_group)      | 0600 (0660 with socket_group) |
/// | state_dir         | absolute path                           | /var/lib/nvfence |
/// | keep_registration | true \| false                           | false   |
/// | ptpl              | true \| false (CPTPL set on each Register) | false   |
/// | rejoin            | auto \| manual (auto: Agent rejoin_auto) | auto with elector = etcd, else manual |
/// | name              | instance name [A-Za-z0-9._-]            | volume  |
/// | log_level         | debug \| info \| warning \| error       | info    |
/// | view_timeout_ms   | 0 (3 x interval + device timeout) or 1000..600000 | 0 |
/// | fence_on_view_loss| true \| false (a HOLDER that lost its view fences itself) | true |
/// | aen_wakeup        | true \| false (check at once on the controller's NVME_AEN uevent) | true |
/// | hardware_watchdog | /dev/watchdogN                          | (none)  |
/// | hardware_watchdog_timeout_s | above 2 x (interval + device timeout), at most 3600 | 60 |
/// | metrics_dir       | absolute path: node_exporter's textfile directory | (none: no metrics) |

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent.hpp"
#include "nvfence/namespace.hpp"
#include "nvfence/result.hpp"

namespace nvfence {

/// What nvfenced does to this host when it is fenced, after stopping the
/// writer units.
enum class FenceActionKind : uint8_t {
    none,       ///< Nothing more (writers are still stopped).
    command,    ///< `/bin/sh -c fence_command`.
    stop_unit,  ///< `systemctl stop fence_unit`.
    reboot,     ///< Reboot at once, as sbd does (reboot_method).
};

/// Words for a fence action as written in the configuration.
const char* fence_action_name(FenceActionKind k);

/// How fence_action=reboot reboots.
enum class RebootMethod : uint8_t {
    sysrq,  ///< Write 'b' to /proc/sysrq-trigger (no sync); `reboot -ff` if that fails.
    force,  ///< `reboot -f`.
};

/// nvfenced's validated configuration.
struct AgentSettings {
    std::string device;                        ///< device: as given.
    std::optional<uint8_t> node;               ///< node_id (nullopt: use the persisted one).
    uint8_t tag = 0;                           ///< cluster_tag.
    bool tag_given = false;                    ///< cluster_tag was given (else a watcher derives it: cluster_tag.hpp).
    ResvType type = ResvType::write_exclusive; ///< mode.
    StartRole role = StartRole::standby;       ///< role.
    uint32_t interval_ms = 1000;               ///< interval_ms.
    uint32_t device_timeout_ms = 5000;         ///< device_timeout_ms.
    FenceActionKind fence_action = FenceActionKind::none;  ///< fence_action.
    std::string fence_command;                 ///< fence_command.
    std::string fence_unit;                    ///< fence_unit.
    RebootMethod reboot_method = RebootMethod::sysrq;      ///< reboot_method.
    uint32_t fence_timeout_ms = 30000;         ///< fence_timeout_ms.
    std::vector<std::string> writer_units;     ///< writer_units.
    std::string control_socket;                ///< control_socket ("": default).
    std::string socket_group;                  ///< socket_group ("": none).
    uint32_t socket_mode = 0600;               ///< socket_mode.
    std::string state_dir = "/var/lib/nvfence";///< state_dir.
    bool keep_registration = false;            ///< keep_registration.
    bool ptpl = false;                         ///< ptpl: Persist Through Power Loss.
    std::optional<bool> rejoin_auto;           ///< rejoin (unset: the daemon decides from the elector).
    std::string name;                          ///< name ("": the volume name).
    std::string log_level = "info";            ///< log_level.
    uint32_t view_timeout_ms = 0;              ///< view_timeout_ms (0: automatic).
    bool fence_on_view_loss = true;            ///< fence_on_view_loss.
    bool aen_wakeup = true;                    ///< aen_wakeup (see uevent.hpp).
    std::string hardware_watchdog;             ///< hardware_watchdog ("": none; see hardware_watchdog.hpp).
    uint32_t hardware_watchdog_timeout_s = 60; ///< hardware_watchdog_timeout_s.
    std::string metrics_dir;                   ///< metrics_dir ("": no metrics file; see metrics.hpp).
};

/// The least hardware_watchdog_timeout_s for @p interval_ms and
/// @p device_timeout_ms: above 2 x (interval_ms + device_timeout_ms), the
/// rule WatchdogSec follows, so a slow check never gets a healthy host reset.
uint32_t min_hardware_watchdog_timeout_s(uint32_t interval_ms, uint32_t device_timeout_ms);

/// Raw configuration: key -> value as written (writer_units: names
/// separated by spaces or commas).
using SettingsMap = std::map<std::string, std::string>;

/// Every key parse_agent_settings() accepts.
const std::vector<std::string>& agent_setting_keys();

/// Validates @p kv. On failure returns Errc::invalid_argument and @p why
/// names the key and says what is wrong, e.g.
/// `interval_ms = "0": must be a whole number from 50 to 60000`.
Result<AgentSettings> parse_agent_settings(const SettingsMap& kv, std::string& why);

/// The options of the Agent for @p s with node id @p node.
AgentOptions agent_options(const AgentSettings& s, uint8_t node);

/// Resolves the device key: an absolute path is returned as is (links are
/// followed by Namespace::open); `nvmeXnY` becomes `<dev_root>/nvmeXnY`; an
/// EBS volume id (`vol-0123…` or `vol0123…`) is found by scanning
/// `<sys_root>/class/nvme/*/serial` (EBS serials are the id without the
/// dash) and returns the controller's namespace; any other volume id (e.g.
/// `nguid-…`) is `<dev_root>/nvfence/<id>`, the udev rules' stable link, if
/// it exists. Errc::not_found (no match), Errc::invalid_argument (ambiguous
/// or unusable); @p why says which.
Result<std::string> resolve_device_spec(const std::string& spec, const std::string& sys_root,
                                        std::string& why, const std::string& dev_root = "/dev");

/// The volume name used for the state, epoch and lock files and the default
/// instance name: NamespaceInfo::volume (volume_id(): the EBS volume id,
/// `nguid-…`, `eui-…` or `<serial>-n<nsid>`), the name `nvfence` uses for
/// its epoch file and the udev rules use for the instance.
std::string agent_volume_name(const NamespaceInfo& info);


/// True when @p s is a usable instance / volume name: 1..64 characters of
/// [A-Za-z0-9._-], not starting with '.' or '-'.
bool valid_instance_name(const std::string& s);

}  // namespace nvfence
