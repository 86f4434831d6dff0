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
/// What Completion::error holds when the status is fenced (is_fenced() is
/// true for all three):
///  - block mode: errno EBADE (system_category), as the block layer reports
///    a Reservation Conflict;
///  - passthrough: the NVMe status, Reservation Conflict 0x83
///    (nvme_category; DNR and More bits dropped);
///  - an I/O that was queued but never sent because the writer latched
///    first: Errc::fenced.
///
/// Ordering contract, in the device's terms. A preempt-and-abort removes
/// this host's registration at once (every command the device admits after
/// that is refused), then waits for this host's commands it had already
/// admitted before it completes. So:
///  - a write that completes fenced was refused by the device, all of it
///    (one I/O is one NVMe command: see max_io_bytes()), in the attempt
///    that completed. The kernel sends a command again after a path error
///    (a fabric link lost and reconnected) or an abort; an earlier attempt
///    admitted before the preempt may have landed, ordered before the new
///    holder. So "fenced" means "nothing of it landed" only for an I/O that
///    met no path error (docs/RELIABILITY.md, invariant 1);
///  - a write that completes ok landed, and if it was admitted before the
///    preempt completed it is ordered before every write of the new
///    holder, even when its ok arrives after another write's fenced
///    completion (a slow backing disk finishes it late);
///  - a fenced completion therefore says nothing about the other I/Os in
///    flight: they may still complete ok. It is not "everything after this
///    failed". After the first fenced completion, settled() turns true
///    once every I/O this writer had handed to the kernel has completed:
///    from then on no write of this writer can still land. Reap until
///    settled() before acting on "nothing more of mine will land".
///
/// Reads: under Write Exclusive (we, wero, wear) a preempted host can still
/// read the namespace (it may read what the new holder writes, or stale
/// data it cached); only the Exclusive Access types (ea, earo, eaar) make
/// the device refuse a non-holder's reads as well.
///
/// Requirements: Linux >= 5.11 (IORING_FEAT_EXT_ARG, for bounded waits in
/// one system call); passthrough needs >= 5.19 and a namespace formatted
/// without metadata. The file is always registered with the ring; fixed
/// (registered) buffers are used for I/Os whose buffer lies inside a region
/// given to register_buffers() (passthrough: Linux >= 6.1 for
/// IORING_URING_CMD_FIXED), ordinary buffers otherwise.
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

#include "nvfence/export.h"
#include "nvfence/result.hpp"

