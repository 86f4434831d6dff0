// SPDX-License-Identifier: MIT
// nvfenced: the nvfence host agent for one shared NVMe namespace. It
// registers this host, holds the reservation or stands by, watches the
// device every interval, self-fences when preempted, and answers
// `nvfence status|takeover|handoff|rejoin` on a unix control socket.
// See docs/AGENT.md.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <string>
#include <vector>

#include "elector_link.hpp"
#include "observe.hpp"
#include "agent/agent.hpp"
#include "agent/agent_config.hpp"
#include "agent/cluster_tag.hpp"
#include "internal/clock.hpp"
#include "internal/file_name.hpp"
#include "nvfence/control.hpp"
#include "agent/control_server.hpp"
#include "nvfence/epoch_store.hpp"
#include "nvfence/error.hpp"
#include "agent/fence_actions.hpp"
#include "agent/following_device.hpp"
#include "nvfence/key.hpp"
#include "nvfence/namespace.hpp"
#include "agent/service_hooks.hpp"
#include "nvfence/state_file.hpp"
#include "agent/uevent.hpp"
#include "sd_notify.hpp"

#ifndef NVFENCED_VERSION
#define NVFENCED_VERSION "unknown"
#endif

namespace nvfenced {
namespace {

using nvfence::Errc;
using nvfence::ExitCode;

// The exit codes are ExitCode's (error.hpp), defined once for every tool.
constexpr int kExitConfig = static_cast<int>(ExitCode::usage);
constexpr int kExitConflict = static_cast<int>(ExitCode::conflict);
constexpr int kExitUnsupported = static_cast<int>(ExitCode::unsupported);
constexpr size_t kMaxControlClients = 16;
constexpr uint32_t kConnectionTimeoutMs = 1000;

constexpr const char* kFooter =
    "\nOne instance per shared volume; systemd: nvfenced@<volume>.service reads\n"
    "/etc/nvfence/<volume>.conf. Operate it with 'nvfence status|takeover|handoff|rejoin'.\n\n"
    "Exit codes:\n"
    "  0  clean stop (SIGTERM/SIGINT): reservation released, registration kept or dropped\n"
    "  1  any other failure (device error, state directory, socket)\n"
    "  2  invalid configuration (the offending key is named), no such device\n"
    "  3  conflict: another nvfenced runs for this volume or socket, or this host's\n"
    "     host id is registered with a key that is not this node's\n"
    "  4  device unsupported: not an NVMe namespace, no reservations, or not the type\n"
    "  5  permission denied (run as root)\n";

// --help's line for every key of agent_setting_keys() and
// elector_setting_keys(); doc_nvfenced_help fails on a key without one.
const std::map<std::string, std::string>& key_help() {
    static const std::map<std::string, std::string> h = {
        {"device", "shared namespace: /dev/nvmeXnY, /dev/disk/by-id/... or an EBS volume id vol-... (default: name)"},
        {"node_id", "this host's node id 1..255 (default: the one persisted in state_dir)"},
        {"cluster_tag", "cluster tag of the keys, 0..255 (default 0)"},
        {"mode", "exclusive (Write Exclusive, default) or shared (Write Exclusive - Registrants Only)"},
        {"role", "at start: standby (default), acquire (take the reservation if nobody holds it) or watch (check-only: never registers; runs the fence action when this node's key, once seen, is gone)"},
        {"interval_ms", "watch interval, 50..60000 ms (default 1000)"},
        {"device_timeout_ms", "bound on each device command, 100..120000 ms (default 5000)"},
        {"fence_action", "when fenced: none (default), command, stop-unit or reboot"},
        {"fence_command", "shell command for fence_action=command (env NVFENCE_REASON, NVFENCE_VOLUME, ...)"},
        {"fence_unit", "systemd unit stopped by fence_action=stop-unit"},
        {"reboot_method", "fence_action=reboot: sysrq (default: immediate, no sync) or force (reboot -f)"},
        {"fence_timeout_ms", "bound on the fence action and on each writer unit stop, 100..600000 (default 30000)"},
        {"writer_units", "systemd units that write to the volume, stopped first when fenced"},
        {"control_socket", "control socket path (default /run/nvfence/<name>.sock)"},
        {"socket_group", "group allowed on the control socket (mode becomes 0660)"},
        {"socket_mode", "control socket mode: 0600 (default) or 0660"},
        {"state_dir", "where node id, epoch and state are persisted (default /var/lib/nvfence)"},
        {"keep_registration", "on clean stop keep the registration (true) or unregister (false, default)"},
        {"ptpl", "register with CPTPL set: the device keeps keys and reservation through power loss (true; the namespace must support PTPL) or not (false, default)"},
        {"rejoin", "a host fenced by the next leader's takeover registers again by itself once its writers are stopped and its fence action done (auto, default with elector = etcd) or waits for 'nvfence rejoin' (manual, default otherwise)"},
        {"name", "instance name: socket /run/nvfence/<name>.sock; the unit passes %i (default: the volume name)"},
        {"log_level", "debug, info (default), warning or error"},
        {"view_timeout_ms", "no successful check for this long = lost view of the device (0, default: 3 x interval_ms + device_timeout_ms)"},
        {"fence_on_view_loss", "a HOLDER that lost its view of the device fences itself (true, default) or only stops claiming HOLDER"},
        {"metrics_dir", "write the metrics for node_exporter's textfile collector to <dir>/nvfence_<volume>.prom after the checks, at most once a second (e.g. /var/lib/prometheus/node-exporter; default: none)"},
        {"aen_wakeup", "check at once when the controller reports an asynchronous event (NVME_AEN uevent), e.g. a preemption (true, default); the interval stays the fallback"},
        {"hardware_watchdog", "hardware watchdog device (/dev/watchdogN) nvfenced arms and feeds after every check; a host whose nvfenced stops running, or whose fence action fails, is reset (default: none)"},
        {"hardware_watchdog_timeout_s", "the hardware watchdog's timeout, above 2 x (interval_ms + device_timeout_ms), at most 3600 s (default 60)"},
        {"elector", "who decides who holds: none (default: takeover on request) or etcd"},
        {"etcd_endpoints", "etcd endpoints http(s)://host:port, separated by , or space (required with elector = etcd)"},
        {"etcd_ca_file", "PEM CA bundle for https endpoints (default: system CAs)"},
        {"etcd_cert_file", "PEM client certificate for mutual TLS (with etcd_key_file)"},
        {"etcd_key_file", "PEM client key for mutual TLS (with etcd_cert_file)"},
        {"etcd_user", "etcd user for etcd's authentication (RBAC), with etcd_password_file"},
        {"etcd_password_file", "file holding etcd_user's password on one line, not accessible by others (read at every authentication)"},
        {"election_name", "etcd election name (default nvfence/<volume>)"},
        {"lease_ttl_s", "etcd lease TTL, 2..3600 s (default 5)"},
        {"lease_margin_ms", "step down this long before the lease may expire, 100..TTL/2 (default min(1000, TTL/4))"},
        {"etcd_timeout_ms", "bound on etcd calls outside a live lease, the least any call gets, 100..TTL/3 (default min(1000, TTL/3))"},
        {"lease_loss", "a holder that cannot renew its etcd lease: fence (default: stop writers, run the fence "
                       "action, resign; the reservation stays held until the next leader preempts it) or hold "
                       "(keep the reservation and the writers until another host preempts)"},
    };
    return h;
}

// journald reads a "<N>" prefix on each stderr line as the syslog priority.
class PriorityFlag final : public spdlog::custom_flag_formatter {
public:
    void format(const spdlog::details::log_msg& m, const std::tm&, spdlog::memory_buf_t& dest) override {
        const char* p = "<6>";
        switch (m.level) {
        case spdlog::level::trace:
        case spdlog::level::debug: p = "<7>"; break;
        case spdlog::level::info: p = "<6>"; break;
        case spdlog::level::warn: p = "<4>"; break;
        case spdlog::level::err: p = "<3>"; break;
        case spdlog::level::critical: p = "<2>"; break;
        default: break;
        }
        dest.append(p, p + 3);
    }
    std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<PriorityFlag>(); }
};

std::shared_ptr<spdlog::logger> make_logger(const std::string& level) {
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    auto log = std::make_shared<spdlog::logger>("nvfenced", sink);
    auto f = std::make_unique<spdlog::pattern_formatter>();
    if (under_systemd()) f->add_flag<PriorityFlag>('*').set_pattern("%*%v");
    else f->set_pattern("%Y-%m-%d %H:%M:%S.%e nvfenced[%P] %l: %v");
    log->set_formatter(std::move(f));
    if (level == "debug") log->set_level(spdlog::level::debug);
    else if (level == "warning") log->set_level(spdlog::level::warn);
    else if (level == "error") log->set_level(spdlog::level::err);
    else log->set_level(spdlog::level::info);
    // Every line reaches the journal at once: the next thing may be a reboot.
    log->flush_on(spdlog::level::trace);
    return log;
}

spdlog::level::level_enum level_of(nvfence::EventLevel l) {
    switch (l) {
    case nvfence::EventLevel::debug: return spdlog::level::debug;
    case nvfence::EventLevel::info: return spdlog::level::info;
    case nvfence::EventLevel::warning: return spdlog::level::warn;
    case nvfence::EventLevel::error: return spdlog::level::err;
    }
    return spdlog::level::info;
}

std::string status_line(nvfence::Agent& a) {
    auto r = a.status();
    std::string s = nvfence::agent_state_name(r.state);
    if (r.key) s += " " + nvfence::format_key(r.key);
    s += ", holder " + (r.holder ? nvfence::format_key(r.holder) : std::string("none"));
    s += ", gen " + std::to_string(r.generation);
    if (r.state == nvfence::AgentState::fenced) s += ", fenced: " + r.fence_reason;
    return s;
}

// systemd's notify socket, for ServiceHooks.
class SdNotifier final : public nvfence::ServiceNotifier {
public:
    void notify(const std::string& message) override { (void)sd_notify(message); }
};

// An exclusive flock on @p path; the file keeps the owner's pid for the
// message the next agent prints. Lock files are never removed: removing a
// flock file lets two processes lock two different inodes.
nvfence::Result<nvfence::Fd> take_lock(const std::string& path, std::string& owner) {
    nvfence::Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) return nvfence::errno_error(errno);
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
        const int e = errno;
        char buf[32] = {};
        if (::pread(fd.get(), buf, sizeof buf - 1, 0) > 0) {
            owner = buf;
            while (!owner.empty() && (owner.back() == '\n' || owner.back() == ' ')) owner.pop_back();
        }
        if (e == EWOULDBLOCK) return nvfence::make_error_code(Errc::refused);
        return nvfence::errno_error(e);
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd.get(), 0) != 0 ||
        ::pwrite(fd.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
        return nvfence::errno_error(errno);
    return fd;
}

