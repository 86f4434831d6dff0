// SPDX-License-Identifier: MIT
// CTest sim_known_defects: the seeds with which nvfence-sim found issue 24's
// elector defects on the code of today (docs/RELIABILITY.md "Simulator"),
// replayed. These tests EXPECT the violation: the defects are known and
// issue 24 fixes them. When issue 24 lands they fail, on purpose: then turn
// each into a regression test that expects NO violation for its seed and
// window, and drop the defect from known_defect() (sim_invariants.cpp) so
// the CI slice checks that invariant again.
//
// A seed replays bit for bit on the same code; a product change that moves
// the schedule (other commands, other timing) may move a defect to another
// seed. The window tests below search a fixed range of seeds, so they stay
// meaningful across such changes; re-record the single seeds with
//   nvfence-sim --schedules 2000 --jobs 1 --tolerate <the earlier invariants>
#include <gtest/gtest.h>

#include "sim_world.hpp"

namespace nvfence::sim {
namespace {

constexpr uint32_t bit(Inv i) { return 1u << static_cast<unsigned>(i); }

// The invariants that a defect's schedule breaks before the one we look
// for (defect 4: a HOLDER past its lease; defect 5: fenced standbys), and
// for defect 1 also defect 3's, tolerated so the run reaches it.
constexpr uint32_t kBefore3 = bit(Inv::holder_past_lease) | bit(Inv::liveness);
constexpr uint32_t kBefore1 = kBefore3 | bit(Inv::acted_on_resigned_term);

ScheduleResult replay(uint64_t seed, uint32_t tolerate) {
    SimOptions o;
    o.seed = seed;
    o.tolerate = tolerate;
    return run_schedule(o);
}

// Issue 24 defect 1: host 1 wins token 2 at 75 ms and its takeover stalls
// (device partitions, slow commands) for 18 s; host 2 is elected with
// token 4 and acquires; host 1's takeover resumes, finds its registration
// gone, registers epoch 5 (device max + 1) and preempts-and-aborts host 2:
// the newer leader is fenced and host 1 holds with an epoch the elector
// never issued.
TEST(SimKnownDefects, Seed390StaleWinnerPreemptsTheNewerLeader) {
    const ScheduleResult r = replay(390, kBefore1);
    ASSERT_TRUE(r.violation) << "issue 24 defect 1 no longer shows with seed 390 (fixed? see the header)";
    EXPECT_EQ(r.violation->inv, Inv::epoch_not_token) << r.violation->what;
    EXPECT_NE(r.violation->what.find("nf:7:2:5 from nf:7:3:4 (token 4 of host 2)"), std::string::npos)
        << r.violation->what;
}

// Issue 24 defect 1, without a victim: host 1 wins token 2, its takeover
// stalls 11 s (its driver resigns meanwhile); a standby registered epoch 2
// in between, so the takeover registers epoch 3 (device max + 1) and
// acquires the free reservation with an epoch the elector never issued.
TEST(SimKnownDefects, Seed389EpochFromTheDeviceNotTheToken) {
    const ScheduleResult r = replay(389, kBefore1);
    ASSERT_TRUE(r.violation) << "issue 24 defect 1 no longer shows with seed 389 (fixed? see the header)";
    EXPECT_EQ(r.violation->inv, Inv::epoch_not_token) << r.violation->what;
}

// Issue 24 defect 3: the agent's answer to token 6 ("failed", the driver had
// given 6 up long before) is taken by the driver as the answer to token 7:
// it resigns 7 while the agent carries 7 out and holds.
TEST(SimKnownDefects, Seed3AnswerAppliedToTheWrongTerm) {
    const ScheduleResult r = replay(3, kBefore3);
    ASSERT_TRUE(r.violation) << "issue 24 defect 3 no longer shows with seed 3 (fixed? see the header)";
    EXPECT_EQ(r.violation->inv, Inv::acted_on_resigned_term) << r.violation->what;
    EXPECT_NE(r.violation->what.find("resigned the term of token 7"), std::string::npos) << r.violation->what;
}

// Issue 24 defect 1 after a target restart without PTPL (found by CI's slice
// of commit f48519b): host 2 wins token 6 and freezes; host 1 is elected with
// token 7, holds and writes; the target restarts and forgets every key;
// host 2 resumes and acquires the empty device with its stale token 6, and
// its first write lands over host 1's acknowledged write of epoch 7.
TEST(SimKnownDefects, Seed27036895840228StaleTokenAfterTargetRestartOverwrites) {
    const ScheduleResult r = replay(27036895840228ull, kBefore1 | bit(Inv::epoch_not_token));
    ASSERT_TRUE(r.violation) << "no longer shows with seed 27036895840228 (fixed? see the header)";
    EXPECT_EQ(r.violation->inv, Inv::acked_write_lost) << r.violation->what;
}

// Within a fixed window of seeds each defect shows at least once.
TEST(SimKnownDefects, WindowOfSeeds1To500ShowsDefects1And3) {
    bool one = false, three = false;
    for (uint64_t seed = 1; seed <= 500 && !(one && three); ++seed) {
        if (!three) {
            const ScheduleResult r = replay(seed, kBefore3);
            three = r.violation && r.violation->inv == Inv::acted_on_resigned_term;
        }
        if (!one) {
            const ScheduleResult r = replay(seed, kBefore1);
            one = r.violation && r.violation->inv == Inv::epoch_not_token;
        }
    }
    EXPECT_TRUE(one) << "no epoch_not_token (issue 24 defect 1) in seeds 1..500";
    EXPECT_TRUE(three) << "no acted_on_resigned_term (issue 24 defect 3) in seeds 1..500";
}

// Issue 24 defect 5 breaks liveness even without faults: a standby that
// registered before the first takeover loses its key to it, goes FENCED
// and never campaigns again.
TEST(SimKnownDefects, FaultFreeSchedulesLeaveFencedStandbys) {
    int fenced = 0;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
        SimOptions o;
        o.seed = seed;
        o.fault_mask = 0;
        const ScheduleResult r = run_schedule(o);
        if (!r.violation) continue;
        EXPECT_EQ(r.violation->inv, Inv::liveness) << "seed " << seed << ": " << r.violation->what;
        fenced += r.violation->what.find("FENCED") != std::string::npos;
    }
    EXPECT_GT(fenced, 0) << "issue 24 defect 5 no longer shows without faults (fixed? see the header)";
}

}  // namespace
}  // namespace nvfence::sim
