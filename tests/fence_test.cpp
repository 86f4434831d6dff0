// SPDX-License-Identifier: MIT
// The ownership protocol (fence.hpp) against the in-memory target model:
// several hosts share one namespace; hooks make the device fail, lie, or let
// another host act in between.

#include <gtest/gtest.h>

#include <cerrno>
#include <memory>

#include "fake_passthru.hpp"
#include "nvfence/epoch_store.hpp"
#include "nvfence/error.hpp"
#include "nvfence/fence.hpp"
#include "nvfence/key.hpp"

namespace nvfence {
namespace {

using test::FakeTarget;
using test::HostPort;
using test::make_host;
using test::TempDir;

constexpr uint8_t kTag = 7;

uint64_t key(uint8_t tag, uint8_t node, uint32_t epoch) { return *make_key({tag, node, epoch}); }
uint64_t key(uint8_t node, uint32_t epoch) { return key(kTag, node, epoch); }

// One host: its port to the shared target, its commands, store and fence.
struct Node {
    Node(FakeTarget& t, uint8_t n, const std::string& dir, FenceOptions o, bool with_store = true)
        : id(make_host(n)),
          port(t, id, n),
          resv(port, 1),
          store(dir, "vol"),
          fence(resv, id, o, with_store ? &store : nullptr) {}
    HostId id;
    HostPort port;
    Reservations resv;
    EpochStore store;
    Fence fence;
    /// Writes one block through this host's port.
    std::error_code write() { return port.submit(encode_rw(true, 1, 0, 1, 512), {}).error(); }
};

class FenceTest : public ::testing::Test {
protected:
    TempDir tmp;
    FakeTarget target;

    std::unique_ptr<Node> node(uint8_t n, FenceOptions o = {}) {
        if (o.node == 0) o.node = n;
        if (o.tag == 0) o.tag = kTag;
        return std::make_unique<Node>(target, n, tmp.path() + "/n" + std::to_string(n), o);
    }
    std::unique_ptr<Node> node_opts(uint8_t n, FenceOptions o) {
        return std::make_unique<Node>(target, n, tmp.path() + "/n" + std::to_string(n), o);
    }
    // The last command with @p op, or nullptr.
    const Command* last(uint8_t op) const {
        for (auto it = target.log.rbegin(); it != target.log.rend(); ++it)
            if (it->cmd.opcode == op && it->cmd.queue == Queue::io) return &it->cmd;
        return nullptr;
    }
    static uint64_t payload_key(const Command& c, size_t off) {
        return test::get_le64(c.payload.data() + off);
    }
    uint64_t key_of(const Node& n) const {
        const auto* r = target.find(n.id);
        return r ? r->key : 0;
    }
};

// ------------------------------------------------------------------- join

TEST_F(FenceTest, JoinRegistersAFreshKey) {
    auto a = node(1);
    auto o = a->fence.join(std::nullopt, false);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_TRUE(o->changed);
    EXPECT_EQ(o->key, key(1, 1));
    EXPECT_EQ(key_of(*a), key(1, 1));
    EXPECT_TRUE(o->before.registrants.empty());
    ASSERT_EQ(o->after.registrants.size(), 1u);
    EXPECT_FALSE(o->previous_holder);
    EXPECT_TRUE(o->removed.empty());
    EXPECT_EQ(*a->store.load(), 1u);
    const Command* reg = last(opcode::kResvRegister);
    ASSERT_NE(reg, nullptr);
    EXPECT_EQ(reg->cdw[0] & 7u, 0u) << "RREGA register";
    EXPECT_EQ(payload_key(*reg, 8), key(1, 1));
    ASSERT_TRUE(a->fence.last_report());
    EXPECT_EQ(a->fence.last_report()->registrants.size(), 1u);
}

TEST_F(FenceTest, JoinTakesAnEpochAboveEveryEpochOfItsTagOnTheDevice) {
    auto a = node(1);
    target.add(make_host(2), key(2, 41));
    target.add(make_host(3), key(8, 3, 900));        // another cluster's key
    target.add(make_host(4), 0x0000000000001234ull); // a foreign key
    auto o = a->fence.join(std::nullopt, false);
    ASSERT_TRUE(o);
    EXPECT_EQ(o->key, key(1, 42));
    EXPECT_EQ(*a->store.load(), 42u);
}

TEST_F(FenceTest, JoinTakesAnEpochAboveTheStore) {
    auto a = node(1);
    ASSERT_TRUE(a->store.raise_to(100));
    target.add(make_host(2), key(2, 41));
    auto o = a->fence.join(std::nullopt, false);
    ASSERT_TRUE(o);
    EXPECT_EQ(o->key, key(1, 101));
    EXPECT_EQ(*a->store.load(), 101u);
}

TEST_F(FenceTest, JoinWithoutAStoreUsesTheDeviceAlone) {
    auto a = std::make_unique<Node>(target, 1, tmp.path() + "/n1",
                                    FenceOptions{.tag = kTag, .node = 1}, false);
    target.add(make_host(2), key(2, 5));
    auto o = a->fence.join(std::nullopt, false);
    ASSERT_TRUE(o);
    EXPECT_EQ(o->key, key(1, 6));
    EXPECT_EQ(*a->store.load(), 0u) << "nothing persisted";
}

TEST_F(FenceTest, JoinWithAnExplicitEpoch) {
    auto a = node(1);
    auto o = a->fence.join(500, false);
    ASSERT_TRUE(o);
    EXPECT_EQ(o->key, key(1, 500));
    EXPECT_EQ(*a->store.load(), 500u);
}

TEST_F(FenceTest, JoinIsIdempotent) {
    auto a = node(1);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    const uint32_t gen = target.generation;
    const size_t regs = target.count(opcode::kResvRegister);
    auto o = a->fence.join(std::nullopt, false);
    ASSERT_TRUE(o);
    EXPECT_FALSE(o->changed);
    EXPECT_EQ(o->key, key(1, 1));
    EXPECT_EQ(target.count(opcode::kResvRegister), regs);
    EXPECT_EQ(target.generation, gen);
    // The same explicit epoch is the same registration.
    o = a->fence.join(1, false);
    ASSERT_TRUE(o);
    EXPECT_FALSE(o->changed);
}

TEST_F(FenceTest, JoinRefusesAHostIdBoundToAnotherKey) {
    auto a = node(1);
    for (uint64_t other : {key(2, 5), key(9, 1, 5), uint64_t{0x1234}}) {
        target.regs.clear();
        target.log.clear();
        target.add(a->id, other);
        auto o = a->fence.join(std::nullopt, false);
        ASSERT_FALSE(o) << format_key(other);
        EXPECT_EQ(o.error(), Errc::host_id_conflict) << format_key(other);
        EXPECT_EQ(target.state_commands(), 0u);
        EXPECT_EQ(key_of(*a), other) << "left as it was";
    }
}

TEST_F(FenceTest, JoinWithReplaceRekeysAboveEverything) {
    auto a = node(1);
    target.add(a->id, key(1, 5));
    target.add(make_host(2), key(2, 9));
    target.hold(a->id, ResvType::write_exclusive);
    auto o = a->fence.join(std::nullopt, true);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_TRUE(o->changed);
    EXPECT_EQ(o->key, key(1, 10));
    const Command* reg = last(opcode::kResvRegister);
    ASSERT_NE(reg, nullptr);
    EXPECT_EQ(reg->cdw[0] & 7u, 2u) << "RREGA replace";
    EXPECT_EQ(payload_key(*reg, 0), key(1, 5)) << "CRKEY is the old key";
    EXPECT_EQ(payload_key(*reg, 8), key(1, 10));
    EXPECT_TRUE(o->removed.empty()) << "this host's own key is replaced, not removed";
    EXPECT_EQ(o->replaced, key(1, 5));
    EXPECT_TRUE(target.is_holder(a->id)) << "replacing the key keeps the reservation";
    EXPECT_EQ(o->previous_holder, key(1, 5));
}

TEST_F(FenceTest, NodeZeroReusesTheRegisteredNode) {
    auto a = node_opts(1, {.tag = kTag, .node = 0});
    auto o = a->fence.join(std::nullopt, false);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::invalid_argument) << "no node and no registration to take it from";
    target.add(a->id, key(4, 3));
    o = a->fence.join(std::nullopt, true);
    ASSERT_TRUE(o);
    EXPECT_EQ(o->key, key(4, 4));
}

TEST_F(FenceTest, EpochIsPersistedBeforeTheKeyReachesTheDevice) {
    auto a = node(1);
    target.add(make_host(2), key(2, 30));
    std::vector<std::pair<uint64_t, uint32_t>> seen;  // (key sent, stored epoch then)
    target.fail = [&](const HostId& h, const Command& c) -> std::optional<std::error_code> {
        if (h == a->id && c.opcode == opcode::kResvRegister)
            seen.emplace_back(payload_key(c, 8), *a->store.load());
        return std::nullopt;
    };
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.join(std::nullopt, true));
    target.hold(make_host(2), ResvType::write_exclusive);
    ASSERT_TRUE(a->fence.takeover(std::nullopt));
    ASSERT_EQ(seen.size(), 3u);
    for (const auto& [k, stored] : seen) {
        auto f = decode_key(k);
        ASSERT_TRUE(f);
        EXPECT_EQ(stored, f->epoch) << format_key(k);
    }
    EXPECT_EQ(seen[0].first, key(1, 31));
    EXPECT_EQ(seen[1].first, key(1, 32));
    EXPECT_EQ(seen[2].first, key(1, 33));
}

