// SPDX-License-Identifier: MIT
// Unit tests of the agent's one decision (decide_transition) over the
// static table of allowed transitions, and of Agent::apply refusing a
// transition outside it.

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "agent_sim.hpp"
#include "agent/agent_transition.hpp"

namespace nvfence::test {
namespace {

using S = AgentState;
using K = ObservationKind;

constexpr uint8_t kTag = 7;
const S kStates[] = {S::starting, S::standby, S::holder, S::fenced, S::stopping};
// A check-only watcher's states (role = watch).
const S kWatchStates[] = {S::starting, S::waiting, S::watching, S::fenced, S::stopping};
const K kKinds[] = {K::report,   K::view_lost, K::resumed_fenced, K::resumed,  K::registered,        K::acquired,
                    K::rekeyed,  K::released,  K::rejoined,       K::unregister_failed, K::stopped,
                    K::lease_lost};
const ResvType kTypes[] = {ResvType::write_exclusive, ResvType::write_exclusive_reg_only};

uint64_t key_of(uint8_t node, uint32_t epoch) { return *make_key({kTag, node, epoch}); }

Registrant reg(uint8_t host, uint64_t key, bool holder) {
    Registrant r;
    r.host_id = make_host(host);
    r.key = key;
    r.holder = holder;
    return r;
}

// Reports a check may read: this host (1) with its key, another key, or
// gone; holding or not; another host (2) holding or not.
std::vector<ReservationStatus> reports(ResvType type) {
    std::vector<ReservationStatus> out;
    const uint64_t mine = key_of(1, 5), newer = key_of(1, 6), other = key_of(2, 4);
    for (int me = 0; me < 3; ++me)          // 0: absent, 1: my key, 2: a newer key of mine
        for (int holder = 0; holder < 3; ++holder) {  // 0: nobody, 1: this host, 2: the other
            if (me == 0 && holder == 1) continue;
            ReservationStatus st;
            st.generation = 9;
            st.type = holder ? type : ResvType::none;
            if (me) st.registrants.push_back(reg(1, me == 1 ? mine : newer, holder == 1));
            st.registrants.push_back(reg(2, other, holder == 2));
            st.num_registrants = static_cast<uint16_t>(st.registrants.size());
            out.push_back(st);
        }
    return out;
}

// Every observation the enumeration below feeds the decision: each kind
// with every report and every flag that matters to it.
std::vector<Observation> observations(const std::vector<ReservationStatus>& rs) {
    std::vector<Observation> out;
    for (K kind : kKinds)
        for (const auto& st : rs)
            for (int flags = 0; flags < 32; ++flags) {
                Observation o;
                o.kind = kind;
                o.report = &st;
                o.generation_reset = flags & 1;
                o.notes.registration_preempted = flags & 2;
                o.holding = flags & 4;
                o.unregistered = flags & 8;
                o.unfenced_key = flags & 16 ? key_of(1, 9) : 0;  // fence_nvfence's record, newer than key_of(1, 5)
                o.found_ours = flags & 1;
                const Registrant* me = st.find_host(make_host(1));
                o.found_key = me ? me->key : 0;
                o.key = key_of(1, 5);
                o.text = "observed";
                for (PersistedRole p : {PersistedRole::none, PersistedRole::standby, PersistedRole::holder}) {
                    o.persisted = p;
                    out.push_back(o);
                }
            }
    return out;
}

// A key of node 1 (any epoch) is registered on @p st.
bool st_has_node_key(const ReservationStatus& st) {
    for (const auto& r : st.registrants)
        if (auto f = decode_key(r.key); f && f->tag == kTag && f->node == 1) return true;
    return false;
}

AgentView view_of(S state, ResvType type, bool fence_on_view_loss, bool holder_needs_lease = false,
                  bool check_only = false) {
    AgentView v;
    v.check_only = check_only;
    v.tag = kTag;
    v.node = 1;
    v.holder_needs_lease = holder_needs_lease;
    v.state = state;
    v.key = state == S::starting ? 0 : key_of(1, 5);
    v.type = type;
    v.self = make_host(1);
    v.fence_on_view_loss = fence_on_view_loss;
    return v;
}

TEST(AgentTransitionTest, EveryDecisionIsInTheTableAndEveryTableEntryIsReachable) {
    std::set<AgentStatePair> produced;
    size_t decisions = 0;
    for (ResvType type : kTypes) {
        const auto rs = reports(type);
        const auto obs = observations(rs);
        for (bool check_only : {false, true})
            for (S state : check_only ? kWatchStates : kStates)
                for (int flags = 0; flags < 4; ++flags)
                    for (const auto& o : obs) {
                        const auto t = decide_transition(view_of(state, type, flags & 1, flags & 2, check_only), o);
                        if (!t) continue;
                        ++decisions;
                        // A watcher never stands by or holds; an agent that
                        // registers never waits for or watches a key.
                        if (check_only) {
                            ASSERT_TRUE(t->to != S::standby && t->to != S::holder) << t->why;
                        } else {
                            ASSERT_TRUE(t->to != S::waiting && t->to != S::watching) << t->why;
                        }
                        ASSERT_EQ(t->from, state) << "kind " << static_cast<int>(o.kind);
                        ASSERT_TRUE(agent_transition_allowed(t->from, t->to))
                            << agent_state_name(t->from) << " -> " << agent_state_name(t->to) << " from kind "
                            << static_cast<int>(o.kind);
                        ASSERT_FALSE(t->why.empty());
                        EXPECT_EQ(t->fence != FenceEntry::none, t->to == S::fenced) << t->why;
                        produced.insert({t->from, t->to});
                    }
    }
    EXPECT_GT(decisions, 0u);
    const auto table = agent_allowed_transitions();
    std::set<AgentStatePair> allowed(table.begin(), table.end());
    EXPECT_EQ(allowed.size(), table.size()) << "no duplicate rows";
    for (const auto& p : allowed)
        EXPECT_TRUE(produced.count(p)) << "no observation produces " << agent_state_name(p.first) << " -> "
                                       << agent_state_name(p.second);
    EXPECT_EQ(produced, allowed);
}

// Issue 27: a check-only watcher moves only on what it reads (a check, its
// start) and on a stop: no request, lease, view loss or registration of
// its own ever changes its state; it leaves FENCED only when a check reads
// the node's key back, and it waits rather than fences for a key it never
// saw (unless the device says this host's registration was preempted).
TEST(AgentTransitionTest, AWatcherMovesOnlyOnItsReadsAndStop) {
    for (ResvType type : kTypes) {
        const auto rs = reports(type);
        for (const auto& o : observations(rs))
            for (S state : kWatchStates) {
                const auto t = decide_transition(view_of(state, type, true, false, true), o);
                if (!t) continue;
                EXPECT_TRUE(o.kind == K::report || o.kind == K::resumed || o.kind == K::resumed_fenced ||
                            o.kind == K::stopped)
                    << static_cast<int>(o.kind);
                EXPECT_FALSE(t->persist && o.kind == K::stopped) << "a watcher's stop persists nothing";
                const bool key_there = st_has_node_key(*o.report);
                if (state == S::fenced && t->to == S::watching) {
                    EXPECT_TRUE(key_there);
                }
                if (t->to == S::fenced && t->fence == FenceEntry::fresh) {
                    EXPECT_FALSE(key_there) << t->why;
                    // Fenced only once the key was seen: watched, persisted at
                    // start, this host's registration preempted since, or
                    // recorded by fence_nvfence's `on` (newer than a fence's).
                    EXPECT_TRUE(state == S::watching ||
                                (state == S::starting && o.persisted != PersistedRole::none) ||
                                (state == S::waiting && o.notes.registration_preempted) || o.unfenced_key != 0)
                        << t->why;
                    if (state == S::fenced) {
                        EXPECT_EQ(t->key, o.unfenced_key) << "fenced again for the new key";
                    }
                }
                if (t->to == S::watching) {
                    EXPECT_TRUE(key_there) << t->why;
                }
                if (t->to == S::waiting) {
                    EXPECT_EQ(state, S::starting);
                    EXPECT_EQ(o.persisted, PersistedRole::none);
                    EXPECT_FALSE(t->persist) << "nothing seen, nothing persisted";
                }
            }
    }
}

// Found by the simulator's first Pacemaker schedules with role = watch
// (seed 10, no fault): fence_nvfence's `on` registered the node, the
// controller fenced it 300 ms later, before the watcher's next check saw
// the key; the device's Registration Preempted notification reached the
// watcher, which stayed WAITING: no fence action, the node never restarted
// its stack, never came back. A waiting watcher told that this host's
// registration was preempted (pages from before its start are discarded)
// was unfenced and fenced since: it runs the fence action.
TEST(AgentTransitionTest, AWaitingWatcherToldItsRegistrationWasPreemptedRunsTheFenceAction) {
    const auto rs = reports(ResvType::write_exclusive_reg_only);
    for (const auto& st : rs) {
        if (st_has_node_key(st)) continue;
        Observation o;
        o.kind = K::report;
        o.report = &st;
        o.notes.pages = 1;
        o.notes.registration_preempted = true;
        const auto t = decide_transition(view_of(S::waiting, ResvType::write_exclusive_reg_only, true, false, true), o);
        ASSERT_TRUE(t) << "stayed WAITING";
        EXPECT_EQ(t->to, S::fenced);
        EXPECT_EQ(t->fence, FenceEntry::fresh);
        EXPECT_NE(t->why.find("Registration Preempted"), std::string::npos) << t->why;
        o.notes = CheckNotes{};  // without the notification: still waiting
        EXPECT_FALSE(decide_transition(view_of(S::waiting, ResvType::write_exclusive_reg_only, true, false, true), o));
    }
}

// Out of FENCED: a rejoin, a stop, or a won term (acquired: Agent::take_term
// of a candidate whose own key still holds after a lease loss).
TEST(AgentTransitionTest, NothingLeavesStoppingOrFencedButRejoinAWonTermAndStop) {
    for (ResvType type : kTypes) {
        const auto rs = reports(type);
        for (const auto& o : observations(rs)) {
            EXPECT_FALSE(decide_transition(view_of(S::stopping, type, true), o)) << static_cast<int>(o.kind);
            const auto t = decide_transition(view_of(S::fenced, type, true), o);
            if (t) {
                EXPECT_TRUE(o.kind == K::rejoined || o.kind == K::stopped || o.kind == K::acquired)
                    << static_cast<int>(o.kind);
            }
        }
    }
}

// Issue 24 defect 4: a lease loss is the agent's own transition, fenced
// like any other (writers stopped, FENCED persisted with the action
// pending); only a HOLDER is moved by it.
TEST(AgentTransitionTest, LeaseLossFencesAHolderAndNothingElse) {
    Observation o;
    o.kind = K::lease_lost;
    o.text = "etcd leadership lost (lease expired): token 7";
    auto t = decide_transition(view_of(S::holder, ResvType::write_exclusive, true), o);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->to, S::fenced);
    EXPECT_EQ(t->fence, FenceEntry::fresh);
    EXPECT_EQ(t->persist, PersistedRole::fenced);
    EXPECT_EQ(t->key, key_of(1, 5)) << "the key stays: the next leader preempts exactly it";
    EXPECT_EQ(t->why, o.text);
    for (S s : {S::starting, S::standby, S::fenced, S::stopping})
        EXPECT_FALSE(decide_transition(view_of(s, ResvType::write_exclusive, true), o)) << agent_state_name(s);
}

// A restart that finds this host holding: HOLDER without an elector; with
// one (holder_needs_lease) FENCED, since the lease ended with the process.
TEST(AgentTransitionTest, ResumedHoldingNeedsALeaseUnderAnElector) {
    const uint64_t mine = key_of(1, 5);
    ReservationStatus st;
    st.generation = 3;
    st.type = ResvType::write_exclusive;
    st.registrants = {reg(1, mine, true), reg(2, key_of(2, 4), false)};
    Observation o;
    o.kind = K::resumed;
    o.report = &st;
    o.persisted = PersistedRole::holder;
    o.key = mine;
    o.found_key = mine;
    o.found_ours = true;
    o.text = "resumed after a restart";
    auto t = decide_transition(view_of(S::starting, ResvType::write_exclusive, true), o);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->to, S::holder);
    t = decide_transition(view_of(S::starting, ResvType::write_exclusive, true, true), o);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->to, S::fenced);
    EXPECT_EQ(t->fence, FenceEntry::fresh);
    EXPECT_EQ(t->key, mine);
    EXPECT_NE(t->why.find("lease of that leadership ended"), std::string::npos) << t->why;
    st.registrants[0].holder = false;
    st.registrants[1].holder = true;
    o.persisted = PersistedRole::standby;
    t = decide_transition(view_of(S::starting, ResvType::write_exclusive, true, true), o);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->to, S::standby) << "a standby needs no lease";
}

