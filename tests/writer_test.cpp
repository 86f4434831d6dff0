// SPDX-License-Identifier: MIT
// FencedWriter on a regular file (allow_regular_file): the queue discipline,
// argument checks, round trips and the timeout bound. Fenced completions
// need a reservation-capable device and are tested in the QEMU lab; here
// only their classification is checked.
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "nvfence/error.hpp"
#include "nvfence/fd.hpp"
#include "nvfence/writer.hpp"
#include "writer/ring_writer.hpp"
#include "fake_ring.hpp"

namespace nvfence {
namespace {

constexpr uint64_t kBlocks = 256;  // 1 MiB file

// A scratch file on a file system with O_DIRECT (tmpfs before Linux 6.6
// has none, so /var/tmp is tried after /tmp).
class WriterTest : public ::testing::Test {
protected:
    void SetUp() override {
        std::vector<std::string> dirs;
        if (const char* t = std::getenv("TMPDIR"); t && *t) dirs.emplace_back(t);
        dirs.emplace_back("/tmp");
        dirs.emplace_back("/var/tmp");
        for (const auto& d : dirs) {
            std::string p = d + "/nvfence-writer-XXXXXX";
            int fd = ::mkstemp(p.data());
            if (fd < 0) continue;
            bool ok = ::ftruncate(fd, static_cast<off_t>(kBlocks * 4096)) == 0;
            ::close(fd);
            int probe = ::open(p.c_str(), O_RDWR | O_DIRECT);
            if (ok && probe >= 0) {
                ::close(probe);
                path_ = p;
                return;
            }
            if (probe >= 0) ::close(probe);
            ::unlink(p.c_str());
        }
        GTEST_SKIP() << "no writable directory with O_DIRECT support among TMPDIR, /tmp, /var/tmp";
    }
    void TearDown() override {
        if (!path_.empty()) ::unlink(path_.c_str());
    }

    std::unique_ptr<FencedWriter> open_writer(uint32_t qd = 32, uint32_t timeout_ms = 5000, bool single_thread = false) {
        WriterOptions o;
        o.allow_regular_file = true;
        o.queue_depth = qd;
        o.timeout_ms = timeout_ms;
        o.single_thread = single_thread;
        o.epoch = 7;
        auto w = FencedWriter::open(path_, o);
        EXPECT_TRUE(w.ok()) << w.error().message();
        if (!w) return nullptr;
        return std::move(*w);
    }

    // Reads the file back without the writer, as an independent witness.
    std::vector<uint8_t> pread_file(uint64_t lba, size_t bytes) {
        std::vector<uint8_t> v(bytes);
        int fd = ::open(path_.c_str(), O_RDONLY);
        EXPECT_GE(fd, 0);
        EXPECT_EQ(::pread(fd, v.data(), bytes, static_cast<off_t>(lba * 4096)), static_cast<ssize_t>(bytes));
        ::close(fd);
        return v;
    }

    static void fill(std::span<uint8_t> s, uint64_t seed) {
        for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>((seed * 131 + i * 7 + (i >> 9)) & 0xff);
    }

    std::string path_;
};

TEST_F(WriterTest, RegularFileNeedsOptIn) {
    WriterOptions o;
    auto w = FencedWriter::open(path_, o);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.error(), Errc::not_nvme);
    o.allow_regular_file = true;
    o.mode = WriterMode::passthrough;
    w = FencedWriter::open(path_, o);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.error(), Errc::invalid_argument);
}

TEST_F(WriterTest, OpenValidatesOptions) {
    WriterOptions o;
    o.allow_regular_file = true;
    for (uint32_t qd : {0u, 1025u}) {
        o.queue_depth = qd;
        auto w = FencedWriter::open(path_, o);
        ASSERT_FALSE(w.ok());
        EXPECT_EQ(w.error(), Errc::invalid_argument);
    }
    o.queue_depth = 1;
    o.timeout_ms = 0;
    auto w = FencedWriter::open(path_, o);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.error(), Errc::invalid_argument);
    auto missing = FencedWriter::open(path_ + ".missing", WriterOptions{});
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.error(), Errc::not_found);
}

TEST_F(WriterTest, Geometry) {
    auto w = open_writer(1024);
    ASSERT_TRUE(w);
    EXPECT_EQ(w->mode(), WriterMode::block);
    EXPECT_GE(w->block_bytes(), 4096u);
    EXPECT_EQ(w->size_blocks(), kBlocks * 4096 / w->block_bytes());
    EXPECT_EQ(w->epoch(), 7u);
    EXPECT_EQ(w->queue_depth(), 1024u);
    EXPECT_FALSE(w->fenced());
    EXPECT_EQ(w->in_flight(), 0u);
    EXPECT_GE(w->max_io_bytes(), 1u << 20);
    EXPECT_STREQ(writer_mode_name(w->mode()), "block");
    EXPECT_STREQ(writer_mode_name(WriterMode::automatic), "auto");
    EXPECT_STREQ(writer_mode_name(WriterMode::passthrough), "passthrough");
}

TEST_F(WriterTest, SyncRoundTrip) {
    auto w = open_writer();
    ASSERT_TRUE(w);
    const uint32_t bs = w->block_bytes();
    AlignedBuffer out(bs * 4, bs), in(bs * 4, bs);
    fill(out.span(), 1);
    auto c = w->write(3, out.span());
    EXPECT_EQ(c.status, IoStatus::ok) << c.error.message();
    EXPECT_FALSE(c.error);
    EXPECT_EQ(c.kind, IoKind::write);
    EXPECT_EQ(c.bytes, bs * 4);
    EXPECT_EQ(w->in_flight(), 0u);

    auto f = w->flush();
    EXPECT_EQ(f.status, IoStatus::ok) << f.error.message();
    EXPECT_EQ(f.kind, IoKind::flush);

    auto r = w->read(3, in.span());
    EXPECT_EQ(r.status, IoStatus::ok) << r.error.message();
    EXPECT_EQ(r.kind, IoKind::read);
    EXPECT_EQ(r.bytes, bs * 4);
    EXPECT_EQ(std::memcmp(out.data(), in.data(), out.size()), 0);
    auto witness = pread_file(3 * bs / 4096, out.size());
    EXPECT_EQ(std::memcmp(out.data(), witness.data(), out.size()), 0);

    // The last block of the file is in bounds.
    AlignedBuffer one(bs, bs);
    fill(one.span(), 2);
    EXPECT_EQ(w->write(w->size_blocks() - 1, one.span()).status, IoStatus::ok);
}