TEST_F(FenceTest, NothingIsSentWhenTheStoreCannotBeUsed) {
    tmp.write("n1", "not a directory");
    auto a = node(1);
    auto o = a->fence.join(std::nullopt, false);
    ASSERT_FALSE(o);
    EXPECT_TRUE(is_state_error(o.error())) << o.error().message();
    EXPECT_EQ(o.error(), state_error(ENOTDIR)) << "the errno is kept";
    EXPECT_EQ(target.state_commands(), 0u);
    target.add(make_host(2), key(2, 1));
    target.hold(make_host(2), ResvType::write_exclusive);
    o = a->fence.takeover(std::nullopt);
    ASSERT_FALSE(o);
    EXPECT_TRUE(is_state_error(o.error())) << o.error().message();
    EXPECT_EQ(target.state_commands(), 0u);
    EXPECT_TRUE(target.is_holder(make_host(2)));
}

TEST_F(FenceTest, JoinFailsWhenEpochsAreExhausted) {
    auto a = node(1);
    ASSERT_TRUE(a->store.raise_to(kEpochCeiling));
    auto o = a->fence.join(std::nullopt, false);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::epoch_exhausted);
    EXPECT_EQ(target.state_commands(), 0u);
}

// Issue 24 item 7: kEpochCeiling is the first epoch nvfence never uses, so a
// key at it (a stray write to the election's counter, another tool) is
// implausible for every host, a fresh one (no floor) too: it neither raises
// the floor nor stops the host's start, and a takeover removes it.
TEST_F(FenceTest, AKeyAtTheCeilingNeitherRaisesAFreshHostsFloorNorStopsItsStart) {
    auto a = node(1);
    const HostId rogue = make_host(9);
    target.add(rogue, key(9, kEpochCeiling));
    target.hold(rogue, ResvType::write_exclusive);
    auto o = a->fence.join(std::nullopt, false);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_EQ(decode_key(o->key)->epoch, 1u);
    EXPECT_EQ(*a->store.load(), 1u) << "the floor is this host's own key, not the ceiling";
    ASSERT_EQ(a->fence.implausible_keys().size(), 1u);
    EXPECT_EQ(a->fence.implausible_keys()[0], key(9, kEpochCeiling));
    auto t = a->fence.takeover(std::nullopt);
    ASSERT_TRUE(t) << t.error().message();
    EXPECT_TRUE(target.is_holder(a->id));
    EXPECT_EQ(target.find(rogue), nullptr) << "the key at the ceiling was preempted";
}

// The last epoch nvfence uses is one below the ceiling; after it, key
// generation stops (docs/CONTRACTS.md says how to recover).
TEST_F(FenceTest, TheLastUsableEpochIsOneBelowTheCeiling) {
    auto a = node(1);
    ASSERT_TRUE(a->store.raise_to(kEpochCeiling - 2));
    auto o = a->fence.join(std::nullopt, false);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_EQ(decode_key(o->key)->epoch, kEpochCeiling - 1);
    auto again = a->fence.join(std::nullopt, true);
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error(), Errc::epoch_exhausted);
    EXPECT_EQ(key_of(*a), key(1, kEpochCeiling - 1)) << "nothing changed";
}

// Issue 13, defect 1: B and C preempt each other up to epoch 8; A reads a
// Report; the target loses every key; A's next key is still above 8.
TEST_F(FenceTest, EveryReportRaisesTheFloorSoEpochsNeverGoBackAfterStateLoss) {
    auto a = node(1), b = node(2), c = node(3);
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    ASSERT_TRUE(c->fence.join(std::nullopt, false));
    ASSERT_TRUE(b->fence.acquire());
    for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(c->fence.takeover(std::nullopt));
        ASSERT_TRUE(b->fence.join(std::nullopt, false));
        ASSERT_TRUE(b->fence.takeover(std::nullopt));
        ASSERT_TRUE(c->fence.join(std::nullopt, false));
    }
    const auto* h = target.find(b->id);
    ASSERT_NE(h, nullptr);
    const uint32_t holder_epoch = decode_key(h->key)->epoch;
    ASSERT_GE(holder_epoch, 8u);
    ASSERT_TRUE(a->fence.verify());  // what 'nvfence report' and every agent check do
    EXPECT_GE(*a->store.load(), holder_epoch);
    target.regs.clear();  // a target restart without PTPL
    target.type = ResvType::none;
    target.holder.reset();
    auto o = a->fence.join(std::nullopt, false);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_GT(decode_key(o->key)->epoch, holder_epoch);
}

// Issue 13, defect 3: one key with the largest epoch must not stop failover.
TEST_F(FenceTest, AKeyWithAnImplausibleEpochNeitherRaisesTheFloorNorStopsATakeover) {
    auto a = node(1);
    const HostId rogue = make_host(9);
    target.add(rogue, key(9, kMaxEpoch));
    target.hold(rogue, ResvType::write_exclusive);
    ASSERT_TRUE(a->fence.verify());
    EXPECT_EQ(*a->store.load(), 0u) << "the floor did not jump to the rogue epoch";
    ASSERT_EQ(a->fence.implausible_keys().size(), 1u);
    EXPECT_EQ(a->fence.implausible_keys()[0], key(9, kMaxEpoch));
    auto o = a->fence.takeover(std::nullopt);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_TRUE(target.is_holder(a->id));
    EXPECT_EQ(target.find(rogue), nullptr) << "the rogue key was preempted";
    EXPECT_EQ(decode_key(o->key)->epoch, 1u);
    // An epoch far above the floor (but below the ceiling) is just as implausible.
    target.add(rogue, key(9, 1u << 30));
    ASSERT_TRUE(a->fence.verify());
    EXPECT_EQ(*a->store.load(), 1u);
    EXPECT_EQ(a->fence.implausible_keys().size(), 1u);
    // A plausible jump raises it.
    target.add(make_host(8), key(8, 5000));
    ASSERT_TRUE(a->fence.verify());
    EXPECT_EQ(*a->store.load(), 5000u);
}

TEST_F(FenceTest, AnExplicitEpochIsBounded) {
    auto a = node(1);
    auto o = a->fence.join(kMaxEpoch, false);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::epoch_out_of_range);
    o = a->fence.join(kMaxEpochJump + 2, false);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::epoch_out_of_range);
    EXPECT_EQ(target.state_commands(), 0u);
    EXPECT_EQ(*a->store.load(), 0u);
    o = a->fence.join(kMaxEpochJump, false);
    ASSERT_TRUE(o) << o.error().message();
}

TEST_F(FenceTest, JoinVerifyFailsWhenTheDeviceLies) {
    auto a = node(1);
    target.swallow = [](const HostId&, const Command& c) { return c.opcode == opcode::kResvRegister; };
    auto o = a->fence.join(std::nullopt, false);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::verify_failed);
}

TEST_F(FenceTest, JoinPassesDeviceErrorsOn) {
    auto a = node(1);
    target.fail = [](const HostId&, const Command& c) -> std::optional<std::error_code> {
        if (c.opcode == opcode::kResvRegister) return make_nvme_error(0x4006);
        return std::nullopt;
    };
    auto o = a->fence.join(std::nullopt, false);
    ASSERT_FALSE(o);
    EXPECT_TRUE(is_nvme(o.error(), NvmeStatus::internal_error));
}

TEST_F(FenceTest, CptplOptionReachesRegister) {
    auto a = node(1, {.cptpl = Cptpl::set});
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    EXPECT_EQ(last(opcode::kResvRegister)->cdw[0] >> 30, 3u);
    EXPECT_TRUE(target.ptpl);
}

TEST_F(FenceTest, SetCptplChangesTheNextRegister) {
    auto a = node(1);
    a->fence.set_cptpl(Cptpl::set);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    EXPECT_EQ(last(opcode::kResvRegister)->cdw[0] >> 30, 3u);
    EXPECT_EQ(a->fence.options().cptpl, Cptpl::set);
    a->fence.set_cptpl(Cptpl::clear);
    ASSERT_TRUE(a->fence.join(std::nullopt, true));  // re-key: Register (replace)
    EXPECT_EQ(last(opcode::kResvRegister)->cdw[0] >> 30, 2u);
}

// ---------------------------------------------------------------- acquire

TEST_F(FenceTest, AcquireNeedsARegistration) {
    auto a = node(1);
    auto o = a->fence.acquire();
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::not_registered);
    EXPECT_EQ(target.state_commands(), 0u);
}