TEST(AgentTransitionTest, ReportDecisions) {
    const uint64_t mine = key_of(1, 5);
    ReservationStatus st;
    st.generation = 3;
    st.type = ResvType::write_exclusive;
    st.registrants = {reg(1, mine, false), reg(2, key_of(2, 4), true)};
    Observation o;
    o.report = &st;
    auto v = view_of(S::holder, ResvType::write_exclusive, true);
    auto t = decide_transition(v, o);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->to, S::fenced);
    EXPECT_EQ(t->fence, FenceEntry::fresh);
    EXPECT_EQ(t->persist, PersistedRole::fenced);
    EXPECT_EQ(t->why, "reservation lost while still registered (the holder is now nf:7:2:4): "
                      "the device refuses this host's writes");
    v.type = ResvType::write_exclusive_reg_only;
    st.type = ResvType::write_exclusive_reg_only;
    t = decide_transition(v, o);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->to, S::standby) << "Registrants Only: a registrant may still write";
    EXPECT_EQ(t->level, EventLevel::warning);
    st.registrants.erase(st.registrants.begin());
    o.generation_reset = true;
    t = decide_transition(view_of(S::standby, ResvType::write_exclusive, true), o);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->to, S::fenced);
    EXPECT_EQ(t->why, "target restart: the generation went backwards and this host's key nf:7:1:5 is gone");
    EXPECT_FALSE(decide_transition(view_of(S::fenced, ResvType::write_exclusive, true), o))
        << "a FENCED agent is not moved by what it reads";
}

