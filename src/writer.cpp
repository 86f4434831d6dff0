// SPDX-License-Identifier: MIT
#include "nvfence/writer.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <sys/uio.h>
#include <linux/nvme_ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <vector>

#include "nvfence/command.hpp"
#include "nvfence/error.hpp"
#include "nvfence/fd.hpp"
#include "nvfence/namespace.hpp"

namespace nvfence {

// ---------------------------------------------------------------- AlignedBuffer

AlignedBuffer::AlignedBuffer(size_t bytes, size_t align) {
    if (align == 0 || (align & (align - 1)) != 0) std::abort();
    if (align < sizeof(void*)) align = sizeof(void*);
    n_ = (bytes + align - 1) / align * align;
    if (n_ == 0) return;
    p_ = static_cast<uint8_t*>(std::aligned_alloc(align, n_));
    if (!p_) throw std::bad_alloc();
    std::memset(p_, 0, n_);
}

AlignedBuffer::~AlignedBuffer() { std::free(p_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept
    : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
        std::free(p_);
        p_ = std::exchange(o.p_, nullptr);
        n_ = std::exchange(o.n_, 0);
    }
    return *this;
}

// ---------------------------------------------------------------- helpers

const char* writer_mode_name(WriterMode m) {
    switch (m) {
    case WriterMode::automatic: return "auto";
    case WriterMode::block: return "block";
    case WriterMode::passthrough: return "passthrough";
    }
    return "unknown";
}

Completion classify_completion(WriterMode mode, IoKind kind, int32_t res, uint32_t expected_bytes) {
    Completion c;
    c.kind = kind;
    auto fail = [&c](IoStatus s, std::error_code ec) {
        c.status = s;
        c.error = ec;
        return c;
    };
    if (mode == WriterMode::automatic) return fail(IoStatus::io_error, make_error_code(Errc::invalid_argument));
    // The block layer maps BLK_STS_RESV_CONFLICT to EBADE and nothing else
    // produces it on these paths, so it is the device's refusal in both modes.
    if (res == -EBADE) return fail(IoStatus::fenced, errno_error(EBADE));
    if (res < 0) return fail(IoStatus::io_error, errno_error(-res));
    if (mode == WriterMode::passthrough) {
        if (res == 0) {
            c.bytes = expected_bytes;
            return c;
        }
        const auto raw = static_cast<uint16_t>(res);
        // Only DNR/More bits and no status would make an error_code that
        // reads as success; that would be an ambiguous completion.
        if (res > 0xffff || (raw & kStatusMask) == 0) return fail(IoStatus::io_error, errno_error(EIO));
        if ((raw & kStatusMask) == static_cast<uint16_t>(NvmeStatus::reservation_conflict))
            return fail(IoStatus::fenced, make_nvme_error(raw));
        return fail(IoStatus::io_error, make_nvme_error(raw));
    }
    if (static_cast<uint32_t>(res) != expected_bytes) return fail(IoStatus::io_error, errno_error(EIO));
    c.bytes = expected_bytes;
    return c;
}

int fixed_buffer_index(std::span<const std::span<uint8_t>> regions, const void* p, size_t len) {
    if (len == 0) return -1;
    const auto a = reinterpret_cast<uintptr_t>(p);
    for (size_t i = 0; i < regions.size(); ++i) {
        const auto start = reinterpret_cast<uintptr_t>(regions[i].data());
        const size_t n = regions[i].size();
        // Written so that nothing overflows: a >= start, then the offset and
        // the length both fit in what is left of the region.
        if (a >= start && a - start <= n && len <= n - (a - start)) return static_cast<int>(i);
    }
    return -1;
}

namespace {

constexpr uint32_t kMaxQueueDepth = 1024;
constexpr uint32_t kBlockMaxIoBytes = 1u << 30;
constexpr uint32_t kFileBlockBytes = 4096;
constexpr size_t kMaxFixedBuffers = 1024;
constexpr size_t kMaxFixedBufferBytes = size_t{1} << 30;  // the kernel's limit per registered buffer

int64_t now_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

__kernel_timespec to_kts(int64_t ns) {
    __kernel_timespec t{};
    t.tv_sec = ns / 1'000'000'000;
    t.tv_nsec = ns % 1'000'000'000;
    return t;
}

class Ring {
public:
    Ring() = default;
    Ring(const Ring&) = delete;
    Ring& operator=(const Ring&) = delete;
    ~Ring() {
        if (live_) io_uring_queue_exit(&r_);
    }
    int init(unsigned entries, unsigned flags) {
        io_uring_params p{};
        p.flags = flags;
        int rc = io_uring_queue_init_params(entries, &r_, &p);
        if (rc < 0) return rc;
        live_ = true;
        return 0;
    }
    io_uring* get() { return &r_; }

private:
    io_uring r_{};
    bool live_ = false;
};

// The latch, the accounting and the drain live here once, so the two modes
// cannot drift apart on the safety rules; a mode only fills SQEs.
class RingWriter : public FencedWriter {
public:
    struct Target {
        Fd fd;
        WriterMode mode = WriterMode::block;
        uint32_t block_bytes = 0;
        uint64_t size_blocks = 0;
        uint32_t nsid = 0;
        uint32_t max_io_bytes = 0;
    };

