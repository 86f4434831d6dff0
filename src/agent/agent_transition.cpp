// SPDX-License-Identifier: MIT
#include "agent/agent_transition.hpp"

#include "agent/agent_text.hpp"

namespace nvfence {
namespace {

using agent_detail::key_text;
using S = AgentState;
using K = ObservationKind;

constexpr AgentStatePair kAllowedTransitions[] = {
    {S::starting, S::standby}, {S::starting, S::holder},  {S::starting, S::fenced},
    {S::starting, S::stopping}, {S::standby, S::holder},  {S::standby, S::fenced},
    {S::standby, S::stopping},  {S::holder, S::standby},  {S::holder, S::fenced},
    {S::holder, S::stopping},   {S::fenced, S::standby},  {S::fenced, S::holder},
    {S::fenced, S::stopping},
    // A key replaced without a change of state (a request that re-keyed
    // this host and then failed, found by the Report afterwards; a fresh
    // key taken before the start role acquires).
    {S::standby, S::standby},   {S::holder, S::holder},
};

PersistedRole role_of(AgentState s) {
    return s == S::holder ? PersistedRole::holder : s == S::fenced ? PersistedRole::fenced : PersistedRole::standby;
}

// A transition that persists the state it leads to.
Transition to_state(const AgentView& v, AgentState to, std::string why, EventLevel level, uint64_t key) {
    Transition t;
    t.from = v.state;
    t.to = to;
    t.why = std::move(why);
    t.level = level;
    t.key = key;
    t.persist = role_of(to);
    return t;
}

Transition fence(const AgentView& v, std::string why, uint64_t key) {
    Transition t = to_state(v, S::fenced, std::move(why), EventLevel::error, key);
    t.fence = FenceEntry::fresh;
    return t;
}

bool holds(const AgentView& v, const ReservationStatus& st, const Registrant& me) {
    return me.holder && st.type == v.type;
}

bool registered(AgentState s) { return s == S::standby || s == S::holder; }

std::string gone_reason(const Observation& o, const std::string& k) {
    if (o.generation_reset)
        return "target restart: the generation went backwards and this host's key " + k + " is gone";
    if (o.notes.registration_preempted)
        return "preempted: registration " + k + " was removed (Registration Preempted notification)";
    if (o.notes.reservation_preempted) return "registration " + k + " was removed: the reservation was cleared";
    return "registration " + k + " is gone: preempted or unregistered by another host";
}

// A check's Report: FENCED when this host's key is gone or replaced (or,
// exclusive, the reservation lost); HOLDER/STANDBY as the device shows.
std::optional<Transition> on_report(const AgentView& v, const Observation& o) {
    if (!registered(v.state) || !o.report) return std::nullopt;
    const ReservationStatus& st = *o.report;
    const Registrant* me = st.find_host(v.self);
    const std::string k = key_text(v.key);
    if (!me) return fence(v, gone_reason(o, k), v.key);
    if (me->key != v.key)
        return fence(v,
                     "this host's host id is now registered with key " + key_text(me->key) + " instead of " + k +
                         ": another host shares this host id, or the key was changed outside the agent",
                     v.key);
    const bool hold = holds(v, st, *me);
    if (v.state == S::holder && !hold) {
        const Registrant* h = st.holder();
        const std::string who = h ? "the holder is now " + key_text(h->key) : "nobody holds it";
        if (v.type == ResvType::write_exclusive)
            return fence(v, "reservation lost while still registered (" + who + "): the device refuses this host's writes",
                         v.key);
        return to_state(v, S::standby,
                        "reservation lost (" + who + "); still registered, and Registrants Only lets registrants write",
                        EventLevel::warning, v.key);
    }
    // Under an elector a hold needs a lease, and a lease comes only with a
    // won term (Agent::take_term): a hold found by a check (a command of a
    // given-up term that completed late; the simulator's seed 5285) has none.
    if (v.state == S::standby && hold && v.holder_needs_lease)
        return fence(v,
                     "the device shows this host holding the reservation with " + k +
                         " (a command that completed late), but no elector lease backs it",
                     v.key);
    if (v.state == S::standby && hold)
        return to_state(v, S::holder,
                        "the device shows this host holding the reservation with " + k + " (acquired outside the agent)",
                        EventLevel::warning, v.key);
    return std::nullopt;
}

std::optional<Transition> on_view_lost(const AgentView& v, const Observation& o) {
    if (v.state != S::holder) return std::nullopt;
    if (v.fence_on_view_loss)
        return fence(v, o.text + ": fencing this host, as it cannot know whether it still holds", v.key);
    return to_state(v, S::standby, o.text + ": no longer claiming HOLDER (fence_on_view_loss = false)",
                    EventLevel::error, v.key);
}

// start(): a registration of this host found on the device (adopted) or
// the persisted one gone (FENCED). o.text says why it is adopted.
std::optional<Transition> on_resumed(const AgentView& v, const Observation& o) {
    if (v.state != S::starting || !o.report) return std::nullopt;
    const bool was_registered = o.persisted == PersistedRole::standby || o.persisted == PersistedRole::holder;
    if (!o.found_ours) {
        if (!was_registered) return std::nullopt;
        return fence(v,
                     o.found_key ? "while the agent was down, this host's host id got key " + key_text(o.found_key) +
                                       " instead of " + key_text(o.key)
                                 : "while the agent was down, key " + key_text(o.key) +
                                       " was removed (preempted or unregistered)",
                     o.key);
    }
    const ReservationStatus& st = *o.report;
    const Registrant* me = st.find_host(v.self);
    if (!me || me->key != o.found_key) return std::nullopt;
    const std::string k = key_text(me->key);
    if (holds(v, st, *me) && v.holder_needs_lease)
        return fence(v,
                     o.text + ": the device shows this host holding with " + k +
                         ", but the elector's lease of that leadership ended with the process that held it",
                     me->key);
    if (holds(v, st, *me))
        return to_state(v, S::holder, o.text + ": the device shows this host holding with " + k, EventLevel::info,
                        me->key);
    if (o.persisted == PersistedRole::holder && v.type == ResvType::write_exclusive) {
        const Registrant* h = st.holder();
        return fence(v,
                     o.text + ": this host held the reservation with " + k + " but the device shows " +
                         (h ? key_text(h->key) + " holding" : std::string("nobody holding")) +
                         ": lost while the agent was down",
                     me->key);
    }
    return to_state(v, S::standby, o.text + ": registered with " + k + ", not holding", EventLevel::info, me->key);
}

std::optional<Transition> on_resumed_fenced(const AgentView& v, const Observation& o) {
    if (v.state != S::starting) return std::nullopt;
    Transition t = to_state(v, S::fenced,
                            "still FENCED from before the restart (" + o.text +
                                "); only 'nvfence rejoin' or a takeover request brings this host back",
                            EventLevel::warning, o.key);
    t.fence = FenceEntry::resumed;
    t.persist.reset();  // the file says FENCED already, with the action's progress
    return t;
}

// The elector's lease ended (or may have): a HOLDER fences itself like on
// any other fence; the reservation stays for the next leader to preempt.
std::optional<Transition> on_lease_lost(const AgentView& v, const Observation& o) {
    if (v.state != S::holder) return std::nullopt;
    return fence(v, o.text, v.key);
}

std::optional<Transition> on_stopped(const AgentView& v, const Observation& o) {
    if (v.state == S::stopping) return std::nullopt;
    Transition t;
    t.from = v.state;
    t.to = S::stopping;
    t.key = v.key;
    if (v.state == S::fenced) {
        t.why = "stopping while FENCED: the device is left as it is and the state file keeps FENCED";
        return t;
    }
    t.why = o.text;
    if (v.state == S::starting) return t;  // nothing was registered or persisted by this run
    t.persist = o.unregistered ? PersistedRole::none : PersistedRole::standby;
    if (o.unregistered) t.key = 0;
    return t;
}

// The outcome of a request (or of the start's own registration).
std::optional<Transition> on_request(const AgentView& v, const Observation& o) {
    switch (o.kind) {
    case K::registered:
        if (v.state != S::starting) return std::nullopt;
        return to_state(v, S::standby, o.text, EventLevel::info, o.key);
    case K::acquired:
        // From FENCED only by a won term (Agent::take_term of a candidate:
        // its own key still holding after a lease loss, writers stopped,
        // action done); every other request refuses FENCED before this.
        if (!registered(v.state) && v.state != S::fenced) return std::nullopt;
        return to_state(v, S::holder, o.text, EventLevel::info, o.key);
    case K::rekeyed:
        if (!registered(v.state)) return std::nullopt;
        return to_state(v, o.holding ? S::holder : S::standby, o.text,
                        o.holding ? EventLevel::info : EventLevel::warning, o.key);
    case K::released:
        if (v.state != S::holder) return std::nullopt;
        return to_state(v, S::standby, o.text, EventLevel::info, v.key);
    case K::rejoined:
        if (v.state != S::fenced) return std::nullopt;
        return to_state(v, o.holding ? S::holder : S::standby, o.text, EventLevel::info, o.key);
    case K::unregister_failed:
        if (v.state != S::holder) return std::nullopt;  // a standby's file already says so
        return to_state(v, S::standby, o.text, EventLevel::error, v.key);
    default: return std::nullopt;
    }
}

}  // namespace

std::span<const AgentStatePair> agent_allowed_transitions() { return kAllowedTransitions; }

bool agent_transition_allowed(AgentState from, AgentState to) {
    for (const auto& [f, t] : kAllowedTransitions)
        if (f == from && t == to) return true;
    return false;
}

std::optional<Transition> decide_transition(const AgentView& v, const Observation& o) {
    switch (o.kind) {
    case K::report: return on_report(v, o);
    case K::view_lost: return on_view_lost(v, o);
    case K::resumed: return on_resumed(v, o);
    case K::resumed_fenced: return on_resumed_fenced(v, o);
    case K::stopped: return on_stopped(v, o);
    case K::lease_lost: return on_lease_lost(v, o);
    default: return on_request(v, o);
    }
}

}  // namespace nvfence