TEST_F(WriterTest, AsyncQueueDepth32) {
    auto w = open_writer(32);
    ASSERT_TRUE(w);
    const uint32_t bs = w->block_bytes();
    constexpr uint32_t n = 32;
    AlignedBuffer out(size_t{bs} * n, bs), in(size_t{bs} * n, bs);
    for (uint32_t i = 0; i < n; ++i) {
        auto blk = out.span().subspan(size_t{i} * bs, bs);
        fill(blk, 100 + i);
        // Scatter: block 7*i mod size, all distinct for 32 < 256.
        ASSERT_TRUE(w->queue_write((7 * i) % w->size_blocks(), blk, 1000 + i).ok());
        EXPECT_EQ(w->in_flight(), i + 1);
    }
    auto s = w->submit();
    ASSERT_TRUE(s.ok()) << s.error().message();
    EXPECT_EQ(*s, n);
    EXPECT_EQ(w->in_flight(), n);

    std::vector<Completion> comps(n);
    std::set<uint64_t> seen;
    size_t total = 0;
    while (total < n) {
        auto r = w->reap(std::span(comps).subspan(total), 1);
        ASSERT_TRUE(r.ok()) << r.error().message();
        total += *r;
    }
    for (const auto& c : comps) {
        EXPECT_EQ(c.status, IoStatus::ok) << c.error.message();
        EXPECT_EQ(c.kind, IoKind::write);
        EXPECT_EQ(c.bytes, bs);
        seen.insert(c.user_data);
    }
    EXPECT_EQ(seen.size(), n);
    EXPECT_EQ(*seen.begin(), 1000u);
    EXPECT_EQ(*seen.rbegin(), 1000u + n - 1);
    EXPECT_EQ(w->in_flight(), 0u);

    // Read everything back at QD 32 through submit_and_reap.
    for (uint32_t i = 0; i < n; ++i)
        ASSERT_TRUE(w->queue_read((7 * i) % w->size_blocks(), in.span().subspan(size_t{i} * bs, bs), i).ok());
    total = 0;
    auto r = w->submit_and_reap(comps, n);
    ASSERT_TRUE(r.ok()) << r.error().message();
    total = *r;
    while (total < n) {
        auto more = w->reap(std::span(comps).subspan(total), 1);
        ASSERT_TRUE(more.ok()) << more.error().message();
        total += *more;
    }
    for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(comps[i].status, IoStatus::ok);
        EXPECT_EQ(comps[i].kind, IoKind::read);
    }
    EXPECT_EQ(std::memcmp(out.data(), in.data(), out.size()), 0);
    EXPECT_EQ(w->in_flight(), 0u);
}

// Keeps qd writes in flight until total have completed, one block-sized
// slot of bufs per write, each recycled on its completion; every completion
// must be ok and the queue never grows past qd.
void keep_queue_full(FencedWriter& w, AlignedBuffer& bufs, uint32_t qd, uint64_t total) {
    const uint32_t bs = w.block_bytes();
    for (uint32_t i = 0; i < qd; ++i)
        ASSERT_TRUE(w.queue_write(i, bufs.span().subspan(size_t{i} * bs, bs), i).ok());
    std::vector<Completion> comps(qd);
    uint64_t done = 0, issued = qd, next = qd;
    while (done < total) {
        auto r = w.submit_and_reap(comps, 1);
        ASSERT_TRUE(r.ok()) << r.error().message();
        for (size_t k = 0; k < *r; ++k) {
            ASSERT_EQ(comps[k].status, IoStatus::ok) << comps[k].error.message();
            ++done;
            const uint64_t slot = comps[k].user_data;
            if (issued < total) {
                ASSERT_TRUE(w.queue_write(next++ % w.size_blocks(), bufs.span().subspan(slot * bs, bs), slot).ok());
                ++issued;
            }
        }
        ASSERT_LE(w.in_flight(), qd);
    }
}

TEST_F(WriterTest, SustainedQueueStaysFull) {
    // Keeps 32 in flight for many rounds: slots are recycled, nothing leaks.
    auto w = open_writer(32);
    ASSERT_TRUE(w);
    const uint32_t bs = w->block_bytes();
    AlignedBuffer bufs(size_t{bs} * 32, bs);
    keep_queue_full(*w, bufs, 32, 2000);
    EXPECT_EQ(w->in_flight(), 0u);
}

