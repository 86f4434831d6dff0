// SPDX-License-Identifier: MIT
#pragma once
/// @file uevent.hpp
/// Kernel uevents of NVMe controllers: the Linux host reports every
/// Asynchronous Event a controller completes as a `change` uevent with
/// `NVME_AEN=0x<dword 0>` (drivers/nvme/host/core.c, nvme_aen_uevent).
/// nvmet (and other targets) send one when a Reservation Notification log
/// page becomes available (AER type 6, I/O command set specific, log page
/// 80h), e.g. when another host preempted this host's registration. The
/// agent wakes its check on such an event instead of waiting for the next
/// interval; the interval stays the fallback. Measured in the lab:
/// docs/PERFORMANCE.md, "Reservation notifications as uevents".
///
/// The parser is pure (and fuzzed); UeventListener owns the netlink socket.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "nvfence/fd.hpp"
#include "nvfence/result.hpp"

namespace nvfence {

/// The largest uevent datagram accepted (the kernel's own bound on one
/// uevent's environment, UEVENT_BUFFER_SIZE, is 2048 bytes).
inline constexpr size_t kMaxUeventBytes = 8192;

/// One kernel uevent, as parsed from a NETLINK_KOBJECT_UEVENT datagram.
struct Uevent {
    std::string action;                 ///< ACTION, e.g. "change".
    std::string devpath;                ///< DEVPATH, e.g. "/devices/virtual/nvme-fabrics/ctl/nvme1".
    std::string subsystem;              ///< SUBSYSTEM ("" if absent), e.g. "nvme".
    std::string devname;                ///< DEVNAME ("" if absent), e.g. "nvme1".
    std::optional<uint32_t> nvme_aen;   ///< NVME_AEN, when present and a valid hex or decimal number.
    uint64_t seqnum = 0;                ///< SEQNUM (0 if absent).
};

/// Parses one datagram of the kernel's uevent multicast group: a header
/// `ACTION@DEVPATH` and then `KEY=VALUE` strings, each NUL-terminated (the
/// last NUL may be missing). Errc::malformed_data when it is not such a
/// message: empty or longer than kMaxUeventBytes, no `@` in the header,
/// udev's re-broadcast format (`libudev` header), a field without `=`, or
/// ACTION/DEVPATH fields that contradict the header. Unknown keys are
/// skipped; a NVME_AEN value that is not a 32-bit number is left unset.
Result<Uevent> parse_uevent(std::span<const uint8_t> datagram);

/// NVME_AEN decoded: the Asynchronous Event Request completion dword 0.
struct AenInfo {
    uint8_t type = 0;      ///< Asynchronous Event Type, bits 2:0 (6 = I/O command set specific).
    uint8_t info = 0;      ///< Asynchronous Event Information, bits 15:8.
    uint8_t log_page = 0;  ///< Log page to read, bits 23:16 (80h = Reservation Notification).
};

/// Decodes @p dw0 into its fields.
AenInfo decode_aen(uint32_t dw0);

/// True when @p e is an asynchronous event (NVME_AEN set, SUBSYSTEM nvme)
/// of the controller named @p controller ("nvme1"): DEVNAME, or else the
/// last component of DEVPATH, equals it. Any event type counts: the agent
/// re-reads the reservation on each one, which is always safe.
bool is_aen_for(const Uevent& e, std::string_view controller);

/// What one UeventListener::drain() saw.
struct UeventDrain {
    uint32_t datagrams = 0;   ///< Datagrams read (any device).
    uint32_t matched = 0;     ///< NVME_AEN events of the controller asked for.
    uint32_t malformed = 0;   ///< Datagrams that did not parse or did not come from the kernel.
    bool overflow = false;    ///< The socket overflowed (ENOBUFS): events were lost.
    bool more = false;        ///< The bound was reached; more may be queued.
    /// True when the agent should check now: an event of its controller
    /// arrived, or events were lost and one of them may have been.
    bool wants_check() const { return matched > 0 || overflow; }
};

/// How many datagrams the agent reads per wake-up (the rest wait for the
/// next poll()).
inline constexpr uint32_t kUeventsPerWake = 64;

/// A non-blocking NETLINK_KOBJECT_UEVENT socket bound to the kernel's
/// multicast group: poll() its fd() for POLLIN, then drain(). Closed on
/// destruction.
class UeventListener {
public:
    /// Opens and binds the socket with a receive buffer of @p rcvbuf_bytes.
    /// Errors are errno values (generic category), e.g. EPERM in a sandbox.
    static Result<UeventListener> open(uint32_t rcvbuf_bytes = 256 * 1024);

    /// The socket, for poll().
    int fd() const noexcept { return fd_.get(); }

    /// Reads at most @p max_datagrams queued datagrams without blocking and
    /// counts the NVME_AEN events of @p controller among them. Datagrams not
    /// sent by the kernel (sender port id not 0) are counted as malformed.
    /// A lost event (overflow) must be treated as a possible match. Errors
    /// other than "nothing queued" and overflow are errno values.
    Result<UeventDrain> drain(std::string_view controller, uint32_t max_datagrams);

private:
    explicit UeventListener(Fd fd) : fd_(std::move(fd)) {}
    Fd fd_;
};

}  // namespace nvfence
