// SPDX-License-Identifier: MIT
#include "agent/agent_transition.hpp"

#include "agent/agent_text.hpp"
#include "internal/invariant.hpp"
#include "nvfence/key.hpp"

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
    // A check-only watcher (role = watch): it waits for the node's key,
    // watches it, is fenced when it is gone and watches again when it is
    // back (the cluster manager unfenced the node); a newer key of the
    // node replaces the one watched without a change of state.
    {S::starting, S::waiting},  {S::starting, S::watching}, {S::waiting, S::watching},
    {S::waiting, S::stopping},  {S::waiting, S::fenced},    {S::watching, S::watching}, {S::watching, S::fenced},
    {S::fenced, S::fenced},
    {S::watching, S::stopping}, {S::fenced, S::watching},
};

// WATCHING persists as standby with the key seen: "this node's key was
// registered" (a restart then knows the node was unfenced, as
// fence_scsi_check's key file does). WAITING persists nothing.
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

// FENCED again after a restart: the state file says FENCED already, with
// the fence action's progress, so nothing is written and the action resumes.
Transition still_fenced(const AgentView& v, const Observation& o, std::string text) {
    Transition t = to_state(v, S::fenced, std::move(text), EventLevel::warning, o.key);
    t.fence = FenceEntry::resumed;
    t.persist.reset();
    return t;
}

