// SPDX-License-Identifier: MIT
#pragma once
/// @file fence_agent.hpp
/// fence_nvfence's actions (fence-agents API) on top of libnvfence, with
/// everything that touches the host behind the Host hooks so unit tests can
/// run every action against the in-memory device model.
///
/// Exit codes (fence-agents): 0 success (status: the node is ON), 1 any
/// failure (bad options included, as fence-agents' fail_usage; an unknown
/// plug; a device-mapper device), 2 status: the node is OFF.
///
/// Keys: a node's key is nvfence's `nf:TAG:NODE:EPOCH`; a node is ON on a
/// device while any key of its tag and node id is registered there,
/// whatever the epoch.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nvfence/control.hpp"
#include "nvfence/fence.hpp"
#include "nvfence/reservation.hpp"
#include "nvfence/state_file.hpp"
#include "options.hpp"
#include "target.hpp"

namespace nvfence::fence_agent {

/// Exit codes of the fence-agents API.
inline constexpr int kExitOk = 0;     ///< Success; status: ON.
inline constexpr int kExitError = 1;  ///< Failure.
inline constexpr int kExitOff = 2;    ///< status: OFF.

/// Rounds of preempt-and-verify per device in `off` before giving up (a
/// victim that re-registers between the Report and the preempt is
/// preempted again, at most this often). Without nvfenced, Fence::evict_node
/// makes them.
inline constexpr int kOffRounds = kEvictRounds;

/// Where the udev rules link shared, reservation-capable namespaces by
/// volume id (/dev/nvfence/VOLUME): the devices when none are given.
inline constexpr const char* kNvfenceLinkDir = "/dev/nvfence";

/// At most this many devices are discovered.
inline constexpr size_t kMaxDiscovered = 64;

/// One opened shared namespace.
class Device {
public:
    virtual ~Device() = default;
    /// The path it was opened by.
    virtual const std::string& path() const = 0;
    /// The volume name (epoch file, nvfenced instance).
    virtual const std::string& volume() const = 0;
    /// This host's NVMe host identifier.
    virtual const HostId& host_id() const = 0;
    /// True when the namespace supports reservation type @p t.
    virtual bool supports(ResvType t) const = 0;
    /// True when the namespace can persist reservations through power
    /// loss (Identify Namespace RESCAP bit 0, PTPL).
    virtual bool ptpl_capable() const = 0;
    /// The namespace id: with volume(), the order every node fences in
    /// (namespaces of one EBS-modelled controller share a volume name).
    virtual uint32_t nsid() const = 0;
    /// Reservation commands to the namespace.
    virtual Reservations& resv() = 0;
};

/// Severity of a log line.
enum class Level { debug, info, warning, error };

/// What the actions need from the machine; tests replace each hook.
struct Host {
    /// Opens and identifies @p path; on failure @p why says what is wrong.
    std::function<Result<std::unique_ptr<Device>>(const std::string& path, std::string& why)> open;
    /// Runs `<cmapctl> args...`, returning its stdout (bounded in time).
    std::function<Result<std::string>(const std::string& cmapctl, const std::vector<std::string>& args)> cmapctl;
    /// The nvfenced control socket serving @p dev on this host, if one runs.
    std::function<std::optional<std::string>(const Device& dev)> find_agent;
    /// Sends one control request to the agent at @p socket.
    std::function<Result<ControlReply>(const std::string& socket, const ControlRequest& req)> control;
    /// Sleeps @p seconds (the `delay` option).
    std::function<void(uint32_t seconds)> sleep;
    /// Receives every log line (after the verbose filter).
    std::function<void(Level, const std::string&)> log;
    /// This node's name (uname -n).
    std::string local_name;
    /// The canonical path of @p path (symbolic links resolved), "" when
    /// unknown; used to recognise device-mapper devices behind links.
    std::function<std::string(const std::string& path)> resolve;
    /// The devices to use when none are given: discover_links(kNvfenceLinkDir).
    std::function<std::vector<std::string>()> discover;
    /// The devices under device-mapper device @p dm_name ("dm-3"), for messages.
    std::function<std::vector<std::string>(const std::string& dm_name)> dm_slaves;
    /// False once the process that ran this agent (Pacemaker's fencer) has
    /// exited: `on` then changes nothing. Unset: always alive.
    std::function<bool()> requester_alive;
    /// Runs every job of @p jobs and returns when all have finished; 'off'
    /// fences the devices after the first through it, so that their
    /// commands are in flight together. The real host runs at most
    /// kMaxParallelDevices at once; unset (the simulator, tests that do
    /// not ask for it): one after another, in order.
    std::function<void(std::vector<std::function<void()>>& jobs)> run_all;
    /// Where the epoch floor under state_dir lives: nullptr, the file
    /// system; the simulator gives each host its simulated disk (nothing of
    /// a simulated node touches a real file).
    const StateMedium* state_medium = nullptr;
    /// Runs @p prog (looked up in PATH, /usr/sbin and /sbin) with @p args,
    /// without a shell, bounded by @p timeout_ms; its stdout, or an error
    /// when it cannot run or exits non-zero (setup-watcher, check-config).
    std::function<Result<std::string>(const std::string& prog, const std::vector<std::string>& args,
                                      uint32_t timeout_ms)>
        run_program;
    /// Reads a whole file (an error when absent or unreadable).
    std::function<Result<std::string>(const std::string& path)> read_file;
    /// Replaces a file atomically (a temporary file renamed over it), mode 0644.
    std::function<Status(const std::string& path, const std::string& text)> write_file;
    /// The directory of nvfenced's configuration files, as the installed
    /// nvfenced@.service names it (its ConditionPathExists=).
    std::function<std::string()> watcher_conf_dir;
    /// This boot's id (current_boot_id()), kept in the record of an
    /// unfencing: a watcher takes only a record of its own boot.
    std::string boot_id;
};

/// How many devices 'off' fences at once (after the first, alone).
inline constexpr size_t kMaxParallelDevices = 16;

/// Host::run_all for a real host: at most kMaxParallelDevices threads.
void run_all_threads(std::vector<std::function<void()>>& jobs);

/// Runs the action of @p parsed and returns its exit code; what the agent
/// prints on stdout (metadata, list, "Status: ON", ...) is appended to
/// @p out. Warnings and errors of parsing are logged first; any parse
/// error ends with kExitError before anything touches a device.
int run(const Parsed& parsed, Host& host, std::string& out);

/// The metadata XML (fence-agents' resource-agent format, valid against
/// its metadata.rng).
std::string metadata_xml();

/// The usage text of -h/--help.
std::string usage_text();

/// The man page fence_nvfence(8) (groff, man(7) macros), generated from the
/// same table as metadata_xml(); man/fence_nvfence.8 is its output.
std::string manpage_text();

/// True for a device-mapper device: /dev/mapper/NAME, /dev/dm-N and the
/// /dev/disk/by-id/dm-uuid-* and dm-name-* links. Such devices are refused
/// (dm-multipath over NVMe: use the namespace with native NVMe multipath).
bool is_device_mapper_path(std::string_view path);

/// The entries of @p dir that are block devices (links followed), as
/// paths, sorted by name: on /dev/nvfence that is volume id order, the same
/// on every node. At most kMaxDiscovered; a missing directory gives none.
std::vector<std::string> discover_links(const std::string& dir);

/// The NVMe reservation type of @p m.
ResvType resv_type_for(Mode m);

/// This node's id under @p o: node_ids by this node's name, else corosync's
/// (the rule every action uses).
/// The cluster tag of @p o: cluster_tag when given, else derived from
/// corosync's cluster name (cluster_tag_for_name; 0 when corosync is not
/// installed). False, logged, when corosync is there but its name cannot
/// be read (no guess). Used by run() and by setup-watcher / check-config
/// for the stonith resource's parameters.
bool resolve_cluster_tag(Options& o, Host& host);

Result<uint8_t> this_node_id(const Options& o, Host& host, std::string& why);

/// The cluster's nodes under @p o: node_ids, else corosync's nodelist.
Result<NodeMap> cluster_nodes(const Options& o, Host& host, std::string& why);

/// The devices the actions use under @p o: its devices, else the links
/// found under /dev/nvfence.
std::vector<std::string> stonith_devices(const Options& o, Host& host);

}  // namespace nvfence::fence_agent
