// SPDX-License-Identifier: MIT
#pragma once
/// @file reservation.hpp
/// The reservation commands of one namespace, sent through a Passthru.
/// Each call encodes (command.hpp), sends, and returns the device's answer;
/// none of them trusts a return code to describe the device's state: callers
/// that change state re-read with report() (fence.hpp does).

#include <cstdint>

#include "nvfence/export.h"
#include "nvfence/command.hpp"
#include "nvfence/passthru.hpp"
#include "nvfence/report.hpp"
#include "nvfence/result.hpp"

namespace nvfence {

/// Bound on one Preempt and Abort. The device completes it only after the
/// preempted host's in-flight commands are aborted, and on a fabric a host
/// that was cut off mid-write keeps them open until the target drops its
/// connection (the host's keep-alive timeout, 5 s by default), so the
/// agent's usual per-command bound would time out a preemption that is
/// about to succeed.
inline constexpr uint32_t kPreemptAbortTimeoutMs = 30000;

/// Limits of Reservations::report().
inline constexpr uint32_t kReportInitialBytes = 4096;     ///< First read.
inline constexpr int kReportMaxReads = 4;                 ///< Re-reads if it grew.

/// Reservation commands for namespace @p nsid behind a Passthru.
class Reservations {
public:
    /// Commands go to @p pt (borrowed) for namespace @p nsid.
    Reservations(Passthru& pt, uint32_t nsid) : pt_(pt), nsid_(nsid) {}

    /// The namespace id.
    uint32_t nsid() const { return nsid_; }
    /// Reservation Register (register, unregister, replace). args.nsid is
    /// overwritten with this namespace's id.
    NVFENCE_API Status reg(RegisterArgs args);
    /// Reservation Acquire (acquire, preempt, preempt-and-abort).
    NVFENCE_API Status acquire(AcquireArgs args);
    /// Reservation Release (release, clear).
    NVFENCE_API Status release(ReleaseArgs args);
    /// Reservation Report. Asks for the extended data structure first on
    /// every call and falls back to the plain one for this call only when the
    /// device refuses it (Invalid Field); sizes the buffer from the registrant count and re-reads while
    /// it grew, at most kReportMaxReads times.
    NVFENCE_API Result<ReservationStatus> report();
    /// Reads (and thereby consumes) one Reservation Notification log page.
    NVFENCE_API Result<ResvNotification> notification_log();
    /// Sets which reservation notifications this controller reports.
    NVFENCE_API Status set_notification_mask(const NotificationMask& m);
    /// Reads the Reservation Notification Mask.
    NVFENCE_API Result<NotificationMask> notification_mask();
    /// True when the last report() had to fall back to the plain data structure.
    bool extended_refused() const { return extended_refused_; }

    /// Diagnostic: the size of report()'s first read (default
    /// kReportInitialBytes). A size too small for every registrant makes
    /// report() re-read with a buffer sized from the registrant count, the
    /// path taken when registrants are added between two reads. Rounded up
    /// to a multiple of 4 and raised to at least the header of the data
    /// structure being read (a device may refuse a buffer smaller than the
    /// header: nvmet answers Invalid Field in Command).
    void set_report_initial_bytes(uint32_t bytes) { initial_bytes_ = bytes; }
    /// The first-read size set by set_report_initial_bytes().
    uint32_t report_initial_bytes() const { return initial_bytes_; }
    /// Reservation Report commands the last report() sent (a refused
    /// extended read included).
    int last_report_reads() const { return last_reads_; }

private:
    Result<ReservationStatus> report_once(bool extended, uint32_t len, std::vector<uint8_t>& buf);
    Passthru& pt_;
    uint32_t nsid_;
    bool extended_refused_ = false;
    uint32_t initial_bytes_ = kReportInitialBytes;
    int last_reads_ = 0;
};

}  // namespace nvfence
