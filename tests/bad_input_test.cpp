// SPDX-License-Identifier: MIT
// Bad input of issue 7 that the library must handle without a device: a
// --victim that matches no registrant (a failed compare-and-swap sends
// nothing), preempting with this host's own key, a Report buffer too small
// for every registrant, a registrant with key 0, and IEKEY, which nvfence
// never sets. The lab side is vm-test/tests/device/test_bad_input.py; the table of
// outcomes is in docs/RELIABILITY.md.

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "fake_passthru.hpp"
#include "nvfence/error.hpp"
#include "nvfence/fence.hpp"
#include "nvfence/key.hpp"

namespace nvfence {
namespace {

using test::FakeTarget;
using test::HostPort;
using test::make_host;
using test::TempDir;

constexpr uint8_t kTag = 0;

uint64_t key(uint8_t node, uint32_t epoch) { return *make_key({kTag, node, epoch}); }

struct Node {
    Node(FakeTarget& t, uint8_t n, const std::string& dir)
        : id(make_host(n)),
          port(t, id, n),
          resv(port, 1),
          store(dir, "vol"),
          fence(resv, id, FenceOptions{.tag = kTag, .node = n}, &store) {}
    HostId id;
    HostPort port;
    Reservations resv;
    EpochStore store;
    Fence fence;
};

class BadInputTest : public ::testing::Test {
protected:
    TempDir tmp;
    FakeTarget target;

    std::unique_ptr<Node> node(uint8_t n) {
        return std::make_unique<Node>(target, n, tmp.path() + "/n" + std::to_string(n));
    }
    uint64_t key_of(const Node& n) const {
        const auto* r = target.find(n.id);
        return r ? r->key : 0;
    }
    // a holds, b is registered and stands by.
    void a_holds_b_stands_by(Node& a, Node& b) {
        ASSERT_TRUE(a.fence.join(std::nullopt, false));
        ASSERT_TRUE(a.fence.acquire());
        ASSERT_TRUE(b.fence.join(std::nullopt, false));
    }
    // Everything a Report shows, to compare before and after.
    struct Snapshot {
        std::vector<FakeTarget::Reg> regs;
        ResvType type;
        std::optional<HostId> holder;
        uint32_t generation;
        size_t state_commands;
    };
    Snapshot snap() const {
        return {target.regs, target.type, target.holder, target.generation, target.state_commands()};
    }
    void expect_unchanged(const Snapshot& s) const {
        ASSERT_EQ(target.regs.size(), s.regs.size());
        for (size_t i = 0; i < s.regs.size(); ++i) {
            EXPECT_EQ(target.regs[i].host, s.regs[i].host);
            EXPECT_EQ(target.regs[i].key, s.regs[i].key);
        }
        EXPECT_EQ(target.type, s.type);
        EXPECT_EQ(target.holder, s.holder);
        EXPECT_EQ(target.generation, s.generation);
        EXPECT_EQ(target.state_commands(), s.state_commands) << "a Register/Acquire/Release was sent";
    }
};

// ------------------------------------------------ victim that matches no one

// Found in the lab: `nvfence preempt --victim <key nobody has>` re-keyed this
// host (a Register with a fresh epoch) before the device refused the
// preempt, then reported a lost race although nobody had raced.
TEST_F(BadInputTest, VictimMatchingNoRegistrantWhileAnotherHoldsChangesNothing) {
    auto a = node(1), b = node(2);
    a_holds_b_stands_by(*a, *b);
    const uint32_t epoch_before = *b->store.load();
    const auto s = snap();
    auto o = b->fence.takeover(0x777);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::lost_race);
    EXPECT_EQ(exit_code_for(o.error()), ExitCode::lost_race);
    expect_unchanged(s);
    EXPECT_EQ(*b->store.load(), epoch_before) << "no epoch was consumed";
    // The error names the holder through the Report it read.
    ASSERT_TRUE(b->fence.last_report());
    ASSERT_NE(b->fence.last_report()->holder(), nullptr);
    EXPECT_EQ(b->fence.last_report()->holder()->key, key_of(*a));
}

TEST_F(BadInputTest, VictimMatchingNoRegistrantByAnUnregisteredHostChangesNothing) {
    auto a = node(1), c = node(3);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    const auto s = snap();
    auto o = c->fence.takeover(key(9, 9));
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::lost_race);
    expect_unchanged(s);
    EXPECT_EQ(target.find(c->id), nullptr) << "c was not registered either";
}