TEST_F(WriterTest, BadInputsAreRefusedWithNothingSent) {
    auto w = open_writer(4);
    ASSERT_TRUE(w);
    const uint32_t bs = w->block_bytes();
    AlignedBuffer big(size_t{bs} * 3, bs);
    auto check = [&](Status st, Errc want) {
        ASSERT_FALSE(st.ok());
        EXPECT_EQ(st.error(), want) << st.error().message();
        EXPECT_EQ(w->in_flight(), 0u);
    };
    // Misaligned buffer address.
    check(w->queue_write(0, big.span().subspan(512, bs), 1), Errc::misaligned);
    check(w->queue_read(0, big.span().subspan(512, bs), 1), Errc::misaligned);
    // Misaligned length.
    check(w->queue_write(0, big.span().first(bs + 512), 1), Errc::misaligned);
    check(w->queue_read(0, big.span().first(512), 1), Errc::misaligned);
    // Zero length.
    check(w->queue_write(0, big.span().first(0), 1), Errc::invalid_argument);
    check(w->queue_read(0, big.span().first(0), 1), Errc::invalid_argument);
    // Past the end, partly past the end, and an LBA that would overflow.
    check(w->queue_write(w->size_blocks(), big.span().first(bs), 1), Errc::out_of_bounds);
    check(w->queue_write(w->size_blocks() - 1, big.span().first(2 * bs), 1), Errc::out_of_bounds);
    check(w->queue_read(UINT64_MAX, big.span().first(bs), 1), Errc::out_of_bounds);
    check(w->queue_write(UINT64_MAX - 1, big.span().first(2 * bs), 1), Errc::out_of_bounds);

    // Synchronous calls report the same errors as io_error.
    auto c = w->write(0, big.span().subspan(512, bs));
    EXPECT_EQ(c.status, IoStatus::io_error);
    EXPECT_EQ(c.error, Errc::misaligned);
    EXPECT_EQ(w->in_flight(), 0u);

    // Queue overflow: four fit, the fifth does not, nothing else changes.
    for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(w->queue_write(i, big.span().first(bs), i).ok());
    EXPECT_EQ(w->in_flight(), 4u);
    auto full = w->queue_write(5, big.span().first(bs), 5);
    ASSERT_FALSE(full.ok());
    EXPECT_EQ(full.error(), Errc::queue_full);
    EXPECT_EQ(w->queue_flush(6).error(), Errc::queue_full);
    EXPECT_EQ(w->queue_read(5, big.span().first(bs), 5).error(), Errc::queue_full);
    EXPECT_EQ(w->in_flight(), 4u);
    // A sync call refuses to run beside queued asynchronous I/O.
    auto busy = w->write(0, big.span().first(bs));
    EXPECT_EQ(busy.status, IoStatus::io_error);
    EXPECT_EQ(busy.error, Errc::invalid_argument);
    EXPECT_EQ(w->in_flight(), 4u);

    // Still full after submit, until reaped.
    auto s = w->submit();
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(*s, 4u);
    EXPECT_EQ(w->queue_write(5, big.span().first(bs), 5).error(), Errc::queue_full);
    Completion comps[4];
    auto bad = w->reap(std::span(comps, 2), 3);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.error(), Errc::invalid_argument);
    size_t total = 0;
    while (total < 4) {
        auto r = w->reap(std::span(comps).subspan(total), 1);
        ASSERT_TRUE(r.ok());
        total += *r;
    }
    EXPECT_EQ(w->in_flight(), 0u);
    EXPECT_FALSE(w->fenced());
}

TEST_F(WriterTest, ReapTimeoutIsBounded) {
    auto w = open_writer(4, 300);
    ASSERT_TRUE(w);
    Completion c[2];
    auto t0 = std::chrono::steady_clock::now();
    auto r = w->reap(c, 1);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error(), Errc::timeout);
    EXPECT_GE(ms, 290);
    EXPECT_LT(ms, 2000);

    // Waiting for more than are in flight: what arrived is returned when
    // the bound runs out, not dropped.
    AlignedBuffer b(w->block_bytes(), w->block_bytes());
    ASSERT_TRUE(w->queue_write(0, b.span(), 42).ok());
    t0 = std::chrono::steady_clock::now();
    r = w->submit_and_reap(c, 2);
    ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ(*r, 1u);
    EXPECT_EQ(c[0].user_data, 42u);
    EXPECT_EQ(c[0].status, IoStatus::ok);
    EXPECT_GE(ms, 290);
    EXPECT_LT(ms, 2000);
    EXPECT_EQ(w->in_flight(), 0u);

    // Nothing ready and min_complete 0: returns at once.
    t0 = std::chrono::steady_clock::now();
    r = w->reap(c, 0);
    ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, 0u);
    EXPECT_LT(ms, 100);
}

TEST_F(WriterTest, DestructorDrainsInFlight) {
    // Queued and submitted I/Os are waited for (not abandoned) when the
    // writer goes away; queued-only ones are never sent.
    AlignedBuffer b(4096 * 8, 4096);
    fill(b.span(), 9);
    {
        auto w = open_writer(8);
        ASSERT_TRUE(w);
        for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(w->queue_write(10 + i, b.span().subspan(i * 4096, 4096), i).ok());
        ASSERT_TRUE(w->submit().ok());
        for (uint32_t i = 4; i < 8; ++i) ASSERT_TRUE(w->queue_write(10 + i, b.span().subspan(i * 4096, 4096), i).ok());
        EXPECT_EQ(w->in_flight(), 8u);
    }
    auto sent = pread_file(10, 4 * 4096);
    EXPECT_EQ(std::memcmp(sent.data(), b.data(), sent.size()), 0);
    auto unsent = pread_file(14, 4 * 4096);
    EXPECT_EQ(std::vector<uint8_t>(4 * 4096, 0), unsent);
}