namespace nvfence {

/// Which I/O path a FencedWriter uses.
enum class WriterMode { automatic, block, passthrough };

/// Options of FencedWriter::open.
struct NVFENCE_API WriterOptions {
    WriterMode mode = WriterMode::automatic;  ///< automatic: passthrough if /dev/ng exists (see open()).
    uint32_t queue_depth = 32;      ///< Max I/Os in flight, 1..1024.
    uint32_t timeout_ms = 30000;    ///< Bound on waiting for completions.
    uint64_t epoch = 0;             ///< Epoch of the grant this writer writes under.
    bool allow_regular_file = false;///< Block mode on a regular file (benchmarks).
    /// A promise that only the thread that calls open() ever calls this
    /// writer, its destructor included. It lets the ring use
    /// IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN (completions
    /// are processed when this thread waits, not by interrupting it) and a
    /// registered ring descriptor, which save CPU per I/O. Ignored where
    /// the kernel lacks them (before 6.1). Breaking the promise is not
    /// undefined behaviour but fails: the kernel refuses another thread's
    /// submissions and waits (returned as the errno, EEXIST or EBADF), and a writer
    /// destroyed on another thread with I/Os in flight cannot drain them
    /// and aborts (see ~FencedWriter). Off by default because the default
    /// writer may be handed from one thread to another between calls.
    bool single_thread = false;
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
struct NVFENCE_API Completion {
    uint64_t user_data = 0;         ///< As given at submission.
    IoKind kind = IoKind::write;    ///< What it was.
    IoStatus status = IoStatus::ok; ///< Exactly one outcome.
    std::error_code error;          ///< Empty for ok; the status or errno otherwise.
    uint32_t bytes = 0;             ///< Bytes transferred when ok.
};

/// A heap buffer aligned for O_DIRECT, freed on destruction.
class NVFENCE_API AlignedBuffer {
public:
    /// @p bytes rounded up to @p align (a power of two), zero-filled.
    /// A non-power-of-two @p align aborts; allocation failure throws
    /// std::bad_alloc like any other allocation.
    AlignedBuffer(size_t bytes, size_t align = 4096);
    /// Frees the buffer.
    ~AlignedBuffer();
    /// Not copyable: one owner frees the memory.
    AlignedBuffer(const AlignedBuffer&) = delete;
    /// Not copyable.
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
    /// The whole buffer as a read-only span.
    std::span<const uint8_t> span() const { return {p_, n_}; }

private:
    uint8_t* p_ = nullptr;
    size_t n_ = 0;
};

/// io_uring I/O with typed fenced completions. Not thread-safe: one owner
/// at a time, which may hand the writer to another thread between calls.
class NVFENCE_API FencedWriter {
public:
    /// Opens @p path (an NVMe namespace block device, its /dev/ng node, or
    /// with allow_regular_file a regular file) in the requested mode.
    ///
    /// Block size and capacity come from Identify Namespace (a regular file:
    /// 4096 bytes, or its larger direct-I/O alignment, and st_size / that).
    /// automatic picks passthrough when the namespace has a generic node and
    /// no metadata, and falls back to block if the passthrough ring cannot
    /// be set up. Errors: Errc::invalid_argument (queue_depth outside
    /// 1..1024, timeout_ms 0, passthrough asked for a regular file or a
    /// namespace with metadata), Errc::not_found (no such path, or
    /// passthrough asked and there is no generic node), Errc::not_nvme (not
    /// an NVMe namespace; a regular file without allow_regular_file), the
    /// errors of Namespace::open, or an errno from open / io_uring setup
    /// (EINVAL from open: the file system has no O_DIRECT).
    static Result<std::unique_ptr<FencedWriter>> open(const std::string& path,
                                                      const WriterOptions& opts);
    /// Waits for every I/O in flight (queued ones are never sent), bounded
    /// by the writer's timeout, then tears the ring down. If I/Os are still
    /// in flight when the timeout runs out, it prints why to stderr and
    /// calls std::abort(): the kernel may still transfer into the caller's
    /// buffers, and returning would let the caller free them.
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
    /// True once fenced() and every I/O handed to the kernel before the
    /// latch has completed and been reaped (the I/Os queued but not sent
    /// when the latch came never reach the device and do not count). From
    /// then on no write of this writer can land on the media; before it, a
    /// write admitted before the preempt may still complete ok (see the
    /// ordering contract at the top of this file). False while not fenced.
    virtual bool settled() const = 0;
    /// I/Os submitted or queued and not yet reaped.
    virtual uint32_t in_flight() const = 0;
    /// The bound on in_flight() given at open.
    virtual uint32_t queue_depth() const = 0;
    /// Largest single read or write in bytes, so that one I/O is one NVMe
    /// command and a fenced completion means none of it landed. Block mode
    /// on a namespace: the queue's max_sectors_kb, and (max_segments - 1)
    /// pages, read at open (128 KiB when sysfs does not say; the kernel
    /// would split anything larger into several commands, and a preempt
    /// between them would leave part written under a fenced completion; an
    /// administrator lowering max_sectors_kb while the writer is open
    /// reopens that gap). Passthrough: the smaller of 65536 blocks and the
    /// device's max_hw_sectors_kb (128 KiB when sysfs does not say). A
    /// regular file: 1 GiB.
    virtual uint32_t max_io_bytes() const = 0;