TEST(AgentTransitionTest, ViewLossFencesAHolderOnlyWhenConfigured) {
    Observation o;
    o.kind = K::view_lost;
    o.text = "lost the view";
    auto t = decide_transition(view_of(S::holder, ResvType::write_exclusive, true), o);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->to, S::fenced);
    t = decide_transition(view_of(S::holder, ResvType::write_exclusive, false), o);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->to, S::standby);
    EXPECT_EQ(t->why, "lost the view: no longer claiming HOLDER (fence_on_view_loss = false)");
    EXPECT_FALSE(decide_transition(view_of(S::standby, ResvType::write_exclusive, true), o));
}

TEST(AgentTransitionTest, StopPersistsWhatIsLeftOnTheDevice) {
    Observation o;
    o.kind = K::stopped;
    o.text = "clean stop";
    o.unregistered = true;
    auto t = decide_transition(view_of(S::holder, ResvType::write_exclusive, true), o);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->persist, PersistedRole::none);
    EXPECT_EQ(t->key, 0u);
    o.unregistered = false;
    t = decide_transition(view_of(S::standby, ResvType::write_exclusive, true), o);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->persist, PersistedRole::standby);
    EXPECT_EQ(t->key, key_of(1, 5));
    t = decide_transition(view_of(S::fenced, ResvType::write_exclusive, true), o);
    ASSERT_TRUE(t);
    EXPECT_FALSE(t->persist) << "the state file keeps FENCED";
}

