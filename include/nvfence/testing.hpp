// SPDX-License-Identifier: MIT
#pragma once
/// @file testing.hpp
/// The nvfence testing kit: an engine's failover unit test without a lab or
/// a shared namespace. Link nvfence::testing (CMake) or -lnvfence_testing
/// (the static archive of the libnvfence-dev package) beside libnvfence.
///
/// A SimCluster is N simulated hosts sharing one simulated namespace: the
/// reservation model of nvfence/testing_model.hpp (FakeTarget, answering as
/// the Linux nvmet target does), plus media that keeps what was written.
/// Each host (SimHost) gives:
///  - the Passthru its reservation commands go through, so Reservations and
///    Fence run unchanged (SimHost::fence(), SimHost::takeover());
///  - FencedWriter::open's counterpart, SimHost::open_writer(): the
///    library's own FencedWriter (the same latch, cancel and settled() code
///    as over io_uring) over a model of the ring whose every read, write and
///    flush the model executes as an NVMe command: a host that was preempted
///    gets Reservation Conflict from the model, and its writer reports
///    IoStatus::fenced.
///
/// Time is simulated (microseconds, SimCluster::now_us()); nothing sleeps.
/// Each I/O follows an IoPlan (SimCluster::plan): how long until the device
/// executes it (admits it: it lands or is refused, against the reservation
/// as it is then), how long until its completion reaches the host after
/// that, and whether the completion is lost (the command ran, but the host
/// gets an I/O error, EIO, when the kernel's timeout, SimOptions::lost_after_us,
/// runs out). A writer that waits for a completion advances the clock to it
/// (each of its bounded waits by timeout_ms at most; a writer's call may
/// wait more than once); SimCluster::advance() moves it from the
/// test. Reservation commands execute at once, after whatever fell due.
///
/// Failure scenarios: another host's preempt (SimHost::takeover() or a
/// Fence of that host), a delayed I/O that reaches the device after the
/// preempt (refused) or before it (landed, even if its completion arrives
/// after another I/O's fenced one), a lost completion (landed, reported as
/// an I/O error), and SimCluster::restart_target(): a target restart that
/// loses every registration and the reservation when PTPL is off (as
/// nvmet without a persistence file), keeps the media, and fails the I/Os
/// the device had not executed yet with an I/O error (EIO).
///
/// Single-threaded: a SimCluster and everything of it is used by one
/// thread. Writers opened on a host must be destroyed before the cluster.
///
/// Example (a failover test in a few lines):
/// @code
///   nvfence::testkit::SimCluster c({.hosts = 2});
///   c.host(0).takeover();                       // host 0 holds
///   auto w = c.host(0).open_writer({});
///   nvfence::AlignedBuffer b(4096);
///   assert((*w)->write(0, b.span()).status == nvfence::IoStatus::ok);
///   c.host(1).takeover();                       // failover: host 1 preempts
///   assert((*w)->write(1, b.span()).status == nvfence::IoStatus::fenced);
/// @endcode

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>

#include "nvfence/export.h"
#include "nvfence/fence.hpp"
#include "nvfence/passthru.hpp"
#include "nvfence/reservation.hpp"
#include "nvfence/result.hpp"
#include "nvfence/testing_model.hpp"
#include "nvfence/writer.hpp"

namespace nvfence::testkit {

/// What the simulated device does with one I/O.
struct IoPlan {
    uint64_t start_us = 0;     ///< From submission until the device executes it.
    uint64_t complete_us = 0;  ///< From execution until the host sees its completion.
    bool lose = false;         ///< The command runs, its completion is lost (EIO after lost_after_us).
};

/// One I/O as the device sees it (the argument of SimCluster::plan).
struct SimIo {
    size_t host = 0;          ///< Index of the submitting host.
    IoKind kind = IoKind::write;
    uint64_t lba = 0;         ///< First block (0 for a flush).
    uint32_t blocks = 0;      ///< Length in blocks (0 for a flush).
    uint64_t seq = 0;         ///< 0, 1, 2, ... in submission order, over all hosts.
};

/// How a SimCluster is built.
struct SimOptions {
    size_t hosts = 2;                     ///< Number of hosts, 1..64.
    uint32_t block_bytes = 4096;          ///< Logical block size: 512 or 4096.
    uint64_t size_blocks = 1u << 16;      ///< Capacity in blocks.
    uint64_t lost_after_us = 30'000'000;  ///< When a lost completion comes back as EIO.
    /// The writers' mode: block (a refusal is errno EBADE) or passthrough
    /// (NVMe status 0x83); automatic means passthrough.
    WriterMode mode = WriterMode::passthrough;
};

class SimCluster;

/// One simulated host: its id, its reservation commands, its writers.
class NVFENCE_API SimHost {
public:
    SimHost(const SimHost&) = delete;
    SimHost& operator=(const SimHost&) = delete;
    ~SimHost();

