// SPDX-License-Identifier: MIT
#include "agent/fence_actions.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "nvfence/error.hpp"
#include "nvfence/fd.hpp"
#include "internal/invariant.hpp"

extern char** environ;

namespace nvfence {
namespace {

class ChildCategory final : public std::error_category {
public:
    const char* name() const noexcept override { return "child"; }
    std::string message(int v) const override {
        if (v >= 1000) return "killed by signal " + std::to_string(v - 1000);
        return "exited with status " + std::to_string(v);
    }
};

std::error_code child_error(int status) {
    if (WIFSIGNALED(status)) return {1000 + WTERMSIG(status), child_category()};
    return {WEXITSTATUS(status), child_category()};
}

class SystemRunner final : public ProcessRunner {
public:
    Status run(const std::vector<std::string>& argv, const ChildEnv& env, uint32_t timeout_ms,
               const std::function<void()>& tick) override {
        return run_bounded(argv, env, timeout_ms, tick);
    }
    void sysrq_reboot() override {
        // No sync: writeback to a device that refuses this host could
        // hang the reboot, and fenced data must not be flushed anyway.
        Fd fd(::open("/proc/sysrq-trigger", O_WRONLY | O_CLOEXEC));
        if (fd && ::write(fd.get(), "b", 1) == 1) std::this_thread::sleep_for(std::chrono::seconds(10));
    }
};

}  // namespace

ProcessRunner& system_process_runner() {
    static SystemRunner r;
    return r;
}

const std::error_category& child_category() noexcept {
    static const ChildCategory c;
    return c;
}

std::string describe_argv(const std::vector<std::string>& argv) {
    std::string s;
    for (const auto& a : argv) {
        if (!s.empty()) s += ' ';
        s += a;
    }
    return s;
}

Status run_bounded(const std::vector<std::string>& argv,
                            const std::vector<std::pair<std::string, std::string>>& env,
                            uint32_t timeout_ms, const std::function<void()>& tick) {
    if (argv.empty()) return make_error_code(Errc::invalid_argument);
    std::vector<std::string> envs;
    for (char** e = environ; e && *e; ++e) {
        const std::string kv(*e);
        bool overridden = false;
        for (const auto& [k, v] : env)
            if (kv.compare(0, k.size() + 1, k + "=") == 0) overridden = true;
        if (!overridden) envs.push_back(kv);
    }
    for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
    std::vector<char*> cargv, cenv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    for (const auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
    cenv.push_back(nullptr);

    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    // nvfenced blocks its termination signals (signalfd) and ignores
    // SIGPIPE; both would be inherited across exec without this.
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT}) sigaddset(&defaults, sig);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, cargv[0], &fa, &attr, cargv.data(), cenv.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) return errno_error(rc);
    // The timeout kills -pid, the child's own process group: a pid of 0 or
    // 1 would signal this daemon's group or every process.
    NVF_INVARIANT(pid > 1);

    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    auto next_tick = std::chrono::steady_clock::now();
    for (;;) {
        if (tick && std::chrono::steady_clock::now() >= next_tick) {
            tick();
            next_tick = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        }
        int status = 0;
        const pid_t w = ::waitpid(pid, &status, WNOHANG);
        if (w == pid) {
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Ok{};
            return child_error(status);
        }
        if (w < 0 && errno != EINTR) return errno_error(errno);
        if (std::chrono::steady_clock::now() >= deadline) {
            ::kill(-pid, SIGKILL);
            ::kill(pid, SIGKILL);
            while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            return make_error_code(Errc::timeout);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

Status FenceActions::run(const std::vector<std::string>& argv, const ChildEnv& env) const {
    // Built from parsed settings (parse_agent_settings): a program and its
    // operand (a unit, a command) are never empty, every child is bounded.
    NVF_INVARIANT(!argv.empty() && !argv.front().empty() && !argv.back().empty());
    NVF_INVARIANT(s_.fence_timeout_ms > 0);
    if (before_run_) before_run_(describe_argv(argv), s_.fence_timeout_ms);
    return runner_.run(argv, env, s_.fence_timeout_ms, tick_);
}

Status FenceActions::stop_writers(const std::string& reason,
                                           const std::function<void(bool, const std::string&)>& log) const {
    Status result = Ok{};
    auto env = env_;
    env.emplace_back("NVFENCE_REASON", reason);
    for (const auto& unit : s_.writer_units) {
        const std::vector<std::string> argv = {"systemctl", "stop", unit};
        auto r = run(argv, env);
        if (r) {
            log(true, "stopped writer unit " + unit);
        } else {
            log(false, "stopping writer unit " + unit + " ('" + describe_argv(argv) + "') failed: " +
                           r.error().message());
            result = r;
        }
    }
    return result;
}

Status FenceActions::fence_action(const std::string& reason,
                                           const std::function<void(bool, const std::string&)>& log) const {
    auto env = env_;
    env.emplace_back("NVFENCE_REASON", reason);
    std::vector<std::string> argv;
    switch (s_.fence_action) {
    case FenceActionKind::none:
        log(true, "fence action: none configured (writers stopped; the device refuses this host's writes)");
        return Ok{};
    case FenceActionKind::command: argv = {"/bin/sh", "-c", s_.fence_command}; break;
    case FenceActionKind::stop_unit: argv = {"systemctl", "stop", s_.fence_unit}; break;
    case FenceActionKind::reboot:
        if (s_.reboot_method == RebootMethod::sysrq) {
            log(true, "fence action: rebooting now through /proc/sysrq-trigger (no sync)");
            runner_.sysrq_reboot();
            log(false, "sysrq reboot did not happen; trying 'reboot -ff'");
            argv = {"reboot", "-ff"};
        } else {
            argv = {"reboot", "-f"};
        }
        break;
    }
    log(true, "fence action: running '" + describe_argv(argv) + "'");
    auto r = run(argv, env);
    if (r) log(true, "fence action '" + describe_argv(argv) + "' done");
    else log(false, "fence action '" + describe_argv(argv) + "' failed: " + r.error().message());
    return r;
}

}  // namespace nvfence
