// SPDX-License-Identifier: MIT
#pragma once
// Internal to libnvfence (and its unit tests): the FencedWriter logic over a
// ring seam. RingWriter<R> holds the latch, the cancel-to-NOP of queued
// writes, the submit accounting and the drain once, for both modes; R is the
// ring it drives. UringRing is the real one (liburing); tests/fake_ring.hpp
// is a scripted one. The seam is a template parameter, not a virtual
// interface, so the fast path costs the same as calling liburing directly.
//
// A ring R provides (all returning 0 or a count on success, -errno on error,
// as liburing does):
//   int init(unsigned entries, unsigned flags);   bool ext_arg() const;
//   io_uring_sqe* get_sqe();                      // nullptr when the SQ is full
//   int submit();                                 // how many SQEs the kernel took
//   unsigned sq_ready();                          // gotten, not yet taken
//   unsigned peek_batch(io_uring_cqe** cqes, unsigned n);  // what is in the CQ, no syscall
//   bool cq_parked();                             // completions wait in task work for an enter
//   int get_events();                             // enter only to run that task work
//   void cq_advance(unsigned n);
//   int wait(unsigned n, __kernel_timespec* ts);  // -ETIME when ts runs out
//   int submit_and_wait(unsigned n, __kernel_timespec* ts);
//   int register_file(int fd); int register_ring_fd();
//   int register_buffers(const iovec* v, unsigned n); int unregister_buffers();
//   int register_eventfd(int fd);                 // signal fd on every completion posted
//                                                 // (or parked in task work) from now on

#include <liburing.h>
#include <linux/nvme_ioctl.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "nvfence/command.hpp"
#include "nvfence/error.hpp"
#include "nvfence/fd.hpp"
#include "nvfence/writer.hpp"
#include "device/kernel_cmd.hpp"
#include "internal/invariant.hpp"

