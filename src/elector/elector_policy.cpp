// SPDX-License-Identifier: MIT
#include "elector/elector_policy.hpp"

#include <algorithm>

#include "internal/invariant.hpp"
#include "nvfence/error.hpp"

namespace nvfence {

const char* loss_reason_name(LossReason r) {
    switch (r) {
    case LossReason::none: return "none";
    case LossReason::lease_expired: return "lease-expired";
    case LossReason::leader_gone: return "leader-gone";
    case LossReason::other_leader: return "other-leader";
    case LossReason::lease_may_expire: return "lease-may-expire";
    }
    return "?";
}

const char* guard_verdict_name(GuardVerdict v) {
    switch (v) {
    case GuardVerdict::hold: return "hold";
    case GuardVerdict::renew: return "renew";
    case GuardVerdict::step_down: return "step-down";
    case GuardVerdict::hold_until_preempted: return "hold-until-preempted";
    }
    return "?";
}

LeaseGuard::LeaseGuard(LeaseGuardOptions opts, TimePoint sent_at)
    : opts_(opts), deadline_(sent_at + std::chrono::milliseconds(opts.ttl_ms)), last_sent_(sent_at) {
    // The options come from lease_guard_options() (a parsed configuration):
    // with a margin not below the TTL the guard would step down at once on
    // every grant, with a zero renew interval it would renew in a busy loop.
    NVF_INVARIANT(opts.ttl_ms > 0 && opts.margin_ms >= 0 && opts.margin_ms < opts.ttl_ms);
    NVF_INVARIANT(opts.renew_interval_ms > 0);
}

void LeaseGuard::on_keepalive(TimePoint sent_at, const Result<LeaseStatus>& r) {
    if (lost_ != LossReason::none) return;
    if (r) {
        // A reply can only extend from its own send time; an older reply
        // arriving late never moves the deadline back. No TTL above the one
        // asked for is believed (a broken or hostile etcd reply of a year).
        const int64_t ttl_ms = std::clamp<int64_t>(r->ttl_ms, 0, opts_.ttl_ms);
        deadline_ = std::max(deadline_, sent_at + std::chrono::milliseconds(ttl_ms));
        last_sent_ = std::max(last_sent_, sent_at);
        failures_ = 0;
        return;
    }
    if (r.error() == make_error_code(ElectorErrc::lease_expired)) {
        lost_ = LossReason::lease_expired;
        return;
    }
    last_sent_ = std::max(last_sent_, sent_at);
    ++failures_;
}

void LeaseGuard::on_leader(const Result<LeaderInfo>& r, const LeaderInfo& mine) {
    if (lost_ != LossReason::none) return;
    if (r) {
        if (!r->same_leadership(mine)) lost_ = LossReason::other_leader;
        return;
    }
    if (r.error() == make_error_code(ElectorErrc::no_leader)) lost_ = LossReason::leader_gone;
    // Any other failure says nothing: the deadline decides.
}

LossReason LeaseGuard::reason(TimePoint now) const {
    if (lost_ != LossReason::none) return lost_;
    if (now + std::chrono::milliseconds(opts_.margin_ms) >= deadline_) return LossReason::lease_may_expire;
    return LossReason::none;
}

GuardVerdict LeaseGuard::verdict(TimePoint now) const {
    switch (reason(now)) {
    case LossReason::none: break;
    case LossReason::lease_may_expire:
        return opts_.on_loss == LeaseLossAction::fence ? GuardVerdict::step_down : GuardVerdict::hold_until_preempted;
    default: return GuardVerdict::step_down;
    }
    return now >= renew_due() ? GuardVerdict::renew : GuardVerdict::hold;
}

int64_t Backoff::next_ms() {
    const int64_t v = next_ms_;
    NVF_INVARIANT(v > 0 && max_ms_ > 0);  // the constructor's precondition: a zero wait would spin
    next_ms_ = std::min(max_ms_, next_ms_ > max_ms_ / 2 ? max_ms_ : next_ms_ * 2);
    // The doubling never overflows and never shrinks a wait below the cap.
    NVF_INVARIANT(next_ms_ > 0 && next_ms_ <= max_ms_ && (next_ms_ >= v || next_ms_ == max_ms_));
    return v;
}

}  // namespace nvfence