bool make_dirs(const std::string& dir, std::filesystem::perms mode) {
    std::error_code ec;
    if (std::filesystem::is_directory(dir, ec)) return true;
    if (!std::filesystem::create_directories(dir, ec) || ec) return std::filesystem::is_directory(dir, ec);
    std::filesystem::permissions(dir, mode, ec);
    return true;
}

int exit_for(std::error_code ec) { return static_cast<int>(nvfence::exit_code_for(ec)); }

std::string open_failure(const std::string& dev, std::error_code ec) {
    if (ec == Errc::not_found) return dev + ": no such device";
    if (ec == Errc::not_nvme) return dev + ": not an NVMe namespace";
    if (ec == Errc::controller_node) return dev + ": an NVMe controller node, not a namespace (use /dev/nvmeXnY)";
    if (ec == Errc::device_gone) return dev + ": the device disappeared";
    if (ec.category() == std::system_category() && (ec.value() == EACCES || ec.value() == EPERM))
        return dev + ": permission denied: NVMe passthrough needs root (CAP_SYS_ADMIN)";
    return dev + ": cannot open: " + ec.message();
}

// Creates the socket's directory and takes `<socket>.lock`; 0 or an exit code.
int lock_socket(const std::string& socket, spdlog::logger& log, nvfence::Fd& lock) {
    const std::string sock_dir = std::filesystem::path(socket).parent_path().string();
    if (!make_dirs(sock_dir, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                 std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                                 std::filesystem::perms::others_exec)) {
        log.error("control_socket = \"{}\": cannot create {}", socket, sock_dir);
        return static_cast<int>(ExitCode::failure);
    }
    std::string owner;
    auto l = take_lock(socket + ".lock", owner);
    if (!l) {
        if (l.error() == Errc::refused) {
            log.error("another nvfenced (pid {}) already serves control socket {}; refusing to start a second one",
                      owner.empty() ? "?" : owner, socket);
            return kExitConflict;
        }
        log.error("cannot lock {}.lock: {}", socket, l.error().message());
        return exit_for(l.error());
    }
    lock = std::move(*l);
    return 0;
}