TEST_F(FenceTest, AcquireTakesAFreeReservationOnce) {
    auto a = node(1, {.type = ResvType::exclusive_access});
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    auto o = a->fence.acquire();
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_TRUE(o->changed);
    EXPECT_EQ(o->after.type, ResvType::exclusive_access);
    EXPECT_TRUE(target.is_holder(a->id));
    EXPECT_EQ(target.type, ResvType::exclusive_access);
    const Command* acq = last(opcode::kResvAcquire);
    ASSERT_NE(acq, nullptr);
    EXPECT_EQ(acq->cdw[0], 0x200u) << "acquire, EA";
    EXPECT_EQ(payload_key(*acq, 0), key(1, 1));

    const size_t n = target.count(opcode::kResvAcquire);
    o = a->fence.acquire();
    ASSERT_TRUE(o);
    EXPECT_FALSE(o->changed);
    EXPECT_EQ(target.count(opcode::kResvAcquire), n) << "already holder: nothing sent";
    EXPECT_EQ(o->previous_holder, key(1, 1));
}

TEST_F(FenceTest, AcquireHeldByOther) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    ASSERT_TRUE(b->fence.acquire());
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    auto o = a->fence.acquire();
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::held_by_other);
    EXPECT_EQ(exit_code_for(o.error()), ExitCode::conflict);
    ASSERT_TRUE(a->fence.last_report());
    ASSERT_NE(a->fence.last_report()->holder(), nullptr);
    EXPECT_EQ(a->fence.last_report()->holder()->key, key_of(*b)) << "who holds, for the message";
    EXPECT_TRUE(target.is_holder(b->id));
}

TEST_F(FenceTest, AcquireVerifyFailsWhenTheDeviceLies) {
    auto a = node(1);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    target.swallow = [](const HostId&, const Command& c) { return c.opcode == opcode::kResvAcquire; };
    auto o = a->fence.acquire();
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::verify_failed);
}

TEST_F(FenceTest, AcquireVerifyFailsWhenTheDeviceGrantsAnotherType) {
    auto a = node(1, {.type = ResvType::exclusive_access});
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    target.after = [&](const HostId&, const Command& c) {
        if (c.opcode == opcode::kResvAcquire) target.type = ResvType::write_exclusive;
    };
    auto o = a->fence.acquire();
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::verify_failed);
}

TEST_F(FenceTest, AcquireAfterBeingPreemptedIsNotRegistered) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    ASSERT_TRUE(b->fence.takeover(std::nullopt));
    // The preempted host gets no way back without a new registration.
    auto o = a->fence.acquire();
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::not_registered);
    EXPECT_TRUE(target.is_holder(b->id));
}

// --------------------------------------------------------------- takeover

TEST_F(FenceTest, TakeoverPreemptsAndAbortsTheHolder) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));  // epoch 1
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));  // epoch 2
    const uint64_t old_a = key_of(*a), old_b = key_of(*b);
    EXPECT_FALSE(a->write());

    auto o = b->fence.takeover(std::nullopt);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_TRUE(o->changed);
    EXPECT_EQ(o->key, key(2, 3)) << "a fresh epoch above every epoch on the device";
    EXPECT_EQ(o->previous_holder, old_a);
    EXPECT_NE(std::find(o->removed.begin(), o->removed.end(), old_a), o->removed.end());
    EXPECT_EQ(std::find(o->removed.begin(), o->removed.end(), old_b), o->removed.end())
        << "b's own old key was replaced, not removed";
    EXPECT_EQ(o->replaced, old_b);
    EXPECT_TRUE(target.is_holder(b->id));
    EXPECT_EQ(target.find(a->id), nullptr);
    EXPECT_EQ(o->after.holder()->key, key(2, 3));

    // Re-key first (replace), then preempt-and-abort with PRKEY = holder.
    const Command* reg = last(opcode::kResvRegister);
    EXPECT_EQ(reg->cdw[0] & 7u, 2u);
    EXPECT_EQ(payload_key(*reg, 0), old_b);
    const Command* acq = last(opcode::kResvAcquire);
    ASSERT_NE(acq, nullptr);
    EXPECT_EQ(acq->cdw[0], 0x102u) << "preempt and abort, WE";
    EXPECT_EQ(payload_key(*acq, 0), key(2, 3));
    EXPECT_EQ(payload_key(*acq, 8), old_a);
    ASSERT_EQ(target.aborted.size(), 1u);
    EXPECT_EQ(target.aborted[0], a->id);

    // The device now refuses the old holder, whatever it believes.
    EXPECT_TRUE(is_fenced(a->write()));
    EXPECT_FALSE(b->write());
}

TEST_F(FenceTest, TakeoverWithoutAbortUsesPlainPreempt) {
    auto a = node(1), b = node(2, {.abort = false});
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    auto o = b->fence.takeover(std::nullopt);
    ASSERT_TRUE(o);
    EXPECT_EQ(last(opcode::kResvAcquire)->cdw[0], 0x101u) << "preempt, WE";
    EXPECT_TRUE(target.aborted.empty());
    EXPECT_TRUE(target.is_holder(b->id));
}

TEST_F(FenceTest, TakeoverIsIdempotentWhenAlreadyHolder) {
    auto a = node(1);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    const size_t n = target.state_commands();
    const uint32_t gen = target.generation;
    auto o = a->fence.takeover(std::nullopt);
    ASSERT_TRUE(o);
    EXPECT_FALSE(o->changed);
    EXPECT_EQ(o->key, key(1, 1));
    EXPECT_EQ(target.state_commands(), n);
    EXPECT_EQ(target.generation, gen);
    EXPECT_EQ(*a->store.load(), 1u) << "no epoch spent";
}

TEST_F(FenceTest, TakeoverByAnUnregisteredHostRegistersFirst) {
    auto a = node(1), c = node(3);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    auto o = c->fence.takeover(std::nullopt);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_EQ(o->key, key(3, 2));
    EXPECT_EQ(last(opcode::kResvRegister)->cdw[0] & 7u, 0u) << "register, not replace";
    EXPECT_TRUE(target.is_holder(c->id));
    EXPECT_EQ(target.find(a->id), nullptr);
}

TEST_F(FenceTest, TakeoverOfAFreeReservationAcquiresIt) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    auto o = a->fence.takeover(std::nullopt);
    ASSERT_TRUE(o);
    EXPECT_FALSE(o->previous_holder);
    EXPECT_EQ(last(opcode::kResvAcquire)->cdw[0], 0x100u) << "acquire, WE";
    EXPECT_TRUE(target.is_holder(a->id));
    // Issue 13, defect 6: nobody held, so b may be a previous holder with
    // writes in flight: it was preempted-and-aborted before a acquired.
    EXPECT_EQ(target.find(b->id), nullptr);
    ASSERT_FALSE(target.aborted.empty());
    EXPECT_EQ(target.aborted.back(), b->id);
}

TEST_F(FenceTest, TakeoverOfAFreeSharedReservationKeepsTheOtherRegistrants) {
    auto a = node(1, FenceOptions{.type = ResvType::write_exclusive_reg_only});
    auto b = node(2, FenceOptions{.type = ResvType::write_exclusive_reg_only});
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.takeover(std::nullopt));
    EXPECT_NE(target.find(b->id), nullptr) << "registrants are the writers of a shared volume";
}

TEST_F(FenceTest, TakeoverOfADeadRegistrantThenTakesTheFreeReservation) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    auto o = a->fence.takeover(key_of(*b));
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_EQ(target.find(b->id), nullptr);
    EXPECT_TRUE(target.is_holder(a->id));
    EXPECT_EQ(target.type, ResvType::write_exclusive);
}

TEST_F(FenceTest, TakeoverRefusesToPreemptItself) {
    auto a = node(1);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    const size_t n = target.state_commands();
    auto o = a->fence.takeover(key_of(*a));
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::own_key);
    EXPECT_EQ(target.state_commands(), n);
    EXPECT_TRUE(target.is_holder(a->id));
}

// Issue 13, defect 10: a host preempted earlier that names a victim without
// a node is told it has no node, not that the victim is its own key.
TEST_F(FenceTest, APreemptedHostWithoutANodeIsNotToldTheVictimIsItsOwnKey) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    ASSERT_TRUE(b->fence.takeover(std::nullopt));
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(b->fence.takeover(key_of(*a)));  // a is preempted: not registered
    Fence nonode(a->resv, a->id, FenceOptions{.tag = kTag, .node = 0}, &a->store);
    auto o = nonode.takeover(key_of(*b));
    ASSERT_FALSE(o);
    EXPECT_NE(o.error(), Errc::own_key);
    EXPECT_EQ(o.error(), Errc::invalid_argument);
}

TEST_F(FenceTest, TakeoverWithTheHolderAsExplicitVictim) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    const uint64_t old_a = key_of(*a);
    auto o = b->fence.takeover(old_a);
    ASSERT_TRUE(o);
    EXPECT_EQ(payload_key(*last(opcode::kResvAcquire), 8), old_a);
    EXPECT_TRUE(target.is_holder(b->id));
}

