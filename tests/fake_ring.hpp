// SPDX-License-Identifier: MIT
#pragma once
// A scripted io_uring for FencedWriter's unit tests (the R of
// detail::RingWriter<R>). It keeps a real SQ array, so what the writer wrote
// into an SQE (including a rewrite to NOP after the latch) is what the fake
// reads when the SQE is submitted. Defaults: submit takes every SQE, and a
// taken I/O stays on the "device" until the test completes it, so tests
// control ordering exactly. Scriptable: partial submits, submit errors
// (-EAGAIN, -EBUSY), wait results (-ETIME, -EINTR), and a responder that
// completes an I/O at once with any res (-EBADE, 0x6083, a short count).
// With park_completions, device completions wait in "task work" until the
// writer enters the kernel (submit, wait, get_events), as DEFER_TASKRUN
// does; NOPs complete inside the submitting enter, as the kernel does.
#include <liburing.h>
#include <linux/nvme_ioctl.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

namespace nvfence::test {

/// One SQE the fake "kernel" took, as the writer had prepared it.
struct SentIo {
    uint8_t opcode = 0;      ///< IORING_OP_* (IORING_OP_NOP for a cancelled I/O).
    uint64_t user_data = 0;  ///< The writer's slot id.
    uint64_t off = 0;        ///< Byte offset (block mode).
    uint32_t len = 0;        ///< Bytes (block mode).
    uint32_t cdw10 = 0;      ///< Passthrough: the command's SLBA low dword.
    uint64_t addr = 0;       ///< Block mode: the buffer's address (a responder may move the data).
};

class FakeRing {
public:
    // ---- the ring interface used by RingWriter
    int init(unsigned entries, unsigned flags) {
        entries_ = entries;
        stride_ = (flags & IORING_SETUP_SQE128) ? 2 : 1;
        sq_.assign(size_t{entries} * stride_, io_uring_sqe{});
        head_ = tail_ = 0;
        return 0;
    }
    bool ext_arg() const { return true; }
    io_uring_sqe* get_sqe() {
        if (tail_ - head_ >= entries_) return nullptr;
        io_uring_sqe* s = &sq_[(tail_ % entries_) * stride_];
        std::memset(s, 0, sizeof(io_uring_sqe) * stride_);
        ++tail_;
        return s;
    }
    int submit() {
        ++enter_calls;
        return submit_();
    }
    unsigned sq_ready() { return tail_ - head_; }
    unsigned peek_batch(io_uring_cqe** cqes, unsigned n) {
        const unsigned k = static_cast<unsigned>(std::min<size_t>(n, cq_.size()));
        for (unsigned i = 0; i < k; ++i) cqes[i] = &cq_[i];
        return k;
    }
    bool cq_parked() { return !parked_.empty(); }
    int get_events() {
        ++enter_calls;
        ++get_events_calls;
        run_task_work_();
        return 0;
    }
    void cq_advance(unsigned n) {
        for (unsigned i = 0; i < n && !cq_.empty(); ++i) cq_.pop_front();
    }
    int wait(unsigned n, __kernel_timespec* ts) {
        ++enter_calls;
        return wait_(n, ts);
    }
    int submit_and_wait(unsigned n, __kernel_timespec* ts) {
        ++enter_calls;  // one io_uring_enter: submits, runs task work, waits
        const int rc = submit_();
        if (rc < 0) return rc;
        return wait_(n, ts);
    }
    int register_file(int) { return 0; }
    int register_ring_fd() { return 0; }
    int register_buffers(const iovec*, unsigned) { return 0; }
    int unregister_buffers() { return 0; }
    int register_eventfd(int fd) {
        event_fd = fd;
        return 0;
    }

    // ---- the test's side
    /// Completes the taken, not yet completed I/O @p index (into sent) with @p res.
    void complete(size_t index, int32_t res) {
        auto& io = sent.at(index);
        done_.resize(sent.size(), false);
        if (done_[index]) std::abort();
        done_[index] = true;
        io_uring_cqe c{};
        c.user_data = io.user_data;
        c.res = res;
        if (park_completions && io.opcode != IORING_OP_NOP) parked_.push_back(c);
        else cq_.push_back(c);
    }


