// SPDX-License-Identifier: MIT
// fence_nvfence: the Pacemaker fence agent for NVMe reservations. The
// actions live in fence_agent.cpp; this file connects them to the machine.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <syslog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <iostream>
#include <optional>
#include <thread>

#include "fence_agent.hpp"
#include "host_io.hpp"
#include "agent/agent_config.hpp"
#include "agent/agent_state_file.hpp"
#include "nvfence/error.hpp"
#include "nvfence/namespace.hpp"

namespace nvfence::fence_agent {
namespace {

constexpr size_t kMaxStdinBytes = 1 << 20;
constexpr uint32_t kAgentStatusTimeoutMs = 3000;
// A takeover waits for a preempt-and-abort (bounded by the library at 30 s).
constexpr uint32_t kAgentChangeTimeoutMs = 60000;
constexpr size_t kMaxAgentSockets = 16;
constexpr uint32_t kDeviceTimeoutMs = 30000;

class RealDevice final : public Device {
public:
    RealDevice(std::string path, std::unique_ptr<Namespace> ns)
        : path_(std::move(path)), ns_(std::move(ns)), volume_(agent_volume_name(ns_->info())),
          resv_(ns_->passthru(), ns_->info().nsid) {}
    const std::string& path() const override { return path_; }
    const std::string& volume() const override { return volume_; }
    const HostId& host_id() const override { return *ns_->info().host_id; }
    bool supports(ResvType t) const override { return ns_->info().ns.rescap.supports(t); }
    bool ptpl_capable() const override { return ns_->info().ns.rescap.ptpl; }
    uint32_t nsid() const override { return ns_->info().nsid; }
    Reservations& resv() override { return resv_; }
    const Namespace& ns() const { return *ns_; }

private:
    std::string path_;
    std::unique_ptr<Namespace> ns_;
    std::string volume_;
    Reservations resv_;
};

Result<std::unique_ptr<Device>> open_real(const std::string& path, std::string& why) {
    OpenOptions oo;
    oo.timeout_ms = kDeviceTimeoutMs;
    auto ns = Namespace::open(path, oo);
    if (!ns) {
        const auto ec = ns.error();
        if (ec == Errc::not_found) why = "no such device";
        else if (ec == Errc::not_nvme) why = "not an NVMe namespace";
        else if (ec == Errc::controller_node) why = "an NVMe controller node, not a namespace (use /dev/nvmeXnY)";
        else if (ec.category() == std::system_category() && (ec.value() == EACCES || ec.value() == EPERM))
            why = "permission denied (NVMe passthrough needs root)";
        else why = "cannot open: " + ec.message();
        return ec;
    }
    if (auto s = (*ns)->require_reservations(&why); !s) return s.error();
    if (!(*ns)->info().host_id) {
        why = "cannot read this host's NVMe host identifier";
        return make_error_code(Errc::host_id_unknown);
    }
    return std::unique_ptr<Device>(std::make_unique<RealDevice>(path, std::move(*ns)));
}

bool same_namespace(const std::string& a, const std::string& b) {
    auto pa = resolve_namespace(a);
    auto pb = resolve_namespace(b);
    return pa && pb && pa->name == pb->name;
}

std::optional<std::string> find_agent_real(const Options& o, const Device& d) {
    std::vector<std::string> candidates;
    if (!o.agent_socket.empty()) {
        candidates.push_back(o.agent_socket);
    } else {
        std::error_code ec;
        const std::string def = control_socket_path(d.volume());
        if (std::filesystem::exists(def, ec)) candidates.push_back(def);
        for (const auto& e : std::filesystem::directory_iterator("/run/nvfence", ec)) {
            if (candidates.size() >= kMaxAgentSockets) break;
            if (e.path().extension() == ".sock" && e.path().string() != def) candidates.push_back(e.path().string());
        }
    }
    for (const auto& sock : candidates) {
        ControlRequest req;
        req.op = ControlOp::status;
        auto r = control_request(sock, req, kAgentStatusTimeoutMs);
        if (!r) continue;
        if (r->volume == d.volume() || same_namespace(r->device, d.path())) return sock;
    }
    return std::nullopt;
}

std::string canonical_path(const std::string& path) {
    std::error_code ec;
    auto p = std::filesystem::canonical(path, ec);
    return ec ? std::string() : p.string();
}

// The block devices under a device-mapper device, from sysfs.
std::vector<std::string> dm_slaves(const std::string& dm_name) {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/sys/block/" + dm_name + "/slaves", ec)) {
        if (out.size() >= kMaxAgentSockets) break;
        out.push_back(e.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
}

// @p prog as a path: itself when it has a '/', else the first executable
// of that name in PATH, /usr/sbin, /sbin, /usr/bin, /bin.
std::string program_path(const std::string& prog) {
    if (prog.find('/') != std::string::npos) return prog;
    std::string dirs = std::getenv("PATH") ? std::getenv("PATH") : "";
    dirs += ":/usr/sbin:/sbin:/usr/bin:/bin";
    std::stringstream ss(dirs);
    for (std::string d; std::getline(ss, d, ':');)
        if (!d.empty() && ::access((d + "/" + prog).c_str(), X_OK) == 0) return d + "/" + prog;
    return prog;
}

Result<std::string> read_whole_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return errno_error(errno ? errno : ENOENT);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

// A temporary file beside @p path, renamed over it: never half written.
Status replace_file(const std::string& path, const std::string& text) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!(f << text) || !f.flush()) return errno_error(errno ? errno : EIO);
    }
    ::chmod(tmp.c_str(), 0644);
    if (::rename(tmp.c_str(), path.c_str()) != 0) return errno_error(errno);
    return Ok{};
}