TEST_F(WriterTest, FixedBuffersRoundTrip) {
    auto w = open_writer(8);
    ASSERT_TRUE(w);
    const uint32_t bs = w->block_bytes();
    EXPECT_EQ(w->fixed_buffers(), 0u);
    AlignedBuffer reg(size_t{bs} * 4, bs), other(bs, bs), in(size_t{bs} * 4, bs);
    const std::span<uint8_t> region = reg.span();
    ASSERT_TRUE(w->register_buffers({&region, 1}).ok());
    EXPECT_EQ(w->fixed_buffers(), 1u);

    // Inside the region (fixed I/O), a sub-span of it, and a buffer outside
    // it (ordinary I/O): all land, and read back through fixed buffers too.
    fill(reg.span(), 21);
    fill(other.span(), 22);
    EXPECT_EQ(w->write(0, reg.span()).status, IoStatus::ok);
    EXPECT_EQ(w->write(8, reg.span().subspan(bs, bs)).status, IoStatus::ok);
    EXPECT_EQ(w->write(9, other.span()).status, IoStatus::ok);
    auto witness = pread_file(0, size_t{bs} * 4);
    EXPECT_EQ(std::memcmp(witness.data(), reg.data(), witness.size()), 0);
    witness = pread_file(8 * bs / 4096, bs);
    EXPECT_EQ(std::memcmp(witness.data(), reg.data() + bs, bs), 0);
    witness = pread_file(9 * bs / 4096, bs);
    EXPECT_EQ(std::memcmp(witness.data(), other.data(), bs), 0);
    auto r = w->read(0, reg.span().subspan(0, size_t{bs} * 2));  // fixed read over what was written at 0..1
    EXPECT_EQ(r.status, IoStatus::ok) << r.error.message();
    EXPECT_EQ(r.bytes, bs * 2);

    // The queue checks still come first, fixed buffer or not.
    EXPECT_EQ(w->queue_write(w->size_blocks(), reg.span().subspan(0, bs), 1).error(), Errc::out_of_bounds);
    EXPECT_EQ(w->queue_write(0, reg.span().subspan(1, bs), 1).error(), Errc::misaligned);

    // Not while I/Os are in flight; bad regions change nothing.
    ASSERT_TRUE(w->queue_write(0, reg.span().subspan(0, bs), 1).ok());
    EXPECT_EQ(w->register_buffers({&region, 1}).error(), Errc::invalid_argument);
    Completion c[1];
    ASSERT_TRUE(w->submit_and_reap(c, 1).ok());
    EXPECT_EQ(c[0].status, IoStatus::ok);
    const std::span<uint8_t> bad[2] = {region, std::span<uint8_t>()};
    EXPECT_EQ(w->register_buffers(bad).error(), Errc::invalid_argument);
    EXPECT_EQ(w->fixed_buffers(), 1u);

    // Replace with two regions, then unregister all; I/O keeps working.
    const std::span<uint8_t> two[2] = {other.span(), in.span()};
    ASSERT_TRUE(w->register_buffers(two).ok());
    EXPECT_EQ(w->fixed_buffers(), 2u);
    r = w->read(0, in.span());
    EXPECT_EQ(r.status, IoStatus::ok) << r.error.message();
    EXPECT_EQ(std::memcmp(in.data(), reg.data(), in.size()), 0);
    ASSERT_TRUE(w->register_buffers({}).ok());
    EXPECT_EQ(w->fixed_buffers(), 0u);
    EXPECT_EQ(w->write(0, reg.span()).status, IoStatus::ok);
}

TEST_F(WriterTest, SingleThreadSustainedWithFixedBuffers) {
    // The benchmark's configuration: single_thread (SINGLE_ISSUER |
    // DEFER_TASKRUN where the kernel has them) plus one registered region;
    // a full queue is kept for many rounds and every completion is ok.
    auto w = open_writer(32, 5000, true);
    ASSERT_TRUE(w);
    const uint32_t bs = w->block_bytes();
    AlignedBuffer bufs(size_t{bs} * 32, bs);
    const std::span<uint8_t> region = bufs.span();
    ASSERT_TRUE(w->register_buffers({&region, 1}).ok());
    keep_queue_full(*w, bufs, 32, 2000);
    EXPECT_EQ(w->in_flight(), 0u);

    // The bounded wait still holds with deferred task work.
    Completion c[1];
    auto t0 = std::chrono::steady_clock::now();
    auto r = w->reap(c, 1);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.error(), Errc::timeout);
    EXPECT_LT(ms, 10000);
}

// Counts this thread's io_uring_enter calls with the kernel's own
// tracepoint (perf_event_open on syscalls:sys_enter_io_uring_enter), so the
// real ring is measured, not a model of it. Needs root and tracefs.
class EnterCounter {
public:
    EnterCounter() {
        for (const char* dir : {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}) {
            std::ifstream f(std::string(dir) + "/events/syscalls/sys_enter_io_uring_enter/id");
            uint64_t id = 0;
            if (!(f >> id)) continue;
            perf_event_attr a{};
            a.type = PERF_TYPE_TRACEPOINT;
            a.size = sizeof a;
            a.config = id;
            fd_ = static_cast<int>(::syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC));
            if (fd_ >= 0) return;
        }
    }
    ~EnterCounter() {
        if (fd_ >= 0) ::close(fd_);
    }
    bool ok() const { return fd_ >= 0; }
    uint64_t count() const {
        uint64_t n = 0;
        return ::read(fd_, &n, sizeof n) == static_cast<ssize_t>(sizeof n) ? n : ~uint64_t{0};
    }

private:
    int fd_ = -1;
};

TEST_F(WriterTest, CompletionsParkedInTaskWorkRideOnTheEnterThatSubmits) {
    // single_thread: DEFER_TASKRUN parks completions until this thread
    // enters the kernel. submit_and_reap with a write queued must submit it
    // and collect the parked ones in one io_uring_enter, not flush them with
    // a separate enter first (issue 31: half the enters at depth 32).
    EnterCounter enters;
    ASSERT_TRUE(enters.ok()) << "perf_event_open on syscalls:sys_enter_io_uring_enter failed (root and tracefs "
                                "are needed): "
                             << std::strerror(errno);
    auto w = open_writer(8, 5000, true);
    ASSERT_TRUE(w);
    const uint32_t bs = w->block_bytes();
    AlignedBuffer bufs(size_t{bs} * 5, bs);
    for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(w->queue_write(i, bufs.span().subspan(size_t{i} * bs, bs), i).ok());
    ASSERT_EQ(*w->submit(), 4u);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // they complete meanwhile, parked
    ASSERT_TRUE(w->queue_write(4, bufs.span().subspan(size_t{4} * bs, bs), 4).ok());
    Completion out[8];
    const uint64_t before = enters.count();
    auto got = w->submit_and_reap(out, 1);
    const uint64_t used = enters.count() - before;
    ASSERT_TRUE(got.ok()) << got.error().message();
    EXPECT_EQ(*got, 4u) << "the four parked completions, collected by the same enter";
    EXPECT_EQ(used, 1u) << "io_uring_enter calls for one submit_and_reap";
    for (size_t i = 0; i < *got; ++i) EXPECT_EQ(out[i].status, IoStatus::ok);
    auto last = w->reap(out, 1);
    ASSERT_TRUE(last.ok());
    EXPECT_EQ(w->in_flight(), 0u);
}

