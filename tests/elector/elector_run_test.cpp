// SPDX-License-Identifier: MIT
// carry_out_win(): a won election carried out on the in-memory target
// model (fake_passthru.hpp, nvmet semantics) with a scripted elector.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <utility>

#include "../fake_passthru.hpp"
#include "elector/elector_run.hpp"
#include "nvfence/error.hpp"
#include "nvfence/key.hpp"

namespace nvfence {
namespace {

using test::FakeTarget;
using test::HostPort;
using test::make_host;
using test::TempDir;
using namespace std::chrono_literals;

constexpr uint8_t kTag = 3;

uint64_t key(uint8_t node, uint32_t epoch) { return *make_key({kTag, node, epoch}); }

// Issues tokens like EtcdElector: above its counter and at_least.
class FakeElector final : public Elector {
public:
    uint32_t counter = 0;
    int terms = 0;
    std::vector<uint32_t> floors;            // at_least of each term() call
    std::function<void(uint32_t)> after_term;  // another host acts meanwhile
    std::optional<std::error_code> fail;

    Result<LeaderInfo> campaign(Ms) override { return LeaderInfo{"n/1", "me", 10, 1}; }
    Result<Term> term(uint32_t at_least, Ms) override {
        if (fail) return *fail;
        ++terms;
        floors.push_back(at_least);
        counter = std::max(counter, at_least) + 1;
        Term t;
        t.leader = {"n/1", "me", 10, 1};
        t.epoch = counter;
        if (after_term) after_term(t.epoch);
        return t;
    }
    Result<LeaseStatus> keepalive(Ms) override { return LeaseStatus{5000}; }
    Result<LeaderInfo> leader(Ms) override { return LeaderInfo{"n/1", "me", 10, 1}; }
    Result<LeaderInfo> observe(const std::optional<LeaderInfo>&, Ms) override { return LeaderInfo{"n/1", "me", 10, 1}; }
    Status resign(Ms) override { return Ok{}; }
};

struct Node {
    Node(FakeTarget& t, uint8_t n, const std::string& dir)
        : id(make_host(n)), port(t, id, n), resv(port, 1), store(dir, "vol"), fence(resv, id, opts(n), &store) {}
    static FenceOptions opts(uint8_t n) {
        FenceOptions o;
        o.node = n;
        o.tag = kTag;
        return o;
    }
    HostId id;
    HostPort port;
    Reservations resv;
    EpochStore store;
    Fence fence;
};

class ElectorRun : public ::testing::Test {
protected:
    TempDir tmp;
    FakeTarget target;
    std::unique_ptr<Node> node(uint8_t n) {
        return std::make_unique<Node>(target, n, tmp.path() + "/n" + std::to_string(n));
    }
    Result<WinResult> win(Node& n, FakeElector& e) { return carry_out_win(e, n.fence, &n.store, n.id, kTag, 1000ms); }
};

TEST_F(ElectorRun, PreemptsTheOldHolderWithTheTokenAsEpoch) {
    auto a = node(1);
    auto b = node(2);
    ASSERT_TRUE(a->fence.join(5, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));  // standby: epoch 6
    FakeElector e;
    e.counter = 2;  // etcd's counter is behind the device
    auto w = win(*b, e);
    ASSERT_TRUE(w) << w.error().message();
    EXPECT_EQ(w->decision.action, WinAction::takeover) << w->decision.why;
    ASSERT_EQ(e.floors.size(), 1u);
    EXPECT_EQ(e.floors[0], 6u) << "the token is asked above the device's epochs";
    EXPECT_EQ(w->term.epoch, 7u);
    EXPECT_EQ(w->key_epoch, 7u);
    ASSERT_TRUE(target.holder);
    EXPECT_EQ(*target.holder, b->id);
    EXPECT_EQ(target.find(b->id)->key, key(2, 7));
    EXPECT_EQ(target.find(a->id), nullptr) << "the old holder is preempted";
    EXPECT_EQ(std::count(target.aborted.begin(), target.aborted.end(), a->id), 1) << "with abort";
    EXPECT_EQ(*b->store.load(), 7u);
}

// The token call takes a round trip: a lease that may have run out
// meanwhile backs no takeover. Asked after the token and the Report, before
// any command for the token is sent.
TEST_F(ElectorRun, ALeaseThatMayHaveRunOutDuringTheTokenCallBacksNoTakeover) {
    auto a = node(1);
    auto b = node(2);
    ASSERT_TRUE(a->fence.join(5, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    const uint64_t b_key = target.find(b->id)->key;
    FakeElector e;
    bool lease_alive = true;
    int asked = 0;
    e.after_term = [&](uint32_t) { lease_alive = false; };  // the call outlived the lease
    auto w = carry_out_win(e, b->fence, &b->store, b->id, kTag, 1000ms, [&] {
        ++asked;
        return lease_alive;
    });
    ASSERT_FALSE(w);
    EXPECT_EQ(w.error(), make_error_code(ElectorErrc::lease_expired)) << w.error().message();
    EXPECT_EQ(asked, 1);
    EXPECT_EQ(*target.holder, a->id) << "acted on a token no live lease backs";
    EXPECT_EQ(target.find(b->id)->key, b_key);
    // With the lease alive the same win is carried out.
    e.after_term = {};
    lease_alive = true;
    auto w2 = carry_out_win(e, b->fence, &b->store, b->id, kTag, 1000ms, [&] { return lease_alive; });
    ASSERT_TRUE(w2) << w2.error().message();
    EXPECT_EQ(*target.holder, b->id);
}

TEST_F(ElectorRun, NobodyHoldingAcquiresWithTheToken) {
    auto b = node(2);
    FakeElector e;
    e.counter = 40;
    auto w = win(*b, e);
    ASSERT_TRUE(w) << w.error().message();
    EXPECT_EQ(w->decision.action, WinAction::acquire);
    EXPECT_EQ(target.find(b->id)->key, key(2, 41));
    EXPECT_EQ(*target.holder, b->id);
}

TEST_F(ElectorRun, StaleWhenANewerLeaderPreemptedMeanwhile) {
    auto a = node(1);
    auto b = node(2);
    auto c = node(3);
    ASSERT_TRUE(a->fence.join(5, false));
    ASSERT_TRUE(a->fence.acquire());
    FakeElector e;
    // b gets its token, pauses; c is elected with a later token and preempts.
    bool done = false;
    e.after_term = [&](uint32_t token) {
        if (std::exchange(done, true)) return;
        ASSERT_TRUE(c->store.raise_to(token));
        ASSERT_TRUE(c->fence.takeover(std::nullopt));
    };
    const size_t before = target.log.size();
    auto w = win(*b, e);
    ASSERT_TRUE(w) << w.error().message();
    EXPECT_EQ(w->decision.action, WinAction::stale) << w->decision.why;
    EXPECT_EQ(*target.holder, c->id);
    EXPECT_EQ(target.find(b->id), nullptr) << "b sent nothing that registers it";
    for (size_t i = before; i < target.log.size(); ++i) {
        if (target.log[i].host == b->id) {
            EXPECT_NE(target.log[i].cmd.opcode, opcode::kResvAcquire) << "b sent an Acquire";
        }
    }
}

TEST_F(ElectorRun, ReissuesWhenARegistrantOvertookTheToken) {
    auto a = node(1);
    auto b = node(2);
    auto d = node(4);
    ASSERT_TRUE(a->fence.join(5, false));
    ASSERT_TRUE(a->fence.acquire());
    FakeElector e;
    // After b's first token (6), a standby registers with a fresh epoch (6+).
    bool done = false;
    e.after_term = [&](uint32_t token) {
        if (std::exchange(done, true)) return;
        ASSERT_TRUE(d->store.raise_to(token));
        ASSERT_TRUE(d->fence.join(std::nullopt, false));
    };
    auto w = win(*b, e);
    ASSERT_TRUE(w) << w.error().message();
    EXPECT_EQ(e.terms, 2);
    EXPECT_EQ(w->decision.action, WinAction::takeover);
    EXPECT_EQ(w->term.epoch, 8u);
    EXPECT_EQ(target.find(b->id)->key, key(2, 8));
    EXPECT_EQ(*target.holder, b->id);
}

// The target restarted (no PTPL) while the token was on its way: the
// Report after it shows GEN gone back and nobody registered, so nothing on
// the device says whether a newer leader took it meanwhile. The token is
// asked again, above the first (etcd would refuse a leadership whose lease
// ran out); acting on the first would acquire the emptied device with it.
TEST_F(ElectorRun, AsksAgainWhenTheTargetRestartedDuringTheToken) {
    auto a = node(1);
    auto b = node(2);
    ASSERT_TRUE(a->fence.join(5, false));
    ASSERT_TRUE(a->fence.acquire());
    FakeElector e;
    bool done = false;
    e.after_term = [&](uint32_t) {
        if (std::exchange(done, true)) return;
        target.regs.clear();
        target.type = ResvType::none;
        target.holder.reset();
        target.generation = 0;
    };
    auto w = win(*b, e);
    ASSERT_TRUE(w) << w.error().message();
    EXPECT_EQ(e.terms, 2);
    EXPECT_EQ(e.floors, (std::vector<uint32_t>{5, 6})) << "the second token is asked above the first (6)";
    EXPECT_EQ(w->decision.action, WinAction::acquire);
    EXPECT_EQ(w->term.epoch, 7u);
    EXPECT_EQ(target.find(b->id)->key, key(2, 7));
}

TEST_F(ElectorRun, HolderVictimChangedIsALostRace) {
    auto a = node(1);
    auto b = node(2);
    auto c = node(3);
    ASSERT_TRUE(a->fence.join(5, false));
    ASSERT_TRUE(a->fence.acquire());
    FakeElector e;
    // c preempts a right after b's decision read the Report (b's compare fails).
    int reports = 0;
    target.after = [&](const HostId& h, const Command& cmd) {
        if (h == b->id && cmd.opcode == opcode::kResvReport && ++reports == 2) {
            ASSERT_TRUE(c->store.raise_to(1000));
            ASSERT_TRUE(c->fence.takeover(std::nullopt));
        }
    };
    auto w = win(*b, e);
    ASSERT_FALSE(w);
    EXPECT_EQ(w.error(), make_error_code(Errc::lost_race));
    EXPECT_EQ(*target.holder, c->id);
}

TEST_F(ElectorRun, AlreadyHolderAndRekey) {
    auto b = node(2);
    FakeElector e;
    ASSERT_TRUE(win(*b, e));  // token 1, acquired
    EXPECT_EQ(target.find(b->id)->key, key(2, 1));
    // A new leadership of the same host: re-key to the new token, keep holding.
    auto w = win(*b, e);
    ASSERT_TRUE(w) << w.error().message();
    EXPECT_EQ(w->decision.action, WinAction::rekey);
    EXPECT_EQ(target.find(b->id)->key, key(2, 2));
    EXPECT_EQ(*target.holder, b->id);
}

TEST_F(ElectorRun, ElectorErrorsComeBackUntouched) {
    auto b = node(2);
    FakeElector e;
    e.fail = make_error_code(ElectorErrc::not_leader);
    auto w = win(*b, e);
    ASSERT_FALSE(w);
    EXPECT_EQ(w.error(), make_error_code(ElectorErrc::not_leader));
    EXPECT_EQ(target.find(b->id), nullptr);
}

}  // namespace
}  // namespace nvfence