// What run() sets up before the agent starts, in that order.
struct Setup {
    nvfence::Fd sock_lock, vol_lock;
    nvfence::OpenOptions open_opts;
    std::unique_ptr<nvfence::Namespace> ns;
    nvfence::NamespaceInfo info;  // a copy: the device may switch to a reappeared namespace
    std::string volume, name, socket;
    uint8_t node = 0;
    int64_t gid = -1;
};

// Resolves and opens the device and checks it can be fenced; 0 or an exit code.
int open_namespace(const nvfence::AgentSettings& s, spdlog::logger& log, Setup& d) {
    std::string why;
    auto path = nvfence::resolve_device_spec(s.device, "/sys", why);
    if (!path) {
        log.error("{}", why);
        return exit_for(path.error());
    }
    d.open_opts.timeout_ms = s.device_timeout_ms;
    auto opened = nvfence::Namespace::open(*path, d.open_opts);
    if (!opened) {
        log.error("{}", open_failure(*path, opened.error()));
        return exit_for(opened.error());
    }
    d.ns = std::move(*opened);
    d.info = d.ns->info();
    if (auto r = d.ns->require_reservations(&why); !r) {
        log.error("{}", why);
        return kExitUnsupported;
    }
    if (!d.info.ns.rescap.supports(s.type)) {
        log.error("{}: the namespace does not support {} (mode = {}); see 'nvfence info'", d.info.paths.block,
                  nvfence::resv_type_name(s.type), s.type == nvfence::ResvType::write_exclusive ? "exclusive" : "shared");
        return kExitUnsupported;
    }
    if (s.ptpl && !d.info.ns.rescap.ptpl) {
        log.error("{}: ptpl = true, but the namespace does not support Persist Through Power Loss (RESCAP bit 0 "
                  "clear); see 'nvfence info'", d.info.paths.block);
        return kExitUnsupported;
    }
    if (!d.info.host_id) {
        log.error("{}: cannot read this host's NVMe host identifier (Get Features Host Identifier failed "
                  "and the controller has no sysfs hostid); nvfenced needs it to find its registration",
                  d.info.paths.block);
        return static_cast<int>(ExitCode::failure);
    }
    d.volume = nvfence::agent_volume_name(d.info);
    d.name = s.name.empty() ? nvfence::volume_name(d.volume) : s.name;
    d.socket = s.control_socket.empty() ? nvfence::control_socket_path(d.name) : s.control_socket;
    return 0;
}