TEST(FixedBufferIndex, PicksTheRegionThatHoldsTheWholeBuffer) {
    alignas(64) static uint8_t buf[64 + 8192];
    uint8_t* const mem = buf + 64;  // room below the regions
    const std::span<uint8_t> regions[3] = {{mem, 4096}, {mem + 4096, 2048}, {mem, 8192}};
    EXPECT_EQ(fixed_buffer_index(regions, mem, 4096), 0);
    EXPECT_EQ(fixed_buffer_index(regions, mem + 100, 3996), 0);    // ends exactly at the end
    EXPECT_EQ(fixed_buffer_index(regions, mem + 4096, 2048), 1);
    EXPECT_EQ(fixed_buffer_index(regions, mem + 4000, 200), 2);    // straddles 0 and 1: only 2 holds it
    EXPECT_EQ(fixed_buffer_index(regions, mem + 6144, 2048), 2);
    EXPECT_EQ(fixed_buffer_index(regions, mem + 6144, 2049), -1);  // one byte past every region
    EXPECT_EQ(fixed_buffer_index(regions, mem + 8192, 1), -1);
    EXPECT_EQ(fixed_buffer_index(regions, mem, 0), -1);
    EXPECT_EQ(fixed_buffer_index(regions, buf + 63, 2), -1);        // starts one byte before
    EXPECT_EQ(fixed_buffer_index({}, mem, 1), -1);
    // Lengths near the top of the address space do not wrap around.
    EXPECT_EQ(fixed_buffer_index(regions, mem + 1, SIZE_MAX), -1);
}

TEST(AlignedBufferTest, AlignsRoundsAndMoves) {
    AlignedBuffer a(5000, 4096);
    EXPECT_EQ(a.size(), 8192u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 4096, 0u);
    for (auto byte : a.span()) ASSERT_EQ(byte, 0);
    uint8_t* p = a.data();
    AlignedBuffer b(std::move(a));
    EXPECT_EQ(b.data(), p);
    EXPECT_EQ(a.data(), nullptr);
    EXPECT_EQ(a.size(), 0u);
    AlignedBuffer c(512, 512);
    c = std::move(b);
    EXPECT_EQ(c.data(), p);
    EXPECT_EQ(c.size(), 8192u);
    const AlignedBuffer& cc = c;
    EXPECT_EQ(cc.span().size(), 8192u);
}

TEST(ClassifyCompletion, BlockMode) {
    auto c = classify_completion(WriterMode::block, IoKind::write, 4096, 4096);
    EXPECT_EQ(c.status, IoStatus::ok);
    EXPECT_FALSE(c.error);
    EXPECT_EQ(c.bytes, 4096u);

    c = classify_completion(WriterMode::block, IoKind::write, -EBADE, 4096);
    EXPECT_EQ(c.status, IoStatus::fenced);
    EXPECT_TRUE(is_fenced(c.error));
    EXPECT_EQ(c.error, std::error_code(EBADE, std::system_category()));
    EXPECT_EQ(c.bytes, 0u);

    c = classify_completion(WriterMode::block, IoKind::read, -EIO, 4096);
    EXPECT_EQ(c.status, IoStatus::io_error);
    EXPECT_EQ(c.error, std::error_code(EIO, std::system_category()));
    EXPECT_FALSE(is_fenced(c.error));

    c = classify_completion(WriterMode::block, IoKind::write, 2048, 4096);  // short write
    EXPECT_EQ(c.status, IoStatus::io_error);
    EXPECT_EQ(c.error, std::error_code(EIO, std::system_category()));

    c = classify_completion(WriterMode::block, IoKind::flush, 0, 0);
    EXPECT_EQ(c.status, IoStatus::ok);
    EXPECT_EQ(c.kind, IoKind::flush);
}

TEST(ClassifyCompletion, Passthrough) {
    // As measured in the lab: DNR | More | Reservation Conflict.
    auto c = classify_completion(WriterMode::passthrough, IoKind::write, 0x6083, 4096);
    EXPECT_EQ(c.status, IoStatus::fenced);
    EXPECT_TRUE(is_nvme(c.error, NvmeStatus::reservation_conflict));
    EXPECT_TRUE(is_fenced(c.error));
    EXPECT_EQ(c.bytes, 0u);

    c = classify_completion(WriterMode::passthrough, IoKind::write, 0x83, 4096);
    EXPECT_EQ(c.status, IoStatus::fenced);

    c = classify_completion(WriterMode::passthrough, IoKind::write, 0, 4096);
    EXPECT_EQ(c.status, IoStatus::ok);
    EXPECT_EQ(c.bytes, 4096u);

    c = classify_completion(WriterMode::passthrough, IoKind::write, 0x4080, 4096);  // LBA out of range
    EXPECT_EQ(c.status, IoStatus::io_error);
    EXPECT_TRUE(is_nvme(c.error, NvmeStatus::lba_out_of_range));
    EXPECT_FALSE(is_fenced(c.error));

    c = classify_completion(WriterMode::passthrough, IoKind::read, 0x4281, 4096);
    EXPECT_EQ(c.status, IoStatus::io_error);
    EXPECT_TRUE(is_nvme(c.error, NvmeStatus::unrecovered_read_error));

    c = classify_completion(WriterMode::passthrough, IoKind::write, -EINTR, 4096);
    EXPECT_EQ(c.status, IoStatus::io_error);
    EXPECT_EQ(c.error, std::error_code(EINTR, std::system_category()));

    c = classify_completion(WriterMode::passthrough, IoKind::write, -EBADE, 4096);
    EXPECT_EQ(c.status, IoStatus::fenced);

    // Only flag bits, no status: an error, never an empty error_code.
    c = classify_completion(WriterMode::passthrough, IoKind::write, 0x4000, 4096);
    EXPECT_EQ(c.status, IoStatus::io_error);
    EXPECT_TRUE(c.error);

    c = classify_completion(WriterMode::automatic, IoKind::write, 0, 4096);
    EXPECT_EQ(c.status, IoStatus::io_error);
    EXPECT_EQ(c.error, Errc::invalid_argument);
}

// ---------------------------------------------------------------- the fake ring
// The latch, cancel-to-NOP, drain and submit accounting, driven through the
// same RingWriter the library uses, over a scripted ring (tests/fake_ring.hpp).

