// SPDX-License-Identifier: MIT
// The elected agent's pure decisions, driven by a ManualClock.
#include <gtest/gtest.h>

#include "internal/clock.hpp"
#include "elector/elector_policy.hpp"
#include "nvfence/epoch_store.hpp"
#include "nvfence/error.hpp"
#include "nvfence/key.hpp"

using namespace nvfence;
using std::chrono::milliseconds;

namespace {

HostId host(uint8_t b) {
    HostId h{};
    h[0] = b;
    return h;
}

Registrant reg(uint8_t hostb, uint8_t node, uint32_t epoch, bool holder, uint8_t tag = 0) {
    Registrant r;
    r.host_id = host(hostb);
    r.key = *make_key({tag, node, epoch});
    r.holder = holder;
    return r;
}

ReservationStatus status(std::vector<Registrant> rs) {
    ReservationStatus st;
    st.registrants = std::move(rs);
    st.num_registrants = static_cast<uint16_t>(st.registrants.size());
    for (const auto& r : st.registrants)
        if (r.holder) st.type = ResvType::write_exclusive;
    return st;
}

LeaderInfo mine() {
    LeaderInfo l;
    l.key = "nvfence/v/1";
    l.revision = 10;
    l.lease = 1;
    return l;
}

}  // namespace

TEST(ElectorPolicy, WinPreemptsTheHolderReadWithTheToken) {
    auto st = status({reg(1, 1, 5, true), reg(2, 2, 6, false)});
    auto d = decide_on_win(7, st, host(2), 0);
    EXPECT_EQ(d.action, WinAction::takeover) << d.why;
    ASSERT_TRUE(d.victim);
    EXPECT_EQ(*d.victim, *make_key({0, 1, 5}));
    EXPECT_EQ(d.device_max_epoch, 6u);
}

TEST(ElectorPolicy, WinWhenHolderAboveOrEqualTokenIsStale) {
    // A newer leader already preempted with epoch 9; our token 8 is stale.
    auto st = status({reg(1, 1, 9, true), reg(2, 2, 3, false)});
    EXPECT_EQ(decide_on_win(8, st, host(2), 0).action, WinAction::stale);
    EXPECT_EQ(decide_on_win(9, st, host(2), 0).action, WinAction::stale);
    EXPECT_EQ(decide_on_win(10, st, host(2), 0).action, WinAction::takeover);
}

TEST(ElectorPolicy, WinBelowARegistrantAsksForANewToken) {
    // A standby registered with epoch 12 after the token was issued.
    auto st = status({reg(1, 1, 5, true), reg(3, 3, 12, false)});
    auto d = decide_on_win(8, st, host(2), 0);
    EXPECT_EQ(d.action, WinAction::reissue) << d.why;
    EXPECT_EQ(d.device_max_epoch, 12u);
}

TEST(ElectorPolicy, WinWithNobodyHoldingAcquires) {
    auto st = status({reg(2, 2, 3, false)});
    EXPECT_EQ(decide_on_win(4, st, host(2), 0).action, WinAction::acquire);
    EXPECT_EQ(decide_on_win(4, status({}), host(2), 0).action, WinAction::acquire);
}

TEST(ElectorPolicy, WinWhenAlreadyHolderOrHoldingAnOlderKey) {
    auto st = status({reg(2, 2, 4, true)});
    EXPECT_EQ(decide_on_win(4, st, host(2), 0).action, WinAction::already_holder);
    EXPECT_EQ(decide_on_win(5, st, host(2), 0).action, WinAction::rekey);
}

TEST(ElectorPolicy, OtherTagsAndForeignHoldersAreNotComparedByEpoch) {
    // Another cluster's holder with a huge epoch says nothing about our tokens.
    auto st = status({reg(1, 1, 4000000000u, true, 9)});
    auto d = decide_on_win(3, st, host(2), 0);
    EXPECT_EQ(d.action, WinAction::takeover);
    EXPECT_EQ(d.device_max_epoch, 0u);
    ReservationStatus foreign = status({});
    Registrant f;
    f.host_id = host(7);
    f.key = 0x1234;
    f.holder = true;
    foreign.registrants.push_back(f);
    foreign.num_registrants = 1;
    auto df = decide_on_win(1, foreign, host(2), 0);
    EXPECT_EQ(df.action, WinAction::takeover);
    EXPECT_EQ(*df.victim, 0x1234u);
}