    RingWriter(Target t, const WriterOptions& o)
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
        if (!(ring_.get()->features & IORING_FEAT_EXT_ARG)) return errno_error(ENOSYS);
        const int fd = t_.fd.get();
        if (io_uring_register_files(ring_.get(), &fd, 1) == 0) fixed_file_ = true;
        // A registered ring descriptor belongs to the registering thread, so
        // only when the caller promised to stay on it: spares a file lookup
        // per io_uring_enter.
        if (single_thread_) io_uring_register_ring_fd(ring_.get());
        return Ok{};
    }

    uint32_t block_bytes() const override { return t_.block_bytes; }
    uint64_t size_blocks() const override { return t_.size_blocks; }
    WriterMode mode() const override { return t_.mode; }
    uint64_t epoch() const override { return epoch_; }
    bool fenced() const override { return fenced_; }
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
            if (int rc = io_uring_unregister_buffers(ring_.get()); rc < 0) return errno_error(-rc);
            bufs_.clear();
        }
        if (regions.empty()) return Ok{};
        std::vector<iovec> iov;
        iov.reserve(regions.size());
        for (const auto& r : regions) iov.push_back(iovec{r.data(), r.size()});
        if (int rc = io_uring_register_buffers(ring_.get(), iov.data(), static_cast<unsigned>(iov.size())); rc < 0)
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
        const int rc = io_uring_submit(ring_.get());
        const uint32_t took = account_submitted_();
        if (cancelled) return make_error_code(Errc::fenced);
        if (rc < 0 && took == 0) return errno_error(-rc);
        return took;
    }

    Result<size_t> reap(std::span<Completion> out, uint32_t min_complete) override {
        if (min_complete > out.size()) return make_error_code(Errc::invalid_argument);
        size_t got = collect_(out, 0);
        if (got >= min_complete) return got;
        return wait_(out, got, min_complete, now_ns() + int64_t{timeout_ms_} * 1'000'000);
    }

    Result<size_t> submit_and_reap(std::span<Completion> out, uint32_t min_complete) override {
        if (min_complete > out.size()) return make_error_code(Errc::invalid_argument);
        if (pending_.empty()) return reap(out, min_complete);
        size_t got = collect_(out, 0);
        // After collecting: a fenced completion just collected latches too.
        const bool cancelled = cancel_if_latched_();
        if (got >= min_complete) {
            auto s = submit();
            if (!s && !cancelled && got == 0) return s.error();
            return got;
        }
        const int64_t deadline = now_ns() + int64_t{timeout_ms_} * 1'000'000;
        __kernel_timespec ts = to_kts(int64_t{timeout_ms_} * 1'000'000);
        io_uring_cqe* cqe = nullptr;
        const int rc = io_uring_submit_and_wait_timeout(ring_.get(), &cqe, static_cast<unsigned>(min_complete - got),
                                                        &ts, nullptr);
        const uint32_t took = account_submitted_();
        got = collect_(out, got);
        if (got >= min_complete) return got;
        if (rc < 0 && rc != -ETIME && rc != -EINTR && took == 0 && got == 0) return errno_error(-rc);
        return wait_(out, got, min_complete, deadline);
    }

