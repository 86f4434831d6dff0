// SPDX-License-Identifier: MIT
#include "elector/elector_run.hpp"

#include "internal/invariant.hpp"
#include "nvfence/error.hpp"
#include "nvfence/key.hpp"

namespace nvfence {

namespace {
// The highest epoch this host ever saw (its store's floor; 0 without one).
Result<uint32_t> floor_of(const EpochStore* store) {
    if (!store) return uint32_t{0};
    return store->load();
}
}  // namespace

Result<WinResult> carry_out_win(Elector& elector, Fence& fence, const EpochStore* store, const HostId& self,
                                uint8_t tag, std::chrono::milliseconds timeout,
                                const std::function<bool()>& may_act) {
    auto st = fence.verify();
    if (!st) return st.error();
    uint32_t floor = max_epoch_of_tag(*st, tag);
    WinResult w;
    for (int round = 0; round < kWinRounds; ++round) {
        const uint32_t gen_asked = st->generation;
        auto term = elector.term(floor, timeout);
        if (!term) return term.error();
        w.term = *term;
        // Read again: the token took a round trip, the device may have moved.
        // This Report decides, and the takeover follows it.
        st = fence.verify();
        if (!st) return st.error();
        // The target restarted meanwhile (GEN went back): every key is gone,
        // a newer leader's included, so the device cannot refuse a stale
        // token; a token above this one needs a live leadership (as
        // Agent::take_term: the simulator's seed 128160025063069).
        if (st->generation < gen_asked) {
            floor = std::max(floor, w.term.epoch);
            continue;
        }
        auto seen_floor = floor_of(store);
        if (!seen_floor) return seen_floor.error();
        w.decision = decide_on_win(w.term.epoch, *st, self, tag, *seen_floor);
        switch (w.decision.action) {
        case WinAction::stale: return w;
        case WinAction::reissue: floor = w.decision.device_max_epoch; continue;
        case WinAction::already_holder: w.key_epoch = w.term.epoch; return w;
        case WinAction::rekey:
        case WinAction::acquire:
        case WinAction::takeover: break;
        }
        // Asked after the token and the Report: the lease may have run out
        // while they took their round trips.
        if (may_act && !may_act()) return make_error_code(ElectorErrc::lease_expired);
        auto o = fence.takeover_with_token(*st, w.term.epoch);
        if (!o) return o.error();
        w.outcome = *o;
        if (auto f = decode_key(w.outcome->key)) w.key_epoch = f->epoch;
        // The key now held carries the token won: the agent's term is this epoch.
        NVF_INVARIANT(w.key_epoch == w.term.epoch);
        return w;
    }
    return make_error_code(Errc::lost_race);
}

}  // namespace nvfence