TEST_F(BadInputTest, VictimMatchingNoRegistrantWhenNobodyHoldsIsInvalid) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    const auto s = snap();
    auto o = b->fence.takeover(0x777);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::invalid_key);
    EXPECT_EQ(exit_code_for(o.error()), ExitCode::usage);
    expect_unchanged(s);
}

// A cluster manager retries `preempt --victim OLD` after a success whose
// answer it lost: the victim is gone and this host holds, so nothing to do.
TEST_F(BadInputTest, VictimGoneAndThisHostHoldingIsAnIdempotentRetry) {
    auto a = node(1), b = node(2);
    a_holds_b_stands_by(*a, *b);
    const uint64_t old_a = key_of(*a);
    auto first = b->fence.takeover(old_a);
    ASSERT_TRUE(first) << first.error().message();
    ASSERT_TRUE(first->changed);
    const auto s = snap();
    auto again = b->fence.takeover(old_a);
    ASSERT_TRUE(again) << again.error().message();
    EXPECT_FALSE(again->changed);
    EXPECT_EQ(again->key, key_of(*b));
    EXPECT_TRUE(again->removed.empty());
    expect_unchanged(s);
}

// The compare is of the Report read first; a victim removed after that read
// is still caught by the device (Reservation Conflict), as before.
TEST_F(BadInputTest, VictimRemovedAfterTheFirstReportIsALostRaceOnTheDevice) {
    auto a = node(1), b = node(2), c = node(3);
    a_holds_b_stands_by(*a, *b);
    ASSERT_TRUE(c->fence.join(std::nullopt, false));
    const uint64_t old_a = key_of(*a);
    bool done = false;
    // Right after b's Register (its re-key), c preempts a.
    target.after = [&](const HostId& h, const Command& cmd) {
        if (done || h != b->id || cmd.opcode != opcode::kResvRegister) return;
        done = true;
        ASSERT_TRUE(c->resv.acquire({.nsid = 1, .action = AcquireAction::preempt_and_abort,
                                     .type = ResvType::write_exclusive, .iekey = false,
                                     .crkey = key_of(*c), .prkey = old_a}));
    };
    auto o = b->fence.takeover(old_a);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::lost_race);
    EXPECT_TRUE(target.is_holder(c->id));
}

// ------------------------------------------------------ this host's own key

TEST_F(BadInputTest, PreemptingItsOwnKeyAsStandbySendsNothing) {
    // On nvmet a non-holder's Preempt with PRKEY = its own key unregisters
    // itself (observed in the lab): nvfence refuses before sending it.
    auto a = node(1), b = node(2);
    a_holds_b_stands_by(*a, *b);
    const auto s = snap();
    auto o = b->fence.takeover(key_of(*b));
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::own_key);
    EXPECT_EQ(exit_code_for(o.error()), ExitCode::usage);
    expect_unchanged(s);
}

TEST_F(BadInputTest, PreemptingItsOwnKeyAsHolderSendsNothing) {
    auto a = node(1);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    const auto s = snap();
    auto o = a->fence.takeover(key_of(*a));
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::own_key);
    expect_unchanged(s);
    // The default takeover as holder: success, nothing changed.
    auto d = a->fence.takeover(std::nullopt);
    ASSERT_TRUE(d);
    EXPECT_FALSE(d->changed);
    expect_unchanged(s);
}

// ------------------------------------------------------ report buffer size

class ReportBufferTest : public BadInputTest {
protected:
    void SetUp() override {
        for (uint8_t n = 1; n <= 5; ++n) target.add(make_host(n), 0x100 + n);
    }
    std::vector<uint32_t> report_lengths() const {
        std::vector<uint32_t> out;
        for (const auto& sub : target.log)
            if (sub.cmd.opcode == opcode::kResvReport) out.push_back(sub.cmd.data_len);
        return out;
    }
};