TEST_F(FenceTest, TakeoverOfANonHolderVictimWhileAnotherHoldsIsHeldByOther) {
    auto a = node(1), b = node(2), c = node(3);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(c->fence.join(std::nullopt, false));
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    auto o = b->fence.takeover(key_of(*c));
    ASSERT_FALSE(o);
    // Nobody raced: the holder simply was not the victim.
    EXPECT_EQ(o.error(), Errc::held_by_other);
    EXPECT_EQ(target.find(c->id), nullptr);
    EXPECT_TRUE(target.is_holder(a->id));
}

TEST_F(FenceTest, TakeoverLostRaceAfterOurPreempt) {
    auto a = node(1), b = node(2), c = node(3);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    ASSERT_TRUE(c->fence.join(std::nullopt, false));
    const uint64_t kc = key_of(*c);
    // Right after b's preempt completes, c preempts b.
    target.after = [&](const HostId& h, const Command& cmd) {
        if (h != b->id || cmd.opcode != opcode::kResvAcquire) return;
        auto pre = encode_acquire({.nsid = 1, .action = AcquireAction::preempt_and_abort,
                                   .type = ResvType::write_exclusive, .iekey = false, .crkey = kc,
                                   .prkey = key_of(*b)});
        ASSERT_TRUE(c->port.submit(pre, {}));
    };
    auto o = b->fence.takeover(std::nullopt);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::lost_race);
    EXPECT_EQ(exit_code_for(o.error()), ExitCode::lost_race);
    EXPECT_TRUE(target.is_holder(c->id));
    ASSERT_TRUE(b->fence.last_report());
    EXPECT_EQ(b->fence.last_report()->holder()->key, kc) << "who holds now";
}

TEST_F(FenceTest, TakeoverLostRaceBeforeOurPreempt) {
    auto a = node(1), b = node(2), c = node(3);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    ASSERT_TRUE(c->fence.join(std::nullopt, false));
    const uint64_t kc = key_of(*c);
    // Just before b's preempt reaches the device, c takes over and evicts b.
    target.fail = [&](const HostId& h, const Command& cmd) -> std::optional<std::error_code> {
        if (h != b->id || cmd.opcode != opcode::kResvAcquire) return std::nullopt;
        const uint64_t ka = key_of(*a), kb = key_of(*b);
        EXPECT_TRUE(c->port.submit(encode_acquire({.nsid = 1, .action = AcquireAction::preempt_and_abort,
                                                   .type = ResvType::write_exclusive, .iekey = false,
                                                   .crkey = kc, .prkey = ka}), {}));
        EXPECT_TRUE(c->port.submit(encode_acquire({.nsid = 1, .action = AcquireAction::preempt_and_abort,
                                                   .type = ResvType::write_exclusive, .iekey = false,
                                                   .crkey = kc, .prkey = kb}), {}));
        return std::nullopt;
    };
    auto o = b->fence.takeover(std::nullopt);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::lost_race);
    EXPECT_TRUE(target.is_holder(c->id));
    EXPECT_EQ(target.find(b->id), nullptr);
}

// takeover_registered: a takeover of exactly the key the caller read.
TEST_F(FenceTest, TakeoverRegisteredTakesOverLikeTakeover) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    const uint64_t old_a = key_of(*a), old_b = key_of(*b);
    auto o = b->fence.takeover_registered(old_b, std::nullopt);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_EQ(o->key, key(2, 3));
    EXPECT_EQ(o->replaced, old_b);
    EXPECT_EQ(o->previous_holder, old_a);
    EXPECT_TRUE(target.is_holder(b->id));
    EXPECT_EQ(target.find(a->id), nullptr);
    EXPECT_EQ(last(opcode::kResvRegister)->cdw[0] & 7u, 2u) << "replace";
}

// nvfence-sim seed 39191188853768: the caller's key was preempted after it
// looked: nothing but the Report is sent, the host that preempted it holds.
TEST_F(FenceTest, TakeoverRegisteredOfAKeyThatIsGoneSendsNothing) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    const uint64_t old_a = key_of(*a);
    ASSERT_TRUE(b->fence.takeover(old_a));
    const uint64_t kb = key_of(*b);
    const size_t n = target.state_commands();
    auto o = a->fence.takeover_registered(old_a, std::nullopt);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::not_registered);
    EXPECT_EQ(target.state_commands(), n) << "no Register, no Acquire";
    EXPECT_TRUE(target.is_holder(b->id));
    EXPECT_EQ(target.find(a->id), nullptr);
    EXPECT_EQ(key_of(*b), kb);
    ASSERT_TRUE(a->fence.last_report());
    EXPECT_EQ(a->fence.last_report()->holder()->key, kb) << "who holds, for the message";
}

TEST_F(FenceTest, TakeoverRegisteredOfAReplacedKeySendsNothing) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    const uint64_t old_b = key_of(*b);
    ASSERT_TRUE(b->fence.join(std::nullopt, true));  // re-keyed since
    ASSERT_NE(key_of(*b), old_b);
    const size_t n = target.state_commands();
    auto o = b->fence.takeover_registered(old_b, std::nullopt);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::not_registered);
    EXPECT_EQ(target.state_commands(), n);
    EXPECT_TRUE(target.is_holder(a->id));
}

// Preempted after the Report, before the Register: the Register replaces
// exactly the key read, so the device refuses it; the host stays out.
TEST_F(FenceTest, TakeoverRegisteredPreemptedBeforeItsRegisterStaysOut) {
    auto a = node(1), b = node(2), c = node(3);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    ASSERT_TRUE(c->fence.join(std::nullopt, false));
    const uint64_t ka = key_of(*a), kb = key_of(*b), kc = key_of(*c);
    target.fail = [&](const HostId& h, const Command& cmd) -> std::optional<std::error_code> {
        if (h != b->id || cmd.opcode != opcode::kResvRegister) return std::nullopt;
        for (uint64_t victim : {ka, kb})
            EXPECT_TRUE(c->port.submit(encode_acquire({.nsid = 1, .action = AcquireAction::preempt_and_abort,
                                                       .type = ResvType::write_exclusive, .iekey = false,
                                                       .crkey = kc, .prkey = victim}), {}));
        return std::nullopt;
    };
    const size_t acquires = target.count(opcode::kResvAcquire);
    auto o = b->fence.takeover_registered(kb, std::nullopt);
    ASSERT_FALSE(o);
    EXPECT_TRUE(target.is_holder(c->id));
    EXPECT_EQ(target.find(b->id), nullptr) << "b is not registered again";
    EXPECT_EQ(target.count(opcode::kResvAcquire), acquires + 2) << "only c's two preempts";
}

TEST_F(FenceTest, TakeoverOfAnAllRegistrantsReservationByANewHost) {
    auto a = node(1), b = node(2), c = node(3);
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    ASSERT_TRUE(c->fence.join(std::nullopt, false));
    target.hold(b->id, ResvType::write_exclusive_all_regs);
    auto o = a->fence.takeover(std::nullopt);
    ASSERT_TRUE(o) << o.error().message();
    // PRKEY 0 preempts every other registrant of an all-registrants type.
    EXPECT_EQ(payload_key(*last(opcode::kResvAcquire), 8), 0u);
    EXPECT_TRUE(target.is_holder(a->id));
    EXPECT_EQ(target.type, ResvType::write_exclusive);
    EXPECT_EQ(target.regs.size(), 1u);
}

TEST_F(FenceTest, TakeoverOfAnAllRegistrantsReservationByARegistrant) {
    // Registered under WEAR this host is itself a holder, but not of the
    // type it wants and not alone: it must still preempt the others.
    auto a = node(1), b = node(2);
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    target.hold(b->id, ResvType::write_exclusive_all_regs);
    auto o = a->fence.takeover(std::nullopt);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_TRUE(target.is_holder(a->id));
    EXPECT_EQ(target.type, ResvType::write_exclusive);
    EXPECT_EQ(target.find(b->id), nullptr);
    EXPECT_TRUE(is_fenced(b->write()));
}

TEST_F(FenceTest, TakeoverChangesTheTypeOfOwnReservation) {
    auto a = node(1, {.type = ResvType::exclusive_access});
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    auto a2 = node(1, {.type = ResvType::write_exclusive});
    auto o = a2->fence.takeover(std::nullopt);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_EQ(target.type, ResvType::write_exclusive);
    EXPECT_TRUE(target.is_holder(a->id));
    // Preempting its own (new) key changes the type; nothing is aborted.
    const Command* acq = last(opcode::kResvAcquire);
    EXPECT_EQ(acq->cdw[0], 0x101u) << "preempt (no abort), WE";
    EXPECT_EQ(payload_key(*acq, 8), o->key);
    EXPECT_EQ(o->key, key(1, 2));
    EXPECT_TRUE(target.aborted.empty());
}

TEST_F(FenceTest, TakeoverVerifyFailsWhenTheDeviceLies) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    // The preempt claims success and changes nothing: a still holds, and
    // the Report says so.
    target.swallow = [](const HostId&, const Command& c) { return c.opcode == opcode::kResvAcquire; };
    auto o = b->fence.takeover(std::nullopt);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::verify_failed) << o.error().message();
    EXPECT_TRUE(target.is_holder(a->id));
}

