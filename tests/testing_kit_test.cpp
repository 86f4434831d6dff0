// SPDX-License-Identifier: MIT
// The testing kit (nvfence/testing.hpp): simulated hosts over the
// reservation model, FencedWriter over the model of the ring, delays, lost
// completions, target restarts and a preempt by another host.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "nvfence/testing.hpp"

using namespace nvfence;
using namespace nvfence::testkit;

namespace {

std::unique_ptr<FencedWriter> writer(SimHost& h, uint32_t timeout_ms = 30000) {
    WriterOptions o;
    o.timeout_ms = timeout_ms;
    auto w = h.open_writer(o);
    EXPECT_TRUE(w) << w.error().message();
    return std::move(*w);
}

AlignedBuffer filled(char c) {
    AlignedBuffer b(4096);
    std::memset(b.data(), c, b.size());
    return b;
}

}  // namespace

TEST(TestingKit, AnswersAsNvmet) {
    SimCluster c;
    EXPECT_EQ(c.target().deviations, NvmetDeviations::all());
    EXPECT_EQ(c.size(), 2u);
    EXPECT_NE(c.host(0).id(), c.host(1).id());
}

TEST(TestingKit, PreemptFencesTheOldHoldersWriter) {
    SimCluster c;
    ASSERT_TRUE(c.host(0).takeover());
    auto w = writer(c.host(0));
    auto a = filled('a');
    EXPECT_EQ(w->write(3, a.span()).status, IoStatus::ok);
    EXPECT_EQ(c.block(3)[0], 'a');
    auto o = c.host(1).takeover();
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_TRUE(o->changed);
    auto b = filled('b');
    const Completion r = w->write(4, b.span());
    EXPECT_EQ(r.status, IoStatus::fenced);
    EXPECT_EQ(r.error, make_nvme_error(static_cast<uint16_t>(NvmeStatus::reservation_conflict)));
    EXPECT_TRUE(w->fenced());
    EXPECT_TRUE(w->settled());
    EXPECT_EQ(c.block(4)[0], 0);
    EXPECT_EQ(c.writes_landed(), 1u);
    EXPECT_EQ(c.writes_refused(), 1u);
    // The new holder writes.
    auto w1 = writer(c.host(1));
    EXPECT_EQ(w1->write(4, b.span()).status, IoStatus::ok);
    EXPECT_EQ(c.block(4)[0], 'b');
}

TEST(TestingKit, BlockModeRefusalIsEbade) {
    SimCluster c({.hosts = 2, .mode = WriterMode::block});
    ASSERT_TRUE(c.host(1).takeover());
    auto w = writer(c.host(0));
    EXPECT_EQ(w->mode(), WriterMode::block);
    auto a = filled('a');
    const Completion r = w->write(0, a.span());
    EXPECT_EQ(r.status, IoStatus::fenced);
    EXPECT_EQ(r.error, std::error_code(EBADE, std::system_category()));
    // Reads stay allowed under Write Exclusive.
    EXPECT_EQ(writer(c.host(0))->read(0, a.span()).status, IoStatus::ok);
}

TEST(TestingKit, DelayedWriteReachingTheDeviceAfterThePreemptIsRefused) {
    SimCluster c;
    ASSERT_TRUE(c.host(0).takeover());
    auto w = writer(c.host(0));
    c.plan = [](const SimIo& io) { return IoPlan{.start_us = io.host == 0 ? 5000u : 0u}; };
    auto a = filled('a');
    ASSERT_TRUE(w->queue_write(1, a.span(), 11));
    ASSERT_TRUE(w->submit());
    EXPECT_EQ(c.now_us(), 0u);
    ASSERT_TRUE(c.host(1).takeover());
    Completion got;
    auto n = w->reap({&got, 1}, 1);
    ASSERT_TRUE(n);
    EXPECT_EQ(got.user_data, 11u);
    EXPECT_EQ(got.status, IoStatus::fenced);
    EXPECT_EQ(c.now_us(), 5000u);  // the wait advanced the simulated clock
    EXPECT_EQ(c.block(1)[0], 0);
}

TEST(TestingKit, WriteAdmittedBeforeThePreemptLandsEvenWhenItsCompletionIsLate) {
    SimCluster c;
    ASSERT_TRUE(c.host(0).takeover());
    auto w = writer(c.host(0));
    c.plan = [](const SimIo& io) { return IoPlan{.complete_us = io.lba == 1 ? 9000u : 0u}; };
    auto a = filled('a');
    auto b = filled('b');
    ASSERT_TRUE(w->queue_write(1, a.span(), 1));
    ASSERT_TRUE(w->submit());
    ASSERT_TRUE(c.host(1).takeover());
    ASSERT_TRUE(w->queue_write(2, b.span(), 2));
    ASSERT_TRUE(w->submit());
    Completion got[2];
    auto n = w->reap(got, 1);
    ASSERT_TRUE(n);
    ASSERT_EQ(*n, 1u);
    EXPECT_EQ(got[0].user_data, 2u);
    EXPECT_EQ(got[0].status, IoStatus::fenced);
    EXPECT_FALSE(w->settled());  // the first write is still on its way back
    n = w->reap(got, 1);
    ASSERT_TRUE(n);
    EXPECT_EQ(got[0].user_data, 1u);
    EXPECT_EQ(got[0].status, IoStatus::ok);
    EXPECT_TRUE(w->settled());
    EXPECT_EQ(c.block(1)[0], 'a');
    EXPECT_EQ(c.block(2)[0], 0);
}

