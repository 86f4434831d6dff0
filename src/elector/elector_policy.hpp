// SPDX-License-Identifier: MIT
#pragma once
/// @file elector_policy.hpp
/// The pure decisions of an elected agent, apart from any I/O, so they are
/// unit-tested with a fake clock:
///  - decide_on_win() (term.hpp): just won the election with a token; the
///    device's Report says whether to preempt (and whom), or that we are stale;
///  - LeaseGuard: while campaigning or holding, whether our lease may still
///    be alive, and what to do when it may not (or is surely gone);
///  - Backoff: bounded waits between attempts.
///
/// Rules (docs/ETCD.md "Failure behaviour"):
///  - a standby never acquires without a term: only a host that won the
///    election, got a token and whose lease may still be alive preempts;
///  - won: a holder on the device with an epoch of our tag at or above the
///    token means a newer leader already acted: we are stale, resign and
///    back off; any other registrant at or above the token means the token
///    must be issued again above it; else a verified preempt-and-abort of
///    the holder read (a compare-and-swap: exactly that key) with the token;
///  - lost for sure (lease expired, leader key gone, another leader): step
///    down (stop writers, self-fence as configured) at once;
///  - unsure (etcd not answering): keep holding while the lease may be
///    alive, i.e. until margin before the last renewal's send time plus its
///    TTL; then step down (lease_loss = fence, the default) or hold until
///    the device refuses us (lease_loss = hold).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "elector/elector.hpp"
#include "nvfence/report.hpp"
#include "agent/term.hpp"

namespace nvfence {

/// What to do when the lease may be gone but nothing says so for sure.
enum class LeaseLossAction : uint8_t {
    fence,  ///< Stop writers and run the fence action (default).
    hold,   ///< Keep the reservation until another host preempts it.
};

/// Why leadership ended.
enum class LossReason : uint8_t {
    none,              ///< Not lost.
    lease_expired,     ///< The service said our lease is gone.
    leader_gone,       ///< Nobody leads: our key was deleted.
    other_leader,      ///< Another leadership was observed.
    lease_may_expire,  ///< No renewal for TTL minus margin (service unreachable).
};

/// Words for a LossReason.
const char* loss_reason_name(LossReason r);

/// The guard's verdict at a point in time.
enum class GuardVerdict : uint8_t {
    hold,                  ///< Leadership valid; nothing due.
    renew,                 ///< Leadership valid; a keepalive is due.
    step_down,             ///< Stop writers, self-fence as configured.
    hold_until_preempted,  ///< Lease may be gone (lease_loss = hold): keep, never re-acquire.
};

/// Words for a GuardVerdict.
const char* guard_verdict_name(GuardVerdict v);

/// Timing of a LeaseGuard.
struct LeaseGuardOptions {
    int64_t ttl_ms = 5000;            ///< Lease TTL.
    int64_t margin_ms = 1000;         ///< Act this long before the lease may expire.
    int64_t renew_interval_ms = 1666; ///< Keepalive period (default TTL / 3).
    LeaseLossAction on_loss = LeaseLossAction::fence;  ///< When unsure.
};

/// Tracks whether our lease may still be alive. Pure: every input carries
/// its time, the caller's clock (ManualClock in tests) decides.
class LeaseGuard {
public:
    /// Monotonic time.
    using TimePoint = std::chrono::steady_clock::time_point;

    /// Starts a guard for a lease whose grant (or last renewal) request was
    /// sent at @p sent_at with TTL opts.ttl_ms: the lease may live until
    /// sent_at + ttl (sent, not answered: the service starts counting later).
    LeaseGuard(LeaseGuardOptions opts, TimePoint sent_at);

    /// A keepalive sent at @p sent_at answered @p r.
    void on_keepalive(TimePoint sent_at, const Result<LeaseStatus>& r);
    /// A leader lookup answered @p r; @p mine is our leadership.
    void on_leader(const Result<LeaderInfo>& r, const LeaderInfo& mine);
    /// The verdict at @p now.
    GuardVerdict verdict(TimePoint now) const;
    /// Why leadership ended (LossReason::none while it holds).
    LossReason reason(TimePoint now) const;
    /// Until when the lease may be alive.
    TimePoint lease_deadline() const { return deadline_; }
    /// When the next keepalive is due.
    TimePoint renew_due() const { return last_sent_ + std::chrono::milliseconds(opts_.renew_interval_ms); }
    /// Renewals that failed in a row (transport or server errors).
    int failures() const { return failures_; }

private:
    LeaseGuardOptions opts_;
    TimePoint deadline_;
    TimePoint last_sent_;
    LossReason lost_ = LossReason::none;
    int failures_ = 0;
};

/// Doubling waits from @p initial_ms up to @p max_ms; reset() starts over.
class Backoff {
public:
    /// Waits initial_ms, 2*initial_ms, ... capped at max_ms (both > 0).
    Backoff(int64_t initial_ms, int64_t max_ms) : initial_ms_(initial_ms), max_ms_(max_ms), next_ms_(initial_ms) {}
    /// The next wait in milliseconds.
    int64_t next_ms();
    /// Back to initial_ms.
    void reset() { next_ms_ = initial_ms_; }

private:
    int64_t initial_ms_;
    int64_t max_ms_;
    int64_t next_ms_;
};

}  // namespace nvfence