    /// Completes every taken, uncompleted I/O, in order, with what @p res_of says.
    void complete_all(const std::function<int32_t(const SentIo&)>& res_of) {
        for (size_t i = 0; i < sent.size(); ++i)
            if (!is_done(i)) complete(i, res_of(sent[i]));
    }
    bool is_done(size_t index) const { return index < done_.size() && done_[index]; }
    size_t outstanding() const {
        size_t n = 0;
        for (size_t i = 0; i < sent.size(); ++i) n += !is_done(i);
        return n;
    }
    /// Taken writes and reads that were not NOPs.
    size_t sent_real() const {
        size_t n = 0;
        for (auto& s : sent) n += s.opcode != IORING_OP_NOP;
        return n;
    }

    std::vector<SentIo> sent;          ///< Every SQE taken, in order.
    std::deque<int> submit_script;     ///< Per submit call: how many to take at most, or -errno.
    std::deque<int> wait_script;       ///< Per wait call: a negative rc to return first.
    /// When set, a taken SQE gets its completion at once with the returned res.
    std::function<std::optional<int32_t>(const SentIo&)> responder;
    std::function<void(FakeRing&)> on_wait;  ///< Runs at the start of every wait.
    std::vector<SentIo>* sent_log = nullptr;  ///< Also gets every taken SQE (outlives the writer).
    bool park_completions = false;     ///< Device completions wait for an enter (DEFER_TASKRUN).
    unsigned submit_calls = 0, wait_calls = 0;
    unsigned enter_calls = 0;          ///< io_uring_enter calls: submit, wait, submit_and_wait, get_events.
    int event_fd = -1;                 ///< What the writer registered (register_eventfd), -1: none.
    unsigned get_events_calls = 0;

private:
    // Plain submits run parked task work too: liburing adds GETEVENTS to a
    // submit's enter when IORING_SQ_TASKRUN is set.
    int submit_() {
        ++submit_calls;
        run_task_work_();
        const unsigned ready = tail_ - head_;
        if (!submit_script.empty()) {
            const int step = submit_script.front();
            submit_script.pop_front();
            if (step < 0) return step;  // an error: nothing taken
            return take_(std::min<unsigned>(ready, static_cast<unsigned>(step)));
        }
        return take_(ready);
    }
    int wait_(unsigned n, __kernel_timespec*) {
        ++wait_calls;
        run_task_work_();
        if (on_wait) on_wait(*this);
        if (!wait_script.empty()) {
            const int rc = wait_script.front();
            wait_script.pop_front();
            if (rc < 0) return rc;
        }
        run_task_work_();  // what on_wait completed arrives during the wait
        // No real clock: a wait that cannot be satisfied times out at once.
        return cq_.size() >= n ? 0 : -ETIME;
    }
    void run_task_work_() {
        cq_.insert(cq_.end(), parked_.begin(), parked_.end());
        parked_.clear();
    }

    int take_(unsigned n) {
        for (unsigned i = 0; i < n; ++i) {
            const io_uring_sqe& s = sq_[(head_ % entries_) * stride_];
            SentIo io;
            io.opcode = s.opcode;
            io.user_data = s.user_data;
            io.off = s.off;
            io.len = s.len;
            io.addr = s.addr;
            if (s.opcode == IORING_OP_URING_CMD) {
                nvme_uring_cmd cmd;
                std::memcpy(&cmd, reinterpret_cast<const unsigned char*>(&s) + offsetof(io_uring_sqe, cmd),
                            sizeof cmd);
                io.cdw10 = cmd.cdw10;
            }
            ++head_;
            sent.push_back(io);
            if (sent_log) sent_log->push_back(io);
            done_.resize(sent.size(), false);
            // A NOP completes in the kernel without reaching any device.
            if (io.opcode == IORING_OP_NOP) {
                complete(sent.size() - 1, 0);
            } else if (responder) {
                if (auto r = responder(io)) complete(sent.size() - 1, *r);
            }
        }
        return static_cast<int>(n);
    }

    unsigned entries_ = 0, stride_ = 1, head_ = 0, tail_ = 0;
    std::vector<io_uring_sqe> sq_;
    std::deque<io_uring_cqe> cq_;
    std::deque<io_uring_cqe> parked_;  // completed, waiting for this task to enter the kernel
    std::vector<bool> done_;
};

}  // namespace nvfence::test