TEST_F(FenceTest, TakeoverVerifyFailsWhenTheTypeIsNotTheOneAsked) {
    auto a = node(1, {.type = ResvType::exclusive_access});
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    // The device grants a different type than asked.
    target.after = [&](const HostId&, const Command& c) {
        if (c.opcode == opcode::kResvAcquire) target.type = ResvType::write_exclusive;
    };
    auto o = a->fence.takeover(std::nullopt);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::verify_failed);
}

// --------------------------------------------------------- release / leave

TEST_F(FenceTest, ReleaseIsIdempotent) {
    auto a = node(1, {.type = ResvType::exclusive_access_reg_only});
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    auto o = a->fence.release();
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_TRUE(o->changed);
    EXPECT_EQ(o->previous_holder, key(1, 1));
    EXPECT_EQ(target.type, ResvType::none);
    EXPECT_NE(target.find(a->id), nullptr) << "still registered";
    EXPECT_EQ(last(opcode::kResvRelease)->cdw[0], 0x400u) << "release, EARO";
    const size_t n = target.state_commands();
    o = a->fence.release();
    ASSERT_TRUE(o);
    EXPECT_FALSE(o->changed);
    EXPECT_EQ(target.state_commands(), n);
    // Not even registered, nothing held: still fine.
    auto b = node(2);
    o = b->fence.release();
    ASSERT_TRUE(o);
    EXPECT_FALSE(o->changed);
}

TEST_F(FenceTest, ReleaseUsesTheTypeHeldNotTheConfiguredOne) {
    auto a = node(1, {.type = ResvType::exclusive_access});
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    auto a2 = node(1, {.type = ResvType::write_exclusive});
    auto o = a2->fence.release();
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_EQ(target.type, ResvType::none);
}

TEST_F(FenceTest, ReleaseWhenAnotherHoldsIsNotHolder) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    ASSERT_TRUE(b->fence.acquire());
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    auto o = a->fence.release();
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::not_holder);
    EXPECT_TRUE(target.is_holder(b->id));
}

TEST_F(FenceTest, ReleaseVerifyFailsWhenTheDeviceLies) {
    auto a = node(1);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    target.swallow = [](const HostId&, const Command& c) { return c.opcode == opcode::kResvRelease; };
    auto o = a->fence.release();
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::verify_failed);
}

TEST_F(FenceTest, LeaveUnregistersAndReleases) {
    auto a = node(1);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    auto o = a->fence.leave();
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_TRUE(o->changed);
    EXPECT_EQ(o->key, 0u);
    EXPECT_EQ(o->removed, std::vector<uint64_t>{key(1, 1)});
    EXPECT_EQ(target.find(a->id), nullptr);
    EXPECT_EQ(target.type, ResvType::none);
    const Command* reg = last(opcode::kResvRegister);
    EXPECT_EQ(reg->cdw[0] & 7u, 1u) << "unregister";
    EXPECT_EQ(payload_key(*reg, 0), key(1, 1));
    // Again: nothing to do.
    const size_t n = target.state_commands();
    o = a->fence.leave();
    ASSERT_TRUE(o);
    EXPECT_FALSE(o->changed);
    EXPECT_EQ(target.state_commands(), n);
}

TEST_F(FenceTest, LeaveVerifyFailsWhenTheDeviceLies) {
    auto a = node(1);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    target.swallow = [](const HostId&, const Command& c) { return c.opcode == opcode::kResvRegister; };
    auto o = a->fence.leave();
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::verify_failed);
}

// ------------------------------------------------------------------ clear

TEST_F(FenceTest, ClearNeedsARegistration) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    auto o = a->fence.clear();
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::not_registered);
    EXPECT_EQ(target.regs.size(), 1u);
}

TEST_F(FenceTest, ClearRemovesEveryRegistrationAndTheReservation) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    ASSERT_TRUE(b->fence.acquire());
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    const uint64_t ka = key_of(*a), kb = key_of(*b);
    auto o = a->fence.clear();
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_TRUE(o->changed);
    EXPECT_EQ(o->previous_holder, kb);
    EXPECT_TRUE(target.regs.empty());
    EXPECT_EQ(target.type, ResvType::none);
    ASSERT_EQ(o->removed.size(), 2u);
    EXPECT_NE(std::find(o->removed.begin(), o->removed.end(), ka), o->removed.end());
    EXPECT_NE(std::find(o->removed.begin(), o->removed.end(), kb), o->removed.end());
    EXPECT_EQ(last(opcode::kResvRelease)->cdw[0] & 7u, 1u) << "clear";
}

TEST_F(FenceTest, ClearVerifyFailsWhenTheDeviceLies) {
    auto a = node(1);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    target.swallow = [](const HostId&, const Command& c) { return c.opcode == opcode::kResvRelease; };
    auto o = a->fence.clear();
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::verify_failed);
}

// ------------------------- release / leave / clear: a completion that is lost

// Makes the next command with @p op from @p n fail with @p ec; with @p ran,
// after it ran on the device (the completion was lost: a timed-out or
// interrupted passthrough, an I/O error from a reset).
void lose_completion(FakeTarget& t, Node& n, uint8_t op, std::error_code ec, bool ran) {
    auto armed = std::make_shared<bool>(true);
    t.fail = [&n, op, ec, ran, armed](const HostId& h, const Command& c) -> std::optional<std::error_code> {
        if (!*armed || h != n.id || c.opcode != op || c.queue != Queue::io) return std::nullopt;
        *armed = false;
        if (ran) (void)n.port.submit(c, {});  // inside a hook: no hook again
        return ec;
    };
}

std::error_code sys(int e) { return {e, std::system_category()}; }

TEST_F(FenceTest, ReleaseWhoseCompletionIsLostIsConfirmedByTheReport) {
    auto a = node(1);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    lose_completion(target, *a, opcode::kResvRelease, sys(ETIMEDOUT), true);
    auto o = a->fence.release();
    ASSERT_TRUE(o) << o.error().message();
    ASSERT_TRUE(o->completion_error);
    EXPECT_EQ(*o->completion_error, sys(ETIMEDOUT));
    EXPECT_TRUE(o->changed);
    EXPECT_EQ(o->key, key(1, 1));
    EXPECT_EQ(target.type, ResvType::none);
    // The log holds the command and its run inside the hook: nvfence sent it once.
    EXPECT_EQ(target.count(opcode::kResvRelease), 2u);
}

TEST_F(FenceTest, LeaveWhoseCompletionIsLostIsConfirmedByTheReport) {
    auto a = node(1);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    lose_completion(target, *a, opcode::kResvRegister, sys(EINTR), true);
    auto o = a->fence.leave();
    ASSERT_TRUE(o) << o.error().message();
    ASSERT_TRUE(o->completion_error);
    EXPECT_EQ(*o->completion_error, sys(EINTR));
    EXPECT_EQ(o->key, 0u);
    EXPECT_EQ(o->removed, std::vector<uint64_t>{key(1, 1)});
    EXPECT_EQ(target.find(a->id), nullptr);
    EXPECT_EQ(target.type, ResvType::none);
}

TEST_F(FenceTest, ClearWhoseCompletionIsLostIsConfirmedByTheReport) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    ASSERT_TRUE(b->fence.acquire());
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    lose_completion(target, *a, opcode::kResvRelease, sys(EIO), true);
    auto o = a->fence.clear();
    ASSERT_TRUE(o) << o.error().message();
    ASSERT_TRUE(o->completion_error);
    EXPECT_EQ(*o->completion_error, sys(EIO));
    EXPECT_EQ(o->removed.size(), 2u);
    EXPECT_TRUE(target.regs.empty());
    EXPECT_EQ(target.type, ResvType::none);
}

// The same errors with nothing done: the Report shows the old state, the
// error stands, and a re-run does the work.
TEST_F(FenceTest, ReleaseLeaveClearThatDidNotRunStillFail) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));

    lose_completion(target, *a, opcode::kResvRelease, sys(ETIMEDOUT), false);
    auto o = a->fence.release();
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), sys(ETIMEDOUT));
    EXPECT_TRUE(target.is_holder(a->id));

    lose_completion(target, *a, opcode::kResvRegister, sys(EIO), false);
    o = a->fence.leave();
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), sys(EIO));
    EXPECT_NE(target.find(a->id), nullptr);

    lose_completion(target, *a, opcode::kResvRelease, make_nvme_error(0x370), false);
    o = a->fence.clear();
    ASSERT_FALSE(o);
    EXPECT_TRUE(is_nvme(o.error(), NvmeStatus::host_pathing_error));
    EXPECT_EQ(target.regs.size(), 2u);
    EXPECT_TRUE(target.is_holder(a->id));

    target.fail = nullptr;
    o = a->fence.clear();
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_FALSE(o->completion_error);
    EXPECT_TRUE(target.regs.empty());
}

