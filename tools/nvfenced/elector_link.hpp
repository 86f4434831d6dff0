// SPDX-License-Identifier: MIT
#pragma once
/// @file elector_link.hpp
/// nvfenced's hooks for `elector = etcd` (elector/agent_elector.hpp): the
/// elector keys on the command line and in the configuration, the etcd
/// elector's thread, the takeover refusal and the status line. main.cpp
/// calls these few functions; without `elector = etcd` they do nothing.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <spdlog/spdlog.h>

#include "agent/agent.hpp"
#include "elector/agent_elector.hpp"
#include "elector/elector.hpp"
#include "elector/elector_config.hpp"

namespace nvfenced {

/// Exit code of `nvfence takeover` (and of any takeover request) refused
/// because an elector decides who holds: ExitCode::conflict (3).
inline constexpr int kExitElectorOwnsTakeover = 3;

/// The elector wired to one agent; absent with `elector = none`.
class ElectorLink {
public:
    /// Validates the elector keys of @p kv (agent keys such as role are
    /// read too) for @p volume; nullopt with @p why on bad input, for
    /// `elector = etcd` in a build without it (NVFENCE_ETCD=OFF), and for
    /// `elector = etcd` when libcurl does not load (it is loaded here).
    static std::optional<nvfence::ElectorSettings> settings(const std::map<std::string, std::string>& kv,
                                                            const std::string& volume, std::string& why);
    /// Builds the etcd elector for @p es (kind etcd). Null with @p why when
    /// it cannot (bad endpoint or TLS file, libcurl missing).
    static std::unique_ptr<ElectorLink> create(const nvfence::ElectorSettings& es, uint8_t node, uint8_t tag,
                                               const nvfence::HostId& self, const nvfence::EpochStore* epochs,
                                               const std::string& state_dir, const std::string& volume,
                                               std::string& why);
    ~ElectorLink();

    /// Before Agent::start(): while HOLDER, the agent's device commands end
    /// by the term's act-before point (ElectorBridge::bind).
    void attach(nvfence::Agent& agent) { bridge_.bind(agent); }
    /// Starts the elector's thread (after Agent::start()).
    void start();
    /// The fd the agent's poll watches (-1: none).
    int wake_fd() const { return bridge_.wake_fd(); }
    /// On every wake of the agent's thread: serves the elector's events.
    void on_wake(nvfence::Agent& agent, nvfence::AgentHooks& hooks, nvfence::Clock& clock) {
        bridge_.drain(agent, hooks, clock);
    }
    /// The agent's poll wakes by then at the latest (ms), so a HOLDER whose
    /// lease may run out steps down on time (ElectorBridge::watch_lease).
    int64_t until_lease_watch_ms(const nvfence::Agent& agent, nvfence::Clock& clock) const {
        const auto w = bridge_.until_lease_watch(agent, clock);
        return w == std::chrono::milliseconds::max() ? INT64_MAX : w.count() + 1;
    }
    /// A request the elector owns (takeover) gets its refusal in @p out;
    /// true when refused.
    bool refuse(const nvfence::ControlRequest& q, nvfence::ControlReply& out, nvfence::Agent& agent) const;
    /// Adds the elector's line to a status reply's message
    /// (`...; elector: etcd: leader ...`).
    void decorate(nvfence::ControlReply& r) const;
    /// The elector's state in one line.
    std::string describe() const { return nvfence::describe_elector(bridge_.snapshot()); }
    /// The term (token) of this host's leadership, 0 while it does not lead.
    uint32_t term() const { return bridge_.snapshot().term; }
    /// The settings in force.
    const nvfence::ElectorSettings& settings() const { return es_; }

private:
    ElectorLink(nvfence::ElectorSettings es, uint8_t tag, const nvfence::HostId& self,
                const nvfence::EpochStore* epochs, std::unique_ptr<nvfence::Elector> elector);
    nvfence::ElectorSettings es_;
    std::unique_ptr<nvfence::Elector> elector_;
    nvfence::ElectorBridge bridge_;
    std::unique_ptr<nvfence::ElectorThread> thread_;
};

}  // namespace nvfenced
