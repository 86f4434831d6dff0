// SPDX-License-Identifier: MIT
// The C API's writer calls (nvfence/nvfence.h) over the testing kit: a
// kit FencedWriter in an nvf_writer handle, preempted by another host.
#include <gtest/gtest.h>

#include <poll.h>

#include <cerrno>
#include <cstring>

#include "capi/writer_handle.hpp"
#include "nvfence/nvfence.h"
#include "nvfence/testing.hpp"

using namespace nvfence;
using namespace nvfence::testkit;

namespace {

nvf_writer* c_writer(SimHost& h) {
    auto w = h.open_writer({});
    EXPECT_TRUE(w);
    return new nvf_writer{std::move(*w)};
}

}  // namespace

TEST(CapiWriter, SettledSubmitAndReapOverAPreempt) {
    SimCluster c;
    ASSERT_TRUE(c.host(0).takeover());
    nvf_writer* w = c_writer(c.host(0));
    AlignedBuffer a(4096), b(4096);
    // The first write reaches the device at once, its completion after 5 ms;
    // the second reaches the device after the preempt.
    c.plan = [](const SimIo& io) {
        return io.seq == 0 ? IoPlan{.complete_us = 5000} : IoPlan{.start_us = 1000};
    };
    ASSERT_EQ(nvf_writer_queue_write(w, 0, a.data(), 4096, 1), NVF_OK);
    ASSERT_EQ(nvf_writer_queue_write(w, 1, b.data(), 4096, 2), NVF_OK);
    nvf_completion got[4];
    EXPECT_EQ(nvf_writer_submit_and_reap(w, got, 4, 0), 0);
    EXPECT_EQ(nvf_writer_settled(w), 0);
    ASSERT_TRUE(c.host(1).takeover());
    ASSERT_EQ(nvf_writer_submit_and_reap(w, got, 4, 1), 1);
    EXPECT_EQ(got[0].user_data, 2u);
    EXPECT_EQ(got[0].status, NVF_IO_FENCED);
    EXPECT_EQ(nvf_is_fenced(got[0].error), 1);
    EXPECT_EQ(nvf_writer_fenced(w), 1);
    EXPECT_EQ(nvf_writer_settled(w), 0);  // the first write's ok is still on its way
    ASSERT_EQ(nvf_writer_reap(w, got, 4, 1), 1);
    EXPECT_EQ(got[0].user_data, 1u);
    EXPECT_EQ(got[0].status, NVF_IO_OK);
    EXPECT_EQ(nvf_writer_settled(w), 1);
    EXPECT_EQ(nvf_writer_submit_and_reap(w, got, 4, 5), -NVF_ERRC_INVALID_ARGUMENT);
    nvf_writer_close(w);
    EXPECT_EQ(nvf_writer_settled(nullptr), 0);
}

TEST(CapiWriter, RegisterBuffers) {
    SimCluster c({.hosts = 1});
    ASSERT_TRUE(c.host(0).takeover());
    nvf_writer* w = c_writer(c.host(0));
    AlignedBuffer a(8192);
    std::memset(a.data(), 'r', a.size());
    nvf_region r{a.data(), a.size()};
    EXPECT_EQ(nvf_writer_register_buffers(w, &r, 1), NVF_OK);
    EXPECT_EQ(nvf_writer_fixed_buffers(w), 1u);
    ASSERT_EQ(nvf_writer_queue_write(w, 2, a.data() + 4096, 4096, 9), NVF_OK);
    nvf_completion got;
    ASSERT_EQ(nvf_writer_submit_and_reap(w, &got, 1, 1), 1);
    EXPECT_EQ(got.status, NVF_IO_OK);
    EXPECT_EQ(c.block(2)[0], 'r');
    nvf_region bad{nullptr, 4096};
    EXPECT_EQ(nvf_writer_register_buffers(w, &bad, 1), -NVF_ERRC_INVALID_ARGUMENT);
    EXPECT_EQ(nvf_writer_register_buffers(w, nullptr, 1), -NVF_ERRC_INVALID_ARGUMENT);
    EXPECT_EQ(nvf_writer_fixed_buffers(w), 1u);  // nothing changed
    EXPECT_EQ(nvf_writer_register_buffers(w, nullptr, 0), NVF_OK);
    EXPECT_EQ(nvf_writer_fixed_buffers(w), 0u);
    nvf_writer_close(w);
}