using FakeWriter = detail::RingWriter<test::FakeRing>;
constexpr uint32_t kFakeBlock = 512;

std::unique_ptr<FakeWriter> fake_writer(WriterMode mode, uint32_t qd = 8, uint32_t timeout_ms = 100) {
    detail::WriterTarget t;
    t.fd = Fd(-1);
    t.mode = mode;
    t.block_bytes = kFakeBlock;
    t.size_blocks = 1u << 20;
    t.nsid = 1;
    t.max_io_bytes = 128 * 1024;
    WriterOptions o;
    o.queue_depth = qd;
    o.timeout_ms = timeout_ms;
    auto w = std::make_unique<FakeWriter>(std::move(t), o);
    EXPECT_TRUE(w->init().ok());
    return w;
}

int32_t ok_res(const test::SentIo& io) { return static_cast<int32_t>(io.len); }

TEST(FakeRingWriter, FirstFencedLatchesAndSettledWaitsForEveryAdmittedWrite) {
    auto w = fake_writer(WriterMode::block);
    AlignedBuffer buf(4 * kFakeBlock, 4096);
    for (uint64_t i = 0; i < 4; ++i)
        ASSERT_TRUE(w->queue_write(i, buf.span().subspan(i * kFakeBlock, kFakeBlock), 100 + i).ok());
    auto n = w->submit();
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 4u);
    auto& r = w->ring();
    ASSERT_EQ(r.sent.size(), 4u);
    EXPECT_EQ(r.sent[2].opcode, IORING_OP_WRITE);
    EXPECT_EQ(r.sent[2].off, 2u * kFakeBlock);
    EXPECT_FALSE(w->fenced());
    EXPECT_FALSE(w->settled());

    // The device refuses the third write while the others are still admitted.
    r.complete(2, -EBADE);
    Completion out[8];
    auto got = w->reap(out, 1);
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(*got, 1u);
    EXPECT_EQ(out[0].status, IoStatus::fenced);
    EXPECT_EQ(out[0].user_data, 102u);
    EXPECT_EQ(out[0].error, std::error_code(EBADE, std::system_category()));
    EXPECT_TRUE(w->fenced());
    EXPECT_FALSE(w->settled()) << "three writes admitted before the latch are still on the device";

    // Latched: nothing new is accepted, nothing sent, in_flight unchanged.
    EXPECT_EQ(w->queue_write(9, buf.span().first(kFakeBlock), 9).error(), Errc::fenced);
    EXPECT_EQ(w->queue_read(9, buf.span().first(kFakeBlock), 9).error(), Errc::fenced);
    EXPECT_EQ(w->queue_flush(9).error(), Errc::fenced);
    EXPECT_EQ(w->in_flight(), 3u);
    EXPECT_EQ(r.sent.size(), 4u);

    // An admitted write may still complete ok after the fenced one (the
    // device ordered it before the preempt): reported as ok, not hidden.
    r.complete(0, ok_res(r.sent[0]));
    got = w->reap(out, 1);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(out[0].status, IoStatus::ok);
    EXPECT_EQ(out[0].bytes, kFakeBlock);
    EXPECT_FALSE(w->settled());

    // A short transfer is an I/O error, never ok.
    r.complete(1, static_cast<int32_t>(kFakeBlock / 2));
    got = w->reap(out, 1);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(out[0].status, IoStatus::io_error);
    EXPECT_EQ(out[0].error, std::error_code(EIO, std::system_category()));
    EXPECT_FALSE(w->settled());

    r.complete(3, ok_res(r.sent[3]));
    got = w->reap(out, 1);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(out[0].user_data, 103u);
    EXPECT_TRUE(w->settled());
    EXPECT_EQ(w->in_flight(), 0u);
    EXPECT_EQ(r.sent_real(), 4u);
}

TEST(FakeRingWriter, QueuedWritesBecomeNopsAfterTheLatch) {
    auto w = fake_writer(WriterMode::block);
    auto& r = w->ring();
    AlignedBuffer buf(4 * kFakeBlock, 4096);
    for (uint64_t i = 0; i < 3; ++i)
        ASSERT_TRUE(w->queue_write(i, buf.span().subspan(i * kFakeBlock, kFakeBlock), i).ok());
    // A partial submit: the kernel takes one of three.
    r.submit_script = {1};
    auto n = w->submit();
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 1u);
    EXPECT_EQ(w->in_flight(), 3u);
    EXPECT_EQ(r.sq_ready(), 2u);

    r.complete(0, -EBADE);
    Completion out[8];
    ASSERT_EQ(*w->reap(out, 1), 1u);
    EXPECT_TRUE(w->fenced());
    EXPECT_TRUE(w->settled()) << "the only I/O the device saw has completed";

    // The two still queued go to the kernel as NOPs: nothing reaches the device.
    auto s = w->submit();
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error(), Errc::fenced);
    ASSERT_EQ(r.sent.size(), 3u);
    EXPECT_EQ(r.sent[1].opcode, IORING_OP_NOP);
    EXPECT_EQ(r.sent[2].opcode, IORING_OP_NOP);
    EXPECT_EQ(r.sent_real(), 1u);
    auto got = w->reap(out, 2);
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(*got, 2u);
    std::set<uint64_t> users;
    for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(out[i].status, IoStatus::fenced);
        EXPECT_EQ(out[i].error, Errc::fenced);
        users.insert(out[i].user_data);
    }
    EXPECT_EQ(users, (std::set<uint64_t>{1, 2}));
    EXPECT_EQ(w->in_flight(), 0u);
}

// A fake writer whose ring parks completions as DEFER_TASKRUN does, and
// a buffer for eight one-block writes.
struct ParkedFake {
    std::unique_ptr<FakeWriter> w = fake_writer(WriterMode::block);
    test::FakeRing& r = w->ring();
    AlignedBuffer buf{8 * kFakeBlock, 4096};
    ParkedFake() { r.park_completions = true; }
    Status queue(uint64_t i) { return w->queue_write(i, buf.span().subspan(i * kFakeBlock, kFakeBlock), i); }
};