// An error that proves nothing ran (not path-related, not a conflict, not a
// lost passthrough) is passed on without a Report.
TEST_F(FenceTest, ReleaseLeaveClearPassOtherDeviceErrorsOnUnchecked) {
    auto a = node(1);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    target.fail = [](const HostId&, const Command& c) -> std::optional<std::error_code> {
        if (c.opcode == opcode::kResvRelease || c.opcode == opcode::kResvRegister)
            return make_nvme_error(0x6);  // Internal Error
        return std::nullopt;
    };
    for (int i = 0; i < 3; ++i) {
        auto o = i == 0 ? a->fence.release() : i == 1 ? a->fence.leave() : a->fence.clear();
        ASSERT_FALSE(o);
        EXPECT_TRUE(is_nvme(o.error(), NvmeStatus::internal_error));
        EXPECT_NE(target.log.back().cmd.opcode, opcode::kResvReport) << "no Report after it (" << i << ")";
    }
    EXPECT_TRUE(target.is_holder(a->id));
}

// ------------------------------------------------------- verify / epochs

TEST_F(FenceTest, VerifyRemembersTheLastReport) {
    auto a = node(1);
    EXPECT_FALSE(a->fence.last_report());
    target.add(make_host(2), key(2, 3));
    auto st = a->fence.verify();
    ASSERT_TRUE(st);
    ASSERT_TRUE(a->fence.last_report());
    EXPECT_EQ(a->fence.last_report()->registrants.size(), 1u);
    EXPECT_EQ(a->fence.mine(*st), nullptr);
    target.fail = [](const HostId&, const Command&) -> std::optional<std::error_code> {
        return errno_error(EIO);
    };
    EXPECT_FALSE(a->fence.verify());
    EXPECT_EQ(a->fence.last_report()->registrants.size(), 1u) << "kept on failure";
}

TEST_F(FenceTest, NextEpochCountsOnlyOurTagAndTheStore) {
    auto a = node(1);
    ReservationStatus st;
    st.registrants.push_back({.cntlid = 1, .holder = false, .key = key(2, 10), .host_id = {}});
    st.registrants.push_back({.cntlid = 2, .holder = false, .key = key(3, 7, 1000), .host_id = {}});
    st.registrants.push_back({.cntlid = 3, .holder = false, .key = 0xf500000000001000ull, .host_id = {}});
    EXPECT_EQ(*a->fence.next_epoch(st), 11u);
    ASSERT_TRUE(a->store.raise_to(20));
    EXPECT_EQ(*a->fence.next_epoch(st), 21u);
    EXPECT_EQ(*a->fence.next_epoch({}), 21u);
}


// ------------------------------------------- takeover with a token (issue 24)
// An elected host's takeover: the key's epoch is the token, every command
// follows the Report the election decided on, the holder read is preempted
// by compare-and-swap, nobody holding is a plain Acquire, standbys stay.

class TokenTakeoverTest : public FenceTest {
protected:
    ReservationStatus seen(Node& n) {
        auto st = n.fence.verify();
        EXPECT_TRUE(st) << st.error().message();
        return st ? *st : ReservationStatus{};
    }
    size_t commands_of(const Node& n, uint8_t op) const {
        size_t c = 0;
        for (const auto& s : target.log) c += s.host == n.id && s.cmd.opcode == op;
        return c;
    }
};

TEST_F(TokenTakeoverTest, AFreeReservationIsAPlainAcquireAndTheStandbyStays) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(b->fence.join(std::nullopt, false));  // a standby, epoch 1
    auto o = a->fence.takeover_with_token(seen(*a), 5);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_TRUE(o->changed);
    EXPECT_EQ(o->key, key(1, 5)) << "the key's epoch is the token, not the device's max + 1";
    EXPECT_TRUE(target.is_holder(a->id));
    EXPECT_EQ(last(opcode::kResvAcquire)->cdw[0], 0x100u) << "a plain Acquire, WE";
    EXPECT_EQ(key_of(*b), key(2, 1)) << "the standby stays registered: the next election's candidate";
    EXPECT_TRUE(target.aborted.empty());
    EXPECT_EQ(*a->store.load(), 5u) << "the token was persisted";
}

TEST_F(TokenTakeoverTest, TheHolderReadIsPreemptedAndAbortedAndOnlyIt) {
    auto a = node(1), b = node(2), c = node(3);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    ASSERT_TRUE(c->fence.join(std::nullopt, false));
    const uint64_t ka = key_of(*a), kb = key_of(*b);
    auto o = c->fence.takeover_with_token(seen(*c), 7);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_EQ(o->key, key(3, 7));
    EXPECT_EQ(o->previous_holder, ka);
    const Command* acq = last(opcode::kResvAcquire);
    EXPECT_EQ(acq->cdw[0], 0x102u) << "preempt and abort, WE";
    EXPECT_EQ(payload_key(*acq, 8), ka) << "exactly the key read";
    EXPECT_EQ(target.find(a->id), nullptr);
    EXPECT_EQ(key_of(*b), kb) << "the standby stays";
    ASSERT_EQ(target.aborted.size(), 1u);
    EXPECT_EQ(target.aborted[0], a->id);
    EXPECT_TRUE(is_fenced(a->write()));
}

// Issue 24 defect 1: a winner whose takeover stalls after its Report must
// not fence the leader elected after it.
TEST_F(TokenTakeoverTest, AStaleWinnerNeverPreemptsTheLeaderElectedAfterIt) {
    auto a = node(1), b = node(2), c = node(3);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    ASSERT_TRUE(c->fence.join(std::nullopt, false));
    const ReservationStatus b_saw = seen(*b);  // b won token 5, then stalled
    ASSERT_TRUE(c->fence.takeover_with_token(seen(*c), 6));
    auto o = b->fence.takeover_with_token(b_saw, 5);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::lost_race);
    EXPECT_TRUE(target.is_holder(c->id));
    EXPECT_EQ(key_of(*c), key(3, 6)) << "the newer leader keeps its key";
    EXPECT_EQ(target.aborted.size(), 1u) << "only a was aborted, by c";
}

TEST_F(TokenTakeoverTest, NobodyHoldingInTheReportNeverMeansPreemptingWhoeverHoldsNow) {
    auto b = node(2), c = node(3);
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    ASSERT_TRUE(c->fence.join(std::nullopt, false));
    const ReservationStatus b_saw = seen(*b);  // nobody holds
    ASSERT_TRUE(c->fence.takeover_with_token(seen(*c), 6));
    auto o = b->fence.takeover_with_token(b_saw, 5);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::lost_race);
    EXPECT_TRUE(target.is_holder(c->id));
    EXPECT_TRUE(target.aborted.empty()) << "nothing was preempted";
    EXPECT_EQ(last(opcode::kResvAcquire)->cdw[0], 0x100u) << "b sent a plain Acquire, which the device refused";
}

// A token far above every epoch seen (the device's keys of the tag and
// this host's floor), as one stray write to the election's counter makes
// it: refused with the bound the device path uses (kMaxEpochJump), before
// anything is stored or sent, so it cannot exhaust the epochs.
TEST_F(TokenTakeoverTest, ATokenFarAboveEveryEpochSeenIsRefusedAsImplausible) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(b->fence.join(std::nullopt, false));  // epoch 1 on the device
    ASSERT_TRUE(a->store.raise_to(3));
    const size_t sent = target.log.size();
    auto o = a->fence.takeover_with_token(seen(*a), 3 + kMaxEpochJump + 1);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::epoch_out_of_range);
    EXPECT_EQ(*a->store.load(), 3u) << "nothing stored";
    EXPECT_EQ(target.log.size(), sent + 1) << "only the Report was sent";
    EXPECT_EQ(a->fence.takeover_with_token(seen(*a), kEpochCeiling - 1).error(), Errc::epoch_out_of_range);
    // At the bound it is a token like any other.
    auto ok = a->fence.takeover_with_token(seen(*a), 3 + kMaxEpochJump);
    ASSERT_TRUE(ok) << ok.error().message();
    EXPECT_EQ(*a->store.load(), 3 + kMaxEpochJump);
}

// Issue 24 defect 2: a re-win re-keys to the new token.
TEST_F(TokenTakeoverTest, AHolderReKeysToItsNewTokenAndKeepsTheReservation) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(a->fence.join(3, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));  // epoch 4
    const size_t acquires = commands_of(*a, opcode::kResvAcquire);
    auto o = a->fence.takeover_with_token(seen(*a), 5);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_EQ(o->key, key(1, 5));
    EXPECT_EQ(o->replaced, key(1, 3));
    EXPECT_TRUE(target.is_holder(a->id));
    EXPECT_EQ(commands_of(*a, opcode::kResvAcquire), acquires) << "the reservation follows the key: no Acquire";
    // A stale token 4 can no longer preempt a: its Report shows epoch 5.
    auto stale = b->fence.takeover_with_token(seen(*b), 4);
    ASSERT_FALSE(stale);
    EXPECT_EQ(stale.error(), Errc::lost_race);
    EXPECT_TRUE(target.is_holder(a->id));
}