// A started standby agent (node 1) on a fresh FakeTarget.
class ApplyTest : public ::testing::Test {
protected:
    void SetUp() override {
        AgentOptions o;
        o.tag = kTag;
        o.node = 1;
        host = std::make_unique<SimHost>(t, clock, 1, o, tmp.path());
        host->start_ok();
    }
    TempDir tmp;
    FakeTarget t;
    ManualClock clock;
    std::unique_ptr<SimHost> host;
};
using ApplyDeathTest = ApplyTest;

TEST_F(ApplyDeathTest, ApplyRefusesATransitionOutsideTheTable) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    SimHost& h = *host;
    ASSERT_EQ(h.agent->state(), S::standby);
    Transition bad;
    bad.from = S::standby;
    bad.to = S::starting;
    bad.why = "back to the start";
    EXPECT_DEATH((void)h.agent->apply(bad), "STANDBY -> STARTING .*not in the table of allowed transitions");
    Transition stale;
    stale.from = S::holder;  // not the agent's state
    stale.to = S::standby;
    stale.why = "from a state the agent is not in";
    EXPECT_DEATH((void)h.agent->apply(stale), "HOLDER -> STANDBY applied while the agent is STANDBY");
    EXPECT_EQ(h.agent->state(), S::standby) << "the parent is untouched";
}

// The decision's precondition: a watcher is never STANDBY or HOLDER, an
// agent that registers never WAITING or WATCHING. A view that breaks it is
// a broken invariant, not a decision.
TEST(AgentTransitionDeathTest, AViewOfTheOtherKindOfAgentIsABrokenInvariant) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    Observation o;
    o.kind = K::stopped;
    o.text = "stop";
    EXPECT_DEATH((void)decide_transition(view_of(S::holder, ResvType::write_exclusive, true, false, true), o),
                 "broken invariant");
    EXPECT_DEATH((void)decide_transition(view_of(S::watching, ResvType::write_exclusive, true, false, false), o),
                 "broken invariant");
    EXPECT_TRUE(decide_transition(view_of(S::watching, ResvType::write_exclusive, true, false, true), o));
}

TEST_F(ApplyTest, ApplyChangesStateEmitsAndPersists) {
    SimHost& h = *host;
    Transition tr;
    tr.from = S::standby;
    tr.to = S::fenced;
    tr.why = "told so";
    tr.key = h.agent->key();
    tr.fence = FenceEntry::fresh;
    tr.persist = PersistedRole::fenced;
    const int stops = h.hooks->writers_stopped;
    ASSERT_TRUE(h.agent->apply(tr).ok());
    EXPECT_EQ(h.agent->state(), S::fenced);
    EXPECT_EQ(h.hooks->writers_stopped, stops + 1);
    EXPECT_EQ(h.hooks->fence_actions, 1);
    EXPECT_EQ(h.hooks->transitions().back(), std::make_pair(S::standby, S::fenced));
    auto p = h.statefile.load();
    ASSERT_TRUE(p.ok() && *p);
    EXPECT_EQ((*p)->role, PersistedRole::fenced);
    EXPECT_EQ((*p)->reason, "told so");
    EXPECT_EQ((*p)->action, FenceActionState::done);
}

}  // namespace
}  // namespace nvfence::test
