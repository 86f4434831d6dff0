// SPDX-License-Identifier: MIT
#pragma once
/// @file agent_event.hpp
/// What the host agent reports: one AgentEvent per thing it observed or
/// did, and its one-line text (nvfenced logs it).

#include <cstdint>
#include <optional>
#include <string>

#include "nvfence/control.hpp"
#include "nvfence/report.hpp"

namespace nvfence {

/// What an AgentEvent reports.
enum class AgentEventKind : uint8_t {
    state_changed,          ///< from -> to, with the reason and the report.
    holder_changed,         ///< The holder is another key than at the last check.
    generation_reset,       ///< The generation went backwards (target restart).
    notification,           ///< A Reservation Notification log page was read.
    notification_overflow,  ///< Notification pages were lost or left unread.
    check_failed,           ///< A check could not read the device (first failure).
    check_recovered,        ///< A check succeeded again after failures.
    slow_check,             ///< A check took longer than the interval.
    loop_stalled,           ///< A check ran much later than scheduled (paused?).
    host_id_shared,         ///< Another controller registered with this host's id.
    request,                ///< A control request was served.
    action_failed,          ///< Stopping writers or the fence action failed.
    info,                   ///< Anything else worth one line.
};

/// How loud an event is.
enum class EventLevel : uint8_t { debug, info, warning, error };

/// One thing the agent observed or did: one log line.
struct AgentEvent {
    AgentEventKind kind = AgentEventKind::info;  ///< What.
    EventLevel level = EventLevel::info;         ///< How loud.
    AgentState from = AgentState::starting;      ///< State before.
    AgentState to = AgentState::starting;        ///< State after.
    std::string text;                            ///< What happened, in words.
    std::optional<ReservationStatus> report;     ///< The observed report, if any.
    HostId self{};                               ///< This host (to mark it in the report).
    uint64_t key = 0;                            ///< This host's key after the event (0: none).
    std::string volume;                          ///< The agent's volume (AgentOptions::volume).
    uint8_t node = 0;                            ///< This host's node id.
};

/// Words for an event kind, e.g. "state", "holder", "notification".
const char* agent_event_kind_name(AgentEventKind k);

/// A report in one line: generation, type, holder and registrants, with
/// this host marked, e.g.
/// `gen 7, WE, holder nf:0:2:5, registrants [nf:0:1:3 (this host), nf:0:2:5 (holder)]`.
std::string describe_report(const ReservationStatus& st, const HostId& self);

/// An event in one line (no timestamp, no level): state changes read
/// `STANDBY -> FENCED: <text>; report: <describe_report>`.
std::string format_event(const AgentEvent& e);

}  // namespace nvfence