std::optional<Transition> on_resumed_fenced(const AgentView& v, const Observation& o) {
    if (v.state != S::starting) return std::nullopt;
    return still_fenced(v, o,
                        "still FENCED from before the restart (" + o.text +
                            "); only 'nvfence rejoin' or a takeover request brings this host back");
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


// ---- the check-only watcher (role = watch) -------------------------------------

// The node's key on the device: a key of this node id and cluster tag, any
// epoch, under any host id (0: none). The newest when there are several.
uint64_t node_key(const AgentView& v, const ReservationStatus* st) {
    if (!st) return 0;
    uint64_t best = 0;
    uint32_t best_epoch = 0;
    for (const Registrant& r : st->registrants) {
        auto f = decode_key(r.key);
        if (!f || f->tag != v.tag || f->node != v.node) continue;
        if (best == 0 || f->epoch > best_epoch) {
            best = r.key;
            best_epoch = f->epoch;
        }
    }
    return best;
}

Transition watch(const AgentView& v, std::string why, EventLevel level, uint64_t key) {
    return to_state(v, S::watching, std::move(why), level, key);
}

Transition wait_for_key(const AgentView& v, std::string why) {
    Transition t = to_state(v, S::waiting, std::move(why), EventLevel::info, 0);
    t.persist.reset();  // nothing seen, nothing to remember
    return t;
}

std::string watch_gone_reason(const Observation& o, const std::string& k) {
    return "check-only watcher: this node's key " + k + " is gone (" +
           (o.generation_reset ? std::string("the target restarted: the generation went backwards")
            : o.notes.registration_preempted ? std::string("Registration Preempted notification")
                                             : std::string("preempted or unregistered by another host")) +
           "): running the fence action; WATCHING again once the node is unfenced";
}

// fence_nvfence's `on` unfenced this node with a key this watcher has not
// acted on: any while WAITING; while FENCED, a newer one than the key it
// fenced for (a fencer's own re-key is older than the next `on`'s).
bool unfenced_since(const AgentView& v, const Observation& o) {
    if (!o.unfenced_key) return false;
    if (v.state == S::waiting || v.key == 0) return true;
    const auto r = decode_key(o.unfenced_key), f = decode_key(v.key);
    return r && f && r->epoch > f->epoch;
}

// WAITING or FENCED, no key of the node registered, and yet it was
// unfenced since (fence_nvfence's record, or while WAITING the device's
// Registration Preempted notification; pages from before the start were
// discarded): fenced again before a check saw the key.
std::optional<Transition> watch_unseen_fence(const AgentView& v, const Observation& o) {
    const bool preempted = v.state == S::waiting && o.notes.registration_preempted;
    if (!unfenced_since(v, o) && !preempted) return std::nullopt;
    const std::string how = unfenced_since(v, o)
                                ? "fence_nvfence 'on' unfenced this node with " + key_text(o.unfenced_key) +
                                      ", which is not registered"
                                : std::string("this host's registration was preempted (Registration Preempted "
                                              "notification)");
    return fence(v,
                 "check-only watcher: " + how +
                     " before a check saw this node's key: the node was unfenced and fenced since; running the "
                     "fence action; WATCHING once the node is unfenced again",
                 unfenced_since(v, o) ? o.unfenced_key : v.key);
}

// A check: the node's key is seen, replaced, gone, or back.
std::optional<Transition> watch_on_report(const AgentView& v, const Observation& o) {
    if (!o.report || (v.state != S::waiting && v.state != S::watching && v.state != S::fenced)) return std::nullopt;
    const uint64_t k = node_key(v, o.report);
    if (v.state == S::waiting || v.state == S::fenced) {
        if (!k) return watch_unseen_fence(v, o);
        return watch(v,
                     "check-only watcher: this node's key " + key_text(k) +
                         (v.state == S::waiting ? " is registered" : " is back") + " (the node was unfenced)",
                     EventLevel::info, k);
    }
    if (!k) return fence(v, watch_gone_reason(o, key_text(v.key)), v.key);
    if (k == v.key) return std::nullopt;
    return watch(v, "check-only watcher: this node's key is now " + key_text(k) + " (was " + key_text(v.key) + ")",
                 EventLevel::info, k);
}

AgentView with_key(AgentView v, uint64_t key) {
    v.key = key;
    return v;
}

// start(): the state file and the start's Report. A key never seen before
// (no file, or nothing registered by it) is waited for: a node the cluster
// manager has not unfenced yet is not fenced.
std::optional<Transition> watch_on_start(const AgentView& v, const Observation& o) {
    if (v.state != S::starting) return std::nullopt;
    const uint64_t k = node_key(v, o.report);
    if (o.kind == K::resumed_fenced) {
        if (k)
            return watch(v, "check-only watcher: FENCED before the restart (" + o.text + "), and this node's key " +
                                key_text(k) + " is back: the node was unfenced",
                         EventLevel::info, k);
        // Unfenced again after that fence, and fenced again while down.
        const AgentView was = with_key(v, o.key);
        if (unfenced_since(was, o)) return watch_unseen_fence(was, o);
        return still_fenced(v, o,
                            "check-only watcher: still FENCED from before the restart (" + o.text +
                                "); WATCHING again once the node is unfenced");
    }
    if (k) return watch(v, "check-only watcher: this node's key " + key_text(k) + " is registered", EventLevel::info, k);
    const bool seen = o.persisted == PersistedRole::standby || o.persisted == PersistedRole::holder;
    if (!seen && !o.unfenced_key)
        return wait_for_key(v, "check-only watcher: this node's key is not registered and was never seen: waiting "
                               "for the node to be unfenced (nothing is registered by this agent)");
    const uint64_t gone = seen ? o.key : o.unfenced_key;
    return fence(v,
                 "check-only watcher: while the agent was down, this node's key " + key_text(gone) + " (" +
                     (seen ? "seen" : "recorded by fence_nvfence 'on'") +
                     ") was removed (preempted or unregistered): running the fence action",
                 gone);
}

std::optional<Transition> watch_on_stopped(const AgentView& v) {
    if (v.state == S::stopping) return std::nullopt;
    Transition t;
    t.from = v.state;
    t.to = S::stopping;
    t.key = v.key;
    t.why = "clean stop of the check-only watcher: the device and the state file are left as they are";
    return t;
}

// The one decision of a check-only watcher: no request, lease or view
// loss moves it (it holds nothing and registers nothing).
std::optional<Transition> decide_watch(const AgentView& v, const Observation& o) {
    switch (o.kind) {
    case K::report: return watch_on_report(v, o);
    case K::resumed:
    case K::resumed_fenced: return watch_on_start(v, o);
    case K::stopped: return watch_on_stopped(v);
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

namespace {

bool watcher_state(AgentState s) { return s == S::waiting || s == S::watching; }

std::optional<Transition> decide_registering(const AgentView& v, const Observation& o) {
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

// What every decision promises (agent_transition.hpp), checked on each one.
void check_decision(const AgentView& v, const Transition& t) {
    NVF_INVARIANT(t.from == v.state);
    NVF_INVARIANT(agent_transition_allowed(t.from, t.to));
    NVF_INVARIANT(v.check_only ? !registered(t.to) : !watcher_state(t.to));
    NVF_INVARIANT((t.fence != FenceEntry::none) == (t.to == S::fenced));
    NVF_INVARIANT(t.to != S::holder || t.key != 0);
    NVF_INVARIANT(!t.why.empty());
}

}  // namespace

std::optional<Transition> decide_transition(const AgentView& v, const Observation& o) {
    // A watcher never stands by or holds; an agent that registers never
    // waits for or watches a key.
    NVF_INVARIANT(v.check_only ? !registered(v.state) : !watcher_state(v.state));
    auto t = v.check_only ? decide_watch(v, o) : decide_registering(v, o);
    if (t) check_decision(v, *t);
    return t;
}

}  // namespace nvfence