TEST_F(ReportBufferTest, DefaultFirstReadHoldsEveryRegistrant) {
    HostPort p(target, make_host(1), 1);
    Reservations r(p, 1);
    EXPECT_EQ(r.report_initial_bytes(), kReportInitialBytes);
    auto st = r.report();
    ASSERT_TRUE(st);
    EXPECT_EQ(st->registrants.size(), 5u);
    EXPECT_EQ(r.last_report_reads(), 1);
    EXPECT_EQ(report_lengths(), std::vector<uint32_t>{kReportInitialBytes});
}

TEST_F(ReportBufferTest, HeaderOnlyFirstReadIsReReadWithTheSizeTheDeviceClaims) {
    HostPort p(target, make_host(1), 1);
    Reservations r(p, 1);
    r.set_report_initial_bytes(64);
    auto st = r.report();
    ASSERT_TRUE(st) << st.error().message();
    EXPECT_FALSE(st->truncated());
    ASSERT_EQ(st->registrants.size(), 5u);
    for (size_t i = 0; i < 5; ++i) EXPECT_EQ(st->registrants[i].key, 0x101u + i);
    EXPECT_EQ(r.last_report_reads(), 2);
    EXPECT_EQ(report_lengths(), (std::vector<uint32_t>{64, 64 + 5 * 64}));
}

TEST_F(ReportBufferTest, FirstReadSizeIsRaisedToTheHeaderAndRoundedToDwords) {
    HostPort p(target, make_host(1), 1);
    Reservations r(p, 1);
    r.set_report_initial_bytes(1);  // nvmet refuses less than the header (Invalid Field)
    ASSERT_TRUE(r.report());
    EXPECT_FALSE(r.extended_refused()) << "a too-small buffer must not read as 'no extended report'";
    r.set_report_initial_bytes(130);  // two registrants and a half
    ASSERT_TRUE(r.report());
    r.set_report_initial_bytes(0xffffffffu);  // capped at the largest possible report
    ASSERT_TRUE(r.report());
    const auto lens = report_lengths();
    ASSERT_EQ(lens.size(), 5u);
    EXPECT_EQ(lens[0], 64u);
    EXPECT_EQ(lens[1], 384u);
    EXPECT_EQ(lens[2], 132u);
    EXPECT_EQ(lens[3], 384u);
    EXPECT_EQ(lens[4], static_cast<uint32_t>(report_size_for(0xffff, true)));
    for (auto l : lens) EXPECT_EQ(l % 4, 0u);
}

TEST_F(ReportBufferTest, RegistrantsAddedBetweenReadsAreReadAgainBounded) {
    HostPort p(target, make_host(1), 1);
    Reservations r(p, 1);
    r.set_report_initial_bytes(64);
    // Every Report sees more registrants than the one before: re-read at
    // most kReportMaxReads times, then fail rather than loop.
    uint8_t next = 10;
    target.after = [&](const HostId&, const Command& c) {
        if (c.opcode != opcode::kResvReport) return;
        target.add(make_host(next), 0x200u + next);
        ++next;
    };
    auto st = r.report();
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error(), Errc::malformed_data);
    EXPECT_EQ(r.last_report_reads(), kReportMaxReads);
}

TEST_F(ReportBufferTest, FenceSeesEveryRegistrantThroughASmallFirstRead) {
    auto a = node(9);
    a->resv.set_report_initial_bytes(64);
    auto o = a->fence.join(std::nullopt, false);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_EQ(o->before.registrants.size(), 5u);
    EXPECT_EQ(o->after.registrants.size(), 6u);
}

// -------------------------------------------------------------- key 0 / IEKEY

TEST_F(BadInputTest, HostRegisteredWithKeyZeroIsAConflictUntilReplaced) {
    // nvme-cli can register key 0 (nvmet accepts it); nvfence shows it as
    // foreign and re-keys it only with --replace (CRKEY 0, no IEKEY).
    auto a = node(1);
    target.add(a->id, 0);
    const auto s = snap();
    auto o = a->fence.join(std::nullopt, false);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), Errc::host_id_conflict);
    expect_unchanged(s);
    auto r = a->fence.join(std::nullopt, true);
    ASSERT_TRUE(r) << r.error().message();
    ASSERT_TRUE(r->replaced);
    EXPECT_EQ(*r->replaced, 0u);
    EXPECT_EQ(key_of(*a), key(1, 1));
}

