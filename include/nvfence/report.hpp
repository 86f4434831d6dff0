// SPDX-License-Identifier: MIT
#pragma once
/// @file report.hpp
/// Parsers for the data the device returns: the Reservation Status data
/// structure (plain and extended), the Reservation Notification log page,
/// and the Identify Controller / Namespace fields nvfence uses. Each parser
/// takes untrusted bytes and either returns a fully checked value or
/// Errc::malformed_data; none reads past the span it is given.

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "nvfence/export.h"
#include "nvfence/command.hpp"
#include "nvfence/result.hpp"

namespace nvfence {

/// A 128-bit NVMe host identifier (a 64-bit one fills the first 8 bytes).
using HostId = std::array<uint8_t, 16>;

/// Prints a host id as 32 lower-case hex digits.
NVFENCE_API std::string format_host_id(const HostId& id);
/// True when every byte is 0.
NVFENCE_API bool host_id_is_zero(const HostId& id);

/// One registrant in a Reservation Report.
struct NVFENCE_API Registrant {
    uint16_t cntlid = 0;       ///< Controller id (0xffff: dynamic controller).
    bool holder = false;       ///< RCSTS bit 0: holds the reservation.
    uint64_t key = 0;          ///< Reservation key.
    HostId host_id{};          ///< Host id (64-bit ids fill bytes 0..7).
    friend bool operator==(const Registrant&, const Registrant&) = default;
};

/// A parsed Reservation Report.
struct NVFENCE_API ReservationStatus {
    uint32_t generation = 0;                 ///< GEN.
    ResvType type = ResvType::none;          ///< RTYPE (none: not held).
    uint8_t raw_type = 0;                    ///< RTYPE as read.
    uint16_t num_registrants = 0;            ///< REGCTL as the device claims.
    bool ptpl = false;                       ///< PTPLS.
    bool extended = false;                   ///< Parsed as the extended form.
    std::vector<Registrant> registrants;     ///< The registrants that fit.

    /// The holder, if any registrant has RCSTS bit 0 set.
    const Registrant* holder() const;
    /// The registrant with @p id, if any.
    const Registrant* find_host(const HostId& id) const;
    /// True when REGCTL claims more registrants than the buffer held.
    bool truncated() const { return registrants.size() < num_registrants; }
};

/// Bytes of the header and of one registrant in each form.
inline constexpr size_t kReportHeaderBytes = 24;
inline constexpr size_t kReportExtHeaderBytes = 64;
inline constexpr size_t kRegistrantBytes = 24;
inline constexpr size_t kRegistrantExtBytes = 64;

/// Buffer size that holds @p n registrants in the given form.
NVFENCE_API size_t report_size_for(uint16_t n, bool extended);

/// Parses a Reservation Status data structure of @p buf.size() bytes. Only
/// whole registrant entries that fit are returned; check truncated().
/// Fails on a buffer shorter than the header or an RTYPE above 6.
NVFENCE_API Result<ReservationStatus> parse_report(std::span<const uint8_t> buf, bool extended);

/// Reservation Notification log page types.
enum class NotificationType : uint8_t {
    empty = 0,
    registration_preempted = 1,
    reservation_released = 2,
    reservation_preempted = 3,
};
/// Words for a notification type.
NVFENCE_API const char* notification_type_name(NotificationType t);

/// The Reservation Notification log page (0x80).
struct NVFENCE_API ResvNotification {
    uint64_t log_page_count = 0;       ///< Running count of notifications.
    NotificationType type = NotificationType::empty;  ///< RNLPT.
    uint8_t available = 0;             ///< Further pages waiting.
    uint32_t nsid = 0;                 ///< Namespace it concerns.
};
/// Parses a 64-byte Reservation Notification log page.
NVFENCE_API Result<ResvNotification> parse_notification_log(std::span<const uint8_t> buf);

/// The Identify Controller fields nvfence uses.
struct NVFENCE_API ControllerIdentity {
    uint16_t vid = 0;            ///< PCI vendor id.
    std::string serial;          ///< SN, trimmed.
    std::string model;           ///< MN, trimmed.
    std::string firmware;        ///< FR, trimmed.
    uint16_t cntlid = 0;         ///< Controller id.
    bool multi_controller = false;   ///< CMIC bit 1.
    bool hostid_128 = false;     ///< CTRATT bit 0: 128-bit host ids.
    bool reservations = false;   ///< ONCS bit 5.
    std::string subnqn;          ///< NVM subsystem NQN.
};
/// Parses a 4096-byte Identify Controller data structure.
NVFENCE_API Result<ControllerIdentity> parse_identify_controller(std::span<const uint8_t> buf);

/// Reservation capabilities (Identify Namespace RESCAP).
struct NVFENCE_API ResvCaps {
    bool ptpl = false;   ///< Persist Through Power Loss.
    bool we = false, ea = false, wero = false, earo = false, wear = false, eaar = false;
    bool iekey = false;  ///< Ignore Existing Key behaves as in NVMe 1.3+.
    /// True when type @p t is supported.
    bool supports(ResvType t) const;
    /// True when any type is supported.
    bool any() const { return we || ea || wero || earo || wear || eaar; }
};

/// The Identify Namespace fields nvfence uses.
struct NVFENCE_API NamespaceIdentity {
    uint64_t size_blocks = 0;     ///< NSZE.
    uint64_t capacity_blocks = 0; ///< NCAP.
    uint32_t lba_bytes = 0;       ///< From the LBA format in use.
    uint16_t metadata_bytes = 0;  ///< Metadata per block of that format.
    bool shared = false;          ///< NMIC bit 0: may be shared.
    uint8_t rescap_raw = 0;       ///< RESCAP as read.
    ResvCaps rescap;              ///< RESCAP decoded.
    std::array<uint8_t, 16> nguid{};  ///< NGUID (all zero: not reported).
    std::array<uint8_t, 8> eui64{};   ///< EUI64 (all zero: not reported).
};
/// Parses a 4096-byte Identify Namespace data structure. Fails on an LBA
/// data size outside 512 B .. 64 KiB or a format index past NLBAF
/// (Errc::malformed_data), and with Errc::device_gone on an all-zero
/// structure: the controller's answer for a namespace that is not active
/// (removed, or disabled on the target).
NVFENCE_API Result<NamespaceIdentity> parse_identify_namespace(std::span<const uint8_t> buf);

/// The EBS volume id for an EBS serial ("vol0123..." gives "vol-0123..."),
/// or std::nullopt when @p serial is not one.
NVFENCE_API std::optional<std::string> ebs_volume_id(const std::string& serial);

/// True when @p model is the model string of an Amazon EBS volume.
NVFENCE_API bool is_ebs_model(const std::string& model);

/// A stable name for a shared volume, different for every namespace: the
/// EBS volume id when @p serial is an EBS serial (with "-n<nsid>" appended
/// for an nsid other than 1, which EBS never has), else "nguid-<hex>" or
/// "eui-<hex>" when the namespace reports one, else "<serial>-n<nsid>" with
/// unsafe characters replaced by '_'.
NVFENCE_API std::string volume_id(const std::string& serial, const NamespaceIdentity& ns, uint32_t nsid);

}  // namespace nvfence