namespace nvfence::detail {

inline int64_t mono_now_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

inline __kernel_timespec to_kts(int64_t ns) {
    __kernel_timespec t{};
    t.tv_sec = ns / 1'000'000'000;
    t.tv_nsec = ns % 1'000'000'000;
    return t;
}

/// The real ring: liburing, one io_uring per writer.
class UringRing {
public:
    UringRing() = default;
    UringRing(const UringRing&) = delete;
    UringRing& operator=(const UringRing&) = delete;
    ~UringRing() {
        if (live_) io_uring_queue_exit(&r_);
    }
    int init(unsigned entries, unsigned flags) {
        if (live_) {
            io_uring_queue_exit(&r_);
            live_ = false;
        }
        io_uring_params p{};
        p.flags = flags;
        int rc = io_uring_queue_init_params(entries, &r_, &p);
        if (rc < 0) return rc;
        live_ = true;
        return 0;
    }
    bool ext_arg() const { return (r_.features & IORING_FEAT_EXT_ARG) != 0; }
    io_uring_sqe* get_sqe() { return io_uring_get_sqe(&r_); }
    int submit() { return io_uring_submit(&r_); }
    unsigned sq_ready() { return io_uring_sq_ready(&r_); }
    // Only what is in the CQ already: liburing's peek enters the kernel to
    // run parked task work when the CQ is empty (2.3 does), which would be
    // a second enter for completions the next wait collects anyway.
    unsigned peek_batch(io_uring_cqe** cqes, unsigned n) {
        if (io_uring_cq_ready(&r_) == 0) return 0;
        return io_uring_peek_batch_cqe(&r_, cqes, n);
    }
    // COOP_TASKRUN and DEFER_TASKRUN park completions in task work until
    // this task enters the kernel; TASKRUN_FLAG says when some are parked.
    bool cq_parked() { return (IO_URING_READ_ONCE(*r_.sq.kflags) & IORING_SQ_TASKRUN) != 0; }
    int get_events() { return io_uring_get_events(&r_); }
    void cq_advance(unsigned n) { io_uring_cq_advance(&r_, n); }
    int wait(unsigned n, __kernel_timespec* ts) {
        io_uring_cqe* cqe = nullptr;
        return io_uring_wait_cqes(&r_, &cqe, n, ts, nullptr);
    }
    int submit_and_wait(unsigned n, __kernel_timespec* ts) {
        io_uring_cqe* cqe = nullptr;
        return io_uring_submit_and_wait_timeout(&r_, &cqe, n, ts, nullptr);
    }
    int register_file(int fd) { return io_uring_register_files(&r_, &fd, 1); }
    int register_ring_fd() { return io_uring_register_ring_fd(&r_); }
    int register_buffers(const iovec* v, unsigned n) { return io_uring_register_buffers(&r_, v, n); }
    int unregister_buffers() { return io_uring_unregister_buffers(&r_); }
    int register_eventfd(int fd) { return io_uring_register_eventfd(&r_, fd); }

private:
    io_uring r_{};
    bool live_ = false;
};

/// What a writer writes to: the descriptor and the geometry, decided at open.
struct WriterTarget {
    Fd fd;
    WriterMode mode = WriterMode::block;
    uint32_t block_bytes = 0;
    uint64_t size_blocks = 0;
    uint32_t nsid = 0;
    uint32_t max_io_bytes = 0;
};

/// The event descriptor of FencedWriter::event_fd(), reached from the
/// non-virtual public function by a cross-cast: a new virtual function in
/// FencedWriter would change its vtable, which the ABI must keep.
class EventSource {
public:
    virtual Result<int> event_fd() = 0;

protected:
    ~EventSource() = default;
};

/// Makes @p fd readable (adds 1 to the eventfd counter); -1: nothing.
inline void signal_eventfd(int fd) {
    if (fd >= 0) (void)::eventfd_write(fd, 1);
}

/// Clears the eventfd counter of @p fd (nonblocking); -1: nothing.
inline void clear_eventfd(int fd) {
    eventfd_t v = 0;
    if (fd >= 0) (void)::eventfd_read(fd, &v);
}

inline constexpr size_t kMaxFixedBuffers = 1024;
inline constexpr size_t kMaxFixedBufferBytes = size_t{1} << 30;  // the kernel's limit per registered buffer

/// FencedWriter over ring R (see the top of this file).
template <class R>
class RingWriter final : public FencedWriter, public EventSource {
public:
    RingWriter(WriterTarget t, const WriterOptions& o)
        : t_(std::move(t)),
          qd_(o.queue_depth),
          timeout_ms_(o.timeout_ms),
          epoch_(o.epoch),
          single_thread_(o.single_thread) {
        slots_.resize(qd_);
        free_.reserve(qd_);
        for (uint32_t i = qd_; i > 0; --i) free_.push_back(i - 1);
        pending_.reserve(qd_);
    }

    // The eventfd is unregistered by the ring's teardown (ring_ is declared
    // after event_fd_, so destroyed first) before the descriptor is closed.
    ~RingWriter() override { drain_(); }

    Status init() {
        unsigned flags = t_.mode == WriterMode::passthrough ? IORING_SETUP_SQE128 | IORING_SETUP_CQE32 : 0u;
        // COOP_TASKRUN spares an IPI per completion; TASKRUN_FLAG lets the
        // non-waiting peek know when completions are parked in task work
        // (also when DEFER_TASKRUN parks them until we wait).
        const unsigned coop = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
        int rc = -EINVAL;
        if (single_thread_) {
            // Completions run only when this thread enters the kernel to
            // wait for them: no task-work interruptions, fewer wakeups.
            rc = ring_.init(qd_, flags | coop | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN);
        }
        if (rc == -EINVAL) rc = ring_.init(qd_, flags | coop);
        if (rc == -EINVAL) rc = ring_.init(qd_, flags);
        if (rc < 0) return errno_error(-rc);
        // Without EXT_ARG liburing implements a bounded wait with a timeout
        // SQE, which would also flush our queued SQEs from inside reap().
        if (!ring_.ext_arg()) return errno_error(ENOSYS);
        if (ring_.register_file(t_.fd.get()) == 0) fixed_file_ = true;
        // A registered ring descriptor belongs to the registering thread, so
        // only when the caller promised to stay on it: spares a file lookup
        // per io_uring_enter.
        if (single_thread_) ring_.register_ring_fd();
        return Ok{};
    }

    /// The ring, for tests that script it.
    R& ring() { return ring_; }