    /// Registers @p regions with the ring as fixed buffers, replacing any
    /// earlier registration; an empty span only unregisters. From then on a
    /// read or write whose buffer lies wholly inside one region is sent as a
    /// fixed-buffer I/O (IORING_OP_WRITE_FIXED / READ_FIXED; passthrough:
    /// IORING_URING_CMD_FIXED), which spares the kernel pinning the user
    /// pages on every I/O; any other buffer is sent as before. Checks and
    /// completions are unchanged. Requires in_flight() == 0, at most 1024
    /// regions, each non-empty and at most 1 GiB (Errc::invalid_argument,
    /// nothing changed); kernel refusals come back as the errno (e.g.
    /// ENOMEM), with no region registered. The kernel pins the regions'
    /// pages: they must stay allocated, and not be remapped, until they are
    /// unregistered or the writer is destroyed; a fixed I/O to an address
    /// whose memory was freed and reused would move the old, pinned pages.
    virtual Status register_buffers(std::span<const std::span<uint8_t>> regions) = 0;
    /// How many regions register_buffers() registered (0: none).
    virtual uint32_t fixed_buffers() const = 0;

    /// Queues a write of @p buf at block @p lba. Checks, in this order,
    /// with nothing sent and in_flight() unchanged on error: latched
    /// (Errc::fenced), zero length or longer than max_io_bytes()
    /// (Errc::invalid_argument), buffer address or length not a multiple of
    /// block_bytes() (Errc::misaligned), blocks past size_blocks()
    /// (Errc::out_of_bounds), in_flight() == queue_depth()
    /// (Errc::queue_full). @p buf must stay valid until its completion is
    /// reaped.
    virtual Status queue_write(uint64_t lba, std::span<const uint8_t> buf, uint64_t user_data) = 0;
    /// Queues a read into @p buf at block @p lba; same checks.
    virtual Status queue_read(uint64_t lba, std::span<uint8_t> buf, uint64_t user_data) = 0;
    /// Queues a flush of the device's volatile write cache (fdatasync on a
    /// regular file); latched and queue-space checks only.
    virtual Status queue_flush(uint64_t user_data) = 0;
    /// Submits everything queued in one system call; returns how many the
    /// kernel took. Any it did not take stay queued for the next call. Once
    /// latched, queued I/Os are not sent: each completes (via reap) as
    /// fenced with Errc::fenced, and submit returns Errc::fenced.
    virtual Result<uint32_t> submit() = 0;
    /// Reaps completions into @p out (at most out.size()), waiting for at
    /// least @p min_complete, 0 to only collect what is ready. The wait is
    /// bounded by the writer's timeout: when it runs out, returns the
    /// completions that did arrive, or Errc::timeout if none did (a wait
    /// for more than are in flight therefore lasts the whole timeout).
    /// Errc::invalid_argument when @p min_complete > out.size(). A reaped
    /// completion is never lost: every one returned is in @p out. reap()
    /// never submits; queued I/Os wait for submit().
    virtual Result<size_t> reap(std::span<Completion> out, uint32_t min_complete) = 0;
    /// submit() then reap(), in one system call where possible: the fast
    /// path of a loop that keeps the queue full. Completions the kernel
    /// holds for this thread (single_thread's deferred task work) are
    /// collected by that same io_uring_enter, not by one of their own. A submission error is
    /// returned only when no completion was collected; otherwise the unsent
    /// I/Os stay queued (in_flight() counts them) for the next submit.
    virtual Result<size_t> submit_and_reap(std::span<Completion> out, uint32_t min_complete) = 0;