// Creates and checks the state directory, then takes the volume's lock and
// the socket's (unless taken early); 0 or an exit code.
int lock_volume(const nvfence::AgentSettings& s, spdlog::logger& log, Setup& d) {
    if (!make_dirs(s.state_dir, std::filesystem::perms::owner_all)) {
        log.error("state_dir = \"{}\": cannot create it", s.state_dir);
        return static_cast<int>(ExitCode::failure);
    }
    if (auto safe = nvfence::check_state_dir(s.state_dir); !safe) {
        log.error("state_dir = \"{}\": {}: it must be a directory (not a symlink) owned by this user and "
                  "writable by nobody else (chmod go-w)", s.state_dir, safe.error().message());
        return static_cast<int>(ExitCode::failure);
    }
    std::string owner;
    const std::string vol_lock = s.state_dir + "/" + nvfence::volume_name(d.volume) + ".lock";
    auto lock = take_lock(vol_lock, owner);
    if (!lock) {
        if (lock.error() == Errc::refused) {
            log.error("another nvfenced (pid {}) already manages volume {} on this host (lock {}); refusing to start a second one",
                      owner.empty() ? "?" : owner, d.volume, vol_lock);
            return kExitConflict;
        }
        log.error("cannot lock {}: {}", vol_lock, lock.error().message());
        return exit_for(lock.error());
    }
    d.vol_lock = std::move(*lock);
    if (!d.sock_lock) return lock_socket(d.socket, log, d.sock_lock);
    return 0;
}

// The node id: configured (and matching the state file) or persisted; 0 or an exit code.
int choose_node(const nvfence::AgentSettings& s, const nvfence::AgentStateFile& statefile, spdlog::logger& log,
                uint8_t& node) {
    auto saved = statefile.load();
    if (!saved) {
        log.error("cannot use the state file {}: {} (inspect it, or remove it to start afresh)", statefile.path(),
                  saved.error().message());
        return static_cast<int>(ExitCode::failure);
    }
    const bool registered_before = *saved && (*saved)->role != nvfence::PersistedRole::none;
    if (s.node) {
        node = *s.node;
        if (registered_before && (*saved)->node != node) {
            log.error("node_id = {}: the state file {} says this host is node {} ({}); unregister it first "
                      "('nvfence unregister') and remove the state file to change the node id",
                      node, statefile.path(), (*saved)->node, nvfence::persisted_role_name((*saved)->role));
            return kExitConfig;
        }
        return 0;
    }
    if (*saved && (*saved)->node != 0) {
        node = (*saved)->node;
        return 0;
    }
    log.error("node_id: required (no node id persisted yet in {})", statefile.path());
    return kExitConfig;
}

// socket_group as a gid (-1: none); 0 or an exit code.
int socket_gid(const nvfence::AgentSettings& s, spdlog::logger& log, int64_t& gid) {
    if (s.socket_group.empty()) return 0;
    if (auto n = nvfence::parse_uint(s.socket_group, 0, UINT32_MAX - 1)) {
        gid = static_cast<int64_t>(*n);
    } else if (const group* g = ::getgrnam(s.socket_group.c_str())) {
        gid = g->gr_gid;
    } else {
        log.error("socket_group = \"{}\": no such group", s.socket_group);
        return kExitConfig;
    }
    return 0;
}

// The watchdog interval (0: none), warning when a slow device could trip it.
std::chrono::microseconds check_watchdog(const nvfence::AgentSettings& s, spdlog::logger& log) {
    const auto wd = watchdog_timeout();
    if (wd.count() > 0 &&
        wd < std::chrono::milliseconds(2 * uint64_t{s.interval_ms} + 2 * uint64_t{s.device_timeout_ms}))
        log.warn("WatchdogSec ({} ms) is shorter than 2 x (interval_ms + device_timeout_ms) = {} ms: "
                 "a slow device may get nvfenced killed by the watchdog",
                 wd.count() / 1000, 2 * (s.interval_ms + s.device_timeout_ms));
    return wd;
}