TEST_F(BadInputTest, NoCommandEverSetsIekey) {
    // nvmet refuses IEKEY on Acquire and Release (Invalid Field, NVMe 1.3+
    // semantics, RESCAP bit 7): nvfence must never rely on it, and replaces
    // or unregisters with the current key read from the Report instead.
    auto a = node(1), b = node(2);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.join(std::nullopt, true));   // replace
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.takeover(std::nullopt));     // register + preempt-and-abort
    ASSERT_TRUE(b->fence.takeover(std::nullopt));     // already holder: nothing sent
    ASSERT_TRUE(b->fence.release());
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.takeover(std::nullopt));     // takes the free reservation
    ASSERT_TRUE(b->fence.leave());
    ASSERT_TRUE(a->fence.clear());
    size_t checked = 0;
    for (const auto& sub : target.log) {
        const uint8_t op = sub.cmd.opcode;
        if (sub.cmd.queue != Queue::io) continue;
        if (op != opcode::kResvRegister && op != opcode::kResvAcquire && op != opcode::kResvRelease) continue;
        EXPECT_EQ(sub.cmd.cdw[0] & (1u << 3), 0u) << "IEKEY set on opcode " << int(op);
        ++checked;
    }
    EXPECT_GE(checked, 8u);
}

// ------------------------------------------- controller reset mid-command

// A host port whose next command of one opcode is hit by a controller reset,
// as the lab showed (vm-test/tests/device/test_bad_input.py, nvme trace on host and
// target): the command executes on the device, its completion is lost, and
// the Linux host re-sends it after reconnecting; the re-sent copy's status is
// what the caller gets. Or, without a re-send, Command Aborted By Host; or
// the re-sent copy runs too and its completion is lost in turn (Host Pathing
// Error).
class ResetPort final : public Passthru {
public:
    enum class Mode { resend, resend_lost, aborted_after, aborted_before };
    ResetPort(FakeTarget& t, HostId id) : inner_(t, id, 9) {}
    void arm(uint8_t op, Mode m) {
        op_ = op;
        mode_ = m;
        armed_ = true;
    }
    Result<uint32_t> submit(const Command& cmd, std::span<uint8_t> data) override {
        if (!armed_ || cmd.opcode != op_ || cmd.queue != Queue::io) return inner_.submit(cmd, data);
        armed_ = false;
        const auto aborted = test::nvme_err(NvmeStatus::command_aborted_by_host);
        if (mode_ == Mode::aborted_before) return aborted;
        auto first = inner_.submit(cmd, data);
        if (mode_ == Mode::aborted_after) return aborted;
        (void)first;
        auto second = inner_.submit(cmd, data);
        if (mode_ == Mode::resend_lost) return test::nvme_err(NvmeStatus::host_pathing_error);
        return second;
    }
    const HostId& id() const { return inner_.id(); }

private:
    HostPort inner_;
    uint8_t op_ = 0;
    Mode mode_ = Mode::resend;
    bool armed_ = false;
};

class ResetTest : public BadInputTest {
protected:
    void SetUp() override {
        a = node(1);
        ASSERT_TRUE(a->fence.join(std::nullopt, false));
        ASSERT_TRUE(a->fence.acquire());
    }
    std::unique_ptr<Node> a;
    HostId bid = make_host(2);
    ResetPort port{target, bid};
    Reservations resv{port, 1};
    EpochStore store{tmp.path() + "/b", "vol"};
    Fence fence{resv, bid, FenceOptions{.tag = kTag, .node = 2}, &store};

    size_t acquires_from_b() const {
        size_t n = 0;
        for (const auto& sub : target.log)
            if (sub.host == bid && sub.cmd.opcode == opcode::kResvAcquire) ++n;
        return n;
    }
};

