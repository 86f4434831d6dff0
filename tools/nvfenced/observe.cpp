// SPDX-License-Identifier: MIT
#include "observe.hpp"

#include <algorithm>

#include "agent/journal.hpp"

namespace nvfenced {

Observer::Observer(const nvfence::AgentSettings& s, const std::string& volume, spdlog::logger& log)
    : log_(log), journal_(nvfence::journald_present()) {
    if (s.metrics_dir.empty()) return;
    const std::string dir = s.metrics_dir;
    metrics_ = std::make_unique<nvfence::MetricsPublisher>(
        dir + "/nvfence_" + volume + ".prom",
        [dir, volume](const std::string& text) { return nvfence::write_metrics_file(dir, volume, text); },
        [&log](bool ok, const std::string& line) {
            if (ok) log.info("{}", line);
            else log.warn("{}", line);
        });
}

void Observer::on_event(const nvfence::AgentEvent& e) {
    if (e.kind != nvfence::AgentEventKind::state_changed) return;
    ++state_changes_;
    if (!journal_) return;
    const bool sent = nvfence::journal_send(nvfence::journal_datagram(nvfence::state_change_fields(e)));
    if (!sent && !journal_failed_)
        log_.warn("journal: cannot send the state change's structured record to {} (logged once; the log "
                  "lines go on)", nvfence::kJournalSocket);
    journal_failed_ = !sent;
}

nvfence::VolumeMetrics Observer::sample(nvfence::Agent& agent, const ElectorLink* elector) const {
    auto m = agent.metrics();
    if (elector) m.elector_term = elector->term();
    return m;
}

int64_t Observer::after_wake(nvfence::Agent& agent, const ElectorLink* elector, nvfence::Clock& clock) {
    if (!metrics_) return INT64_MAX;
    const auto now = clock.now();
    metrics_->publish(now, agent.checks() + state_changes_, [&] { return sample(agent, elector); });
    const auto due = metrics_->until_due(now);
    return due == nvfence::Clock::Ms::max() ? INT64_MAX : due.count();
}

void Observer::at_stop(nvfence::Agent& agent, const ElectorLink* elector) {
    if (metrics_) metrics_->write_now(sample(agent, elector));
}

}  // namespace nvfenced