TEST(CapiWriter, ClassifyCompletion) {
    nvf_completion o;
    ASSERT_EQ(nvf_classify_completion(NVF_WRITER_BLOCK, NVF_IO_WRITE, -EBADE, 4096, &o), NVF_OK);
    EXPECT_EQ(o.status, NVF_IO_FENCED);
    EXPECT_EQ(nvf_err_errno(o.error), EBADE);
    ASSERT_EQ(nvf_classify_completion(NVF_WRITER_BLOCK, NVF_IO_WRITE, 4096, 4096, &o), NVF_OK);
    EXPECT_EQ(o.status, NVF_IO_OK);
    EXPECT_EQ(o.bytes, 4096u);
    ASSERT_EQ(nvf_classify_completion(NVF_WRITER_BLOCK, NVF_IO_READ, 512, 4096, &o), NVF_OK);
    EXPECT_EQ(o.status, NVF_IO_ERROR);
    EXPECT_EQ(nvf_err_errno(o.error), EIO);
    ASSERT_EQ(nvf_classify_completion(NVF_WRITER_PASSTHROUGH, NVF_IO_WRITE, 0x83, 4096, &o), NVF_OK);
    EXPECT_EQ(o.status, NVF_IO_FENCED);
    EXPECT_EQ(nvf_err_nvme_status(o.error), 0x83);
    ASSERT_EQ(nvf_classify_completion(NVF_WRITER_PASSTHROUGH, NVF_IO_WRITE, 0x281, 4096, &o), NVF_OK);
    EXPECT_EQ(o.status, NVF_IO_ERROR);
    EXPECT_EQ(nvf_classify_completion(NVF_WRITER_AUTO, NVF_IO_WRITE, 0, 0, &o), -NVF_ERRC_INVALID_ARGUMENT);
    EXPECT_EQ(nvf_classify_completion(NVF_WRITER_BLOCK, static_cast<nvf_io_kind>(3), 0, 0, &o),
              -NVF_ERRC_INVALID_ARGUMENT);
    EXPECT_EQ(nvf_classify_completion(NVF_WRITER_BLOCK, NVF_IO_WRITE, 0, 0, nullptr), -NVF_ERRC_INVALID_ARGUMENT);
}

TEST(CapiWriter, EventFdSignalsAFencedCompletion) {
    SimCluster c;
    ASSERT_TRUE(c.host(0).takeover());
    nvf_writer* w = c_writer(c.host(0));
    const int fd = nvf_writer_event_fd(w);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(nvf_writer_event_fd(w), fd);
    c.plan = [](const SimIo& io) { return IoPlan{.start_us = io.host == 0 ? 1000u : 0u}; };
    AlignedBuffer a(4096);
    ASSERT_EQ(nvf_writer_queue_write(w, 0, a.data(), 4096, 5), NVF_OK);
    ASSERT_EQ(nvf_writer_submit(w), 1);
    pollfd p{fd, POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 0), 0);
    ASSERT_TRUE(c.host(1).takeover());
    c.advance(1000);
    EXPECT_EQ(poll(&p, 1, 0), 1);
    nvf_completion got[4];
    ASSERT_EQ(nvf_writer_reap(w, got, 4, 0), 1);
    EXPECT_EQ(got[0].status, NVF_IO_FENCED);
    EXPECT_EQ(nvf_writer_fenced(w), 1);
    EXPECT_EQ(poll(&p, 1, 0), 0);
    nvf_writer_close(w);
    EXPECT_EQ(nvf_writer_event_fd(nullptr), -NVF_ERRC_INVALID_ARGUMENT);
}
