// SPDX-License-Identifier: MIT
#include "nvfence/elector_run.hpp"

#include "nvfence/error.hpp"
#include "nvfence/key.hpp"

namespace nvfence {

Result<WinResult> carry_out_win(Elector& elector, Fence& fence, const EpochStore* store, const HostId& self,
                                uint8_t tag, std::chrono::milliseconds timeout) {
    auto st = fence.verify();
    if (!st) return st.error();
    uint32_t floor = max_epoch_of_tag(*st, tag);
    WinResult w;
    for (int round = 0; round < kWinRounds; ++round) {
        auto term = elector.term(floor, timeout);
        if (!term) return term.error();
        w.term = *term;
        // Read again: the token took a round trip, the device may have moved.
        st = fence.verify();
        if (!st) return st.error();
        w.decision = decide_on_win(w.term.epoch, *st, self, tag);
        switch (w.decision.action) {
        case WinAction::stale:
            return w;
        case WinAction::reissue:
            floor = w.decision.device_max_epoch;
            continue;
        case WinAction::already_holder:
            w.key_epoch = w.term.epoch;
            return w;
        case WinAction::rekey: {
            auto o = fence.join(w.term.epoch, true);
            if (!o) return o.error();
            w.outcome = *o;
            break;
        }
        case WinAction::acquire:
        case WinAction::preempt: {
            // Fence takes max(device, store) + 1: with the store at token - 1
            // and the device below the token (decided above), that is the token.
            if (store) {
                if (auto s = store->raise_to(w.term.epoch - 1); !s) return s.error();
            }
            auto o = fence.takeover(w.decision.victim);
            if (!o) {
                // A victim gone before our compare: somebody else took over.
                if (o.error() == make_error_code(Errc::invalid_key)) return make_error_code(Errc::lost_race);
                return o.error();
            }
            w.outcome = *o;
            break;
        }
        }
        if (auto f = decode_key(w.outcome->key)) w.key_epoch = f->epoch;
        return w;
    }
    return make_error_code(Errc::lost_race);
}

}  // namespace nvfence
