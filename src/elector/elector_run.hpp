// SPDX-License-Identifier: MIT
#pragma once
/// @file elector_run.hpp
/// Carrying out a won election on the device: the one sequence an elected
/// agent (nvfenced with `elector = etcd`, or nvfence-elect) runs after
/// Elector::campaign() returned, so the token etcd issues is the epoch of
/// the key the device enforces.
///
///  1. Report: the highest epoch of our tag on the device;
///  2. Elector::term(that epoch): a token above it, above every token
///     issued, above this host's record;
///  3. Report again and decide_on_win() on it (with the EpochStore's floor);
///  4. stale: return (the caller resigns and backs off); reissue: back to 2
///     (at most kWinRounds times); acquire / preempt / rekey:
///     Fence::takeover_with_token() following the Report of 3, so the key's
///     epoch is the token exactly, the holder read is preempted by
///     compare-and-swap, and nobody holding means a plain Acquire;
///     already_holder: nothing;
///  5. the Outcome's verification says what the device shows.
/// Agent::take_term() is the same rule for nvfenced.

#include <chrono>
#include <functional>
#include <optional>

#include "elector/elector.hpp"
#include "elector/elector_policy.hpp"
#include "nvfence/epoch_store.hpp"
#include "nvfence/fence.hpp"
#include "nvfence/result.hpp"

namespace nvfence {

/// Rounds of "token, then Report" before giving up (Errc::lost_race).
inline constexpr int kWinRounds = 3;

/// What a won election did on the device.
struct WinResult {
    Term term;                     ///< The token used.
    WinDecision decision;          ///< The last decision.
    std::optional<Outcome> outcome;///< The Fence operation's outcome (acquire/preempt/rekey).
    uint32_t key_epoch = 0;        ///< Our key's epoch afterwards (0: not registered).
};

/// Runs steps 1-5 for a host that just won @p elector's campaign, with
/// @p fence for this host (FenceOptions::node set) and @p store its
/// EpochStore (may be null). @p self is this host's id, @p tag our
/// cluster tag; @p timeout bounds each elector call. A stale decision is a
/// successful result with decision.action == WinAction::stale (the caller
/// resigns). Errors: the elector's (not_leader: leadership gone before the
/// token), the device's, Errc::lost_race (the holder changed under us, or
/// the token kept falling behind the device), ElectorErrc::lease_expired
/// when @p may_act (if set) says no after a token came back, before any
/// command for it is sent: the token call took a round trip, and a lease
/// that may have run out meanwhile backs no takeover (the caller resigns).
Result<WinResult> carry_out_win(Elector& elector, Fence& fence, const EpochStore* store, const HostId& self,
                                uint8_t tag, std::chrono::milliseconds timeout,
                                const std::function<bool()>& may_act = {});

}  // namespace nvfence