    /// Index of the host in its cluster (0-based).
    size_t index() const { return index_; }
    /// Its 128-bit host identifier (make_host(index + 1)).
    const HostId& id() const { return id_; }
    /// Where its reservation commands go (Namespace::passthru()'s role).
    Passthru& passthru();
    /// Reservation commands on the namespace, through passthru().
    Reservations& reservations();
    /// The namespace id (1).
    uint32_t nsid() const;
    /// A Fence of this host over reservations() (it must not outlive the
    /// cluster). @p store may be null.
    Fence fence(const FenceOptions& opts, const EpochStore* store = nullptr);
    /// Takes the reservation over with this host's own Fence (tag 1, node
    /// index() + 1, Write Exclusive, preempt-and-abort): the failover.
    Result<Outcome> takeover();
    /// A FencedWriter of this host. Its geometry is the cluster's; the
    /// options' checks are FencedWriter::open's (queue_depth 1..1024,
    /// timeout_ms > 0: Errc::invalid_argument); mode and
    /// allow_regular_file are ignored (SimOptions::mode decides).
    Result<std::unique_ptr<FencedWriter>> open_writer(const WriterOptions& opts);

private:
    friend class SimCluster;
    struct Port;
    SimHost(SimCluster& c, size_t index);

    SimCluster& cluster_;
    size_t index_;
    HostId id_;
    std::unique_ptr<Port> port_;
    std::unique_ptr<Reservations> resv_;
    std::unique_ptr<Fence> fence_;
};

/// N hosts sharing one simulated namespace (see the top of this file).
class NVFENCE_API SimCluster {
public:
    /// Builds the cluster; SimOptions out of range (hosts 0 or above 64,
    /// another block size, capacity 0) abort: a test's own mistake.
    explicit SimCluster(const SimOptions& opts = {});
    ~SimCluster();
    SimCluster(const SimCluster&) = delete;
    SimCluster& operator=(const SimCluster&) = delete;

    /// Number of hosts.
    size_t size() const;
    /// Host @p i (aborts when out of range).
    SimHost& host(size_t i);
    /// The reservation model: inspect it, or set its state and hooks. Its
    /// deviations are NvmetDeviations::all(): it answers as nvmet does.
    FakeTarget& target();
    /// The options it was built with.
    const SimOptions& options() const;

    /// The simulated clock, in microseconds since the cluster was built.
    uint64_t now_us() const;
    /// Moves the clock @p us forward, executing and completing every I/O
    /// that falls due on the way, in time order.
    void advance(uint64_t us);
    /// Runs the clock until no I/O is left on the device or in flight to a
    /// host (lost completions included).
    void run_all();
    /// The plan of each I/O when it is submitted; unset: every I/O is
    /// executed and completed at once.
    std::function<IoPlan(const SimIo&)> plan;

    /// A target restart: PTPL off (FakeTarget::ptpl false), every
    /// registration, the reservation and the pending notifications are
    /// lost and the generation restarts at 0; PTPL on keeps them. The media
    /// keeps what was written. I/Os not executed yet complete with an I/O
    /// error (EIO) and never reach the media.
    void restart_target();

    /// A power loss of the device, which has a volatile write cache (as
    /// nvmet reports one): once it has executed @p commands more I/O
    /// commands (reads, writes and flushes of any host; 0: at once), every
    /// block written since the last Flush either keeps its newest content
    /// or falls back to what the last Flush made durable, each block on its
    /// own, as @p seed picks (the same seed, the same pick). From then on the
    /// device executes nothing: every I/O completes with an I/O error (EIO)
    /// and never reaches the media, every reservation command fails with
    /// EIO, until power_on(). A Flush the device executed makes every block
    /// written before it durable, whichever host wrote it.
    void power_loss_after(uint64_t commands, uint64_t seed);
    /// Powers the device back on after a power loss: a target restart
    /// (restart_target(): PTPL off loses registrations and the
    /// reservation), with the media as the power loss left it. Aborts when
    /// the power is on: a test's own mistake.
    void power_on();
    /// False between a power loss and power_on().
    bool powered() const;

    /// The media's block @p lba as it is now (zeros if never written; empty
    /// when out of range).
    std::span<const uint8_t> block(uint64_t lba) const;
    /// Writes the device executed and accepted, over all hosts.
    uint64_t writes_landed() const;
    /// Writes the device refused (Reservation Conflict), over all hosts.
    uint64_t writes_refused() const;

    /// Internal to the kit.
    struct Impl;
    /// Internal to the kit.
    Impl& impl() { return *impl_; }

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace nvfence::testkit