    /// A descriptor for an event loop (epoll, poll, select; readable =
    /// EPOLLIN) that becomes readable when completions are ready to reap.
    /// Fencing is one of them: the fenced completion of an I/O, or the
    /// Errc::fenced completion of one queued when the latch came, makes it
    /// readable like any other, so an owner that waits on it learns of a
    /// preemption at its next reap. An eventfd (EFD_NONBLOCK | EFD_CLOEXEC)
    /// registered with the ring (io_uring_register_eventfd), made by the
    /// first call and owned by the writer: later calls return the same
    /// descriptor; do not close it, it is closed with the writer. Errors
    /// (nothing made; a later call tries again): the errno of eventfd(2) or
    /// io_uring_register(2), or ENOTSUP for a FencedWriter that is not the
    /// library's own.
    ///
    /// Semantics, exactly:
    ///  - level, not edge, in effect: a successful reap() or
    ///    submit_and_reap() clears it before it returns, and leaves it
    ///    readable when it filled its whole output span or completions are
    ///    left (more may be waiting); a completion that arrives later makes
    ///    it readable again. The caller need not read it (reading the 8-byte
    ///    counter is harmless).
    ///  - it may be readable with nothing to reap (spurious): a completion
    ///    already reaped by a call that ran after the signal, the counter's
    ///    own start (readable at once when I/Os were in flight at the first
    ///    call), completions parked in task work that reap collects. On
    ///    readiness, reap with min_complete 0 (never blocks) until it returns
    ///    fewer than out.size(), and treat 0 as normal.
    ///  - not readable with nothing in flight and nothing unreaped, once
    ///    cleared.
    ///  - a writer of the testing kit (testkit::SimHost::open_writer) offers
    ///    the same descriptor: it becomes readable when the simulated clock
    ///    delivers a completion (a wait of the writer, SimCluster::advance()
    ///    or run_all()).
    /// Not thread-safe, like the rest of the writer; with
    /// WriterOptions::single_thread the first call must come from the
    /// writer's thread too.
    Result<int> event_fd();

    /// Synchronous write: queue, submit, wait for this one completion.
    /// Requires in_flight() == 0 (otherwise io_error with
    /// Errc::invalid_argument, nothing sent), so no asynchronous completion
    /// is consumed by it. Argument errors come back as io_error with the
    /// queue error (Errc::fenced as status fenced once latched). On
    /// Errc::timeout the write is still in flight, and after a submission
    /// error it is still queued: either way in_flight() is 1 and @p buf must
    /// stay valid until a later reap() returns it or the writer is
    /// destroyed.
    Completion write(uint64_t lba, std::span<const uint8_t> buf);
    /// Synchronous read; same rules as write().
    Completion read(uint64_t lba, std::span<uint8_t> buf);
    /// Synchronous flush; same rules as write().
    Completion flush();

private:
    NVFENCE_LOCAL Completion sync_(Status queued, IoKind kind);
};

/// Words for a mode: "block", "passthrough", "auto".
NVFENCE_API const char* writer_mode_name(WriterMode m);

/// The one outcome of a raw io_uring completion result @p res of an I/O of
/// @p kind that should have moved @p expected_bytes, as FencedWriter
/// reports it (user_data left 0). Block mode (@p mode block): -EBADE is
/// fenced (errno EBADE), any other negative value io_error with that errno,
/// a count other than @p expected_bytes io_error EIO (short transfer).
/// Passthrough: 0 is ok; a positive NVMe status is fenced when its SC/SCT
/// is 0x83 (error: make_nvme_error(res)), io_error otherwise; -EBADE is
/// fenced and other negative values io_error with the errno. automatic is
/// not a completion mode: io_error Errc::invalid_argument.
NVFENCE_API Completion classify_completion(WriterMode mode, IoKind kind, int32_t res, uint32_t expected_bytes);

/// The index of the first region in @p regions that wholly contains the
/// @p len bytes at @p p, or -1 if none does (or @p len is 0). This is how a
/// FencedWriter picks the fixed buffer of an I/O (see register_buffers()).
NVFENCE_API int fixed_buffer_index(std::span<const std::span<uint8_t>> regions, const void* p, size_t len);

}  // namespace nvfence