TEST(ElectorPolicy, GuardHoldsRenewsAndStepsDownBeforeTheLeaseMayExpire) {
    ManualClock clk;
    LeaseGuardOptions o;
    o.ttl_ms = 5000;
    o.margin_ms = 1000;
    o.renew_interval_ms = 1666;
    LeaseGuard g(o, clk.now());
    EXPECT_EQ(g.verdict(clk.now()), GuardVerdict::hold);
    clk.advance(milliseconds(1666));
    EXPECT_EQ(g.verdict(clk.now()), GuardVerdict::renew);
    // The renewal sent now answers TTL 5 s: the lease may live until now + 5 s.
    const auto sent = clk.now();
    clk.advance(milliseconds(30));
    g.on_keepalive(sent, LeaseStatus{5000});
    EXPECT_EQ(g.lease_deadline(), sent + milliseconds(5000));
    EXPECT_EQ(g.verdict(clk.now()), GuardVerdict::hold);
    // etcd stops answering: renewals fail, hold until 1 s before the deadline.
    for (int i = 0; i < 3; ++i) {
        clk.advance(milliseconds(1000));
        g.on_keepalive(clk.now(), make_error_code(ElectorErrc::unreachable));
    }
    EXPECT_EQ(g.failures(), 3);
    EXPECT_EQ(g.reason(clk.now()), LossReason::none);  // sent + 3030 ms
    clk.advance(milliseconds(969));                   // sent + 3999 ms
    EXPECT_NE(g.verdict(clk.now()), GuardVerdict::step_down);
    clk.advance(milliseconds(1));                     // sent + 4000 ms = deadline - margin
    EXPECT_EQ(g.verdict(clk.now()), GuardVerdict::step_down);
    EXPECT_EQ(g.reason(clk.now()), LossReason::lease_may_expire);
}

TEST(ElectorPolicy, GuardWithLeaseLossHoldKeepsUntilPreempted) {
    ManualClock clk;
    LeaseGuardOptions o;
    o.ttl_ms = 2000;
    o.margin_ms = 500;
    o.renew_interval_ms = 666;
    o.on_loss = LeaseLossAction::hold;
    LeaseGuard g(o, clk.now());
    clk.advance(milliseconds(1500));
    EXPECT_EQ(g.verdict(clk.now()), GuardVerdict::hold_until_preempted);
    // A sure loss still steps down, whatever lease_loss says.
    g.on_leader(make_error_code(ElectorErrc::no_leader), mine());
    EXPECT_EQ(g.verdict(clk.now()), GuardVerdict::step_down);
    EXPECT_EQ(g.reason(clk.now()), LossReason::leader_gone);
}

TEST(ElectorPolicy, GuardSureLosses) {
    ManualClock clk;
    LeaseGuardOptions o;
    {
        LeaseGuard g(o, clk.now());
        g.on_keepalive(clk.now(), make_error_code(ElectorErrc::lease_expired));
        EXPECT_EQ(g.verdict(clk.now()), GuardVerdict::step_down);
        EXPECT_EQ(g.reason(clk.now()), LossReason::lease_expired);
        // Nothing brings it back.
        g.on_keepalive(clk.now(), LeaseStatus{5000});
        EXPECT_EQ(g.verdict(clk.now()), GuardVerdict::step_down);
    }
    {
        LeaseGuard g(o, clk.now());
        LeaderInfo other = mine();
        other.key = "nvfence/v/2";
        other.revision = 12;
        g.on_leader(other, mine());
        EXPECT_EQ(g.reason(clk.now()), LossReason::other_leader);
    }
    {
        LeaseGuard g(o, clk.now());
        LeaderInfo same = mine();
        same.value = "renamed";
        g.on_leader(same, mine());
        g.on_leader(make_error_code(Errc::timeout), mine());
        g.on_leader(make_error_code(ElectorErrc::unreachable), mine());
        EXPECT_EQ(g.verdict(clk.now()), GuardVerdict::hold);
    }
}