    // Made on first use: a writer nobody polls pays no eventfd signal per
    // completion. Completions that were already on their way when it is
    // registered would not signal it, so it starts readable whenever any
    // I/O is in the kernel's hands (a spurious wakeup at worst).
    Result<int> event_fd() override {
        if (event_fd_) return event_fd_.get();
        Fd fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
        if (!fd) return errno_error(errno);
        if (int rc = ring_.register_eventfd(fd.get()); rc < 0) return errno_error(-rc);
        event_fd_ = std::move(fd);
        if (submitted_ > 0 || fenced_) signal_eventfd(event_fd_.get());
        return event_fd_.get();
    }

    uint32_t block_bytes() const override { return t_.block_bytes; }
    uint64_t size_blocks() const override { return t_.size_blocks; }
    WriterMode mode() const override { return t_.mode; }
    uint64_t epoch() const override { return epoch_; }
    bool fenced() const override { return fenced_; }
    bool settled() const override { return fenced_ && on_device_ == 0; }
    uint32_t in_flight() const override { return static_cast<uint32_t>(pending_.size()) + submitted_; }
    uint32_t queue_depth() const override { return qd_; }
    uint32_t max_io_bytes() const override { return t_.max_io_bytes; }
    uint32_t fixed_buffers() const override { return static_cast<uint32_t>(bufs_.size()); }

    Status register_buffers(std::span<const std::span<uint8_t>> regions) override {
        if (in_flight() != 0 || regions.size() > kMaxFixedBuffers) return make_error_code(Errc::invalid_argument);
        for (const auto& r : regions)
            if (r.data() == nullptr || r.empty() || r.size() > kMaxFixedBufferBytes)
                return make_error_code(Errc::invalid_argument);
        if (!bufs_.empty()) {
            if (int rc = ring_.unregister_buffers(); rc < 0) return errno_error(-rc);
            bufs_.clear();
        }
        if (regions.empty()) return Ok{};
        std::vector<iovec> iov;
        iov.reserve(regions.size());
        for (const auto& r : regions) iov.push_back(iovec{r.data(), r.size()});
        if (int rc = ring_.register_buffers(iov.data(), static_cast<unsigned>(iov.size())); rc < 0)
            return errno_error(-rc);
        bufs_.assign(regions.begin(), regions.end());
        return Ok{};
    }

    Status queue_write(uint64_t lba, std::span<const uint8_t> buf, uint64_t user_data) override {
        if (auto st = check_rw_(lba, buf.data(), buf.size()); !st) return st;
        // One prep path for both directions; the kernel only reads a write's buffer.
        return queue_(IoKind::write, lba, const_cast<uint8_t*>(buf.data()), static_cast<uint32_t>(buf.size()),
                      user_data);
    }

    Status queue_read(uint64_t lba, std::span<uint8_t> buf, uint64_t user_data) override {
        if (auto st = check_rw_(lba, buf.data(), buf.size()); !st) return st;
        return queue_(IoKind::read, lba, buf.data(), static_cast<uint32_t>(buf.size()), user_data);
    }

    Status queue_flush(uint64_t user_data) override {
        if (fenced_) return make_error_code(Errc::fenced);
        if (in_flight() >= qd_) return make_error_code(Errc::queue_full);
        return queue_(IoKind::flush, 0, nullptr, 0, user_data);
    }

    Result<uint32_t> submit() override {
        if (pending_.empty()) return uint32_t{0};
        const bool cancelled = cancel_if_latched_();
        const int rc = ring_.submit();
        const uint32_t took = account_submitted_();
        if (cancelled) return make_error_code(Errc::fenced);
        if (rc < 0 && took == 0) return errno_error(-rc);
        return took;
    }

    Result<size_t> reap(std::span<Completion> out, uint32_t min_complete) override {
        if (min_complete > out.size()) return make_error_code(Errc::invalid_argument);
        size_t got = collect_(out, 0);
        if (min_complete == 0) return rearm_event_(out, flush_parked_(out, got));
        if (got >= min_complete) return rearm_event_(out, got);
        // The wait's own enter runs the parked task work: no separate flush.
        auto r = wait_(out, got, min_complete, mono_now_ns() + int64_t{timeout_ms_} * 1'000'000);
        if (r) rearm_event_(out, *r);
        return r;
    }

