// SPDX-License-Identifier: MIT
#pragma once
/// @file writer.hpp
/// FencedWriter: io_uring I/O to a shared namespace whose every completion
/// is exactly one of ok, fenced (the device refused this host: Reservation
/// Conflict) or an I/O error. The first fenced completion latches the
/// writer: later submissions fail at once as fenced without reaching the
/// device, until the owner opens a new writer under a new grant.
///
/// Two modes:
///  - block: the namespace's block device opened O_DIRECT, IORING_OP_READ /
///    IORING_OP_WRITE (fixed buffers and a registered file where given).
///    A refused write completes with -EBADE.
///  - passthrough: NVMe Read/Write through IORING_OP_URING_CMD on the
///    generic char device /dev/ngXnY (SQE128/CQE32); the completion carries
///    the NVMe status itself (0x83 = Reservation Conflict).
///
/// Example:
/// @code
///   auto w = nvfence::FencedWriter::open("/dev/nvme1n1", {.epoch = 42});
///   if (!w) return w.error();
///   nvfence::AlignedBuffer buf(4096, (*w)->block_bytes());
///   std::memcpy(buf.data(), record, 4096);   // stamp epoch 42 in the record
///   auto c = (*w)->write(/*lba=*/8, buf.span());
///   if (c.status == nvfence::IoStatus::fenced) { /* preempted: stop */ }
/// @endcode

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <system_error>

#include "nvfence/result.hpp"

namespace nvfence {

/// Which I/O path a FencedWriter uses.
enum class WriterMode { automatic, block, passthrough };

/// Options of FencedWriter::open.
struct WriterOptions {
    WriterMode mode = WriterMode::automatic;  ///< automatic: passthrough if /dev/ng exists.
    uint32_t queue_depth = 32;      ///< Max I/Os in flight, 1..1024.
    uint32_t timeout_ms = 30000;    ///< Bound on waiting for completions.
    uint64_t epoch = 0;             ///< Epoch of the grant this writer writes under.
    bool allow_regular_file = false;///< Block mode on a regular file (benchmarks).
};

/// The kind of an I/O.
enum class IoKind : uint8_t { write, read, flush };

/// The one outcome of a completion.
enum class IoStatus : uint8_t {
    ok,        ///< The device accepted it.
    fenced,    ///< The device refused this host (or the writer is latched).
    io_error,  ///< Any other failure; see Completion::error.
};

/// One completed I/O.
struct Completion {
    uint64_t user_data = 0;         ///< As given at submission.
    IoKind kind = IoKind::write;    ///< What it was.
    IoStatus status = IoStatus::ok; ///< Exactly one outcome.
    std::error_code error;          ///< Empty for ok; the status or errno otherwise.
    uint32_t bytes = 0;             ///< Bytes transferred when ok.
};

/// A heap buffer aligned for O_DIRECT, freed on destruction.
class AlignedBuffer {
public:
    /// @p bytes rounded up to @p align (a power of two), zero-filled.
    AlignedBuffer(size_t bytes, size_t align = 4096);
    ~AlignedBuffer();
    AlignedBuffer(const AlignedBuffer&) = delete;
    AlignedBuffer& operator=(const AlignedBuffer&) = delete;
    /// Moves ownership.
    AlignedBuffer(AlignedBuffer&& o) noexcept;
    /// Moves ownership.
    AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
    /// Start of the buffer.
    uint8_t* data() { return p_; }
    /// Start of the buffer.
    const uint8_t* data() const { return p_; }
    /// Size in bytes.
    size_t size() const { return n_; }
    /// The whole buffer as a span.
    std::span<uint8_t> span() { return {p_, n_}; }

private:
    uint8_t* p_ = nullptr;
    size_t n_ = 0;
};

/// io_uring I/O with typed fenced completions. Not thread-safe: one owner.
class FencedWriter {
public:
    /// Opens @p path (an NVMe namespace block device, its /dev/ng node, or
    /// with allow_regular_file a regular file) in the requested mode.
    static Result<std::unique_ptr<FencedWriter>> open(const std::string& path,
                                                      const WriterOptions& opts);
    virtual ~FencedWriter() = default;

    /// Logical block size in bytes.
    virtual uint32_t block_bytes() const = 0;
    /// Capacity in blocks.
    virtual uint64_t size_blocks() const = 0;
    /// The mode in use (never automatic).
    virtual WriterMode mode() const = 0;
    /// The epoch given at open: stamp it into records.
    virtual uint64_t epoch() const = 0;
    /// True once a completion was fenced.
    virtual bool fenced() const = 0;
    /// I/Os submitted or queued and not yet reaped.
    virtual uint32_t in_flight() const = 0;

    /// Queues a write of @p buf at block @p lba. Checks alignment, bounds,
    /// non-zero length and queue space first (nothing is sent on error);
    /// fails with Errc::fenced at once once latched. @p buf must stay valid
    /// until its completion is reaped.
    virtual Status queue_write(uint64_t lba, std::span<const uint8_t> buf, uint64_t user_data) = 0;
    /// Queues a read into @p buf at block @p lba; same checks.
    virtual Status queue_read(uint64_t lba, std::span<uint8_t> buf, uint64_t user_data) = 0;
    /// Queues a flush.
    virtual Status queue_flush(uint64_t user_data) = 0;
    /// Submits everything queued in one system call; returns how many.
    virtual Result<uint32_t> submit() = 0;
    /// Reaps completions into @p out, waiting for at least @p min_complete
    /// (bounded by the writer's timeout; Errc::timeout when it runs out).
    virtual Result<size_t> reap(std::span<Completion> out, uint32_t min_complete) = 0;

    /// Synchronous write: queue, submit, wait.
    Completion write(uint64_t lba, std::span<const uint8_t> buf);
    /// Synchronous read.
    Completion read(uint64_t lba, std::span<uint8_t> buf);
    /// Synchronous flush.
    Completion flush();

private:
    Completion sync_(Status queued, IoKind kind);
};

/// Words for a mode: "block", "passthrough", "auto".
const char* writer_mode_name(WriterMode m);

}  // namespace nvfence