TEST(FakeRingWriter, ParkedCompletionsCostNoEnterOfTheirOwn) {
    // DEFER_TASKRUN: completions wait in task work until the writer enters
    // the kernel. A path that enters anyway (submit, wait) collects them
    // there; only a reap that will not wait flushes them with an enter.
    ParkedFake f;
    auto& w = f.w;
    auto& r = f.r;
    auto queue = [&](uint64_t i) { return f.queue(i); };
    for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(queue(i).ok());
    ASSERT_EQ(*w->submit(), 3u);
    r.complete(0, ok_res(r.sent[0]));
    r.complete(1, ok_res(r.sent[1]));
    ASSERT_TRUE(queue(3).ok());
    Completion out[8];
    unsigned before = r.enter_calls;
    auto got = w->submit_and_reap(out, 1);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, 2u);
    EXPECT_EQ(r.enter_calls - before, 1u) << "submit, parked completions and wait in one enter";
    EXPECT_EQ(r.get_events_calls, 0u);
    EXPECT_EQ(r.sent.size(), 4u);

    // Nothing visible, one parked: a reap that may wait enters once.
    r.complete(2, ok_res(r.sent[2]));
    before = r.enter_calls;
    got = w->reap(out, 1);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, 1u);
    EXPECT_EQ(r.enter_calls - before, 1u);
    EXPECT_EQ(r.get_events_calls, 0u);

    // A reap that will not wait still sees parked completions (one enter),
    // and costs no enter when nothing is parked.
    before = r.enter_calls;
    got = w->reap(out, 0);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, 0u);
    EXPECT_EQ(r.enter_calls, before);
    r.complete(3, ok_res(r.sent[3]));
    got = w->reap(out, 0);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, 1u);
    EXPECT_EQ(r.get_events_calls, 1u);
    EXPECT_EQ(w->in_flight(), 0u);
}

TEST(FakeRingWriter, AParkedFencedCompletionLatchesOnTheEnterThatCollectsIt) {
    ParkedFake f;
    auto& w = f.w;
    auto& r = f.r;
    auto queue = [&](uint64_t i) { return f.queue(i); };
    ASSERT_TRUE(queue(0).ok());
    ASSERT_TRUE(queue(1).ok());
    ASSERT_EQ(*w->submit(), 2u);
    r.complete(0, -EBADE);
    ASSERT_TRUE(queue(2).ok());
    Completion out[8];
    auto got = w->submit_and_reap(out, 1);
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(*got, 1u);
    EXPECT_EQ(out[0].status, IoStatus::fenced);
    EXPECT_TRUE(w->fenced());
    EXPECT_EQ(queue(3).error(), Errc::fenced) << "latched the moment the refusal was collected";
    r.complete_all(ok_res);
    while (w->in_flight() > 0) ASSERT_TRUE(w->reap(out, 1).ok());
    EXPECT_TRUE(w->settled());
}

TEST(FakeRingWriter, SubmitAndReapCancelsWhatALatchInTheSameCallLeftQueued) {
    auto w = fake_writer(WriterMode::block);
    auto& r = w->ring();
    AlignedBuffer buf(4 * kFakeBlock, 4096);
    for (uint64_t i = 0; i < 2; ++i)
        ASSERT_TRUE(w->queue_write(i, buf.span().subspan(i * kFakeBlock, kFakeBlock), i).ok());
    ASSERT_EQ(*w->submit(), 2u);
    for (uint64_t i = 2; i < 4; ++i)
        ASSERT_TRUE(w->queue_write(i, buf.span().subspan(i * kFakeBlock, kFakeBlock), i).ok());
    r.complete(0, -EBADE);  // arrives before the next submit
    Completion out[8];
    auto got = w->submit_and_reap(out, 1);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(out[0].status, IoStatus::fenced);
    EXPECT_EQ(r.sent_real(), 2u) << "writes 2 and 3 were queued when the latch came: never sent";
    ASSERT_EQ(r.sent.size(), 4u);
    EXPECT_EQ(r.sent[2].opcode, IORING_OP_NOP);
    EXPECT_EQ(r.sent[3].opcode, IORING_OP_NOP);
    EXPECT_FALSE(w->settled());
    r.complete(1, ok_res(r.sent[1]));
    size_t total = *got;
    while (w->in_flight() > 0) {
        auto more = w->reap(std::span<Completion>(out).subspan(0, 8), 1);
        ASSERT_TRUE(more.ok());
        total += *more;
    }
    EXPECT_EQ(total, 4u);
    EXPECT_TRUE(w->settled());
}

TEST(FakeRingWriter, PassthroughStatusAndCommand) {
    auto w = fake_writer(WriterMode::passthrough);
    auto& r = w->ring();
    AlignedBuffer buf(3 * kFakeBlock, 4096);
    for (uint64_t i = 0; i < 3; ++i)
        ASSERT_TRUE(w->queue_write(500 + i, buf.span().subspan(i * kFakeBlock, kFakeBlock), i).ok());
    ASSERT_EQ(*w->submit(), 3u);
    ASSERT_EQ(r.sent.size(), 3u);
    EXPECT_EQ(r.sent[1].opcode, IORING_OP_URING_CMD);
    EXPECT_EQ(r.sent[1].cdw10, 501u);
    r.complete(0, 0);
    r.complete(1, 0x4002);  // Invalid Field with DNR: an I/O error, not fenced
    r.complete(2, 0x6083);  // DNR | More | Reservation Conflict
    Completion out[4];
    auto got = w->reap(out, 3);
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(*got, 3u);
    EXPECT_EQ(out[0].status, IoStatus::ok);
    EXPECT_EQ(out[0].bytes, kFakeBlock);
    EXPECT_EQ(out[1].status, IoStatus::io_error);
    EXPECT_EQ(out[2].status, IoStatus::fenced);
    EXPECT_EQ(out[2].error, make_nvme_error(0x83));
    EXPECT_TRUE(w->fenced());
    EXPECT_TRUE(w->settled());
}