    Result<size_t> submit_and_reap(std::span<Completion> out, uint32_t min_complete) override {
        if (min_complete > out.size()) return make_error_code(Errc::invalid_argument);
        if (pending_.empty()) return reap(out, min_complete);
        auto r = submit_and_reap_(out, min_complete);
        if (r) rearm_event_(out, *r);
        return r;
    }

private:
    Result<size_t> submit_and_reap_(std::span<Completion> out, uint32_t min_complete) {
        size_t got = collect_(out, 0);
        // After collecting: a fenced completion just collected latches too.
        const bool cancelled = cancel_if_latched_();
        if (got >= min_complete) {
            auto s = submit();
            got = collect_(out, got);  // what the submit's enter ran from task work
            if (!s && !cancelled && got == 0) return s.error();
            return got;
        }
        const int64_t deadline = mono_now_ns() + int64_t{timeout_ms_} * 1'000'000;
        __kernel_timespec ts = to_kts(int64_t{timeout_ms_} * 1'000'000);
        const int rc = ring_.submit_and_wait(static_cast<unsigned>(min_complete - got), &ts);
        const uint32_t took = account_submitted_();
        got = collect_(out, got);
        if (got >= min_complete) return got;
        if (rc < 0 && rc != -ETIME && rc != -EINTR && took == 0 && got == 0) return errno_error(-rc);
        return wait_(out, got, min_complete, deadline);
    }

    // At the end of a reap: cleared, then signalled again if anything may be
    // left (a full @p out, a CQE in the ring, completions parked in task
    // work). The kernel publishes a CQE (or sets the parked flag) before it
    // signals, so one that arrives after these checks signals after the
    // clear: no wakeup is lost. Clearing at the end, not the start, also
    // drops the signals of the enters of this reap (a DEFER_TASKRUN ring
    // signals once when a completion is parked and again when it is posted).
    size_t rearm_event_(std::span<Completion> out, size_t got) {
        if (!event_fd_) return got;
        clear_eventfd(event_fd_.get());
        io_uring_cqe* left = nullptr;
        if ((got == out.size() && !out.empty()) || ring_.peek_batch(&left, 1) > 0 || ring_.cq_parked())
            signal_eventfd(event_fd_.get());
        return got;
    }

    struct Slot {
        uint64_t user_data = 0;
        io_uring_sqe* sqe = nullptr;  // points into the SQ ring: only valid until the kernel consumes it
        uint32_t bytes = 0;
        IoKind kind = IoKind::write;
        bool cancelled = false;
    };

    int file_() const { return fixed_file_ ? 0 : t_.fd.get(); }

    // A switch rather than a virtual call per SQE: the mode never changes.
    void prep_(io_uring_sqe* sqe, IoKind kind, uint64_t lba, uint8_t* buf, uint32_t bytes, int buf_index) {
        if (t_.mode == WriterMode::passthrough) prep_passthru_(sqe, kind, lba, buf, bytes, buf_index);
        else prep_block_(sqe, kind, lba, buf, bytes, buf_index);
        if (fixed_file_) sqe->flags |= IOSQE_FIXED_FILE;
    }

    void prep_block_(io_uring_sqe* sqe, IoKind kind, uint64_t lba, uint8_t* buf, uint32_t bytes, int buf_index) {
        const uint64_t off = lba * t_.block_bytes;
        switch (kind) {
        case IoKind::write:
            if (buf_index >= 0) io_uring_prep_write_fixed(sqe, file_(), buf, bytes, off, buf_index);
            else io_uring_prep_write(sqe, file_(), buf, bytes, off);
            break;
        case IoKind::read:
            if (buf_index >= 0) io_uring_prep_read_fixed(sqe, file_(), buf, bytes, off, buf_index);
            else io_uring_prep_read(sqe, file_(), buf, bytes, off);
            break;
        case IoKind::flush: io_uring_prep_fsync(sqe, file_(), IORING_FSYNC_DATASYNC); break;
        }
    }

