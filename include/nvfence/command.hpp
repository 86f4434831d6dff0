// SPDX-License-Identifier: MIT
#pragma once
/// @file command.hpp
/// Pure encoders for every NVMe command nvfence sends. Each takes a plain
/// args struct and returns a Command: the submission-queue fields and the
/// data the command carries. Nothing here touches a device, so unit tests
/// check every bit; passthru.hpp sends a Command.

#include <array>
#include <cstdint>
#include <string_view>

#include "nvfence/export.h"
#include "nvfence/result.hpp"

namespace nvfence {

/// NVMe opcodes used by nvfence.
namespace opcode {
inline constexpr uint8_t kFlush = 0x00;             ///< NVM Flush.
inline constexpr uint8_t kWrite = 0x01;             ///< NVM Write.
inline constexpr uint8_t kRead = 0x02;              ///< NVM Read.
inline constexpr uint8_t kResvRegister = 0x0d;      ///< Reservation Register.
inline constexpr uint8_t kResvReport = 0x0e;        ///< Reservation Report.
inline constexpr uint8_t kResvAcquire = 0x11;       ///< Reservation Acquire.
inline constexpr uint8_t kResvRelease = 0x15;       ///< Reservation Release.
inline constexpr uint8_t kGetLogPage = 0x02;        ///< Admin Get Log Page.
inline constexpr uint8_t kIdentify = 0x06;          ///< Admin Identify.
inline constexpr uint8_t kSetFeatures = 0x09;       ///< Admin Set Features.
inline constexpr uint8_t kGetFeatures = 0x0a;       ///< Admin Get Features.
}  // namespace opcode

/// Reservation types (RTYPE), NVMe Base Specification "Reservation Type
/// Encoding".
///
/// Reads: the Write Exclusive types (WE, WERO, WEAR) fence writes only. A
/// preempted host can still READ the namespace, so an old leader may serve
/// stale reads (or read the new holder's data). The Exclusive Access types
/// (EA, EARO, EAAR) make the device refuse a preempted host's reads as well
/// (vm-test/tests/device/test_write_paths.py checks both); choose one of those when
/// stale reads matter. Under the all-registrants types (WEAR, EAAR) every
/// registrant holds, so fencing a host means preempting its key by name.
enum class ResvType : uint8_t {
    none = 0,                          ///< No reservation held (report only).
    write_exclusive = 1,               ///< WE.
    exclusive_access = 2,              ///< EA.
    write_exclusive_reg_only = 3,      ///< WERO.
    exclusive_access_reg_only = 4,     ///< EARO.
    write_exclusive_all_regs = 5,      ///< WEAR.
    exclusive_access_all_regs = 6,     ///< EAAR.
};

/// Reservation Register action (RREGA).
enum class RegisterAction : uint8_t { register_key = 0, unregister_key = 1, replace_key = 2 };

/// Change Persist Through Power Loss state (CPTPL) on Register.
enum class Cptpl : uint8_t { no_change = 0, clear = 2, set = 3 };

/// Reservation Acquire action (RACQA).
enum class AcquireAction : uint8_t { acquire = 0, preempt = 1, preempt_and_abort = 2 };

/// Reservation Release action (RRELA).
enum class ReleaseAction : uint8_t { release = 0, clear = 1 };

/// Which queue a command goes to.
enum class Queue : uint8_t { admin, io };

/// One encoded command: the submission-queue entry fields the kernel
/// passthrough takes, plus the payload for commands that carry host data.
struct NVFENCE_API Command {
    Queue queue = Queue::io;              ///< Admin or I/O queue.
    uint8_t opcode = 0;                   ///< Command opcode.
    uint32_t nsid = 0;                    ///< Namespace id.
    std::array<uint32_t, 6> cdw{};        ///< CDW10..CDW15.
    uint32_t data_len = 0;                ///< Bytes transferred.
    bool host_to_device = false;          ///< Data direction.
    std::array<uint8_t, 16> payload{};    ///< Host-to-device data (<=16 bytes).
    uint32_t timeout_ms = 0;              ///< 0: the kernel's default.
    friend bool operator==(const Command&, const Command&) = default;
};

/// Reservation Register arguments.
struct NVFENCE_API RegisterArgs {
    uint32_t nsid = 0;                               ///< Namespace id.
    RegisterAction action = RegisterAction::register_key;  ///< RREGA.
    Cptpl cptpl = Cptpl::no_change;                  ///< CPTPL.
    bool iekey = false;                              ///< Ignore Existing Key.
    uint64_t crkey = 0;                              ///< Current key.
    uint64_t nrkey = 0;                              ///< New key.
};

/// Reservation Acquire arguments.
struct NVFENCE_API AcquireArgs {
    uint32_t nsid = 0;                               ///< Namespace id.
    AcquireAction action = AcquireAction::acquire;   ///< RACQA.
    ResvType type = ResvType::write_exclusive;       ///< RTYPE.
    bool iekey = false;                              ///< Ignore Existing Key.
    uint64_t crkey = 0;                              ///< Current key.
    uint64_t prkey = 0;                              ///< Preempt key.
};

/// Reservation Release arguments.
struct NVFENCE_API ReleaseArgs {
    uint32_t nsid = 0;                               ///< Namespace id.
    ReleaseAction action = ReleaseAction::release;   ///< RRELA.
    ResvType type = ResvType::write_exclusive;       ///< RTYPE of the held one.
    bool iekey = false;                              ///< Ignore Existing Key.
    uint64_t crkey = 0;                              ///< Current key.
};

/// Reservation Report arguments.
struct NVFENCE_API ReportArgs {
    uint32_t nsid = 0;           ///< Namespace id.
    bool extended = true;        ///< EDS: 128-bit host ids.
    uint32_t len_bytes = 4096;   ///< Buffer size; a multiple of 4, >= 4.
};

/// Encodes Reservation Register (opcode 0x0d).
NVFENCE_API Command encode_register(const RegisterArgs& a);
/// Encodes Reservation Acquire (opcode 0x11).
NVFENCE_API Command encode_acquire(const AcquireArgs& a);
/// Encodes Reservation Release (opcode 0x15).
NVFENCE_API Command encode_release(const ReleaseArgs& a);
/// Encodes Reservation Report (opcode 0x0e); NUMD = len_bytes / 4 - 1.
NVFENCE_API Command encode_report(const ReportArgs& a);

/// Identify CNS values used.
enum class IdentifyCns : uint8_t { namespace_ = 0x00, controller = 0x01 };
/// Encodes Identify (admin 0x06) returning 4096 bytes.
NVFENCE_API Command encode_identify(IdentifyCns cns, uint32_t nsid);

/// Log page identifiers used.
inline constexpr uint8_t kLogReservationNotification = 0x80;
/// Encodes Get Log Page (admin 0x02) for @p len_bytes of log @p lid.
/// @p rae keeps an asynchronous event outstanding (Retain Async Event).
NVFENCE_API Command encode_get_log_page(uint8_t lid, uint32_t nsid, uint32_t len_bytes, bool rae);

/// Feature identifiers used.
inline constexpr uint8_t kFeatHostId = 0x81;             ///< Host Identifier.
inline constexpr uint8_t kFeatResvNotifMask = 0x82;      ///< Reservation Notification Mask.
inline constexpr uint8_t kFeatResvPersistence = 0x83;    ///< Reservation Persistence.

/// Encodes Get Features Host Identifier, asking for the 128-bit id (EXHID).
NVFENCE_API Command encode_get_host_id();

/// Which reservation notifications a controller reports; true = report it.
struct NVFENCE_API NotificationMask {
    bool registration_preempted = true;   ///< REGPRE.
    bool reservation_released = true;     ///< RESREL.
    bool reservation_preempted = true;    ///< RESPRE.
    friend bool operator==(const NotificationMask&, const NotificationMask&) = default;
};
/// Encodes Set Features Reservation Notification Mask for namespace @p nsid.
/// The feature takes mask bits (1 = suppress), so this inverts @p m.
NVFENCE_API Command encode_set_notification_mask(uint32_t nsid, const NotificationMask& m);
/// Encodes Get Features Reservation Notification Mask.
NVFENCE_API Command encode_get_notification_mask(uint32_t nsid);
/// Decodes the completion dword 0 of Get Features Reservation Notification
/// Mask.
NVFENCE_API NotificationMask decode_notification_mask(uint32_t dw0);

/// Encodes an NVM Read or Write of @p nlb blocks at @p slba (nlb >= 1).
NVFENCE_API Command encode_rw(bool write, uint32_t nsid, uint64_t slba, uint32_t nlb, uint32_t data_len);
/// Encodes NVM Flush.
NVFENCE_API Command encode_flush(uint32_t nsid);

/// Short upper-case name of a type ("WE", "EA", "WERO", ...), "none" for 0.
NVFENCE_API const char* resv_type_short(ResvType t);
/// Words for a type, e.g. "Write Exclusive - Registrants Only".
NVFENCE_API const char* resv_type_name(ResvType t);
/// True for 1..6.
NVFENCE_API bool resv_type_valid(uint8_t raw);
/// A type by name: the one parser of type names (CLI, nvfenced.conf,
/// fence_nvfence). Any case, '_' or '-' between words. Accepted: the short
/// names (we, ea, wero, earo, wear, eaar: what resv_type_short() prints),
/// the specification's words (write-exclusive-registrants-only, ...), the
/// abbreviations of util-linux's blkpr (write-exclusive-reg-only,
/// exclusive-access-all-regs, ...), and three aliases: exclusive (WE),
/// shared and registrants-only (WERO). Numbers are refused: SCSI numbers
/// the types differently (its 5 is NVMe's 3). Errc::invalid_argument for
/// anything else.
NVFENCE_API Result<ResvType> parse_resv_type(std::string_view name);
/// True for the all-registrants types (WEAR, EAAR), whose holder key reads 0.
NVFENCE_API bool resv_type_all_registrants(ResvType t);

}  // namespace nvfence
