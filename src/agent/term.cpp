// SPDX-License-Identifier: MIT
#include "agent/term.hpp"

#include <algorithm>

#include "nvfence/epoch_store.hpp"
#include "nvfence/key.hpp"
#include "internal/invariant.hpp"

namespace nvfence {

const char* win_action_name(WinAction a) {
    switch (a) {
    case WinAction::acquire: return "acquire";
    case WinAction::takeover: return "takeover";
    case WinAction::already_holder: return "already-holder";
    case WinAction::stale: return "stale";
    case WinAction::reissue: return "reissue";
    case WinAction::rekey: return "rekey";
    }
    return "?";
}

uint32_t max_epoch_of_tag(const ReservationStatus& st, uint8_t tag) {
    uint32_t max = 0;
    for (const auto& r : st.registrants) {
        auto f = decode_key(r.key);
        if (f && f->tag == tag && usable_epoch(f->epoch)) max = std::max(max, f->epoch);
    }
    return max;
}

namespace {
// The highest epoch of @p tag in @p st, leaving out the key @p skip.
uint32_t max_epoch_but(const ReservationStatus& st, uint8_t tag, uint64_t skip) {
    uint32_t max = 0;
    for (const auto& r : st.registrants) {
        auto f = decode_key(r.key);
        if (f && f->tag == tag && r.key != skip && usable_epoch(f->epoch)) max = std::max(max, f->epoch);
    }
    return max;
}

bool has_epoch(const Registrant* r, uint8_t tag, uint32_t epoch) {
    if (!r) return false;
    auto f = decode_key(r->key);
    return f && f->tag == tag && f->epoch == epoch;
}
}  // namespace

namespace {

WinDecision decide(uint32_t token, const ReservationStatus& st, const HostId& self, uint8_t tag, uint32_t floor) {
    WinDecision d;
    const Registrant* holder = st.holder();
    const Registrant* me = st.find_host(self);
    // Our own key of this very token (a retry of the term) is no obstacle.
    const bool term_key = has_epoch(me, tag, token);
    d.device_max_epoch = max_epoch_but(st, tag, term_key ? me->key : 0);
    std::optional<KeyFields> hf;
    if (holder) hf = decode_key(holder->key);
    // A holder at or above the ceiling is nobody's term: preempted like a
    // foreign key, never a reason to ask for a token above it.
    const bool holder_ours = hf && hf->tag == tag && usable_epoch(hf->epoch);

    if (!usable_epoch(token)) {
        d.action = WinAction::stale;
        d.why = "token " + std::to_string(token) + " is outside the key's epochs (1.." + std::to_string(kEpochCeiling - 1) +
                "): refused, never stored; repair the election's counter (docs/ETCD.md)";
        return d;
    }
    if (holder && holder == me && term_key) {
        d.action = WinAction::already_holder;
        d.why = "already holder with epoch " + std::to_string(token);
        return d;
    }
    if (holder_ours && holder != me && hf->epoch >= token) {
        // A leader with this token or a later one already took the device:
        // ours is stale, whatever etcd told us a moment ago.
        d.action = WinAction::stale;
        d.why = "holder " + format_key(holder->key) + " has epoch " + std::to_string(hf->epoch) +
                " >= our token " + std::to_string(token);
        return d;
    }
    if (d.device_max_epoch >= token || (floor >= token && !term_key)) {
        const bool dev = d.device_max_epoch >= token;
        d.why = (dev ? "a registrant has epoch " + std::to_string(d.device_max_epoch)
                     : "this host already saw epoch " + std::to_string(floor)) +
                " >= token " + std::to_string(token);
        d.device_max_epoch = std::max(d.device_max_epoch, floor);
        d.action = WinAction::reissue;
        return d;
    }
    if (!holder) {
        d.action = WinAction::acquire;
        d.why = "nobody holds";
        return d;
    }
    if (holder == me) {
        d.action = WinAction::rekey;
        d.why = "holder with an older key " + format_key(holder->key) + ": re-key to epoch " + std::to_string(token);
        return d;
    }
    d.action = WinAction::takeover;
    d.victim = holder->key;
    d.why = "preempt holder " + format_key(holder->key) + " with epoch " + std::to_string(token);
    return d;
}

// The token rule's promises (term.hpp), checked on every decision: the
// device is acted on only under a usable token above every other key of
// the tag and above this host's floor, and a takeover's victim is the
// holder read, never this host.
void check_win(const WinDecision& d, uint32_t token, const ReservationStatus& st, const HostId& self, uint8_t tag,
               uint32_t floor) {
    NVF_INVARIANT(!d.why.empty());
    const bool acts = d.action == WinAction::acquire || d.action == WinAction::takeover || d.action == WinAction::rekey;
    if (acts) {
        NVF_INVARIANT(usable_epoch(token) && d.device_max_epoch < token);
        NVF_INVARIANT(floor < token || has_epoch(st.find_host(self), tag, token));
    }
    const Registrant* holder = st.holder();
    NVF_INVARIANT(d.action != WinAction::acquire || holder == nullptr);
    NVF_INVARIANT((d.action == WinAction::takeover) == d.victim.has_value());
    if (d.victim) {
        NVF_INVARIANT(holder && *d.victim == holder->key && holder != st.find_host(self));
    }
    if (d.action == WinAction::reissue) {
        NVF_INVARIANT(d.device_max_epoch >= token);
    }
}

}  // namespace

WinDecision decide_on_win(uint32_t token, const ReservationStatus& st, const HostId& self, uint8_t tag,
                          uint32_t floor) {
    WinDecision d = decide(token, st, self, tag, floor);
    check_win(d, token, st, self, tag, floor);
    return d;
}

}  // namespace nvfence
