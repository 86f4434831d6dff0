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
#include "writer/ring_writer.hpp"
#include "internal/invariant.hpp"

namespace nvfence {

// ---------------------------------------------------------------- AlignedBuffer

AlignedBuffer::AlignedBuffer(size_t bytes, size_t align) {
    NVF_INVARIANT(align != 0 && (align & (align - 1)) == 0);
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

// A block-mode I/O above the queue's limits is split by the block layer
// into several NVMe commands, and a preemption between them would leave
// part of it written under a fenced completion. Capping one I/O at what one
// command carries keeps "fenced = nothing of this I/O landed" true. Limits:
// max_sectors_kb, and max_segments pages less one (a buffer that is only
// block-aligned can straddle one more page than it is long). Unknown limits
// fall back to 128 KiB, the smallest MDTS-derived limit seen in practice.
uint32_t block_max_io(const std::string& name, uint32_t lba_bytes) {
    const std::string q = "/sys/block/" + name + "/queue/";
    uint64_t max = kBlockMaxIoBytes;
    uint64_t kb = 0, segs = 0;
    if (std::ifstream f(q + "max_sectors_kb"); f >> kb && kb > 0) max = std::min<uint64_t>(max, kb * 1024);
    else max = std::min<uint64_t>(max, 128 * 1024);
    if (std::ifstream f(q + "max_segments"); f >> segs && segs > 1)
        max = std::min<uint64_t>(max, (segs - 1) * uint64_t{4096});
    max = max / lba_bytes * lba_bytes;
    if (max == 0) max = lba_bytes;
    return static_cast<uint32_t>(max);
}

Result<std::unique_ptr<FencedWriter>> make_writer(detail::WriterTarget t, const WriterOptions& o) {
    auto w = std::make_unique<detail::RingWriter<detail::UringRing>>(std::move(t), o);
    if (auto st = w->init(); !st) return st.error();
    return std::unique_ptr<FencedWriter>(std::move(w));
}

Result<std::unique_ptr<FencedWriter>> open_regular(const std::string& path, const WriterOptions& o) {
    if (!o.allow_regular_file) return make_error_code(Errc::not_nvme);
    if (o.mode == WriterMode::passthrough) return make_error_code(Errc::invalid_argument);
    auto fd = open_fd(path, O_RDWR | O_DIRECT);
    if (!fd) return fd.error();
    detail::WriterTarget t;
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

    detail::WriterTarget base;
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
            detail::WriterTarget t;
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
    base.max_io_bytes = block_max_io(paths->name, base.block_bytes);
    return make_writer(std::move(base), opts);
}

// ---------------------------------------------------------------- event fd

Result<int> FencedWriter::event_fd() {
    // Every writer the library makes (here and in the testing kit) is a
    // RingWriter, which is an EventSource.
    if (auto* s = dynamic_cast<detail::EventSource*>(this)) return s->event_fd();
    return errno_error(ENOTSUP);
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