TEST_F(TokenTakeoverTest, ARegistrantAtOrAboveTheTokenStopsItBeforeAnyCommand) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(b->fence.join(6, false));
    for (uint32_t token : {5u, 6u}) {
        const ReservationStatus st = seen(*a);
        const size_t sent = target.log.size();
        auto o = a->fence.takeover_with_token(st, token);
        ASSERT_FALSE(o) << token;
        EXPECT_EQ(o.error(), Errc::lost_race);
        EXPECT_EQ(target.log.size(), sent) << "nothing sent for token " << token;
    }
}

// may_act is asked before the Register and before the Acquire; a no ends
// the takeover there with Errc::timeout.
TEST_F(TokenTakeoverTest, MayActIsAskedBeforeEachCommandThatChangesTheReservation) {
    auto a = node(1);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    const size_t registers = commands_of(*a, opcode::kResvRegister);
    int asked = 0;
    auto o = a->fence.takeover_with_token(seen(*a), 5, [&] { return ++asked == 1; });  // yes, then no
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::timeout);
    EXPECT_EQ(asked, 2);
    EXPECT_EQ(commands_of(*a, opcode::kResvRegister), registers + 1) << "the Register went out";
    EXPECT_EQ(commands_of(*a, opcode::kResvAcquire), 0u) << "no Acquire after a no";
    EXPECT_FALSE(target.is_holder(a->id));
    auto b = node(2);
    const size_t b_registers = commands_of(*b, opcode::kResvRegister);
    auto n = b->fence.takeover_with_token(seen(*b), 6, [] { return false; });
    ASSERT_FALSE(n);
    EXPECT_EQ(n.error(), Errc::timeout);
    EXPECT_EQ(commands_of(*b, opcode::kResvRegister), b_registers) << "nothing sent";
    auto y = a->fence.takeover_with_token(seen(*a), 7, [] { return true; });
    ASSERT_TRUE(y) << y.error().message();
    EXPECT_TRUE(target.is_holder(a->id));
}

TEST_F(TokenTakeoverTest, ATokenAtOrBelowTheStoresFloorIsRefused) {
    auto a = node(1);
    ASSERT_TRUE(a->store.raise_to(9));
    auto o = a->fence.takeover_with_token(seen(*a), 9);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::lost_race);
    EXPECT_EQ(target.find(a->id), nullptr);
}

TEST_F(TokenTakeoverTest, ATokenOutsideTheEpochsIsRefusedAndNeverStored) {
    auto a = node(1);
    for (uint32_t token : {0u, kEpochCeiling, kEpochCeiling + 1, 0xffffffffu}) {
        auto o = a->fence.takeover_with_token(seen(*a), token);
        ASSERT_FALSE(o) << token;
        EXPECT_EQ(o.error(), Errc::epoch_out_of_range);
        EXPECT_EQ(*a->store.load(), 0u) << "never stored: " << token;
    }
    EXPECT_TRUE(a->fence.takeover_with_token(seen(*a), kEpochCeiling - 1)) << "the last usable token";
}

// Issue 24 item 7: a key at or above the ceiling (a rogue holder) never
// stops the next failover: the token's takeover preempts it by compare-and-
// swap like any holder, and it does not count as a key above the token.
TEST_F(TokenTakeoverTest, AKeyAtOrAboveTheCeilingDoesNotStopTheNextFailover) {
    auto a = node(1);
    const HostId rogue = make_host(9);
    for (uint32_t epoch : {kEpochCeiling, kMaxEpoch}) {
        target.add(rogue, key(9, epoch));
        target.hold(rogue, ResvType::write_exclusive);
        const uint32_t token = epoch == kEpochCeiling ? 7 : 8;
        auto o = a->fence.takeover_with_token(seen(*a), token);
        ASSERT_TRUE(o) << epoch << ": " << o.error().message();
        EXPECT_EQ(o->key, key(1, token));
        EXPECT_TRUE(target.is_holder(a->id));
        EXPECT_EQ(target.find(rogue), nullptr) << "preempted: " << epoch;
        EXPECT_EQ(*a->store.load(), token) << "the rogue epoch never reached the floor";
    }
}

TEST_F(TokenTakeoverTest, ARetryOfTheTermChangesNothingAndFinishesAHalfDoneOne) {
    auto a = node(1);
    // The Acquire is lost: registered with the token's key, not holding.
    target.fail = [&](const HostId&, const Command& c) -> std::optional<std::error_code> {
        if (c.opcode == opcode::kResvAcquire) return errno_error(EIO);
        return std::nullopt;
    };
    ASSERT_FALSE(a->fence.takeover_with_token(seen(*a), 5));
    EXPECT_EQ(key_of(*a), key(1, 5));
    target.fail = nullptr;
    auto again = a->fence.takeover_with_token(seen(*a), 5);
    ASSERT_TRUE(again) << again.error().message();
    EXPECT_TRUE(target.is_holder(a->id));
    const size_t sent = target.log.size();
    auto third = a->fence.takeover_with_token(seen(*a), 5);
    ASSERT_TRUE(third);
    EXPECT_FALSE(third->changed);
    EXPECT_EQ(target.log.size(), sent + 1) << "only the Report";
}

// ------------------------------------------------------------- evict_node

// The Acquire @p c preempts (and aborts, @p abort) @p prkey with @p crkey
// under Write Exclusive, bit for bit.
void expect_preempt(const Command& c, uint64_t crkey, uint64_t prkey, bool abort = true) {
    EXPECT_EQ(c.cdw[0], abort ? 0x102u : 0x101u) << "RACQA preempt(-and-abort), RTYPE WE";
    EXPECT_EQ(test::get_le64(c.payload.data()), crkey);
    EXPECT_EQ(test::get_le64(c.payload.data() + 8), prkey);
}

// The commands @p h sent with opcode @p op, in order.
std::vector<Command> sent_by(const FakeTarget& t, const HostId& h, uint8_t op) {
    std::vector<Command> out;
    for (const auto& s : t.log)
        if (s.host == h && s.cmd.opcode == op && s.cmd.queue == Queue::io) out.push_back(s.cmd);
    return out;
}

TEST_F(FenceTest, EvictNodeRemovesEveryKeyOfTheNodeWithTheRegisteredKeyAndKeepsAThirdHolder) {
    auto a = node(1), b = node(2), c = node(3);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));  // epoch 1
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));  // epoch 2
    ASSERT_TRUE(c->fence.join(std::nullopt, false));  // epoch 3
    target.add(make_host(9), key(2, 41));  // node 2 through a second host id, a newer epoch
    const uint64_t kc = key_of(*c);
    const size_t regs_before = target.count(opcode::kResvRegister);

    auto o = c->fence.evict_node(2);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_TRUE(o->changed);
    EXPECT_EQ(o->removed, (std::vector<uint64_t>{key(2, 2), key(2, 41)}));
    EXPECT_EQ(o->key, kc) << "this host's key is unchanged: it does not take the reservation";
    EXPECT_FALSE(o->completion_error);
    EXPECT_EQ(target.count(opcode::kResvRegister), regs_before) << "nothing registered or re-keyed";
    const auto acq = sent_by(target, c->id, opcode::kResvAcquire);
    ASSERT_EQ(acq.size(), 2u);
    expect_preempt(acq[0], kc, key(2, 2));
    expect_preempt(acq[1], kc, key(2, 41));
    EXPECT_TRUE(target.is_holder(a->id)) << "a third holder keeps the reservation";
    EXPECT_NE(target.find(c->id), nullptr);
    EXPECT_TRUE(node_keys(o->after, kTag, 2).empty());
    EXPECT_TRUE(is_fenced(b->write()));
}

TEST_F(FenceTest, EvictNodeOfTheHolderTakesTheReservationWithTheFreshestKey) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));  // epoch 1
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));  // epoch 2: above every other epoch
    const size_t regs_before = target.count(opcode::kResvRegister);
    auto o = b->fence.evict_node(1);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_EQ(o->previous_holder, key(1, 1));
    EXPECT_EQ(o->removed, std::vector<uint64_t>{key(1, 1)});
    EXPECT_EQ(target.count(opcode::kResvRegister), regs_before) << "its epoch is the highest: no re-key";
    const auto acq = sent_by(target, b->id, opcode::kResvAcquire);
    ASSERT_EQ(acq.size(), 1u);
    expect_preempt(acq[0], key(2, 2), key(1, 1));
    EXPECT_TRUE(target.is_holder(b->id));
    EXPECT_EQ(target.type, ResvType::write_exclusive);
    ASSERT_EQ(target.aborted.size(), 1u);
    EXPECT_EQ(target.aborted[0], a->id);
}

