// SPDX-License-Identifier: MIT
#pragma once
/// @file observe.hpp
/// What nvfenced tells the outside besides its log lines and systemd's
/// STATUS=: the metrics file for node_exporter's textfile collector
/// (`metrics_dir`, agent/metrics.hpp) and one structured journal record per
/// state change (agent/journal.hpp). Neither ever stops fencing: a failed
/// write is logged once, a record journald did not take is dropped (its
/// stderr line was logged all the same).

#include <cstdint>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "agent/agent.hpp"
#include "agent/agent_config.hpp"
#include "agent/metrics.hpp"
#include "elector_link.hpp"

namespace nvfenced {

/// The metrics file and the journal records of one agent.
class Observer {
public:
    /// For volume @p volume with @p s (metrics_dir: "" none); journal
    /// records go to journald when it is present (journald_present()).
    Observer(const nvfence::AgentSettings& s, const std::string& volume, spdlog::logger& log);

    /// Every event of the agent: a state change is counted (the metrics are
    /// due) and sent to the journal.
    void on_event(const nvfence::AgentEvent& e);
    /// After every check and every wake of the loop: writes the metrics
    /// when due. Returns the ms until a held-back sample is due (INT64_MAX:
    /// none), which the loop's poll waits at most.
    int64_t after_wake(nvfence::Agent& agent, const ElectorLink* elector, nvfence::Clock& clock);
    /// After the agent stopped: its last sample (STOPPING), at once.
    void at_stop(nvfence::Agent& agent, const ElectorLink* elector);

private:
    nvfence::VolumeMetrics sample(nvfence::Agent& agent, const ElectorLink* elector) const;

    spdlog::logger& log_;
    std::unique_ptr<nvfence::MetricsPublisher> metrics_;
    bool journal_ = false;
    bool journal_failed_ = false;
    uint64_t state_changes_ = 0;
};

}  // namespace nvfenced