protected:
    struct Slot {
        uint64_t user_data = 0;
        io_uring_sqe* sqe = nullptr;  // points into the SQ ring: only valid until the kernel consumes it
        uint32_t bytes = 0;
        IoKind kind = IoKind::write;
        bool cancelled = false;
    };

    // @p buf_index: the registered buffer holding buf, or -1 for none.
    virtual void prep_(io_uring_sqe* sqe, IoKind kind, uint64_t lba, uint8_t* buf, uint32_t bytes,
                       int buf_index) = 0;

    int file_() const { return fixed_file_ ? 0 : t_.fd.get(); }
    void finish_prep_(io_uring_sqe* sqe) const {
        if (fixed_file_) sqe->flags |= IOSQE_FIXED_FILE;
    }

    Target t_;

private:
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
        io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
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
    // counted by io_uring_sq_ready() and stays at the back of pending_.
    uint32_t account_submitted_() {
        const size_t left = io_uring_sq_ready(ring_.get());
        const size_t took = pending_.size() > left ? pending_.size() - left : 0;
        if (took == 0) return 0;
        for (size_t i = 0; i < took; ++i) slots_[pending_[i]].sqe = nullptr;
        pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(took));
        submitted_ += static_cast<uint32_t>(took);
        return static_cast<uint32_t>(took);
    }

    size_t collect_(std::span<Completion> out, size_t got) {
        io_uring_cqe* cqes[64];
        while (got < out.size()) {
            const unsigned want = static_cast<unsigned>(std::min<size_t>(out.size() - got, std::size(cqes)));
            unsigned n = io_uring_peek_batch_cqe(ring_.get(), cqes, want);
            if (n == 0 && (IO_URING_READ_ONCE(*ring_.get()->sq.kflags) & IORING_SQ_TASKRUN)) {
                // COOP_TASKRUN parks completions in task work until we enter
                // the kernel; some liburing versions' peek does not do it.
                io_uring_get_events(ring_.get());
                n = io_uring_peek_batch_cqe(ring_.get(), cqes, want);
            }
            if (n == 0) break;
            for (unsigned i = 0; i < n; ++i) out[got++] = complete_(*cqes[i]);
            io_uring_cq_advance(ring_.get(), n);
        }
        return got;
    }

    Completion complete_(const io_uring_cqe& cqe) {
        const auto id = static_cast<uint32_t>(cqe.user_data);
        if (id >= qd_) std::abort();  // not ours: the ring is private to this writer
        Slot& s = slots_[id];
        Completion c;
        if (s.cancelled) {
            c.kind = s.kind;
            c.status = IoStatus::fenced;
            c.error = make_error_code(Errc::fenced);
        } else {
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
            const int64_t left = deadline - now_ns();
            if (left <= 0) break;
            __kernel_timespec ts = to_kts(left);
            io_uring_cqe* cqe = nullptr;
            const int rc = io_uring_wait_cqes(ring_.get(), &cqe, static_cast<unsigned>(min_complete - got), &ts,
                                              nullptr);
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
                io_uring_submit(ring_.get());
                account_submitted_();
            }
        }
        const int64_t deadline = now_ns() + int64_t{timeout_ms_} * 1'000'000;
        Completion sink[64];
        while (submitted_ > 0 && now_ns() < deadline) {
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

    Ring ring_;
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
};

class BlockWriter final : public RingWriter {
public:
    using RingWriter::RingWriter;

private:
    void prep_(io_uring_sqe* sqe, IoKind kind, uint64_t lba, uint8_t* buf, uint32_t bytes, int buf_index) override {
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
        finish_prep_(sqe);
    }
};

