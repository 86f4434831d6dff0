// SPDX-License-Identifier: MIT
#pragma once
/// @file agent_transition.hpp
/// The host agent's state machine as data and one pure function: the
/// static table of allowed transitions, and decide_transition(), which maps
/// (what the agent is, what it observed) to the transition to make, or to
/// none. Agent::apply() is the only code that performs a transition: it
/// checks it against the table (a transition outside it aborts), changes
/// the state, emits the event and persists the state file.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "agent/agent_event.hpp"
#include "agent/agent_state_file.hpp"
#include "nvfence/control.hpp"
#include "nvfence/report.hpp"

namespace nvfence {

/// One allowed change of state: from, to.
using AgentStatePair = std::pair<AgentState, AgentState>;

/// The static table of allowed transitions, the single source of
/// agent_transition_allowed(). Nothing leads out of FENCED but a rejoin
/// (to STANDBY, or HOLDER when the device shows this host holding), a
/// check-only watcher's check that finds the node's key back (to WATCHING)
/// and a stop; STOPPING is final; nothing returns to STARTING. WAITING and
/// WATCHING are a check-only watcher's only (role = watch), which never
/// reaches STANDBY or HOLDER.
std::span<const AgentStatePair> agent_allowed_transitions();

/// True when the agent may change from @p from to @p to (membership in
/// agent_allowed_transitions()).
bool agent_transition_allowed(AgentState from, AgentState to);

/// What the agent learnt from the Reservation Notification log in one check.
struct CheckNotes {
    uint32_t pages = 0;                   ///< Log pages read.
    bool registration_preempted = false;  ///< A Registration Preempted page was read.
    bool reservation_released = false;    ///< A Reservation Released page was read.
    bool reservation_preempted = false;   ///< A Reservation Preempted page was read.
    uint64_t lost = 0;                    ///< Pages lost (counter jumped).
    bool more_pending = false;            ///< More pages than read per check.
};

/// What an Observation reports.
enum class ObservationKind : uint8_t {
    report,          ///< A check read the Report (report, notes, generation_reset).
    view_lost,       ///< No check succeeded for the view timeout (text: why).
    resumed_fenced,  ///< start(): the state file says FENCED (text: its reason; check-only: found_key).
    resumed,         ///< start(): this host's registration found (persisted, found_key, found_ours, text);
                     ///< check-only: the start's Report (persisted, found_key: the node's key, 0: none).
    registered,      ///< start(): registered with a fresh key (key, text).
    acquired,        ///< A request or the start role left this host holding (key, text).
    rekeyed,         ///< A request left this host with a newer key of its own (key, holding, text).
    released,        ///< A handoff released the reservation (text).
    rejoined,        ///< A rejoin registered a fresh key (key, holding, text).
    unregister_failed,  ///< stop(): unregistering failed; still registered (text).
    stopped,         ///< stop() finished (unregistered, text).
    lease_lost,      ///< The elector's lease of this host's leadership ended or may have (text: why).
};

/// The input of decide_transition() besides the agent's own state. Fields
/// not named for a kind are ignored.
struct Observation {
    ObservationKind kind = ObservationKind::report;  ///< What.
    const ReservationStatus* report = nullptr;       ///< The Report read, if any.
    CheckNotes notes;                                ///< report: the notification log.
    bool generation_reset = false;                   ///< report: GEN went backwards (no wrap).
    uint64_t key = 0;                                ///< This host's key after it.
    bool holding = false;                            ///< rekeyed, rejoined: the device shows this host holding.
    PersistedRole persisted = PersistedRole::none;   ///< resumed: the role in the state file.
    uint64_t found_key = 0;                          ///< resumed: this host id's key on the device (0: none).
    bool found_ours = false;                         ///< resumed: found_key is the persisted key or a newer one of ours.
    bool unregistered = false;                       ///< stopped: the registration was removed.
    /// Check-only (report while WAITING, resumed): the key fence_nvfence's
    /// `on` recorded for this node (AgentStateFile::unfenced_key, read
    /// before the Report), 0: none.
    uint64_t unfenced_key = 0;
    std::string text;                                ///< The caller's words (see each kind).
};

/// What the agent is, as decide_transition() needs it.
struct AgentView {
    AgentState state = AgentState::starting;   ///< Current state.
    uint64_t key = 0;                          ///< This host's key (0: none).
    ResvType type = ResvType::write_exclusive; ///< The reservation type the agent keeps.
    HostId self{};                             ///< This host.
    bool fence_on_view_loss = true;            ///< AgentOptions::fence_on_view_loss.
    bool holder_needs_lease = false;           ///< AgentOptions::holder_needs_lease.
    /// A check-only watcher (role = watch): never registers; WAITING until
    /// the node's key (tag, node, any epoch) is seen, WATCHING while it is
    /// registered, FENCED once it is gone, WATCHING again when it is back.
    bool check_only = false;
    uint8_t tag = 0;   ///< Cluster tag (check-only: whose keys are the node's).
    uint8_t node = 0;  ///< Node id (check-only: whose keys are the node's).
};

/// How a transition into FENCED treats the self-fence.
enum class FenceEntry : uint8_t {
    none,     ///< Not entering FENCED.
    fresh,    ///< Stop the writers first, persist the action pending, then run it.
    resumed,  ///< FENCED from the state file: its fence progress is kept.
};

/// One state change: what Agent::apply() performs.
struct Transition {
    AgentState from = AgentState::starting;   ///< State before (must be the agent's).
    AgentState to = AgentState::starting;     ///< State after.
    std::string why;                          ///< The event's text.
    EventLevel level = EventLevel::info;      ///< The event's level.
    uint64_t key = 0;                         ///< This host's key after it (0 on an unregistering stop).
    FenceEntry fence = FenceEntry::none;      ///< Entering FENCED: how.
    /// What the state file says after it (std::nullopt: left as it is).
    std::optional<PersistedRole> persist;
};

/// The one decision of the agent: the transition @p o calls for in @p v,
/// or std::nullopt when the state stays. Pure: no device, clock or file.
/// Every transition it returns starts at v.state and is in the table.
std::optional<Transition> decide_transition(const AgentView& v, const Observation& o);

}  // namespace nvfence