TEST(FakeRingWriter, SubmitAccountingAcrossPartialAndFailedSubmits) {
    auto w = fake_writer(WriterMode::block);
    auto& r = w->ring();
    AlignedBuffer buf(5 * kFakeBlock, 4096);
    for (uint64_t i = 0; i < 5; ++i)
        ASSERT_TRUE(w->queue_write(i, buf.span().subspan(i * kFakeBlock, kFakeBlock), 10 + i).ok());
    r.submit_script = {2, -EAGAIN, -EBUSY, 5};
    EXPECT_EQ(*w->submit(), 2u);
    EXPECT_EQ(w->in_flight(), 5u);
    auto s = w->submit();
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error(), std::error_code(EAGAIN, std::system_category()));
    EXPECT_EQ(w->in_flight(), 5u);
    EXPECT_EQ(r.sent.size(), 2u);
    // submit_and_reap with a completion ready: the error is not returned,
    // the unsent stay queued.
    r.complete(0, ok_res(r.sent[0]));
    Completion out[8];
    auto got = w->submit_and_reap(out, 1);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, 1u);
    EXPECT_EQ(w->in_flight(), 4u);
    EXPECT_EQ(r.sent.size(), 2u);
    EXPECT_EQ(*w->submit(), 3u);
    EXPECT_EQ(r.sent.size(), 5u);
    // Each queued I/O was sent exactly once, in order.
    for (size_t i = 0; i < 5; ++i) EXPECT_EQ(r.sent[i].off, i * kFakeBlock);
    r.complete_all(ok_res);
    got = w->reap(out, 4);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, 4u);
    std::set<uint64_t> users;
    for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(out[i].status, IoStatus::ok);
        users.insert(out[i].user_data);
    }
    EXPECT_EQ(users, (std::set<uint64_t>{11, 12, 13, 14}));
    EXPECT_EQ(w->in_flight(), 0u);
    // A full queue is refused before any SQE is taken.
    AlignedBuffer more(9 * kFakeBlock, 4096);
    for (uint64_t i = 0; i < 8; ++i)
        ASSERT_TRUE(w->queue_write(i, more.span().subspan(i * kFakeBlock, kFakeBlock), i).ok());
    EXPECT_EQ(w->queue_write(8, more.span().subspan(8 * kFakeBlock, kFakeBlock), 8).error(), Errc::queue_full);
    EXPECT_EQ(*w->submit(), 8u);
    r.complete_all(ok_res);
    EXPECT_EQ(*w->reap(out, 8), 8u);
}

TEST(FakeRingWriter, WaitsAreBoundedAndRetryInterruptions) {
    auto w = fake_writer(WriterMode::block, 8, 50);
    auto& r = w->ring();
    AlignedBuffer buf(kFakeBlock, 4096);
    ASSERT_TRUE(w->queue_write(0, buf.span().first(kFakeBlock), 1).ok());
    ASSERT_EQ(*w->submit(), 1u);
    Completion out[2];
    // -ETIME from the kernel: the bound ran out, nothing arrived.
    r.wait_script = {-ETIME};
    auto got = w->reap(out, 1);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.error(), Errc::timeout);
    EXPECT_EQ(w->in_flight(), 1u);
    // -EINTR and -EAGAIN are retried; the completion that then arrives is returned.
    r.wait_script = {-EINTR, -EAGAIN};
    const unsigned before = r.wait_calls;
    r.on_wait = [before](test::FakeRing& fr) {
        if (fr.wait_calls == before + 3 && fr.outstanding() == 1) fr.complete(0, static_cast<int32_t>(kFakeBlock));
    };
    got = w->reap(out, 1);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, 1u);
    EXPECT_EQ(out[0].status, IoStatus::ok);
    EXPECT_EQ(r.wait_calls, before + 3);
    // Another errno is returned as such.
    r.on_wait = nullptr;
    ASSERT_TRUE(w->queue_write(0, buf.span().first(kFakeBlock), 2).ok());
    ASSERT_EQ(*w->submit(), 1u);
    r.wait_script = {-EBADF};
    got = w->reap(out, 1);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.error(), std::error_code(EBADF, std::system_category()));
    r.complete(1, static_cast<int32_t>(kFakeBlock));
    EXPECT_EQ(*w->reap(out, 1), 1u);
}

TEST(FakeRingWriter, DestructorSendsQueuedWritesAsNopsAndDrainsTheRest) {
    std::vector<test::SentIo> log;
    {
        auto w = fake_writer(WriterMode::block);
        auto& r = w->ring();
        r.sent_log = &log;
        AlignedBuffer buf(3 * kFakeBlock, 4096);
        ASSERT_TRUE(w->queue_write(0, buf.span().first(kFakeBlock), 0).ok());
        ASSERT_EQ(*w->submit(), 1u);
        ASSERT_TRUE(w->queue_write(1, buf.span().subspan(kFakeBlock, kFakeBlock), 1).ok());
        ASSERT_TRUE(w->queue_write(2, buf.span().subspan(2 * kFakeBlock, kFakeBlock), 2).ok());
        // The device finishes the admitted write while the destructor waits.
        r.on_wait = [](test::FakeRing& fr) {
            if (fr.outstanding() > 0) fr.complete(0, static_cast<int32_t>(kFakeBlock));
        };
    }
    ASSERT_EQ(log.size(), 3u);
    EXPECT_EQ(log[0].opcode, IORING_OP_WRITE);
    EXPECT_EQ(log[1].opcode, IORING_OP_NOP);
    EXPECT_EQ(log[2].opcode, IORING_OP_NOP);
}

TEST(FakeRingWriterDeathTest, DestructorAbortsWhenTheDeviceNeverCompletes) {
    ::testing::FLAGS_gtest_death_test_style = "threadsafe";
    EXPECT_DEATH(
        {
            auto w = fake_writer(WriterMode::block, 8, 20);
            AlignedBuffer buf(kFakeBlock, 4096);
            if (!w->queue_write(0, buf.span(), 0).ok()) std::_Exit(0);
            (void)w->submit();
            w.reset();
        },
        "still in flight");
}

}  // namespace
}  // namespace nvfence