TEST(ElectorPolicy, GuardLateReplyNeverMovesTheDeadlineBack) {
    ManualClock clk;
    LeaseGuardOptions o;
    o.ttl_ms = 5000;
    const auto t0 = clk.now();
    LeaseGuard g(o, t0);
    clk.advance(milliseconds(2000));
    g.on_keepalive(clk.now(), LeaseStatus{5000});
    const auto d = g.lease_deadline();
    g.on_keepalive(t0 + milliseconds(100), LeaseStatus{5000});  // an old request's reply
    EXPECT_EQ(g.lease_deadline(), d);
    // A reply that reports less TTL left shortens nothing already granted
    // from a later send time, but never extends beyond its own send + TTL.
    g.on_keepalive(clk.now(), LeaseStatus{1000});
    EXPECT_EQ(g.lease_deadline(), d);
}

TEST(ElectorPolicy, StandbyWithoutTermOrPastItsLeaseNeverPreempts) {
    // A candidate that won but stalled past its lease (a pause between the
    // campaign and the preempt) must not act on that term.
    ManualClock clk;
    LeaseGuardOptions o;
    o.ttl_ms = 2000;
    o.margin_ms = 500;
    LeaseGuard g(o, clk.now());
    EXPECT_NE(g.verdict(clk.now()), GuardVerdict::step_down);
    clk.advance(milliseconds(1600));
    EXPECT_EQ(g.verdict(clk.now()), GuardVerdict::step_down);
}

TEST(ElectorPolicy, BackoffDoublesAndIsCapped) {
    Backoff b(100, 1000);
    EXPECT_EQ(b.next_ms(), 100);
    EXPECT_EQ(b.next_ms(), 200);
    EXPECT_EQ(b.next_ms(), 400);
    EXPECT_EQ(b.next_ms(), 800);
    EXPECT_EQ(b.next_ms(), 1000);
    EXPECT_EQ(b.next_ms(), 1000);
    b.reset();
    EXPECT_EQ(b.next_ms(), 100);
    Backoff big(INT64_MAX / 2 + 1, INT64_MAX);
    EXPECT_GT(big.next_ms(), 0);
    EXPECT_EQ(big.next_ms(), INT64_MAX);
}

// The guard's and the backoff's preconditions (lease_guard_options() and the
// driver's constants meet them): a guard whose margin is not below the TTL
// would step down on every grant, a backoff without a wait would spin.
TEST(ElectorPolicyDeathTest, GuardWithAMarginNotBelowTheTtlAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    LeaseGuardOptions o;
    o.ttl_ms = 1000;
    o.margin_ms = 1000;
    EXPECT_DEATH({ LeaseGuard g(o, LeaseGuard::TimePoint{}); (void)g; }, "broken invariant");
    o.margin_ms = 500;
    o.renew_interval_ms = 0;
    EXPECT_DEATH({ LeaseGuard g(o, LeaseGuard::TimePoint{}); (void)g; }, "broken invariant");
}

TEST(ElectorPolicyDeathTest, BackoffWithoutAWaitAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    Backoff zero(0, 1000);
    EXPECT_DEATH((void)zero.next_ms(), "broken invariant");
    Backoff no_cap(100, 0);
    EXPECT_DEATH((void)no_cap.next_ms(), "broken invariant");
}