// The hardware watchdog, opened, armed and fed by @p hooks (none when not
// configured); 0 or an exit code.
int arm_hardware_watchdog(const nvfence::AgentSettings& s, spdlog::logger& log,
                          std::unique_ptr<nvfence::HardwareWatchdog>& hw, nvfence::ServiceHooks& hooks) {
    if (s.hardware_watchdog.empty()) return 0;
    auto dev = nvfence::open_watchdog_device(s.hardware_watchdog);
    if (!dev) {
        const bool busy = dev.error() == std::errc::device_or_resource_busy;
        log.error("hardware_watchdog = \"{}\": cannot open: {}{}", s.hardware_watchdog, dev.error().message(),
                  busy ? " (another process has it: a watchdog daemon, sbd, or another nvfenced; one per host)" : "");
        return kExitConfig;
    }
    hw = std::make_unique<nvfence::HardwareWatchdog>(
        std::move(*dev), s.hardware_watchdog,
        [&log](bool ok, const std::string& line) { log.log(ok ? spdlog::level::info : spdlog::level::err, "{}", line); });
    if (auto st = hw->arm(s.hardware_watchdog_timeout_s); !st) {
        log.error("hardware_watchdog: {}", hw->why());
        hw.reset();
        return kExitConfig;
    }
    hooks.set_hardware_watchdog(hw.get());
    return 0;
}

// SIGTERM, SIGINT and SIGHUP arrive on the returned signalfd; SIGPIPE is ignored.
nvfence::Fd signal_fd() {
    sigset_t sigs;
    sigemptyset(&sigs);
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&sigs, sig);
    ::sigprocmask(SIG_BLOCK, &sigs, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    return nvfence::Fd(::signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK));
}

void log_start(const nvfence::AgentSettings& s, const Setup& d, spdlog::logger& log) {
    log.info("nvfenced {} starting: volume {} ({}, nsid {}, model \"{}\"), host id {}, node {}, cluster tag {}, "
             "mode {}, role {}, interval {} ms, fence action {}, socket {}",
             NVFENCED_VERSION, d.volume, d.info.paths.block, d.info.nsid, d.info.ctrl.model,
             nvfence::format_host_id(*d.info.host_id), d.node, s.tag,
             s.type == nvfence::ResvType::write_exclusive ? "exclusive" : "shared",
             s.role == nvfence::StartRole::acquire ? "acquire"
             : s.role == nvfence::StartRole::watch ? "watch (check-only: never registers)"
                                                   : "standby",
             s.interval_ms,
             nvfence::fence_action_name(s.fence_action), d.socket);
}

// Reads the pending uevents; this controller's asynchronous event (e.g. a
// preemption's reservation notification) asks the agent to check now. A
// failing socket is given up: the interval stays the fallback.
void on_uevents(nvfence::Result<nvfence::UeventListener>& aen, nvfence::Agent& agent,
                nvfence::FollowingDevice& device, spdlog::logger& log) {
    auto d = aen->drain(device.info().paths.controller, nvfence::kUeventsPerWake);
    if (!d) {
        log.warn("uevents: {}: checking every interval only", d.error().message());
        aen = d.error();
    } else if (d->wants_check()) {
        log.debug("uevents: asynchronous event of {}: checking now", device.info().paths.controller);
        agent.request_check();
    }
}

// elector = etcd: the elector wired to the agent (null with elector = none);
// false (logged) on bad elector settings.
bool make_elector(const nvfence::SettingsMap& elector_kv, const nvfence::AgentSettings& s, const Setup& d,
                  const nvfence::EpochStore& epochs, spdlog::logger& log, std::unique_ptr<ElectorLink>& out) {
    std::string why;
    auto es = ElectorLink::settings(elector_kv, d.volume, why);
    if (!es) {
        log.error("invalid configuration: {}", why);
        return false;
    }
    if (es->kind != nvfence::ElectorKind::etcd) return true;
    out = ElectorLink::create(*es, d.node, s.tag, *d.info.host_id, &epochs, s.state_dir, d.volume, why);
    if (!out) {
        log.error("{}", why);
        return false;
    }
    std::string endpoints;
    for (const auto& e : es->endpoints) endpoints += (endpoints.empty() ? "" : ",") + e;
    log.info("elector etcd: election {}, endpoints {}, lease TTL {} s, lease_loss {}", es->election_name, endpoints,
             es->lease_ttl_s, es->lease_loss == nvfence::LeaseLossAction::fence ? "fence" : "hold");
    return true;
}

// What the agent's loop serves besides the agent and its device.
struct Served {
    int sigfd = -1, listener = -1;
    bool aen_wakeup = true;
    ElectorLink* elector = nullptr;  // elector = etcd
    nvfence::AgentHooks* hooks = nullptr;
    nvfence::Clock* clock = nullptr;
    Observer* observer = nullptr;
};