TEST_F(FenceTest, EvictNodeReKeysAboveTheVictimBeforeTakingTheReservation) {
    auto b = node(2);
    target.add(make_host(1), key(1, 5));
    target.add(b->id, key(2, 3));
    target.hold(make_host(1), ResvType::write_exclusive);
    auto o = b->fence.evict_node(1);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_EQ(o->key, key(2, 6)) << "a fresh epoch above the victim's";
    EXPECT_EQ(o->replaced, key(2, 3));
    const Command* reg = last(opcode::kResvRegister);
    ASSERT_NE(reg, nullptr);
    EXPECT_EQ(reg->cdw[0] & 7u, 2u) << "RREGA replace: exactly its current key";
    EXPECT_EQ(payload_key(*reg, 0), key(2, 3));
    EXPECT_EQ(payload_key(*reg, 8), key(2, 6));
    const auto acq = sent_by(target, b->id, opcode::kResvAcquire);
    ASSERT_EQ(acq.size(), 1u);
    expect_preempt(acq[0], key(2, 6), key(1, 5));
    EXPECT_TRUE(target.is_holder(b->id));
    EXPECT_EQ(*b->store.load(), 6u);
}

TEST_F(FenceTest, EvictNodeTakesAFreeReservation) {
    auto a = node(1, {.abort = false});
    target.add(a->id, key(1, 1));
    target.add(make_host(2), key(2, 2));  // nobody holds: under Write Exclusive everyone writes
    auto o = a->fence.evict_node(2);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_EQ(o->key, key(1, 3));
    const auto acq = sent_by(target, a->id, opcode::kResvAcquire);
    ASSERT_EQ(acq.size(), 2u);
    expect_preempt(acq[0], key(1, 3), key(2, 2), false);
    EXPECT_EQ(acq[1].cdw[0], 0x100u) << "Acquire, WE";
    EXPECT_EQ(test::get_le64(acq[1].payload.data()), key(1, 3));
    EXPECT_TRUE(target.is_holder(a->id));
    EXPECT_TRUE(target.aborted.empty()) << "--no-abort: plain preempt";
}

TEST_F(FenceTest, EvictNodeNeverRegistersThisHost) {
    auto a = node(1), c = node(3);
    target.add(a->id, key(1, 1));
    target.add(make_host(2), key(2, 2));
    target.hold(a->id, ResvType::write_exclusive);
    const size_t before = target.state_commands();
    auto o = c->fence.evict_node(2);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::not_registered);
    EXPECT_EQ(target.state_commands(), before) << "nothing sent";
    EXPECT_EQ(target.find(c->id), nullptr);
    EXPECT_NE(target.find(make_host(2)), nullptr);
}

TEST_F(FenceTest, EvictNodePreemptedBeforeItsReKeyDoesNotRegisterAgain) {
    auto b = node(2);
    target.add(make_host(1), key(1, 5));
    target.add(b->id, key(2, 3));
    target.hold(make_host(1), ResvType::write_exclusive);
    HostPort p1(target, make_host(1));
    Reservations r1(p1, 1);
    target.fail = [&](const HostId& h, const Command& cmd) -> std::optional<std::error_code> {
        if (h == b->id && cmd.opcode == opcode::kResvRegister) {
            AcquireArgs p;  // the holder fences b first
            p.action = AcquireAction::preempt_and_abort;
            p.crkey = key(1, 5);
            p.prkey = key(2, 3);
            EXPECT_TRUE(r1.acquire(p).ok());
        }
        return std::nullopt;
    };
    auto o = b->fence.evict_node(1);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::not_registered);
    EXPECT_EQ(target.find(b->id), nullptr) << "the Register replaces exactly its key: refused";
    EXPECT_EQ(target.count(opcode::kResvAcquire), 1u) << "only the holder's preempt";
    EXPECT_TRUE(target.is_holder(make_host(1)));
}

TEST_F(FenceTest, EvictNodeRefusesItsOwnNode) {
    auto a = node(1);
    auto z = node_opts(4, {.tag = kTag});  // no node in the options: the one of its key
    target.add(a->id, key(1, 1));
    target.add(z->id, key(4, 2));
    target.hold(a->id, ResvType::write_exclusive);
    const size_t before = target.state_commands();
    auto o = a->fence.evict_node(1);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::own_key);
    o = z->fence.evict_node(4);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::own_key);
    EXPECT_EQ(target.state_commands(), before);
}

TEST_F(FenceTest, EvictNodeOfANodeWithoutKey) {
    auto a = node(1), b = node(2, {.tag = kTag, .node = 2});
    target.add(a->id, key(1, 1));
    target.add(b->id, key(2, 2));
    const size_t before = target.state_commands();
    // Nobody holds: a failed compare, or (fence) take the reservation.
    auto o = a->fence.evict_node(5, EvictAbsent::compare);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::invalid_key);
    EXPECT_EQ(target.state_commands(), before);
    o = a->fence.evict_node(5);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_TRUE(o->changed);
    EXPECT_TRUE(target.is_holder(a->id));
    EXPECT_EQ(o->key, key(1, 3));
    EXPECT_TRUE(o->removed.empty());
    // Held: nothing to do for the holder; another host's failed compare.
    const size_t held = target.state_commands();
    o = a->fence.evict_node(5, EvictAbsent::compare);
    ASSERT_TRUE(o);
    EXPECT_FALSE(o->changed);
    o = b->fence.evict_node(5, EvictAbsent::compare);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::lost_race);
    o = b->fence.evict_node(5);
    ASSERT_TRUE(o);
    EXPECT_FALSE(o->changed) << "fenced already";
    EXPECT_EQ(target.state_commands(), held);
}

TEST_F(FenceTest, EvictNodeWhoseCompletionIsLostIsConfirmedByTheReport) {
    auto a = node(1), b = node(2);
    target.add(a->id, key(1, 1));
    target.add(b->id, key(2, 2));
    target.hold(a->id, ResvType::write_exclusive);
    lose_completion(target, *a, opcode::kResvAcquire, sys(ETIMEDOUT), true);
    auto o = a->fence.evict_node(2);
    ASSERT_TRUE(o) << o.error().message();
    ASSERT_TRUE(o->completion_error);
    EXPECT_EQ(*o->completion_error, sys(ETIMEDOUT));
    EXPECT_EQ(o->removed, std::vector<uint64_t>{key(2, 2)});
    // Lost, and it did not run: the next round sends it again.
    target.add(b->id, key(2, 3));
    lose_completion(target, *a, opcode::kResvAcquire, sys(EIO), false);
    o = a->fence.evict_node(2);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_FALSE(o->completion_error) << "the second round's preempt completed";
    EXPECT_EQ(target.find(b->id), nullptr);
    // An error that proves nothing ran ends it.
    target.add(b->id, key(2, 4));
    lose_completion(target, *a, opcode::kResvAcquire, test::nvme_err(NvmeStatus::invalid_field), false);
    o = a->fence.evict_node(2);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), test::nvme_err(NvmeStatus::invalid_field));
}

TEST_F(FenceTest, EvictNodeLosingToAnotherFencerIsSuccess) {
    auto a = node(1), c = node(3);
    target.add(a->id, key(1, 1));
    target.add(make_host(2), key(2, 2));
    target.add(c->id, key(3, 3));
    target.hold(a->id, ResvType::write_exclusive);
    bool raced = false;
    target.fail = [&](const HostId& h, const Command& cmd) -> std::optional<std::error_code> {
        if (!raced && h == a->id && cmd.opcode == opcode::kResvAcquire) {
            raced = true;
            AcquireArgs p;
            p.action = AcquireAction::preempt_and_abort;
            p.crkey = key(3, 3);
            p.prkey = key(2, 2);
            EXPECT_TRUE(c->resv.acquire(p).ok());  // c fences node 2 first
        }
        return std::nullopt;
    };
    auto o = a->fence.evict_node(2);
    ASSERT_TRUE(o) << o.error().message();
    ASSERT_TRUE(o->completion_error);
    EXPECT_TRUE(is_nvme(*o->completion_error, NvmeStatus::reservation_conflict));
    EXPECT_TRUE(target.is_holder(a->id));
}

TEST_F(FenceTest, EvictNodeRetriesAVictimThatRegistersAgainABoundedNumberOfTimes) {
    auto a = node(1);
    target.add(a->id, key(1, 1));
    target.add(make_host(2), key(2, 2));
    target.hold(a->id, ResvType::write_exclusive);
    HostPort p2(target, make_host(2));
    Reservations r2(p2, 1);
    uint32_t epoch = 10;
    int again = 0, limit = 1;
    target.after = [&](const HostId& h, const Command& cmd) {
        if (again < limit && h == a->id && cmd.opcode == opcode::kResvAcquire) {
            ++again;  // node 2 registers again before a verifies
            RegisterArgs r;
            r.nrkey = key(2, epoch++);
            EXPECT_TRUE(r2.reg(r).ok());
        }
    };
    auto o = a->fence.evict_node(2);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_EQ(target.count(opcode::kResvAcquire), 2u);
    EXPECT_EQ(target.find(make_host(2)), nullptr);
    // Always back: kEvictRounds preempts, then a failure.
    target.add(make_host(2), key(2, 20));
    again = 0;
    limit = 100;
    o = a->fence.evict_node(2);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::verify_failed);
    EXPECT_EQ(target.count(opcode::kResvAcquire), 2u + kEvictRounds);
}

}  // namespace
}  // namespace nvfence
