// SPDX-License-Identifier: MIT
#include "agent/service_hooks.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "agent/agent_event.hpp"
#include "internal/invariant.hpp"
#include "nvfence/control.hpp"

namespace nvfence {

ServiceHooks::ServiceHooks(FenceActions& actions, ServiceNotifier& notifier, bool watchdog, EventLog on_event,
                           LineLog on_line)
    : actions_(actions), notifier_(notifier), watchdog_(watchdog), on_event_(std::move(on_event)),
      on_line_(std::move(on_line)) {
    if (!on_line_) on_line_ = [](bool, const std::string&) {};
    if (watchdog_) actions_.set_tick([this] { keepalive(); });
    actions_.set_before_run([this](const std::string&, uint32_t timeout_ms) {
        const uint64_t usec = (uint64_t{timeout_ms} + kExtendMarginMs) * 1000;
        notifier_.notify("EXTEND_TIMEOUT_USEC=" + std::to_string(usec));
    });
}

void ServiceHooks::event(const AgentEvent& e) {
    if (on_event_) on_event_(e);
    if (e.kind != AgentEventKind::state_changed) return;
    std::string text = e.text.substr(0, 200);
    std::replace(text.begin(), text.end(), '\n', ' ');  // a newline would start a new assignment
    const std::string status = std::string("STATUS=") + agent_state_name(e.to) + ": " + text;
    // One assignment, whatever the event's text carried (a device's or a
    // peer's words): never READY=1 or WATCHDOG=trigger smuggled in.
    NVF_INVARIANT(status.find('\n') == std::string::npos);
    notifier_.notify(status);
}

Status ServiceHooks::stop_writers(const std::string& reason) {
    return actions_.stop_writers(reason, on_line_);
}

Status ServiceHooks::fence_action(const std::string& reason) {
    auto s = actions_.fence_action(reason, on_line_);
    if (!s && hw_) hw_->give_up("the fence action failed: " + s.error().message());
    return s;
}

void ServiceHooks::keepalive() {
    if (watchdog_) notifier_.notify("WATCHDOG=1");
    if (hw_) hw_->feed();
}

void ServiceHooks::set_hardware_watchdog(HardwareWatchdog* hw) {
    hw_ = hw;
    if (watchdog_ || hw_) actions_.set_tick([this] { keepalive(); });
}

void ServiceHooks::ready(const std::string& status) {
    notifier_.notify("READY=1\nSTATUS=" + status);
}

void ServiceHooks::stopping() { notifier_.notify("STOPPING=1"); }

}  // namespace nvfence