class PassthruWriter final : public RingWriter {
public:
    using RingWriter::RingWriter;

private:
    void prep_(io_uring_sqe* sqe, IoKind kind, uint64_t lba, uint8_t* buf, uint32_t bytes, int buf_index) override {
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
        nvme_uring_cmd cmd;
        std::memset(&cmd, 0, sizeof cmd);
        cmd.opcode = c.opcode;
        cmd.nsid = c.nsid;
        cmd.addr = reinterpret_cast<uintptr_t>(buf);
        cmd.data_len = c.data_len;
        cmd.cdw10 = c.cdw[0];
        cmd.cdw11 = c.cdw[1];
        cmd.cdw12 = c.cdw[2];
        cmd.cdw13 = c.cdw[3];
        cmd.cdw14 = c.cdw[4];
        cmd.cdw15 = c.cdw[5];
        static_assert(sizeof cmd <= 2 * sizeof(io_uring_sqe) - offsetof(io_uring_sqe, cmd));
        // Through a byte pointer: sqe->cmd is declared as 16 bytes, but an
        // SQE128 ring gives it 80 (checked above).
        std::memcpy(reinterpret_cast<unsigned char*>(sqe) + offsetof(io_uring_sqe, cmd), &cmd, sizeof cmd);
        finish_prep_(sqe);
    }
};

Result<int> open_fd(const std::string& path, int flags) {
    int fd = ::open(path.c_str(), flags | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return make_error_code(Errc::not_found);
        return errno_error(errno);
    }
    return fd;
}

// The passthrough path maps the user buffer into one request; the kernel
// refuses requests above the queue's max_hw_sectors with EINVAL, so refuse
// them at queue time instead.
uint32_t passthru_max_io(const std::string& name, uint32_t lba_bytes) {
    uint64_t max = uint64_t{65536} * lba_bytes;
    std::ifstream f("/sys/block/" + name + "/queue/max_hw_sectors_kb");
    uint64_t kb = 0;
    if (f >> kb && kb > 0) max = std::min<uint64_t>(max, kb * 1024);
    else max = std::min<uint64_t>(max, 128 * 1024);
    max = std::min<uint64_t>(max, kBlockMaxIoBytes);
    return static_cast<uint32_t>(max / lba_bytes * lba_bytes);
}

Result<std::unique_ptr<FencedWriter>> make_writer(RingWriter::Target t, const WriterOptions& o) {
    std::unique_ptr<RingWriter> w;
    if (t.mode == WriterMode::passthrough) w = std::make_unique<PassthruWriter>(std::move(t), o);
    else w = std::make_unique<BlockWriter>(std::move(t), o);
    if (auto st = w->init(); !st) return st.error();
    return std::unique_ptr<FencedWriter>(std::move(w));
}

Result<std::unique_ptr<FencedWriter>> open_regular(const std::string& path, const WriterOptions& o) {
    if (!o.allow_regular_file) return make_error_code(Errc::not_nvme);
    if (o.mode == WriterMode::passthrough) return make_error_code(Errc::invalid_argument);
    auto fd = open_fd(path, O_RDWR | O_DIRECT);
    if (!fd) return fd.error();
    RingWriter::Target t;
    t.fd = Fd(*fd);
    t.mode = WriterMode::block;
    t.block_bytes = kFileBlockBytes;
    struct statx sx {};
    if (::statx(t.fd.get(), "", AT_EMPTY_PATH, STATX_SIZE | STATX_DIOALIGN, &sx) < 0) return errno_error(errno);
    if (sx.stx_mask & STATX_DIOALIGN) {
        for (uint32_t a : {sx.stx_dio_offset_align, sx.stx_dio_mem_align})
            if (a > t.block_bytes && (a & (a - 1)) == 0) t.block_bytes = a;
    }
    t.size_blocks = sx.stx_size / t.block_bytes;
    t.max_io_bytes = kBlockMaxIoBytes;
    return make_writer(std::move(t), o);
}

}  // namespace