    void prep_passthru_(io_uring_sqe* sqe, IoKind kind, uint64_t lba, uint8_t* buf, uint32_t bytes, int buf_index) {
        const Command c = kind == IoKind::flush
                              ? encode_flush(t_.nsid)
                              : encode_rw(kind == IoKind::write, t_.nsid, lba, bytes / t_.block_bytes, bytes);
        io_uring_prep_rw(IORING_OP_URING_CMD, sqe, file_(), nullptr, 0, 0);
        sqe->cmd_op = NVME_URING_CMD_IO;
        if (buf_index >= 0) {
            // The command's addr/len still name the buffer; the kernel
            // looks them up inside registered buffer buf_index.
            sqe->uring_cmd_flags = IORING_URING_CMD_FIXED;
            sqe->buf_index = static_cast<uint16_t>(buf_index);
        }
        nvme_uring_cmd cmd = to_kernel_cmd<nvme_uring_cmd>(c);
        cmd.addr = reinterpret_cast<uintptr_t>(buf);
        static_assert(sizeof cmd <= 2 * sizeof(io_uring_sqe) - offsetof(io_uring_sqe, cmd));
        // Through a byte pointer: sqe->cmd is declared as 16 bytes, but an
        // SQE128 ring gives it 80 (checked above).
        std::memcpy(reinterpret_cast<unsigned char*>(sqe) + offsetof(io_uring_sqe, cmd), &cmd, sizeof cmd);
    }

    Status check_rw_(uint64_t lba, const uint8_t* p, size_t len) const {
        if (fenced_) return make_error_code(Errc::fenced);
        if (len == 0 || len > t_.max_io_bytes) return make_error_code(Errc::invalid_argument);
        const uint64_t bs = t_.block_bytes;
        if (reinterpret_cast<uintptr_t>(p) % bs != 0 || len % bs != 0) return make_error_code(Errc::misaligned);
        const uint64_t n = len / bs;
        if (lba >= t_.size_blocks || n > t_.size_blocks - lba) return make_error_code(Errc::out_of_bounds);
        if (in_flight() >= qd_) return make_error_code(Errc::queue_full);
        return Ok{};
    }

    Status queue_(IoKind kind, uint64_t lba, uint8_t* buf, uint32_t bytes, uint64_t user_data) {
        if (free_.empty()) return make_error_code(Errc::queue_full);
        io_uring_sqe* sqe = ring_.get_sqe();
        if (!sqe) return make_error_code(Errc::queue_full);
        const uint32_t id = free_.back();
        free_.pop_back();
        Slot& s = slots_[id];
        s.user_data = user_data;
        s.sqe = sqe;
        s.bytes = bytes;
        s.kind = kind;
        s.cancelled = false;
        const int buf_index = bufs_.empty() || kind == IoKind::flush ? -1 : fixed_buffer_index(bufs_, buf, bytes);
        prep_(sqe, kind, lba, buf, bytes, buf_index);
        io_uring_sqe_set_data64(sqe, id);
        pending_.push_back(id);
        return Ok{};
    }

    // Queued SQEs still sit in our half of the SQ ring (no SQPOLL), so they
    // can be rewritten: a NOP keeps each one's slot and completion while
    // guaranteeing that nothing reaches the device after the latch.
    bool cancel_if_latched_() {
        if (!fenced_ || pending_.empty()) return false;
        bool any = false;
        for (uint32_t id : pending_) {
            Slot& s = slots_[id];
            if (s.cancelled) continue;
            io_uring_prep_nop(s.sqe);
            io_uring_sqe_set_data64(s.sqe, id);
            s.cancelled = true;
            any = true;
        }
        return any;
    }

    // The kernel consumes SQEs in order; whatever it did not take is still
    // counted by sq_ready() and stays at the back of pending_.
    uint32_t account_submitted_() {
        const size_t left = ring_.sq_ready();
        const size_t took = pending_.size() > left ? pending_.size() - left : 0;
        if (took == 0) return 0;
        for (size_t i = 0; i < took; ++i) {
            Slot& s = slots_[pending_[i]];
            s.sqe = nullptr;
            if (!s.cancelled) ++on_device_;
        }
        pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(took));
        submitted_ += static_cast<uint32_t>(took);
        return static_cast<uint32_t>(took);
    }