// Found in the lab: the preempt-and-abort ran, its re-sent copy got
// Reservation Conflict (the victim's key was gone), and nvfence exited 3
// "the device refused this host" while this host held the reservation.
TEST_F(ResetTest, PreemptReSentAfterAResetIsReportedDone) {
    const uint64_t ka = key_of(*a);
    port.arm(opcode::kResvAcquire, ResetPort::Mode::resend);
    auto o = fence.takeover(std::nullopt);
    ASSERT_TRUE(o) << o.error().message();
    ASSERT_TRUE(o->completion_error);
    EXPECT_TRUE(is_nvme(*o->completion_error, NvmeStatus::reservation_conflict));
    EXPECT_TRUE(o->changed);
    EXPECT_TRUE(target.is_holder(bid));
    EXPECT_EQ(o->key, target.find(bid)->key);
    EXPECT_EQ(o->removed, std::vector<uint64_t>{ka});
    EXPECT_EQ(target.find(a->id), nullptr);
    // The preempt, its re-sent copy, and the confirming Acquire.
    EXPECT_EQ(acquires_from_b(), 3u);
    EXPECT_EQ(target.log.back().cmd.opcode, opcode::kResvReport);
}

TEST_F(ResetTest, PreemptCompletionLostWithoutReSendIsConfirmed) {
    port.arm(opcode::kResvAcquire, ResetPort::Mode::aborted_after);
    auto o = fence.takeover(std::nullopt);
    ASSERT_TRUE(o) << o.error().message();
    ASSERT_TRUE(o->completion_error);
    EXPECT_TRUE(is_nvme(*o->completion_error, NvmeStatus::command_aborted_by_host));
    EXPECT_TRUE(target.is_holder(bid));
    EXPECT_EQ(acquires_from_b(), 2u);
}

TEST_F(ResetTest, PreemptAbortedBeforeReachingTheDeviceFails) {
    port.arm(opcode::kResvAcquire, ResetPort::Mode::aborted_before);
    auto o = fence.takeover(std::nullopt);
    ASSERT_FALSE(o);
    EXPECT_TRUE(is_nvme(o.error(), NvmeStatus::command_aborted_by_host));
    EXPECT_EQ(exit_code_for(o.error()), ExitCode::failure);
    EXPECT_TRUE(target.is_holder(a->id)) << "a still holds; a re-run takes over";
    auto again = fence.takeover(std::nullopt);
    ASSERT_TRUE(again) << again.error().message();
    EXPECT_FALSE(again->completion_error);
    EXPECT_TRUE(target.is_holder(bid));
}

TEST_F(ResetTest, ReplaceReSentAfterAResetIsReportedDone) {
    ASSERT_TRUE(fence.join(std::nullopt, false));  // b stands by with a key to replace
    const uint64_t old_b = target.find(bid)->key;
    port.arm(opcode::kResvRegister, ResetPort::Mode::resend);
    auto o = fence.takeover(std::nullopt);
    ASSERT_TRUE(o) << o.error().message();
    ASSERT_TRUE(o->completion_error);
    EXPECT_TRUE(is_nvme(*o->completion_error, NvmeStatus::reservation_conflict));
    EXPECT_TRUE(target.is_holder(bid));
    ASSERT_TRUE(o->replaced);
    EXPECT_EQ(*o->replaced, old_b);
}

TEST_F(ResetTest, JoinReplaceReSentAfterAResetIsReportedDone) {
    ASSERT_TRUE(fence.join(std::nullopt, false));
    const uint64_t old_b = target.find(bid)->key;
    port.arm(opcode::kResvRegister, ResetPort::Mode::resend);
    auto o = fence.join(std::nullopt, true);
    ASSERT_TRUE(o) << o.error().message();
    ASSERT_TRUE(o->completion_error);
    EXPECT_NE(target.find(bid)->key, old_b);
    EXPECT_EQ(o->key, target.find(bid)->key);
}


// ------------------------------- release / unregister / clear after a reset

// The re-sent copy of a Release that freed the reservation succeeds (a
// registrant that does not hold releases nothing): plain success.
TEST_F(ResetTest, ReleaseReSentAfterAResetSucceeds) {
    ASSERT_TRUE(fence.takeover(std::nullopt));
    port.arm(opcode::kResvRelease, ResetPort::Mode::resend);
    auto o = fence.release();
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_FALSE(o->completion_error);
    EXPECT_EQ(target.type, ResvType::none);
}