// <dir> of the installed nvfenced@.service's ConditionPathExists=<dir>/%i.conf.
std::string watcher_conf_dir() {
    auto unit = run_bounded(program_path("systemctl"), {"cat", "nvfenced@.service"});
    if (unit) {
        const std::string key = "ConditionPathExists=";
        const size_t p = unit->find(key);
        const size_t e = p == std::string::npos ? p : unit->find("/%i.conf", p);
        if (e != std::string::npos) return unit->substr(p + key.size(), e - p - key.size());
    }
    return "/etc/nvfence";
}

std::string local_node_name() {
    utsname u{};
    if (::uname(&u) != 0) return {};
    return u.nodename;
}

const char* level_word(Level l) {
    switch (l) {
    case Level::debug: return "DEBUG";
    case Level::info: return "INFO";
    case Level::warning: return "WARNING";
    case Level::error: return "ERROR";
    }
    return "?";
}

}  // namespace

// The options from argv, or (no arguments) from stdin as fence-agents
// give them; nullopt, said on stderr, when stdin holds more than it may.
std::optional<Parsed> read_options(int argc, char** argv) {
    if (argc > 1) {
        std::vector<std::string> args(argv + 1, argv + argc);
        return parse_argv(args);
    }
    std::string text;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) {
        text.append(buf, n);
        if (text.size() > kMaxStdinBytes) {
            std::fprintf(stderr, "ERROR: Failed: more than %zu bytes of options on stdin\n", kMaxStdinBytes);
            return std::nullopt;
        }
    }
    return parse_stdin(text);
}

int main(int argc, char** argv) {
    auto read = read_options(argc, argv);
    if (!read) return kExitError;
    const Parsed parsed = std::move(*read);
    const Options& o = parsed.opts;
    Fd debug_file;
    std::error_code debug_error;
    if (!o.debug_file.empty()) {
        if (auto f = open_debug_file(o.debug_file)) debug_file = std::move(*f);
        else debug_error = f.error();
    }
    ::openlog("fence_nvfence", LOG_PID, LOG_DAEMON);

    Host host;
    host.requester_alive = [ppid = ::getppid()] { return ::getppid() == ppid; };
    host.local_name = local_node_name();
    host.boot_id = current_boot_id();
    host.resolve = canonical_path;
    host.dm_slaves = dm_slaves;
    host.open = open_real;
    host.discover = [] { return discover_links(kNvfenceLinkDir); };
    host.cmapctl = [](const std::string& prog, const std::vector<std::string>& args) { return run_bounded(prog, args); };
    host.find_agent = [&o](const Device& d) { return find_agent_real(o, d); };
    host.control = [](const std::string& sock, const ControlRequest& req) {
        return control_request(sock, req, req.op == ControlOp::status ? kAgentStatusTimeoutMs : kAgentChangeTimeoutMs);
    };
    host.run_all = run_all_threads;
    host.run_program = [](const std::string& prog, const std::vector<std::string>& args, uint32_t timeout_ms) {
        return run_bounded(program_path(prog), args, static_cast<int>(timeout_ms));
    };
    host.read_file = read_whole_file;
    host.write_file = replace_file;
    host.watcher_conf_dir = watcher_conf_dir;
    host.sleep = [](uint32_t s) { std::this_thread::sleep_for(std::chrono::seconds(s)); };
    host.log = [&](Level l, const std::string& msg) {
        if (l == Level::debug && o.verbose == 0) return;
        const std::string line = std::string(level_word(l)) + ": " + msg;
        if (!o.quiet) std::fprintf(stderr, "%s\n", line.c_str());
        if (debug_file) {
            const std::time_t t = std::time(nullptr);
            char ts[32];
            std::strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
            const std::string text = std::string(ts) + " " + line + "\n";
            (void)!::write(debug_file.get(), text.data(), text.size());
        }
        if (l != Level::debug)
            ::syslog(l == Level::error ? LOG_ERR : l == Level::warning ? LOG_WARNING : LOG_INFO, "%s", msg.c_str());
    };
    if (debug_error) host.log(Level::warning, "cannot open debug file " + o.debug_file + ": " + debug_error.message());

    std::string out;
    const int rc = run(parsed, host, out);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
    ::closelog();
    return rc;
}

}  // namespace nvfence::fence_agent

int main(int argc, char** argv) { return nvfence::fence_agent::main(argc, argv); }