    // A caller that will not wait (min_complete 0) would otherwise never see
    // completions parked in task work: one enter to run it. Every other path
    // enters the kernel anyway (submit, wait) and the parked work runs there,
    // so a flush before it would be a second syscall for the same I/Os.
    size_t flush_parked_(std::span<Completion> out, size_t got) {
        if (got == out.size() || !ring_.cq_parked()) return got;
        ring_.get_events();
        return collect_(out, got);
    }

    size_t collect_(std::span<Completion> out, size_t got) {
        io_uring_cqe* cqes[64];
        while (got < out.size()) {
            const unsigned want = static_cast<unsigned>(std::min<size_t>(out.size() - got, std::size(cqes)));
            const unsigned n = ring_.peek_batch(cqes, want);
            if (n == 0) break;
            for (unsigned i = 0; i < n; ++i) out[got++] = complete_(*cqes[i]);
            ring_.cq_advance(n);
        }
        return got;
    }

    Completion complete_(const io_uring_cqe& cqe) {
        const auto id = static_cast<uint32_t>(cqe.user_data);
        NVF_INVARIANT(id < qd_);  // ours: the ring is private to this writer
        Slot& s = slots_[id];
        Completion c;
        if (s.cancelled) {
            c.kind = s.kind;
            c.status = IoStatus::fenced;
            c.error = make_error_code(Errc::fenced);
        } else {
            --on_device_;
            c = classify_completion(t_.mode, s.kind, cqe.res, s.bytes);
            if (c.status == IoStatus::fenced) fenced_ = true;
        }
        c.user_data = s.user_data;
        s.cancelled = false;
        free_.push_back(id);
        --submitted_;
        return c;
    }

    Result<size_t> wait_(std::span<Completion> out, size_t got, uint32_t min_complete, int64_t deadline) {
        for (;;) {
            const int64_t left = deadline - mono_now_ns();
            if (left <= 0) break;
            __kernel_timespec ts = to_kts(left);
            const int rc = ring_.wait(static_cast<unsigned>(min_complete - got), &ts);
            got = collect_(out, got);
            if (got >= min_complete) return got;
            if (rc == -ETIME) break;
            if (rc < 0 && rc != -EINTR && rc != -EAGAIN) {
                if (got > 0) return got;
                return errno_error(-rc);
            }
        }
        if (got > 0) return got;
        return make_error_code(Errc::timeout);
    }

    void drain_() {
        if (!pending_.empty()) {
            // Never send an I/O nobody will reap: turn the queue into NOPs.
            const bool was = fenced_;
            fenced_ = true;
            cancel_if_latched_();
            fenced_ = was;
            for (int tries = 0; !pending_.empty() && tries < 100; ++tries) {
                ring_.submit();
                account_submitted_();
            }
        }
        const int64_t deadline = mono_now_ns() + int64_t{timeout_ms_} * 1'000'000;
        Completion sink[64];
        while (submitted_ > 0 && mono_now_ns() < deadline) {
            auto r = wait_(sink, 0, 1, deadline);
            if (!r && r.error() != Errc::timeout && r.error() != std::errc::interrupted) break;
        }
        // Unsent NOPs left in the SQ reference no memory; only I/Os the
        // kernel took can still transfer.
        if (submitted_ > 0) {
            std::fprintf(stderr,
                         "nvfence: FencedWriter destroyed with %u I/O(s) still in flight after %u ms; aborting "
                         "rather than letting the caller free buffers the device may still transfer into\n",
                         submitted_, timeout_ms_);
            std::abort();
        }
    }

    WriterTarget t_;
    Fd event_fd_;  // event_fd(), made on first use
    R ring_;  // after t_ and event_fd_: torn down before the descriptors are closed
    bool fixed_file_ = false;
    uint32_t qd_;
    uint32_t timeout_ms_;
    uint64_t epoch_;
    bool single_thread_;
    bool fenced_ = false;
    std::vector<std::span<uint8_t>> bufs_;  // registered fixed buffers, by index
    std::vector<Slot> slots_;
    std::vector<uint32_t> free_;
    std::vector<uint32_t> pending_;  // queued, not yet taken by the kernel, in SQ order
    uint32_t submitted_ = 0;         // taken by the kernel, not yet reaped
    uint32_t on_device_ = 0;         // of those, real I/Os (not the NOPs of cancelled ones)
};

}  // namespace nvfence::detail