TEST_F(ResetTest, ReleaseWhoseReSentCopyFailsIsReportedDone) {
    ASSERT_TRUE(fence.takeover(std::nullopt));
    const uint64_t kb = target.find(bid)->key;
    port.arm(opcode::kResvRelease, ResetPort::Mode::resend_lost);
    auto o = fence.release();
    ASSERT_TRUE(o) << o.error().message();
    ASSERT_TRUE(o->completion_error);
    EXPECT_TRUE(is_nvme(*o->completion_error, NvmeStatus::host_pathing_error));
    EXPECT_TRUE(o->changed);
    EXPECT_EQ(o->previous_holder, kb);
    EXPECT_EQ(o->key, kb) << "still registered";
    EXPECT_TRUE(o->removed.empty());
    EXPECT_EQ(target.type, ResvType::none);
    EXPECT_EQ(target.log.back().cmd.opcode, opcode::kResvReport);
}

TEST_F(ResetTest, ReleaseCompletionLostWithoutReSendIsReportedDone) {
    ASSERT_TRUE(fence.takeover(std::nullopt));
    port.arm(opcode::kResvRelease, ResetPort::Mode::aborted_after);
    auto o = fence.release();
    ASSERT_TRUE(o) << o.error().message();
    ASSERT_TRUE(o->completion_error);
    EXPECT_TRUE(is_nvme(*o->completion_error, NvmeStatus::command_aborted_by_host));
    EXPECT_EQ(target.type, ResvType::none);
}

TEST_F(ResetTest, ReleaseAbortedBeforeReachingTheDeviceFails) {
    ASSERT_TRUE(fence.takeover(std::nullopt));
    port.arm(opcode::kResvRelease, ResetPort::Mode::aborted_before);
    const auto s = snap();
    auto o = fence.release();
    ASSERT_FALSE(o);
    EXPECT_TRUE(is_nvme(o.error(), NvmeStatus::command_aborted_by_host));
    EXPECT_TRUE(target.is_holder(bid)) << "b still holds";
    EXPECT_EQ(target.generation, s.generation);
    auto again = fence.release();
    ASSERT_TRUE(again) << again.error().message();
    EXPECT_FALSE(again->completion_error);
    EXPECT_EQ(target.type, ResvType::none);
}

// An Unregister re-sent after a reset, as the preempt in the lab: its copy
// names a key that is gone, Reservation Conflict.
TEST_F(ResetTest, UnregisterReSentAfterAResetIsReportedDone) {
    ASSERT_TRUE(fence.takeover(std::nullopt));  // b holds: leaving releases too
    const uint64_t kb = target.find(bid)->key;
    port.arm(opcode::kResvRegister, ResetPort::Mode::resend);
    auto o = fence.leave();
    ASSERT_TRUE(o) << o.error().message();
    ASSERT_TRUE(o->completion_error);
    EXPECT_TRUE(is_nvme(*o->completion_error, NvmeStatus::reservation_conflict));
    EXPECT_TRUE(o->changed);
    EXPECT_EQ(o->key, 0u);
    EXPECT_EQ(o->removed, std::vector<uint64_t>{kb});
    EXPECT_EQ(target.find(bid), nullptr);
    EXPECT_EQ(target.type, ResvType::none);
}

TEST_F(ResetTest, UnregisterCompletionLostWithoutReSendIsReportedDone) {
    ASSERT_TRUE(fence.join(std::nullopt, false));
    port.arm(opcode::kResvRegister, ResetPort::Mode::aborted_after);
    auto o = fence.leave();
    ASSERT_TRUE(o) << o.error().message();
    ASSERT_TRUE(o->completion_error);
    EXPECT_TRUE(is_nvme(*o->completion_error, NvmeStatus::command_aborted_by_host));
    EXPECT_EQ(target.find(bid), nullptr);
    EXPECT_TRUE(target.is_holder(a->id)) << "a untouched";
}

