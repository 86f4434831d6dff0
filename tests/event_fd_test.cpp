// SPDX-License-Identifier: MIT
// FencedWriter::event_fd(): readable when completions are ready to reap,
// fencing included; cleared by the reap that drains them. On a real
// io_uring over a regular file (O_DIRECT), over the scripted ring (a reap
// that fills its span leaves it readable), and over the testing kit (a
// preempt while a write is in flight).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "fake_ring.hpp"
#include "nvfence/testing.hpp"
#include "nvfence/writer.hpp"
#include "writer/ring_writer.hpp"

namespace nvfence {
namespace {

// Whether @p fd is readable within @p timeout_ms.
bool readable(int fd, int timeout_ms = 0) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

// A 1 MiB scratch file with O_DIRECT (tmpfs before Linux 6.6 has none).
std::string direct_file() {
    const char* const dirs[] = {std::getenv("TMPDIR"), "/var/tmp", "/tmp"};
    for (const char* d : dirs) {
        if (!d || !*d) continue;
        std::string p = std::string(d) + "/nvfence-eventfd-XXXXXX";
        int fd = ::mkstemp(p.data());
        if (fd < 0) continue;
        const bool sized = ::ftruncate(fd, 1 << 20) == 0;
        ::close(fd);
        int probe = ::open(p.c_str(), O_RDWR | O_DIRECT);
        if (probe >= 0) ::close(probe);
        if (sized && probe >= 0) return p;
        ::unlink(p.c_str());
    }
    return {};
}

class EventFdFile : public ::testing::TestWithParam<bool> {
protected:
    void SetUp() override {
        path_ = direct_file();
        if (path_.empty()) GTEST_SKIP() << "no directory with O_DIRECT among TMPDIR, /var/tmp, /tmp";
    }
    void TearDown() override {
        if (!path_.empty()) ::unlink(path_.c_str());
    }
    std::string path_;
};

// single_thread (DEFER_TASKRUN: completions parked in task work until an
// enter) and the default ring.
TEST_P(EventFdFile, ReadableAfterACompletionNotBeforeClearedByTheReap) {
    WriterOptions o;
    o.allow_regular_file = true;
    o.single_thread = GetParam();
    auto w = FencedWriter::open(path_, o);
    ASSERT_TRUE(w) << w.error().message();
    auto fd = (*w)->event_fd();
    ASSERT_TRUE(fd) << fd.error().message();
    ASSERT_GE(*fd, 0);
    EXPECT_EQ(*(*w)->event_fd(), *fd);  // one descriptor per writer
    EXPECT_EQ(::fcntl(*fd, F_GETFL) & O_NONBLOCK, O_NONBLOCK);
    EXPECT_EQ(::fcntl(*fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
    EXPECT_FALSE(readable(*fd));
    AlignedBuffer buf(8192, 4096);
    std::memset(buf.data(), 'e', buf.size());
    ASSERT_TRUE((*w)->queue_write(0, buf.span().subspan(0, 4096), 1));
    ASSERT_TRUE((*w)->queue_write(1, buf.span().subspan(4096), 2));
    EXPECT_FALSE(readable(*fd));  // queued, not submitted: nothing can complete
    ASSERT_TRUE((*w)->submit());
    size_t got = 0;
    Completion out[4];
    while (got < 2) {
        ASSERT_TRUE(readable(*fd, 5000)) << "no readiness with " << (2 - got) << " completion(s) due";
        auto n = (*w)->reap(out, 0);
        ASSERT_TRUE(n) << n.error().message();
        for (size_t i = 0; i < *n; ++i) EXPECT_EQ(out[i].status, IoStatus::ok);
        got += *n;
    }
    EXPECT_EQ((*w)->in_flight(), 0u);
    EXPECT_FALSE(readable(*fd));  // drained: cleared
    EXPECT_FALSE(readable(*fd, 50));
}

INSTANTIATE_TEST_SUITE_P(Rings, EventFdFile, ::testing::Bool(),
                         [](const auto& i) { return i.param ? "single_thread" : "shared"; });

TEST(EventFdFakeRing, MadeWithIosInFlightItStartsReadableAndStaysSoWhileAReapFillsItsSpan) {
    detail::WriterTarget t;
    t.fd = Fd(-1);
    t.block_bytes = 512;
    t.size_blocks = 1024;
    t.max_io_bytes = 4096;
    WriterOptions o;
    o.queue_depth = 4;
    o.timeout_ms = 100;
    detail::RingWriter<test::FakeRing> w(std::move(t), o);
    ASSERT_TRUE(w.init());
    AlignedBuffer buf(3 * 512, 4096);
    for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(w.queue_write(i, buf.span().subspan(i * 512, 512), i));
    ASSERT_TRUE(w.submit());
    auto fd = w.event_fd();
    ASSERT_TRUE(fd);
    EXPECT_EQ(w.ring().event_fd, *fd);  // registered with the ring
    EXPECT_TRUE(readable(*fd));         // I/Os were already in the kernel's hands
    w.ring().complete_all([](const test::SentIo& io) { return static_cast<int32_t>(io.len); });
    Completion out[2];
    auto n = w.reap(out, 0);
    ASSERT_TRUE(n);
    EXPECT_EQ(*n, 2u);
    EXPECT_TRUE(readable(*fd));  // the span was full: one more may wait
    n = w.reap(out, 0);
    ASSERT_TRUE(n);
    EXPECT_EQ(*n, 1u);
    EXPECT_FALSE(readable(*fd));
}

TEST(EventFdTestingKit, ReadableWhenTheClockDeliversTheFencedCompletionOfAPreempt) {
    testkit::SimCluster c;
    ASSERT_TRUE(c.host(0).takeover());
    auto w = c.host(0).open_writer({});
    ASSERT_TRUE(w);
    auto fd = (*w)->event_fd();
    ASSERT_TRUE(fd);
    // Host 0's write reaches the device 5 ms after its submission.
    c.plan = [](const testkit::SimIo& io) { return testkit::IoPlan{.start_us = io.host == 0 ? 5000u : 0u}; };
    AlignedBuffer a(4096);
    ASSERT_TRUE((*w)->queue_write(1, a.span(), 11));
    ASSERT_TRUE((*w)->submit());
    EXPECT_FALSE(readable(*fd));  // in flight
    ASSERT_TRUE(c.host(1).takeover());
    EXPECT_FALSE(readable(*fd));  // the write has yet to reach the device
    c.advance(5000);
    ASSERT_TRUE(readable(*fd));
    EXPECT_FALSE((*w)->fenced());  // the writer learns it at the reap
    Completion got[2];
    auto n = (*w)->reap(got, 0);
    ASSERT_TRUE(n);
    ASSERT_EQ(*n, 1u);
    EXPECT_EQ(got[0].user_data, 11u);
    EXPECT_EQ(got[0].status, IoStatus::fenced);
    EXPECT_TRUE((*w)->fenced());
    EXPECT_TRUE((*w)->settled());
    EXPECT_FALSE(readable(*fd));
}

TEST(EventFdTestingKit, ACompletionDeliveredByTheWritersOwnWaitAlsoSignals) {
    testkit::SimCluster c({.hosts = 1});
    ASSERT_TRUE(c.host(0).takeover());
    auto w = c.host(0).open_writer({});
    ASSERT_TRUE(w);
    auto fd = (*w)->event_fd();
    ASSERT_TRUE(fd);
    AlignedBuffer a(4096);
    ASSERT_TRUE((*w)->queue_write(0, a.span(), 1));
    ASSERT_TRUE((*w)->submit());
    // No plan: executed and completed inside the submit.
    EXPECT_TRUE(readable(*fd));
    eventfd_t v = 0;
    EXPECT_EQ(::eventfd_read(*fd, &v), 0);  // reading it by hand is harmless
    EXPECT_FALSE(readable(*fd));
    Completion got;
    auto n = (*w)->reap({&got, 1}, 0);
    ASSERT_TRUE(n);
    EXPECT_EQ(*n, 1u);  // the completion was still there to reap
}

}  // namespace
}  // namespace nvfence
