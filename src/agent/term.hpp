// SPDX-License-Identifier: MIT
#pragma once
/// @file term.hpp
/// The token rule: a host elected with a token (the term) acts on the
/// device only with a key whose epoch is that token, decided on one Report
/// that the commands then follow (Fence::takeover_with_token). Pure: used by
/// the agent (Agent::take_term), nvfence-elect (carry_out_win) and tests.
///
///  - a holder of our tag at or above the token: a newer leader acted, ours
///    is stale (resign, back off);
///  - any other key of our tag at or above the token, or this host's floor
///    (EpochStore) at or above it: ask for a token above (reissue);
///  - this host's own key of the token: a retry of the term, no obstacle;
///  - else nobody holding: a plain Acquire; another holder: preempt-and-abort
///    exactly the key read (compare-and-swap); we hold with an older key:
///    re-key to the token;
///  - a token of 0 or above kEpochCeiling is never used nor stored.

#include <cstdint>
#include <optional>
#include <string>

#include "nvfence/report.hpp"

namespace nvfence {

/// What to do on a win.
enum class WinAction : uint8_t {
    acquire,         ///< Nobody holds: acquire (takeover without victim).
    takeover,        ///< Fence::takeover of WinDecision::victim (verified preempt-and-abort), with the token's epoch.
    already_holder,  ///< We already hold with this token (a retry).
    stale,           ///< A holder at or above our token: resign and back off.
    reissue,         ///< A registrant at or above the token: get a token above it.
    rekey,           ///< We hold with an older epoch: replace our key with the token's.
};

/// Words for a WinAction.
const char* win_action_name(WinAction a);

/// The decision on a win and why.
struct WinDecision {
    WinAction action = WinAction::stale;  ///< What to do.
    std::optional<uint64_t> victim;       ///< takeover: the holder key read.
    uint32_t device_max_epoch = 0;        ///< Highest epoch of our tag on the device (reissue: or the floor).
    std::string why;                      ///< One line for the log.
};

/// Decides what a host that won with @p token does, given the device's
/// Report @p st, this host's id @p self, our cluster @p tag and @p floor,
/// the highest epoch this host ever saw (its EpochStore). This host's own
/// key of epoch @p token (a retry of the term) is no obstacle. A token of 0
/// or above kEpochCeiling is stale (never stored). For reissue,
/// device_max_epoch is the epoch the next token must pass (device or floor).
WinDecision decide_on_win(uint32_t token, const ReservationStatus& st, const HostId& self, uint8_t tag,
                          uint32_t floor = 0);

/// The highest epoch of keys of @p tag registered in @p st (0: none).
uint32_t max_epoch_of_tag(const ReservationStatus& st, uint8_t tag);

}  // namespace nvfence