// The agent's loop: checks when due; between them waits for a signal, a
// control connection or (aen_wakeup) a uevent. Returns when a termination
// signal arrived.
void serve(nvfence::Agent& agent, nvfence::FollowingDevice& device, const Served& sv, spdlog::logger& log) {
    ElectorLink* const elector = sv.elector;
    const nvfence::ControlHandler handler = [&](const nvfence::ControlRequest& q,
                                                const nvfence::ControlPeer& p) {
        const std::string who = "uid " + std::to_string(p.uid) + " pid " + std::to_string(p.pid);
        if (q.op != nvfence::ControlOp::status)
            log.info("control: {} requested by {}", nvfence::control_op_name(q.op), who);
        nvfence::ControlReply refused;
        if (elector && elector->refuse(q, refused, agent)) {
            log.warn("control: {} by {} refused: {}", nvfence::control_op_name(q.op), who, refused.message);
            return refused;
        }
        auto r = agent.handle(q, who);
        if (elector && q.op == nvfence::ControlOp::status) elector->decorate(r);
        return r;
    };
    bool stopping = false;
    std::string shown_device = device.info().paths.block;
    auto aen = sv.aen_wakeup ? nvfence::UeventListener::open()
                             : nvfence::Result<nvfence::UeventListener>(nvfence::make_error_code(Errc::refused));
    if (sv.aen_wakeup && !aen) log.warn("uevents: {}: checking every interval only", aen.error().message());
    // Control clients never hold the loop: their sockets are polled with
    // the rest and served only as far as they are ready.
    nvfence::ControlServer control(sv.listener, kConnectionTimeoutMs, kMaxControlClients);
    std::vector<pollfd> fds;
    agent.run([&](nvfence::Clock::Ms wait) {
        fds.assign({{sv.sigfd, POLLIN, 0}, {aen ? aen->fd() : -1, POLLIN, 0},
                    {sv.elector ? sv.elector->wake_fd() : -1, POLLIN, 0}});
        control.poll_fds(fds);
        int timeout_ms = static_cast<int>(wait.count());
        if (const int d = control.next_deadline_ms(); d >= 0) timeout_ms = std::min(timeout_ms, d);
        if (elector && sv.clock)
            timeout_ms = static_cast<int>(
                std::min<int64_t>(timeout_ms, elector->until_lease_watch_ms(agent, *sv.clock)));
        if (sv.observer && sv.clock)  // after each check: the metrics file, when due
            timeout_ms = static_cast<int>(
                std::min<int64_t>(timeout_ms, sv.observer->after_wake(agent, elector, *sv.clock)));
        const int rc = ::poll(fds.data(), fds.size(), timeout_ms);
        if (rc > 0 && (fds[1].revents & (POLLIN | POLLERR))) on_uevents(aen, agent, device, log);
        if (sv.elector) sv.elector->on_wake(agent, *sv.hooks, *sv.clock);
        if (rc < 0 && errno != EINTR) log.error("poll: {}", std::strerror(errno));
        if (rc > 0 && (fds[0].revents & POLLIN)) {
            signalfd_siginfo si;
            while (::read(sv.sigfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
                if (si.ssi_signo == SIGHUP) {
                    log.info("status: {}{}", status_line(agent), elector ? "; elector: " + elector->describe() : "");
                } else {
                    log.info("received {}: stopping", ::strsignal(static_cast<int>(si.ssi_signo)));
                    stopping = true;
                }
            }
        }
        if (stopping) return false;
        if (device.info().paths.block != shown_device) {
            shown_device = device.info().paths.block;
            agent.set_device(shown_device);
        }
        const auto served = control.serve(handler);
        if (served.accept_error) log.warn("control socket: {}", served.accept_error.message());
        if (served.dropped) log.debug("control socket: {} connection(s) closed without a reply", served.dropped);
        return true;
    });
}

// Everything up to the agent: device, locks, node id, socket group; 0 or an exit code.
int prepare(const nvfence::AgentSettings& s, spdlog::logger& log, Setup& d) {
    // When the socket is known from the configuration, a second agent for
    // it is refused before it touches the device.
    if (!s.control_socket.empty() || !s.name.empty()) {
        const std::string early = s.control_socket.empty() ? nvfence::control_socket_path(s.name) : s.control_socket;
        if (int rc = lock_socket(early, log, d.sock_lock)) return rc;
    }
    if (int rc = open_namespace(s, log, d)) return rc;
    if (int rc = lock_volume(s, log, d)) return rc;
    if (int rc = choose_node(s, nvfence::AgentStateFile(s.state_dir, d.volume), log, d.node)) return rc;
    return socket_gid(s, log, d.gid);
}

// The agent's options for this run: the settings', and what the elector
// and the device decide.
nvfence::AgentOptions run_options(const nvfence::AgentSettings& s, const Setup& d, const ElectorLink* elector) {
    auto opts = nvfence::agent_options(s, d.node);
    // Under an elector, failover after failover needs the fenced hosts back
    // as candidates; without one, the operator's rejoin stays the way back.
    opts.rejoin_auto = s.rejoin_auto.value_or(elector != nullptr);
    // HOLDER only under a live lease: a restart finds no lease (it ended
    // with the process), so a holding host resumes FENCED.
    opts.holder_needs_lease = elector && elector->settings().lease_loss == nvfence::LeaseLossAction::fence;
    opts.volume = d.volume;
    opts.device = d.info.paths.block;
    opts.boot_id = nvfence::current_boot_id();
    return opts;
}

int run(const nvfence::AgentSettings& s, spdlog::logger& log, const nvfence::SettingsMap& elector_kv) {
    Setup d;
    if (int rc = prepare(s, log, d)) return rc;
    nvfence::EpochStore epochs(s.state_dir, d.volume);
    std::unique_ptr<ElectorLink> elector;
    if (!make_elector(elector_kv, s, d, epochs, log, elector)) return kExitConfig;
    nvfence::AgentStateFile statefile(s.state_dir, d.volume);
    nvfence::FenceActions actions(s, {{"NVFENCE_VOLUME", d.volume},
                                      {"NVFENCE_DEVICE", d.info.paths.block},
                                      {"NVFENCE_NODE", std::to_string(d.node)},
                                      {"NVFENCE_NAME", d.name}});
    const auto wd = check_watchdog(s, log);
    std::unique_ptr<nvfence::HardwareWatchdog> hw;  // disarmed on every return, unless given up
    SdNotifier notifier;
    Observer observer(s, d.volume, log);
    nvfence::ServiceHooks hooks(
        actions, notifier, wd.count() > 0,
        [&](const nvfence::AgentEvent& e) {
            log.log(level_of(e.level), "{}", nvfence::format_event(e));
            observer.on_event(e);
        },
        [&](bool ok, const std::string& line) { log.log(ok ? spdlog::level::info : spdlog::level::err, "{}", line); });
    if (int rc = arm_hardware_watchdog(s, log, hw, hooks)) return rc;
    nvfence::SystemClock clock;
    const auto opts = run_options(s, d, elector.get());
    nvfence::Fd sigfd = signal_fd();
    if (!sigfd) {
        log.error("signalfd: {}", std::strerror(errno));
        return static_cast<int>(ExitCode::failure);
    }
    nvfence::ControlListenOptions lo;
    lo.path = d.socket;
    lo.mode = s.socket_mode;
    lo.gid = d.gid;
    auto listener = nvfence::control_listen(lo);
    if (!listener) {
        log.error("control_socket = \"{}\": cannot listen: {}", d.socket, listener.error().message());
        return exit_for(listener.error());
    }
    log_start(s, d, log);
    nvfence::FollowingDevice device(std::move(d.ns), d.open_opts, s.interval_ms, [&](bool warning, const std::string& line) {
        if (warning) log.warn("{}", line);
        else log.info("{}", line);
    });
    nvfence::Agent agent(device, d.info.nsid, *d.info.host_id, opts, clock, hooks, &epochs, &statefile);
    if (elector) elector->attach(agent);
    if (auto st = agent.start(); !st) {
        log.error("cannot start: {}", agent.last_error());
        ::unlink(d.socket.c_str());
        if (st.error() == Errc::host_id_conflict) return kExitConflict;
        if (st.error() == Errc::refused) return kExitConfig;
        return exit_for(st.error());
    }
    hooks.ready(status_line(agent));
    if (elector) elector->start();
    serve(agent, device, {sigfd.get(), listener->get(), s.aen_wakeup, elector.get(), &hooks, &clock, &observer}, log);
    hooks.stopping();
    auto stopped = agent.stop();
    observer.at_stop(agent, elector.get());
    elector.reset();  // after the release: resign, so the next leader need not wait for the lease
    ::unlink(d.socket.c_str());
    if (!stopped) {
        log.error("stop failed: {}", agent.last_error());
        return static_cast<int>(ExitCode::failure);
    }
    log.info("stopped");
    return 0;
}

// Takes the elector's keys out of @p kv (the agent's parser does not know
// them); role stays in both, the elector refuses role = acquire.
nvfence::SettingsMap split_elector_keys(nvfence::SettingsMap& kv) {
    nvfence::SettingsMap elector_kv;
    for (const auto& k : nvfence::elector_setting_keys()) {
        if (auto it = kv.find(k); it != kv.end()) {
            elector_kv[k] = it->second;
            kv.erase(it);
        }
    }
    if (auto it = kv.find("role"); it != kv.end()) elector_kv["role"] = it->second;
    return elector_kv;
}

// The keys given on the command line or in the configuration file.
nvfence::SettingsMap settings_given(const std::map<std::string, CLI::Option*>& options,
                                    std::map<std::string, std::string>& values,
                                    const std::vector<std::string>& units) {
    nvfence::SettingsMap kv;
    for (const auto& [k, opt] : options) {
        if (opt->count() == 0) continue;
        if (k == "writer_units") {
            std::string joined;
            for (const auto& u : units) joined += (joined.empty() ? "" : " ") + u;
            kv[k] = joined;
        } else {
            kv[k] = values[k];
        }
    }
    // nvfenced@<volume id>.service passes --name %i: the instance name is
    // the volume, so a config file need not repeat it as the device.
    if (!kv.count("device") && kv.count("name")) kv["device"] = kv["name"];
    return kv;
}

// The configuration file's reader. CLI11's default (TOML) reader splits an
// unquoted value at spaces and commas into several, which a single-value
// option refuses: `fence_command = logger -t db fenced` or `etcd_endpoints =
// http://a:2379,http://b:2379` would stop nvfenced. Here a value is the
// whole rest of the line (up to a '#' comment), surrounding quotes removed;
// the parsers split writer_units and etcd_endpoints themselves.
std::shared_ptr<CLI::ConfigBase> whole_value_config() {
    auto cfg = std::make_shared<CLI::ConfigBase>();
    // Array bounds and separator no line contains: no value is split.
    cfg->arrayBounds('\x01', '\x02')->arrayDelimiter('\x03');
    return cfg;
}

// One option per configuration key (--key-with-dashes and --key), in the
// parsers' order: the agent's keys, then the elector's.
void add_key_options(CLI::App& app, std::map<std::string, std::string>& values,
                     std::map<std::string, CLI::Option*>& options, std::vector<std::string>& units) {
    std::vector<std::string> keys = nvfence::agent_setting_keys();
    const auto& elector_keys = nvfence::elector_setting_keys();
    keys.insert(keys.end(), elector_keys.begin(), elector_keys.end());
    for (const auto& k : keys) {
        std::string dashed = k;
        std::replace(dashed.begin(), dashed.end(), '_', '-');
        const std::string names = "--" + dashed + (dashed != k ? ",--" + k : std::string());
        const auto help = key_help().find(k);
        const std::string text = help == key_help().end() ? std::string() : help->second;
        if (k == "writer_units") options[k] = app.add_option(names, units, text);
        else options[k] = app.add_option(names, values[k], text);
    }
}

// The check-only watcher of a Pacemaker cluster without cluster_tag: the
// tag fence_nvfence derives from the same cluster name (cluster_tag.hpp).
bool derive_watch_tag(nvfence::AgentSettings& s, const std::string& config) {
    if (s.role != nvfence::StartRole::watch || s.tag_given) return true;
    std::string why;
    auto tag = nvfence::tag_from_corosync_conf(nvfence::kCorosyncConf, why);
    if (!tag) {
        std::cerr << "nvfenced: invalid configuration: " << why << (config.empty() ? "" : " (in " + config + ")")
                  << "\n";
        return false;
    }
    s.tag = *tag;
    return true;
}

int real_main(int argc, char** argv) {
    CLI::App app{"nvfenced: the nvfence host agent. It registers this host on one shared NVMe namespace,\n"
                 "holds the reservation or stands by, watches it every interval, and self-fences\n"
                 "(stops writers, runs the fence action) when this host was preempted."};
    app.footer(kFooter);
    app.set_config("--config", "", "configuration file: INI or TOML, 'key = value' with the keys below");
    app.config_formatter(whole_value_config());
    app.allow_config_extras(CLI::config_extras_mode::error);
    std::map<std::string, std::string> values;
    std::map<std::string, CLI::Option*> options;
    std::vector<std::string> units;
    add_key_options(app, values, options, units);
    bool check_only = false, version = false;
    app.add_flag("--check-config", check_only,
                 "validate the configuration and exit (no device access): 0 valid, 2 invalid (the key is named)");
    app.add_flag("--version", version, "print the version and exit");
    std::string config;
    app.get_option("--config")->each([&](const std::string& v) { config = v; });
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::ConfigError& e) {
        std::string what = e.what();
        const std::string prefix = "INI was not able to parse ";
        if (what.rfind(prefix, 0) == 0) what = "unknown key '" + what.substr(prefix.size()) + "'";
        std::cerr << "nvfenced: invalid configuration: " << what << (config.empty() ? "" : " (in " + config + ")")
                  << "\n";
        return kExitConfig;
    } catch (const CLI::FileError& e) {
        std::cerr << "nvfenced: cannot read the configuration: " << e.what() << "\n";
        return kExitConfig;
    } catch (const CLI::ParseError& e) {
        std::cerr << "nvfenced: " << e.what() << "\n         run 'nvfenced --help' for usage\n";
        return kExitConfig;
    }
    if (version) {
        std::cout << "nvfenced " << NVFENCED_VERSION << " (control protocol " << nvfence::kControlVersion << ")\n";
        return 0;
    }
    nvfence::SettingsMap kv = settings_given(options, values, units);
    std::string why;
    const nvfence::SettingsMap elector_kv = split_elector_keys(kv);
    // The volume is known only from the device; "volume" stands in for it here.
    const auto es = ElectorLink::settings(elector_kv, "volume", why);
    if (!es || !nvfence::check_elector_files(*es, why)) {
        std::cerr << "nvfenced: invalid configuration: " << why << (config.empty() ? "" : " (in " + config + ")")
                  << "\n";
        return kExitConfig;
    }
    auto settings = nvfence::parse_agent_settings(kv, why);
    if (!settings) {
        std::cerr << "nvfenced: invalid configuration: " << why << (config.empty() ? "" : " (in " + config + ")")
                  << "\n";
        return kExitConfig;
    }
    if (!derive_watch_tag(*settings, config)) return kExitConfig;
    if (check_only) {
        std::cout << "nvfenced: configuration ok\n";
        return 0;
    }
    auto log = make_logger(settings->log_level);
    return run(*settings, *log, elector_kv);
}

}  // namespace
}  // namespace nvfenced

int main(int argc, char** argv) { return nvfenced::real_main(argc, argv); }