// A TTL from etcd is believed only up to the one this host asked for: a
// hostile or broken reply of a year (or of etcd's maximum) must not keep a
// host leading past its own lease.
TEST(ElectorPolicy, GuardBelievesNoTtlAboveTheConfiguredOne) {
    ManualClock clk;
    LeaseGuardOptions o;
    o.ttl_ms = 5000;
    o.margin_ms = 1000;
    o.renew_interval_ms = 1666;
    LeaseGuard g(o, clk.now());
    const auto sent = clk.now();
    g.on_keepalive(sent, LeaseStatus{int64_t{365} * 24 * 3600 * 1000});
    EXPECT_EQ(g.lease_deadline(), sent + milliseconds(5000));
    g.on_keepalive(sent, LeaseStatus{int64_t{9'000'000'000} * 1000});
    EXPECT_EQ(g.lease_deadline(), sent + milliseconds(5000));
    clk.advance(milliseconds(4000));
    EXPECT_EQ(g.verdict(clk.now()), GuardVerdict::step_down);
    // A shorter TTL than asked is believed as it is.
    LeaseGuard h(o, clk.now());
    const auto sent2 = clk.now();
    h.on_keepalive(sent2, LeaseStatus{2000});
    EXPECT_EQ(h.lease_deadline(), sent2 + milliseconds(5000));  // the grant's own deadline still stands
}

// Issue 24: the token is the epoch; this host's own key of the token is a
// retry of the term, not a rival.
TEST(ElectorPolicy, OurOwnKeyOfTheTokenIsARetryNotARival) {
    // Registered with the token's key, the Acquire lost: acquire it.
    auto st = status({reg(2, 2, 6, false), reg(1, 1, 5, false)});
    auto d = decide_on_win(6, st, host(2), 0, 6);
    EXPECT_EQ(d.action, WinAction::acquire) << d.why;
    EXPECT_EQ(d.device_max_epoch, 5u) << "our own key of the token is left out";
    // Another host's key of the token is a rival.
    EXPECT_EQ(decide_on_win(6, st, host(3), 0).action, WinAction::reissue);
}

TEST(ElectorPolicy, AFloorAtOrAboveTheTokenAsksForATokenAboveTheFloor) {
    // This host saw epoch 9 (its EpochStore) though the device shows less now
    // (the target restarted and forgot its keys).
    auto st = status({reg(1, 1, 3, true)});
    auto d = decide_on_win(8, st, host(2), 0, 9);
    EXPECT_EQ(d.action, WinAction::reissue) << d.why;
    EXPECT_EQ(d.device_max_epoch, 9u) << "the next token must pass the floor";
    EXPECT_EQ(decide_on_win(10, st, host(2), 0, 9).action, WinAction::takeover);
}

TEST(ElectorPolicy, ATokenOutsideTheKeysEpochsIsStaleAndSaysHowToRepair) {
    for (uint32_t token : {0u, kEpochCeiling, kEpochCeiling + 1, 0xffffffffu}) {
        auto d = decide_on_win(token, status({}), host(2), 0);
        EXPECT_EQ(d.action, WinAction::stale) << token;
        EXPECT_NE(d.why.find("repair the election's counter"), std::string::npos) << d.why;
    }
    EXPECT_EQ(decide_on_win(kEpochCeiling - 1, status({}), host(2), 0).action, WinAction::acquire);
}

// Issue 24 item 7: a key of our tag at or above the ceiling is nobody's
// term: the win preempts it as a holder and does not ask for a token above
// it (there is none), and it is not the device's highest epoch.
TEST(ElectorPolicy, AKeyAtOrAboveTheCeilingIsPreemptedNotATokenToPass) {
    for (uint32_t epoch : {kEpochCeiling, kMaxEpoch}) {
        auto st = status({reg(9, 9, epoch, true), reg(1, 1, 4, false)});
        auto d = decide_on_win(6, st, host(2), 0, 4);
        EXPECT_EQ(d.action, WinAction::takeover) << epoch << ": " << d.why;
        EXPECT_EQ(d.victim, st.registrants[0].key);
        EXPECT_EQ(d.device_max_epoch, 4u) << epoch;
        EXPECT_EQ(max_epoch_of_tag(st, 0), 4u) << epoch;
    }
}

TEST(ElectorPolicy, HoldingAboveTheTokenAsksForANewToken) {
    // We hold with epoch 7 and won token 6 (etcd's counter was repaired
    // below us): re-key needs a token above 7.
    auto st = status({reg(2, 2, 7, true)});
    auto d = decide_on_win(6, st, host(2), 0);
    EXPECT_EQ(d.action, WinAction::reissue) << d.why;
    EXPECT_EQ(d.device_max_epoch, 7u);
}
