// SPDX-License-Identifier: MIT
#include "nvfence/fence.hpp"

#include <algorithm>
#include <cerrno>

#include "internal/invariant.hpp"
#include "nvfence/error.hpp"
#include "nvfence/key.hpp"

namespace nvfence {

namespace {
// Postconditions of the operations (TigerBeetle's style: each success is
// checked against what it promises). Each success above them was already
// verified by a Report; a success that breaks one is a bug in this file,
// not the device's doing, so it stops the program.

// acquire and every takeover: this host holds the reservation, of the
// options' type, with the key returned.
Outcome holding(const Fence& f, Outcome o) {
    const Registrant* m = f.mine(o.after);
    NVF_INVARIANT(m != nullptr && m->key == o.key && m->holder && o.after.type == f.options().type);
    return o;
}

// join: registered with the key returned, of this host's cluster tag.
Outcome registered(const Fence& f, Outcome o) {
    const Registrant* m = f.mine(o.after);
    const auto k = m ? decode_key(m->key) : std::nullopt;
    NVF_INVARIANT(m != nullptr && m->key == o.key && k && k->tag == f.options().tag);
    return o;
}

// release: this host does not hold; leave: it is not registered.
Outcome released(const Fence& f, Outcome o) {
    const Registrant* m = f.mine(o.after);
    NVF_INVARIANT(m == nullptr || !m->holder);
    return o;
}
Outcome left(const Fence& f, Outcome o) {
    NVF_INVARIANT(f.mine(o.after) == nullptr && o.key == 0);
    return o;
}

// A completion that does not prove the command had no effect is
// completion_uncertain() (error.hpp), the one rule: the Report decides.
bool maybe_done(std::error_code ec) { return completion_uncertain(ec); }

// The error completion @p ec of a command whose intended end state @p done
// recognises in a Report: when @p ec does not prove the command had no
// effect (maybe_done) and a fresh Report shows that end state, @p ec is
// recorded in o.completion_error and the command counts as done; otherwise
// the result is @p ec.
template <class Done>
Status confirm_done(Fence& f, std::error_code ec, Outcome& o, Done done) {
    if (!maybe_done(ec)) return ec;
    auto now = f.verify();
    if (!now || !done(*now)) return ec;
    o.completion_error = ec;
    return Ok{};
}
}  // namespace

Result<ReservationStatus> Fence::verify() {
    auto r = resv_.report();
    if (!r) return r;
    last_ = *r;
    floor_error_ = {};
    if (store_) {
        // Every Report raises the floor, so a key this host takes after the
        // target lost every key is still above every epoch it saw.
        auto o = store_->raise_from(*r, opts_.tag);
        if (o) implausible_ = std::move(o->implausible);
        else floor_error_ = o.error();
    } else {
        implausible_ = observe_epochs(*r, opts_.tag, 0).implausible;
    }
    return r;
}

Result<uint32_t> Fence::next_epoch(const ReservationStatus& st) const {
    uint32_t floor = 0;
    if (store_) {
        auto s = store_->load();
        if (!s) return s.error();
        floor = *s;
    }
    const uint32_t max = std::max(floor, observe_epochs(st, opts_.tag, floor).highest);
    if (!usable_epoch(max + 1)) return make_error_code(Errc::epoch_exhausted);
    return max + 1;
}

Result<uint8_t> Fence::node_for(const ReservationStatus& st) const {
    if (opts_.node != 0) return opts_.node;
    if (const auto* me = mine(st)) {
        auto f = decode_key(me->key);
        if (f && f->tag == opts_.tag) return f->node;
    }
    return make_error_code(Errc::invalid_argument);
}

Result<uint64_t> Fence::fresh_key(const ReservationStatus& st, uint8_t node,
                                  std::optional<uint32_t> epoch) {
    uint32_t e;
    if (epoch) {
        auto n = next_epoch(st);
        const uint32_t known = n ? *n - 1 : kEpochCeiling - 1;
        if (!usable_epoch(*epoch) || *epoch - std::min(*epoch, known) > kMaxEpochJump)
            return make_error_code(Errc::epoch_out_of_range);
        e = *epoch;
    } else {
        auto n = next_epoch(st);
        if (!n) return n.error();
        e = *n;
    }
    auto key = make_key({opts_.tag, node, e});
    if (!key) return key.error();
    // Persist before the key reaches the device: a crash after the register
    // must never let this host reuse the epoch.
    if (store_) {
        auto s = store_->raise_to(e);
        if (!s) return s.error();
    }
    last_fresh_epoch_ = e;
    return *key;
}

Result<Outcome> Fence::start() {
    auto before = verify();
    if (!before) return before.error();
    Outcome o;
    o.before = std::move(*before);
    if (const auto* h = o.before.holder()) o.previous_holder = h->key;
    return o;
}

Outcome Fence::finish(Outcome o, const ReservationStatus& after) const {
    o.after = after;
    const auto* me = mine(after);
    o.key = me ? me->key : 0;
    for (const auto& r : o.before.registrants) {
        // This host's own earlier key, still registered under a new key, was
        // replaced, not removed: callers report it apart from the victims.
        if (r.host_id == self_ && me) {
            if (r.key != me->key) o.replaced = r.key;
            continue;
        }
        const bool still = std::any_of(after.registrants.begin(), after.registrants.end(),
                                       [&](const Registrant& a) { return a.key == r.key; });
        if (!still && std::find(o.removed.begin(), o.removed.end(), r.key) == o.removed.end())
            o.removed.push_back(r.key);
    }
    return o;
}

// Register @p key, or replace this host's registration @p me with it.
RegisterArgs Fence::register_args(const Registrant* me, uint64_t key) const {
    RegisterArgs a;
    a.cptpl = opts_.cptpl;
    a.nrkey = key;
    if (me) {
        a.action = RegisterAction::replace_key;
        a.crkey = me->key;
    }
    return a;
}

Status Fence::register_fresh(const RegisterArgs& a, Outcome& o) {
    auto s = resv_.reg(a);
    if (s) return Ok{};
    // The key is fresh (its epoch was never used): if the device shows this
    // host registered with it, this host's Register did it.
    return confirm_done(*this, s.error(), o, [&](const ReservationStatus& st) {
        const Registrant* m = mine(st);
        return m && m->key == a.nrkey;
    });
}

Result<Outcome> Fence::join(std::optional<uint32_t> epoch, bool replace) {
    auto started = start();
    if (!started) return started.error();
    Outcome o = std::move(*started);
    const ReservationStatus* before = &o.before;
    auto node = node_for(*before);
    if (!node) return node.error();
    const auto* me = mine(*before);
    if (me && !replace) {
        auto f = decode_key(me->key);
        if (f && f->tag == opts_.tag && f->node == *node && (!epoch || *epoch == f->epoch))
            return registered(*this, finish(o, *before));
        return make_error_code(Errc::host_id_conflict);
    }
    auto key = fresh_key(*before, *node, epoch);
    if (!key) return key.error();
    if (auto s = register_fresh(register_args(me, *key), o); !s) return s.error();
    o.changed = true;
    auto after = verify();
    if (!after) return after.error();
    const auto* now = mine(*after);
    if (!now || now->key != *key) return make_error_code(Errc::verify_failed);
    return registered(*this, finish(o, *after));
}

Result<Outcome> Fence::acquire() {
    auto started = start();
    if (!started) return started.error();
    Outcome o = std::move(*started);
    const ReservationStatus* before = &o.before;
    const auto* me = mine(*before);
    if (!me) return make_error_code(Errc::not_registered);
    if (me->holder && before->type == opts_.type) return holding(*this, finish(o, *before));
    AcquireArgs a;
    a.action = AcquireAction::acquire;
    a.type = opts_.type;
    a.crkey = me->key;
    if (auto s = resv_.acquire(a); !s) {
        if (!is_nvme(s.error(), NvmeStatus::reservation_conflict)) return s.error();
        auto now = verify();
        if (!now) return now.error();
        if (!mine(*now)) return make_error_code(Errc::not_registered);
        const auto* h = now->holder();
        if (h && h->key != me->key) return make_error_code(Errc::held_by_other);
        return s.error();
    }
    o.changed = true;
    auto after = verify();
    if (!after) return after.error();
    const auto* now = mine(*after);
    if (!now || !now->holder || after->type != opts_.type)
        return make_error_code(Errc::verify_failed);
    return holding(*this, finish(o, *after));
}

// An Acquire with the fresh key @p key that failed: lost race, or done after
// all (see maybe_done).
Result<Outcome> Fence::after_acquire_failure(std::error_code ec, const Outcome& o, uint64_t key) {
    const bool conflict = is_nvme(ec, NvmeStatus::reservation_conflict);
    if (!maybe_done(ec)) return ec;
    auto now = verify();
    if (!now) return conflict ? now.error() : ec;
    const auto* h = now->holder();
    const auto* m = mine(*now);
    if (m && m->key == key && m->holder && now->type == opts_.type) {
        // Only this host uses the key, so one of its Acquires took the
        // reservation, though its own completion says otherwise. An Acquire
        // of the type held, by the holder, changes nothing and completes
        // after that first one (nvmet serialises reservation commands, and a
        // preempt-and-abort completes after the abort): its success is the
        // completion the first one lost.
        AcquireArgs confirm;
        confirm.action = AcquireAction::acquire;
        confirm.type = opts_.type;
        confirm.crkey = key;
        if (auto c = resv_.acquire(confirm); !c) return ec;
        auto fin = verify();
        if (!fin) return ec;
        const auto* m2 = mine(*fin);
        if (!m2 || m2->key != key || !m2->holder || fin->type != opts_.type) return ec;
        Outcome done = finish(o, *fin);
        done.completion_error = ec;
        return holding(*this, std::move(done));
    }
    if (!conflict) return ec;
    if ((h && h->key != key) || !m) return make_error_code(Errc::lost_race);
    return ec;
}

Result<Outcome> Fence::takeover(std::optional<uint64_t> victim) {
    auto started = start();
    if (!started) return started.error();
    return takeover_after(std::move(*started), victim);
}

Result<Outcome> Fence::takeover_registered(uint64_t own_key, std::optional<uint64_t> victim) {
    auto started = start();
    if (!started) return started.error();
    const Registrant* me = mine(started->before);
    if (!me || me->key != own_key) return make_error_code(Errc::not_registered);
    return takeover_after(std::move(*started), victim);
}

// The takeover decided on o.before, the Report just read.
Result<Outcome> Fence::takeover_after(Outcome o, std::optional<uint64_t> victim) {
    const ReservationStatus* before = &o.before;
    const auto* holder = before->holder();
    const auto* me = mine(*before);
    const uint64_t victim_key = victim.value_or(0);
    bool has_victim = victim.has_value();
    if (has_victim && me && victim_key == me->key) return make_error_code(Errc::own_key);
    if (has_victim && !std::any_of(before->registrants.begin(), before->registrants.end(),
                                   [&](const Registrant& r) { return r.key == victim_key; })) {
        // The victim is not registered: the compare of the compare-and-swap
        // failed before anything was sent, so nothing is changed (no re-key).
        // Already the holder: a retry of a takeover that succeeded.
        if (!(me && me->holder)) return make_error_code(holder ? Errc::lost_race : Errc::invalid_key);
        has_victim = false;
    }
    if (me && me->holder && before->type == opts_.type && !has_victim) return holding(*this, finish(o, *before));

    auto node = node_for(*before);
    if (!node) return node.error();
    auto key = fresh_key(*before, *node, std::nullopt);
    if (!key) return key.error();
    if (auto s = register_fresh(register_args(me, *key), o); !s) return s.error();
    o.changed = true;

    std::optional<uint64_t> prkey;
    if (has_victim) prkey = victim_key;
    if (!prkey && holder) {
        if (resv_type_all_registrants(before->type))
            prkey = 0;  // every registrant holds, this host too: preempt all others
        else if (!(me && me->holder))
            prkey = holder->key;
        else
            prkey = *key;  // this host holds another type: preempting itself changes it
    }
    if (!prkey && opts_.type == ResvType::write_exclusive) {
        // Nobody holds, and under Write Exclusive then every host may write:
        // a previous holder's writes may still be in flight. Preempt-and-abort
        // every other registrant (each a key of an earlier term) so the device
        // drains them before this host holds.
        for (const auto& r : before->registrants) {
            if (r.host_id == self_) continue;
            AcquireArgs p;
            p.type = opts_.type;
            p.crkey = *key;
            p.prkey = r.key;
            p.action = opts_.abort ? AcquireAction::preempt_and_abort : AcquireAction::preempt;
            if (auto s = resv_.acquire(p); !s && !maybe_done(s.error())) return s.error();
        }
    }
    const std::optional<uint64_t> held_before = holder ? std::optional<uint64_t>(holder->key) : std::nullopt;
    return acquire_verified(o, *key, prkey, held_before);
}

// The Acquire of a takeover, with this host registered with @p key: preempt
// (and abort) @p prkey, or a plain Acquire without; then the Report that
// verifies it. @p held_before is the holder's key in the Report the
// takeover was decided on.
Result<Outcome> Fence::acquire_verified(const Outcome& o, uint64_t key, std::optional<uint64_t> prkey,
                                        std::optional<uint64_t> held_before) {
    AcquireArgs a;
    a.type = opts_.type;
    a.crkey = key;
    if (prkey) {
        // Never abort this host's own commands when it only changes the type.
        a.action = opts_.abort && *prkey != key ? AcquireAction::preempt_and_abort
                                                 : AcquireAction::preempt;
        a.prkey = *prkey;
    } else {
        a.action = AcquireAction::acquire;
    }
    if (auto s = resv_.acquire(a); !s) return after_acquire_failure(s.error(), o, key);
    auto after = verify();
    if (!after) return after.error();
    // Preempting a registrant that did not hold leaves the reservation
    // free: take it now, once.
    if (!after->holder() && mine(*after)) {
        AcquireArgs take;
        take.type = opts_.type;
        take.crkey = key;
        if (auto s = resv_.acquire(take); !s) return after_acquire_failure(s.error(), o, key);
        after = verify();
        if (!after) return after.error();
    }
    const auto* now = mine(*after);
    if (now && now->holder && now->key == key && after->type == opts_.type)
        return holding(*this, finish(o, *after));
    const auto* h = after->holder();
    if (h && h->key != key) {
        // The key just preempted still holds: the device did not do what it
        // acknowledged.
        if (prkey && h->key == *prkey) return make_error_code(Errc::verify_failed);
        // The holder from before, which was not the victim, still holds:
        // nobody raced.
        if (held_before && h->key == *held_before) return make_error_code(Errc::held_by_other);
        return make_error_code(Errc::lost_race);
    }
    if (!now) return make_error_code(Errc::lost_race);
    return make_error_code(Errc::verify_failed);
}

// Whether @p seen lets this host take the reservation with @p key, of epoch
// @p token: no key of our tag at or above the token but that key itself, no
// reservation every registrant holds, and the store's floor below the token
// unless the key is already ours (a retry of this term).
Status Fence::token_usable(const ReservationStatus& seen, uint32_t token, uint64_t key) const {
    for (const auto& r : seen.registrants) {
        const auto f = decode_key(r.key);
        // A key at or above the ceiling is nobody's term (implausible): the
        // takeover removes it like an earlier key.
        if (f && f->tag == opts_.tag && f->epoch >= token && usable_epoch(f->epoch) && r.key != key)
            return make_error_code(Errc::lost_race);
    }
    if (seen.holder() && resv_type_all_registrants(seen.type)) return make_error_code(Errc::held_by_other);
    uint32_t floor = 0;
    if (store_) {
        auto f = store_->load();
        if (!f) return f.error();
        floor = *f;
    }
    const Registrant* me = mine(seen);
    if (floor >= token && !(me && me->key == key)) return make_error_code(Errc::lost_race);
    // A token far above every epoch seen (the device's of the tag, this
    // host's floor) is implausible, by the bound a key's epoch has
    // (kMaxEpochJump): one stray write to an elector's counter must not
    // exhaust the epochs. Nothing seen (a fresh host and device): only the
    // ceiling applies, as for the floor.
    const uint32_t known = std::max(floor, observe_epochs(seen, opts_.tag, floor).highest);
    if (known > 0 && token - std::min(token, known) > kMaxEpochJump) return make_error_code(Errc::epoch_out_of_range);
    return Ok{};
}

Result<Outcome> Fence::takeover_with_token(const ReservationStatus& seen, uint32_t token,
                                           const std::function<bool()>& may_act) {
    if (!usable_epoch(token)) return make_error_code(Errc::epoch_out_of_range);
    auto node = node_for(seen);
    if (!node) return node.error();
    auto key = make_key({opts_.tag, *node, token});
    if (!key) return key.error();
    Outcome o;
    o.before = seen;
    const Registrant* holder = seen.holder();
    if (holder) o.previous_holder = holder->key;
    const Registrant* me = mine(seen);
    const bool holding = me && me->holder;
    if (holding && me->key == *key && seen.type == opts_.type) return finish(o, seen);  // a retry of this term
    NVF_INVARIANT(decode_key(*key) && decode_key(*key)->epoch == token);  // the token is the epoch
    if (auto u = token_usable(seen, token, *key); !u) return u.error();
    if (!(me && me->key == *key)) {
        // Persist before the key reaches the device: a crash after the
        // Register must never let this host use the epoch again.
        if (store_) {
            if (auto s = store_->raise_to(token); !s) return s.error();
        }
        if (may_act && !may_act()) return make_error_code(Errc::timeout);
        if (auto s = register_fresh(register_args(me, *key), o); !s) {
            // Our registration read in @p seen is gone: another host took it.
            if (me && is_nvme(s.error(), NvmeStatus::reservation_conflict)) return make_error_code(Errc::lost_race);
            return s.error();
        }
        o.changed = true;
        last_fresh_epoch_ = token;
    }
    const std::optional<uint64_t> held_before = holder ? std::optional<uint64_t>(holder->key) : std::nullopt;
    if (holding && seen.type == opts_.type) return verify_rekeyed(o, *key);
    // Holding another type: preempting ourselves changes it. Another holder:
    // exactly the key read (compare-and-swap). Nobody: a plain Acquire.
    std::optional<uint64_t> prkey;
    if (holding) prkey = *key;
    else if (holder) prkey = holder->key;
    if (may_act && !may_act()) return make_error_code(Errc::timeout);
    return acquire_verified(o, *key, prkey, held_before);
}

// The Report after this host, holding, replaced its key with @p key: the
// reservation follows the registrant.
Result<Outcome> Fence::verify_rekeyed(Outcome& o, uint64_t key) {
    auto after = verify();
    if (!after) return after.error();
    const auto* now = mine(*after);
    if (now && now->key == key && now->holder && after->type == opts_.type) return holding(*this, finish(o, *after));
    if (now && now->key == key) return make_error_code(Errc::lost_race);
    return make_error_code(Errc::verify_failed);
}

std::vector<uint64_t> node_keys(const ReservationStatus& st, uint8_t tag, uint8_t node) {
    std::vector<uint64_t> keys;
    for (const auto& r : st.registrants) {
        auto f = decode_key(r.key);
        if (f && f->tag == tag && f->node == node && std::find(keys.begin(), keys.end(), r.key) == keys.end())
            keys.push_back(r.key);
    }
    return keys;
}

// Whether this host may evict @p victim_node, on @p st: registered (never
// registering to evict), not that node itself, and its key the node the
// options name.
Status Fence::evict_allowed(const ReservationStatus& st, uint8_t victim_node) const {
    if (victim_node == 0) return make_error_code(Errc::invalid_argument);
    if (opts_.node == victim_node) return make_error_code(Errc::own_key);
    const Registrant* me = mine(st);
    if (!me) return make_error_code(Errc::not_registered);
    const auto f = decode_key(me->key);
    if (f && f->tag == opts_.tag && f->node == victim_node) return make_error_code(Errc::own_key);
    if (f && f->tag == opts_.tag && opts_.node != 0 && f->node != opts_.node)
        return make_error_code(Errc::host_id_conflict);
    return Ok{};
}

Result<Outcome> Fence::evict_node(uint8_t victim_node, EvictAbsent absent) {
    auto started = start();
    if (!started) return started.error();
    Outcome o = std::move(*started);
    if (auto s = evict_allowed(o.before, victim_node); !s) return s.error();
    // Postcondition: no key of the victim node left, and a reservation held.
    auto evicted = [&](const ReservationStatus& st) {
        NVF_INVARIANT(node_keys(st, opts_.tag, victim_node).empty() && st.type != ResvType::none);
        return finish(o, st);
    };
    if (node_keys(o.before, opts_.tag, victim_node).empty()) {
        const bool held = o.before.type != ResvType::none;
        if (absent == EvictAbsent::compare && !mine(o.before)->holder)
            return make_error_code(held ? Errc::lost_race : Errc::invalid_key);
        if (held) return evicted(o.before);  // fenced already
    }
    ReservationStatus st = o.before;
    std::error_code uncertain;
    for (int round = 0; round < kEvictRounds; ++round) {
        uncertain = {};  // only an error of the round the Report confirms is kept
        auto now = evict_round(o, st, victim_node, uncertain);
        if (!now) return now.error();
        st = std::move(*now);
        if (node_keys(st, opts_.tag, victim_node).empty() && st.type != ResvType::none) {
            Outcome done = evicted(st);
            if (uncertain) done.completion_error = uncertain;
            return done;
        }
    }
    return uncertain ? uncertain : make_error_code(Errc::verify_failed);
}

// One round of evict_node on @p st, the last Report: preempts (and aborts)
// every key of the victim node with this host's key, which first becomes a
// fresh one when this host is to take the reservation (the victim holds it,
// or nobody does); Acquires when nobody holds after. Returns the Report
// that follows.
Result<ReservationStatus> Fence::evict_round(Outcome& o, const ReservationStatus& st, uint8_t victim_node,
                                             std::error_code& uncertain) {
    const Registrant* me = mine(st);
    // Preempted since the last Report: never register again to go on.
    if (!me) return make_error_code(Errc::not_registered);
    const auto victims = node_keys(st, opts_.tag, victim_node);
    const Registrant* h = st.holder();
    const bool take =
        !me->holder && (!h || std::find(victims.begin(), victims.end(), h->key) != victims.end());
    uint64_t key = me->key;
    if (take) {
        auto k = evict_rekey(o, st, *me);
        if (!k) return k.error();
        key = *k;
    }
    AcquireArgs a;
    a.type = opts_.type;
    a.crkey = key;
    a.action = opts_.abort ? AcquireAction::preempt_and_abort : AcquireAction::preempt;
    for (uint64_t v : victims) {
        a.prkey = v;
        if (auto s = evict_send(a, uncertain); !s) return s.error();
    }
    o.changed = true;
    auto now = verify();
    // Preempting a victim that did not hold leaves the reservation free.
    if (!now || !take || now->type != ResvType::none || !mine(*now)) return now;
    AcquireArgs acq;
    acq.type = opts_.type;
    acq.crkey = key;
    if (auto s = evict_send(acq, uncertain); !s) return s.error();
    return verify();
}

// The key this host takes the reservation with: its own when its epoch is
// already above every other plausible epoch of its tag on the device and
// the floor (rule 4), else a fresh one, by a Register that replaces exactly
// @p me's key (refused by the device when that key is gone: never a new
// registration).
Result<uint64_t> Fence::evict_rekey(Outcome& o, const ReservationStatus& st, const Registrant& me) {
    const auto next = next_epoch(st);
    const auto f = decode_key(me.key);
    if (next && f && f->tag == opts_.tag && *next == f->epoch + 1) return me.key;
    auto node = node_for(st);
    if (!node) return node.error();
    auto key = fresh_key(st, *node, std::nullopt);
    if (!key) return key.error();
    if (auto s = register_fresh(register_args(&me, *key), o); !s) {
        // The device refuses to replace a key that is gone: this host was
        // preempted after the Report.
        if (is_nvme(s.error(), NvmeStatus::reservation_conflict)) return make_error_code(Errc::not_registered);
        return s.error();
    }
    o.changed = true;
    return *key;
}

// One Acquire of evict_node: an error that may hide a command that ran is
// kept in @p uncertain for the next Report to decide; any other ends it.
Status Fence::evict_send(const AcquireArgs& a, std::error_code& uncertain) {
    auto s = resv_.acquire(a);
    if (s) return Ok{};
    if (!maybe_done(s.error())) return s.error();
    uncertain = s.error();
    return Ok{};
}

Result<Outcome> Fence::release() {
    auto started = start();
    if (!started) return started.error();
    Outcome o = std::move(*started);
    const ReservationStatus* before = &o.before;
    const auto* holder = before->holder();
    const auto* me = mine(*before);
    if (!me || !me->holder) {
        if (!holder) return released(*this, finish(o, *before));
        return make_error_code(Errc::not_holder);
    }
    ReleaseArgs a;
    a.action = ReleaseAction::release;
    a.type = before->type;
    a.crkey = me->key;
    if (auto s = resv_.release(a); !s) {
        // Done when nobody holds: what this Release leaves, and what an
        // idempotent re-run would accept. (The Linux host's re-sent copy of a
        // Release that freed the reservation succeeds; a lost completion
        // surfaces as a path-related status or a failed passthrough.)
        auto c = confirm_done(*this, s.error(), o, [](const ReservationStatus& st) {
            return st.type == ResvType::none && !st.holder();
        });
        if (!c) return c.error();
    }
    o.changed = true;
    auto after = verify();
    if (!after) return after.error();
    const auto* now = mine(*after);
    if (now && now->holder) return make_error_code(Errc::verify_failed);
    return released(*this, finish(o, *after));
}

Result<Outcome> Fence::leave() {
    auto started = start();
    if (!started) return started.error();
    Outcome o = std::move(*started);
    const ReservationStatus* before = &o.before;
    const auto* me = mine(*before);
    if (!me) return left(*this, finish(o, *before));
    RegisterArgs a;
    a.action = RegisterAction::unregister_key;
    a.crkey = me->key;
    if (auto s = resv_.reg(a); !s) {
        // Done when this host is no longer registered (the re-sent copy of
        // an Unregister that ran is refused with Reservation Conflict).
        auto c = confirm_done(*this, s.error(), o,
                              [&](const ReservationStatus& st) { return mine(st) == nullptr; });
        if (!c) return c.error();
    }
    o.changed = true;
    auto after = verify();
    if (!after) return after.error();
    if (mine(*after)) return make_error_code(Errc::verify_failed);
    return left(*this, finish(o, *after));
}

Result<Outcome> Fence::clear() {
    auto started = start();
    if (!started) return started.error();
    Outcome o = std::move(*started);
    const ReservationStatus* before = &o.before;
    const auto* me = mine(*before);
    if (!me) return make_error_code(Errc::not_registered);
    ReleaseArgs a;
    a.action = ReleaseAction::clear;
    a.type = before->type == ResvType::none ? opts_.type : before->type;
    a.crkey = me->key;
    if (auto s = resv_.release(a); !s) {
        // Done when no registrant and no reservation are left (the re-sent
        // copy of a Clear that ran is refused with Reservation Conflict).
        auto c = confirm_done(*this, s.error(), o, [](const ReservationStatus& st) {
            return st.registrants.empty() && st.num_registrants == 0 && !st.holder() &&
                   st.type == ResvType::none;
        });
        if (!c) return c.error();
    }
    o.changed = true;
    auto after = verify();
    if (!after) return after.error();
    if (!after->registrants.empty() || after->holder()) return make_error_code(Errc::verify_failed);
    NVF_INVARIANT(o.changed);
    return left(*this, finish(o, *after));
}

}  // namespace nvfence
