// SPDX-License-Identifier: MIT
#pragma once
/// @file fence_actions.hpp
/// What nvfenced does to this host outside the device: stop the writer
/// units and run the fence action, each as a child process with a bounded
/// run time (killed with its whole process group when it overruns).

#include <functional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "agent/agent_config.hpp"
#include "nvfence/result.hpp"

namespace nvfence {

/// The category of child-process failures: value = exit status (1..255),
/// or 1000 + signal number when killed by a signal.
const std::error_category& child_category() noexcept;

/// Runs @p argv (argv[0] looked up in PATH, no shell) with stdin from
/// /dev/null, the current environment plus @p env, default signal
/// dispositions and an empty signal mask, in its own process group. Waits at
/// most @p timeout_ms; then kills the group (Errc::timeout). A non-zero exit
/// is an error in child_category(). While it waits it calls @p tick (if
/// set) about once a second: the watchdog is fed while a bounded action runs.
Status run_bounded(const std::vector<std::string>& argv,
                            const std::vector<std::pair<std::string, std::string>>& env,
                            uint32_t timeout_ms, const std::function<void()>& tick = {});

/// The command line for a fence action or a unit stop, as logged.
std::string describe_argv(const std::vector<std::string>& argv);

/// Environment additions for a child: name, value.
using ChildEnv = std::vector<std::pair<std::string, std::string>>;

/// How FenceActions acts on this host: child processes and the sysrq
/// reboot (the seam unit tests replace).
class ProcessRunner {
public:
    virtual ~ProcessRunner() = default;
    /// Runs @p argv as run_bounded() does.
    virtual Status run(const std::vector<std::string>& argv, const ChildEnv& env, uint32_t timeout_ms,
                       const std::function<void()>& tick) = 0;
    /// Reboots at once through /proc/sysrq-trigger (no sync). Returns only
    /// when the reboot did not happen.
    virtual void sysrq_reboot() = 0;
};

/// The real runner: run_bounded() and /proc/sysrq-trigger.
ProcessRunner& system_process_runner();

/// Stops writer units and runs the configured fence action.
class FenceActions {
public:
    /// Acts as @p s says through @p runner (borrowed); @p env is added to
    /// the environment of every child (NVFENCE_VOLUME, NVFENCE_DEVICE, ...).
    FenceActions(const AgentSettings& s, ChildEnv env, ProcessRunner& runner = system_process_runner())
        : runner_(runner), s_(s), env_(std::move(env)) {}
    /// `systemctl stop UNIT` for every writer unit, each bounded by
    /// fence_timeout_ms. @p log receives one line per unit.
    Status stop_writers(const std::string& reason,
                                 const std::function<void(bool, const std::string&)>& log) const;
    /// The fence action; for reboot this does not return when it works.
    Status fence_action(const std::string& reason,
                                 const std::function<void(bool, const std::string&)>& log) const;

    /// Called about once a second while a child runs (the watchdog keep-alive).
    void set_tick(std::function<void()> tick) { tick_ = std::move(tick); }
    /// Called just before each child starts, with its command line and its
    /// bound (fence_timeout_ms): nvfenced extends systemd's timeouts by it.
    void set_before_run(std::function<void(const std::string&, uint32_t)> f) { before_run_ = std::move(f); }

private:
    /// One bounded child: before_run_, then the runner with tick_.
    Status run(const std::vector<std::string>& argv, const ChildEnv& env) const;

    ProcessRunner& runner_;
    std::function<void()> tick_;
    std::function<void(const std::string&, uint32_t)> before_run_;
    AgentSettings s_;
    ChildEnv env_;
};

}  // namespace nvfence
