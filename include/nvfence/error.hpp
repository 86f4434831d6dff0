// SPDX-License-Identifier: MIT
#pragma once
/// @file error.hpp
/// The one error model of libnvfence: std::error_code in one of three
/// categories.
///  - nvme_category(): the device answered with an NVMe status. The value is
///    the 11-bit status (SCT << 8 | SC) without the DNR and More bits, and the
///    message names it in words, e.g. "Reservation Conflict (0x83)".
///  - nvfence_category(): nvfence's own failures (Errc below).
///  - std::system_category(): an errno from the kernel, kept as it is.

#include <cstdint>
#include <string>
#include <system_error>

#include "nvfence/export.h"

namespace nvfence {

/// NVMe status values nvfence reasons about (SCT << 8 | SC).
enum class NvmeStatus : uint16_t {
    success = 0x000,
    invalid_opcode = 0x001,
    invalid_field = 0x002,
    command_id_conflict = 0x003,
    data_transfer_error = 0x004,
    power_loss_abort = 0x005,
    internal_error = 0x006,
    abort_requested = 0x007,
    sq_deletion_abort = 0x008,
    invalid_namespace = 0x00b,
    command_sequence_error = 0x00c,
    host_id_inconsistent_format = 0x018,
    lba_out_of_range = 0x080,
    capacity_exceeded = 0x081,
    namespace_not_ready = 0x082,
    reservation_conflict = 0x083,
    format_in_progress = 0x084,
    invalid_log_page = 0x109,
    feature_not_saveable = 0x10d,
    feature_not_changeable = 0x10e,
    feature_not_namespace_specific = 0x10f,
    write_fault = 0x280,
    unrecovered_read_error = 0x281,
    access_denied = 0x286,
    internal_path_error = 0x300,
    ana_persistent_loss = 0x301,
    ana_inaccessible = 0x302,
    ana_transition = 0x303,
    controller_pathing_error = 0x360,
    host_pathing_error = 0x370,
    command_aborted_by_host = 0x371,
};

/// Bits of the 15-bit status field returned by the kernel passthrough.
inline constexpr uint16_t kStatusDnr = 0x4000;   ///< Do Not Retry.
inline constexpr uint16_t kStatusMore = 0x2000;  ///< More information in log.
inline constexpr uint16_t kStatusMask = 0x07ff;  ///< SCT << 8 | SC.

/// The category of NVMe completion statuses.
NVFENCE_API const std::error_category& nvme_category() noexcept;

/// An error_code for an NVMe status as the kernel returns it (DNR and More
/// bits are dropped). @p raw_status must be non-zero for an error.
NVFENCE_API std::error_code make_nvme_error(uint16_t raw_status) noexcept;

/// The words for an NVMe status value (SCT << 8 | SC), without the number.
NVFENCE_API std::string nvme_status_name(uint16_t status);

/// nvfence's own failures.
enum class Errc : int {
    not_found = 1,          ///< The path does not exist.
    not_nvme,               ///< The path is not an NVMe namespace.
    controller_node,        ///< An NVMe controller node, not a namespace.
    no_reservations,        ///< The namespace has no reservation support.
    type_unsupported,       ///< The namespace lacks this reservation type.
    invalid_argument,       ///< A caller-supplied value is out of range.
    invalid_key,            ///< A key string could not be parsed.
    malformed_data,         ///< The device returned data that does not parse.
    not_registered,         ///< This host has no registration.
    not_holder,             ///< This host does not hold the reservation.
    held_by_other,          ///< Another host holds the reservation.
    lost_race,              ///< Another host won a concurrent takeover.
    verify_failed,          ///< A Report contradicts what a command claimed.
    host_id_conflict,       ///< Another registrant shares this host's id.
    host_id_unknown,        ///< This host's identifier could not be read.
    device_gone,            ///< The device disappeared.
    fenced,                 ///< The device refused I/O: this host is fenced.
    timeout,                ///< A bounded wait ran out.
    queue_full,             ///< A bounded queue is full.
    misaligned,             ///< Buffer, offset or length not aligned.
    out_of_bounds,          ///< I/O past the end of the namespace.
    epoch_exhausted,        ///< No larger epoch fits in the key.
    state_io,               ///< The state directory could not be used.
    refused,                ///< Refused for safety; a flag overrides.
    protocol,               ///< A malformed control-socket message.
    epoch_out_of_range,     ///< An epoch above what this host may use (kEpochCeiling, jump bound).
    unsafe_state_dir,       ///< The state directory is writable by others or not ours.
    own_key,                ///< The victim named is this host's own current key.
    permission_denied,      ///< The peer may not make this request (control socket).
    view_lost,              ///< The agent could not read the device for too long.
};

/// The category of nvfence's own failures.
NVFENCE_API const std::error_category& nvfence_category() noexcept;

/// The category of failures to use the state directory: the value is the
/// errno of the system call that failed (kept, not collapsed into one code).
NVFENCE_API const std::error_category& state_category() noexcept;

/// An errno from a state-directory system call, in state_category().
inline std::error_code state_error(int err) noexcept { return {err, state_category()}; }

/// True when @p ec says the state directory or a state file could not be
/// used: an errno in state_category(), Errc::state_io (a file that does not
/// parse) or Errc::unsafe_state_dir.
NVFENCE_API bool is_state_error(std::error_code ec) noexcept;

/// Makes an error_code in nvfence_category().
NVFENCE_API std::error_code make_error_code(Errc e) noexcept;

/// An errno as an error_code in std::system_category().
inline std::error_code errno_error(int err) noexcept {
    return {err, std::system_category()};
}

/// True when a command that failed with @p ec may nevertheless have taken
/// effect on the device (the one rule for "completion uncertain"):
/// Reservation Conflict on a re-sent command, a path-related NVMe status
/// (SCT 3), or an interrupted, timed-out or failed passthrough (EINTR,
/// ETIMEDOUT, EIO, ENOTCONN, ECONNRESET). Only a Report decides what happened.
NVFENCE_API bool completion_uncertain(std::error_code ec) noexcept;

/// True when @p ec is the NVMe status @p s.
NVFENCE_API bool is_nvme(std::error_code ec, NvmeStatus s) noexcept;

/// True when @p ec means the device refused this host (Reservation Conflict,
/// -EBADE from the block layer, or Errc::fenced).
NVFENCE_API bool is_fenced(std::error_code ec) noexcept;

/// Process exit codes of the nvfence tools (docs/CONTRACTS.md).
enum class ExitCode : int {
    ok = 0,
    failure = 1,       ///< Anything else.
    usage = 2,         ///< Bad command line.
    conflict = 3,      ///< Reservation conflict / not the holder.
    unsupported = 4,   ///< Not NVMe, or no reservation support.
    permission = 5,    ///< Permission denied.
    lost_race = 6,     ///< Another host won a takeover race.
};

/// The documented exit code for an error.
NVFENCE_API ExitCode exit_code_for(std::error_code ec) noexcept;

}  // namespace nvfence

namespace std {
template <>
struct is_error_code_enum<nvfence::Errc> : true_type {};
}  // namespace std