Result<std::unique_ptr<FencedWriter>> FencedWriter::open(const std::string& path, const WriterOptions& opts) {
    if (opts.queue_depth < 1 || opts.queue_depth > kMaxQueueDepth || opts.timeout_ms == 0)
        return make_error_code(Errc::invalid_argument);
    struct stat st {};
    if (::stat(path.c_str(), &st) < 0) {
        if (errno == ENOENT) return make_error_code(Errc::not_found);
        return errno_error(errno);
    }
    if (S_ISREG(st.st_mode)) return open_regular(path, opts);

    auto paths = resolve_namespace(path);
    if (!paths) return paths.error();
    auto ns = Namespace::open(path);
    if (!ns) return ns.error();
    const NamespaceInfo& info = (*ns)->info();
    if (info.ns.lba_bytes == 0 || info.ns.size_blocks == 0) return make_error_code(Errc::malformed_data);

    RingWriter::Target base;
    base.block_bytes = info.ns.lba_bytes;
    base.size_blocks = info.ns.size_blocks;
    base.nsid = info.nsid;

    const bool has_generic = !paths->generic.empty() && ::access(paths->generic.c_str(), F_OK) == 0;
    bool try_passthru = false;
    if (opts.mode == WriterMode::passthrough) {
        if (!has_generic) return make_error_code(Errc::not_found);
        // Passthrough would send no metadata buffer for a namespace that
        // expects one; the block layer handles that case, so use block.
        if (info.ns.metadata_bytes != 0) return make_error_code(Errc::invalid_argument);
        try_passthru = true;
    } else if (opts.mode == WriterMode::automatic) {
        try_passthru = has_generic && info.ns.metadata_bytes == 0;
    }

    if (try_passthru) {
        auto fd = open_fd(paths->generic, O_RDWR);
        if (fd) {
            RingWriter::Target t;
            t.fd = Fd(*fd);
            t.mode = WriterMode::passthrough;
            t.block_bytes = base.block_bytes;
            t.size_blocks = base.size_blocks;
            t.nsid = base.nsid;
            t.max_io_bytes = passthru_max_io(paths->name, base.block_bytes);
            auto w = make_writer(std::move(t), opts);
            if (w || opts.mode == WriterMode::passthrough) return w;
        } else if (opts.mode == WriterMode::passthrough) {
            return fd.error();
        }
    }

    auto fd = open_fd(paths->block, O_RDWR | O_DIRECT);
    if (!fd) return fd.error();
    base.fd = Fd(*fd);
    base.mode = WriterMode::block;
    base.max_io_bytes = kBlockMaxIoBytes;
    return make_writer(std::move(base), opts);
}

// ---------------------------------------------------------------- sync calls

Completion FencedWriter::sync_(Status queued, IoKind kind) {
    Completion c;
    c.kind = kind;
    if (!queued) {
        c.status = queued.error() == Errc::fenced ? IoStatus::fenced : IoStatus::io_error;
        c.error = queued.error();
        return c;
    }
    Completion got[1];
    auto r = submit_and_reap(got, 1);
    if (!r) {
        c.status = r.error() == Errc::fenced ? IoStatus::fenced : IoStatus::io_error;
        c.error = r.error();
        return c;
    }
    return got[0];
}

namespace {
Completion busy(IoKind kind) {
    Completion c;
    c.kind = kind;
    c.status = IoStatus::io_error;
    c.error = make_error_code(Errc::invalid_argument);
    return c;
}
}  // namespace

Completion FencedWriter::write(uint64_t lba, std::span<const uint8_t> buf) {
    if (in_flight() != 0) return busy(IoKind::write);
    return sync_(queue_write(lba, buf, 0), IoKind::write);
}

Completion FencedWriter::read(uint64_t lba, std::span<uint8_t> buf) {
    if (in_flight() != 0) return busy(IoKind::read);
    return sync_(queue_read(lba, buf, 0), IoKind::read);
}

Completion FencedWriter::flush() {
    if (in_flight() != 0) return busy(IoKind::flush);
    return sync_(queue_flush(0), IoKind::flush);
}

}  // namespace nvfence
