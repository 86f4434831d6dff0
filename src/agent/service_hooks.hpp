// SPDX-License-Identifier: MIT
#pragma once
/// @file service_hooks.hpp
/// nvfenced's AgentHooks: log the agent's events, act on this host through
/// FenceActions, and tell the service manager (systemd's notify protocol)
/// the agent's state and keep-alives. The messages go through a
/// ServiceNotifier, the seam unit tests replace.

#include <functional>
#include <string>

#include "agent/agent.hpp"
#include "agent/fence_actions.hpp"
#include "agent/hardware_watchdog.hpp"

namespace nvfence {

/// Where the messages to the service manager go: sd_notify() in nvfenced,
/// a recorder in tests. One call is one datagram ("A=1\nB=2").
class ServiceNotifier {
public:
    virtual ~ServiceNotifier() = default;
    /// Sends @p message; never blocks. A lost message is not an error here.
    virtual void notify(const std::string& message) = 0;
};

/// The AgentHooks of nvfenced.
///
/// Before every bounded child (writer-unit stop, fence action) it sends
/// EXTEND_TIMEOUT_USEC= covering the child's bound plus kExtendMarginMs:
/// a fence action left pending by a killed agent runs again during the next
/// start, before READY=1 (units ordered after the agent must not start while
/// it runs), and must not be cut off by TimeoutStartSec, or systemd would
/// kill and restart the agent in a loop. The same covers TimeoutStopSec for
/// the writer stops of a clean stop. The extension is bounded (each child
/// is); the watchdog keep-alives go on while the child runs.
class ServiceHooks final : public AgentHooks {
public:
    /// Added to each child's bound in EXTEND_TIMEOUT_USEC: what runs after
    /// the child (persisting the state, the next child's start, READY=1).
    static constexpr uint32_t kExtendMarginMs = 10000;

    /// Logs one event.
    using EventLog = std::function<void(const AgentEvent&)>;
    /// Logs one line of an action (true: it went well).
    using LineLog = std::function<void(bool, const std::string&)>;

    /// Acts through @p actions and tells @p notifier (both borrowed);
    /// @p watchdog: systemd expects keep-alives (WATCHDOG=1). Sets the
    /// actions' tick, so children's waits feed the watchdog, and their
    /// before_run, which extends the service manager's timeouts.
    ServiceHooks(FenceActions& actions, ServiceNotifier& notifier, bool watchdog, EventLog on_event,
                 LineLog on_line);

    /// Logs @p e; a state change also becomes STATUS=.
    void event(const AgentEvent& e) override;
    /// FenceActions::stop_writers().
    Status stop_writers(const std::string& reason) override;
    /// FenceActions::fence_action().
    Status fence_action(const std::string& reason) override;
    /// WATCHDOG=1 when the watchdog is on.
    void keepalive() override;
    /// READY=1 with STATUS=@p status: the agent has started.
    void ready(const std::string& status);
    /// STOPPING=1.
    void stopping();
    /// Feeds @p hw (borrowed; nullptr: none) wherever WATCHDOG=1 would go
    /// (after every check, about once a second while a child runs), and
    /// gives it up when the fence action fails: a host that could not run
    /// its fence action is reset by the hardware.
    void set_hardware_watchdog(HardwareWatchdog* hw);

private:
    FenceActions& actions_;
    ServiceNotifier& notifier_;
    bool watchdog_;
    HardwareWatchdog* hw_ = nullptr;
    EventLog on_event_;
    LineLog on_line_;
};

}  // namespace nvfence