TEST(TestingKit, LostCompletionIsAnIoErrorAfterTheTimeoutAndTheWriteLanded) {
    SimCluster c({.hosts = 1, .lost_after_us = 2'000'000});
    ASSERT_TRUE(c.host(0).takeover());
    auto w = writer(c.host(0));
    c.plan = [](const SimIo&) { return IoPlan{.lose = true}; };
    auto a = filled('a');
    const Completion r = w->write(5, a.span());
    EXPECT_EQ(r.status, IoStatus::io_error);
    EXPECT_EQ(r.error, std::error_code(EIO, std::system_category()));
    EXPECT_EQ(c.now_us(), 2'000'000u);
    EXPECT_EQ(c.block(5)[0], 'a');
}

TEST(TestingKit, CompletionLaterThanTheWritersTimeoutTimesOut) {
    SimCluster c({.hosts = 1});
    ASSERT_TRUE(c.host(0).takeover());
    auto w = writer(c.host(0), 10);
    c.plan = [](const SimIo&) { return IoPlan{.complete_us = 50'000}; };
    auto a = filled('a');
    const Completion r = w->write(0, a.span());
    EXPECT_EQ(r.error, Errc::timeout);
    // Each of the writer's bounded waits moves the clock by its timeout at most.
    EXPECT_GE(c.now_us(), 10'000u);
    EXPECT_LT(c.now_us(), 50'000u);
    EXPECT_EQ(w->in_flight(), 1u);
    c.advance(50'000);
    Completion got;
    auto n = w->reap({&got, 1}, 0);
    ASSERT_TRUE(n);
    EXPECT_EQ(*n, 1u);
    EXPECT_EQ(got.status, IoStatus::ok);
}

TEST(TestingKit, TargetRestartWithoutPtplLosesTheReservationAndFailsUnexecutedIo) {
    SimCluster c;
    ASSERT_TRUE(c.host(0).takeover());
    auto w = writer(c.host(0));
    auto a = filled('a');
    ASSERT_EQ(w->write(0, a.span()).status, IoStatus::ok);
    c.plan = [](const SimIo&) { return IoPlan{.start_us = 1000}; };
    ASSERT_TRUE(w->queue_write(1, a.span(), 1));
    ASSERT_TRUE(w->submit());
    c.restart_target();
    EXPECT_TRUE(c.target().regs.empty());
    EXPECT_EQ(c.target().type, ResvType::none);
    Completion got;
    ASSERT_TRUE(w->reap({&got, 1}, 1));
    EXPECT_EQ(got.status, IoStatus::io_error);
    EXPECT_EQ(c.block(0)[0], 'a');  // the media keeps what landed
    EXPECT_EQ(c.block(1)[0], 0);
    auto st = c.host(1).reservations().report();
    ASSERT_TRUE(st);
    EXPECT_EQ(st->generation, 0u);
    EXPECT_TRUE(st->registrants.empty());
}

TEST(TestingKit, TargetRestartWithPtplKeepsTheReservation) {
    SimCluster c;
    ASSERT_TRUE(c.host(0).takeover());
    c.target().ptpl = true;
    c.restart_target();
    EXPECT_EQ(c.target().regs.size(), 1u);
    EXPECT_EQ(c.target().type, ResvType::write_exclusive);
}

TEST(TestingKit, QueuedIosAfterTheLatchNeverReachTheDevice) {
    SimCluster c;
    ASSERT_TRUE(c.host(1).takeover());
    auto w = writer(c.host(0));
    auto a = filled('a');
    ASSERT_TRUE(w->queue_write(0, a.span(), 1));
    ASSERT_TRUE(w->submit());
    Completion got[4];
    ASSERT_TRUE(w->reap({got, 1}, 1));
    ASSERT_TRUE(w->fenced());
    EXPECT_EQ(w->queue_write(1, a.span(), 2).error(), Errc::fenced);
    EXPECT_EQ(c.writes_refused(), 1u);
    EXPECT_EQ(c.target().count(opcode::kWrite), 1u);
}

TEST(TestingKit, ReadsBackWhatWasWrittenAndHostsOwnFences) {
    SimCluster c({.hosts = 3, .block_bytes = 512, .size_blocks = 64});
    Fence f = c.host(2).fence({.tag = 7, .node = 9});
    auto o = f.takeover(std::nullopt);
    ASSERT_TRUE(o) << o.error().message();
    auto w = writer(c.host(2));
    EXPECT_EQ(w->block_bytes(), 512u);
    EXPECT_EQ(w->size_blocks(), 64u);
    AlignedBuffer a(1024, 512), b(1024, 512);
    std::memset(a.data(), 'x', 1024);
    ASSERT_EQ(w->write(62, a.span()).status, IoStatus::ok);
    ASSERT_EQ(w->read(62, b.span()).status, IoStatus::ok);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), 1024), 0);
    EXPECT_EQ(w->write(63, a.span()).error, Errc::out_of_bounds);
    EXPECT_TRUE(c.block(64).empty());
}

TEST(TestingKit, RunAllDeliversEverything) {
    SimCluster c({.hosts = 1});
    ASSERT_TRUE(c.host(0).takeover());
    auto w = writer(c.host(0));
    c.plan = [](const SimIo& io) { return IoPlan{.start_us = 100 * (io.seq + 1), .lose = io.seq == 1}; };
    auto a = filled('a');
    for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(w->queue_write(i, a.span(), i));
    ASSERT_TRUE(w->submit());
    c.run_all();
    EXPECT_EQ(c.writes_landed(), 3u);
    Completion got[3];
    auto n = w->reap(got, 0);
    ASSERT_TRUE(n);
    EXPECT_EQ(*n, 3u);
}

// A power loss: what a Flush made durable stays; each block written since
// the last Flush is kept or lost on its own (both happen over 64 blocks and
// the seed decides); nothing runs until power_on(), which then acts as a
// target restart.
TEST(TestingKit, PowerLossKeepsWhatAFlushMadeDurableAndLosesOrKeepsEachCachedBlock) {
    SimCluster c({.hosts = 2});
    ASSERT_TRUE(c.host(0).takeover());
    auto w = writer(c.host(0));
    auto a = filled('a'), b = filled('b');
    for (uint64_t i = 0; i < 64; ++i) ASSERT_EQ(w->write(i, a.span()).status, IoStatus::ok);
    ASSERT_EQ(w->flush().status, IoStatus::ok);
    for (uint64_t i = 0; i < 64; ++i) ASSERT_EQ(w->write(i, b.span()).status, IoStatus::ok);
    ASSERT_EQ(w->write(100, b.span()).status, IoStatus::ok);  // never written before: lost means zeros
    c.power_loss_after(0, 7);
    EXPECT_FALSE(c.powered());
    size_t kept = 0, lost = 0;
    for (uint64_t i = 0; i < 64; ++i) {
        ASSERT_TRUE(c.block(i)[0] == 'a' || c.block(i)[0] == 'b');
        (c.block(i)[0] == 'b' ? kept : lost) += 1;
    }
    EXPECT_GT(kept, 0u);
    EXPECT_GT(lost, 0u);
    EXPECT_TRUE(c.block(100)[0] == 'b' || c.block(100)[0] == 0);
    // Powered off: an I/O is an I/O error and does not land; so is a
    // reservation command.
    EXPECT_EQ(w->write(200, a.span()).status, IoStatus::io_error);
    EXPECT_EQ(c.block(200)[0], 0);
    EXPECT_FALSE(c.host(1).reservations().report());
    c.power_on();
    EXPECT_TRUE(c.powered());
    EXPECT_TRUE(c.target().regs.empty());  // PTPL off: as a target restart
    ASSERT_TRUE(c.host(1).takeover());
}

TEST(TestingKit, PowerLossAfterNCommandsAndTheSameSeedLosesTheSameBlocks) {
    auto run = [](uint64_t seed, std::vector<uint8_t>& firsts) {
        SimCluster c({.hosts = 1});
        EXPECT_TRUE(c.host(0).takeover());
        auto w = writer(c.host(0));
        auto a = filled('a');
        c.power_loss_after(40, seed);
        size_t ok = 0;
        for (uint64_t i = 0; i < 50; ++i) ok += w->write(i, a.span()).status == IoStatus::ok;
        EXPECT_EQ(ok, 40u);  // the 40th executed; the rest found the power off
        EXPECT_EQ(c.writes_landed(), 40u);
        for (uint64_t i = 0; i < 50; ++i) firsts.push_back(c.block(i)[0]);
    };
    std::vector<uint8_t> x, y, z;
    run(3, x);
    run(3, y);
    run(4, z);
    EXPECT_EQ(x, y);
    EXPECT_NE(x, z);
    for (size_t i = 40; i < 50; ++i) EXPECT_EQ(x[i], 0) << i;
}

TEST(TestingKit, AFlushOfAnyHostMakesEveryEarlierWriteDurable) {
    SimCluster c({.hosts = 2});
    ASSERT_TRUE(c.host(0).takeover());
    auto w0 = writer(c.host(0));
    auto w1 = writer(c.host(1));
    auto a = filled('a');
    for (uint64_t i = 0; i < 32; ++i) ASSERT_EQ(w0->write(i, a.span()).status, IoStatus::ok);
    // nvmet refuses a Flush of a host without write access, as a write;
    // the new holder's Flush makes the old holder's landed writes durable.
    EXPECT_EQ(w1->flush().status, IoStatus::fenced);
    w1.reset();
    ASSERT_TRUE(c.host(1).takeover());
    w1 = writer(c.host(1));
    ASSERT_EQ(w1->flush().status, IoStatus::ok);
    c.power_loss_after(0, 1);
    for (uint64_t i = 0; i < 32; ++i) EXPECT_EQ(c.block(i)[0], 'a') << i;
}