TEST_F(ResetTest, UnregisterAbortedBeforeReachingTheDeviceFails) {
    ASSERT_TRUE(fence.join(std::nullopt, false));
    const auto s = snap();
    port.arm(opcode::kResvRegister, ResetPort::Mode::aborted_before);
    auto o = fence.leave();
    ASSERT_FALSE(o);
    EXPECT_TRUE(is_nvme(o.error(), NvmeStatus::command_aborted_by_host));
    EXPECT_EQ(exit_code_for(o.error()), ExitCode::failure);
    ASSERT_NE(target.find(bid), nullptr) << "b still registered";
    EXPECT_EQ(target.generation, s.generation);
    auto again = fence.leave();
    ASSERT_TRUE(again) << again.error().message();
    EXPECT_FALSE(again->completion_error);
    EXPECT_EQ(target.find(bid), nullptr);
}

TEST_F(ResetTest, ClearReSentAfterAResetIsReportedDone) {
    ASSERT_TRUE(fence.join(std::nullopt, false));
    const uint64_t ka = key_of(*a), kb = target.find(bid)->key;
    port.arm(opcode::kResvRelease, ResetPort::Mode::resend);
    auto o = fence.clear();
    ASSERT_TRUE(o) << o.error().message();
    ASSERT_TRUE(o->completion_error);
    EXPECT_TRUE(is_nvme(*o->completion_error, NvmeStatus::reservation_conflict));
    EXPECT_TRUE(o->changed);
    EXPECT_EQ(o->previous_holder, ka);
    EXPECT_EQ(o->key, 0u);
    ASSERT_EQ(o->removed.size(), 2u);
    EXPECT_NE(std::find(o->removed.begin(), o->removed.end(), ka), o->removed.end());
    EXPECT_NE(std::find(o->removed.begin(), o->removed.end(), kb), o->removed.end());
    EXPECT_TRUE(target.regs.empty());
    EXPECT_EQ(target.type, ResvType::none);
}

TEST_F(ResetTest, ClearAbortedBeforeReachingTheDeviceFails) {
    ASSERT_TRUE(fence.join(std::nullopt, false));
    const auto s = snap();
    port.arm(opcode::kResvRelease, ResetPort::Mode::aborted_before);
    auto o = fence.clear();
    ASSERT_FALSE(o);
    EXPECT_TRUE(is_nvme(o.error(), NvmeStatus::command_aborted_by_host));
    EXPECT_EQ(target.regs.size(), 2u);
    EXPECT_TRUE(target.is_holder(a->id));
    EXPECT_EQ(target.generation, s.generation);
}

// A Conflict that is no re-sent copy: another host preempted this one just
// before its Release. The Report shows another holder: the error stands.
TEST_F(ResetTest, ReleaseRefusedAfterBeingPreemptedStillFails) {
    ASSERT_TRUE(fence.takeover(std::nullopt));
    bool raced = false;
    target.fail = [&](const HostId& h, const Command& c) -> std::optional<std::error_code> {
        if (h == bid && c.opcode == opcode::kResvRelease && !raced) {
            raced = true;
            EXPECT_TRUE(a->fence.takeover(std::nullopt));
        }
        return std::nullopt;
    };
    auto o = fence.release();
    ASSERT_FALSE(o);
    EXPECT_TRUE(is_nvme(o.error(), NvmeStatus::reservation_conflict));
    EXPECT_TRUE(target.is_holder(a->id));
}

// A Conflict with nothing done (the device refused the Clear): the Report
// still shows registrants, so the error stands.
TEST_F(ResetTest, ClearRefusedWithoutEffectStillFails) {
    ASSERT_TRUE(fence.join(std::nullopt, false));
    target.fail = [&](const HostId& h, const Command& c) -> std::optional<std::error_code> {
        if (h == bid && c.opcode == opcode::kResvRelease) return test::nvme_err(NvmeStatus::reservation_conflict);
        return std::nullopt;
    };
    auto o = fence.clear();
    ASSERT_FALSE(o);
    EXPECT_TRUE(is_nvme(o.error(), NvmeStatus::reservation_conflict));
    EXPECT_EQ(target.regs.size(), 2u);
}

}  // namespace
}  // namespace nvfence
