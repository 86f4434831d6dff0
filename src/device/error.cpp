// SPDX-License-Identifier: MIT
#include "nvfence/error.hpp"

#include <cerrno>
#include <cstdio>

namespace nvfence {
namespace {

const char* status_words(uint16_t s) {
    switch (static_cast<NvmeStatus>(s)) {
    case NvmeStatus::success: return "Successful Completion";
    case NvmeStatus::invalid_opcode: return "Invalid Command Opcode";
    case NvmeStatus::invalid_field: return "Invalid Field in Command";
    case NvmeStatus::command_id_conflict: return "Command ID Conflict";
    case NvmeStatus::data_transfer_error: return "Data Transfer Error";
    case NvmeStatus::power_loss_abort: return "Commands Aborted due to Power Loss Notification";
    case NvmeStatus::internal_error: return "Internal Error";
    case NvmeStatus::abort_requested: return "Command Abort Requested";
    case NvmeStatus::sq_deletion_abort: return "Command Aborted due to SQ Deletion";
    case NvmeStatus::invalid_namespace: return "Invalid Namespace or Format";
    case NvmeStatus::command_sequence_error: return "Command Sequence Error";
    case NvmeStatus::host_id_inconsistent_format: return "Host Identifier Inconsistent Format";
    case NvmeStatus::lba_out_of_range: return "LBA Out of Range";
    case NvmeStatus::capacity_exceeded: return "Capacity Exceeded";
    case NvmeStatus::namespace_not_ready: return "Namespace Not Ready";
    case NvmeStatus::reservation_conflict: return "Reservation Conflict";
    case NvmeStatus::format_in_progress: return "Format In Progress";
    case NvmeStatus::invalid_log_page: return "Invalid Log Page";
    case NvmeStatus::feature_not_saveable: return "Feature Identifier Not Saveable";
    case NvmeStatus::feature_not_changeable: return "Feature Not Changeable";
    case NvmeStatus::feature_not_namespace_specific: return "Feature Not Namespace Specific";
    case NvmeStatus::write_fault: return "Write Fault";
    case NvmeStatus::unrecovered_read_error: return "Unrecovered Read Error";
    case NvmeStatus::access_denied: return "Access Denied";
    case NvmeStatus::internal_path_error: return "Internal Path Error";
    case NvmeStatus::ana_persistent_loss: return "Asymmetric Access Persistent Loss";
    case NvmeStatus::ana_inaccessible: return "Asymmetric Access Inaccessible";
    case NvmeStatus::ana_transition: return "Asymmetric Access Transition";
    case NvmeStatus::controller_pathing_error: return "Controller Pathing Error";
    case NvmeStatus::host_pathing_error: return "Host Pathing Error";
    case NvmeStatus::command_aborted_by_host: return "Command Aborted By Host";
    }
    switch (s >> 8) {
    case 0: return "Generic Command Status";
    case 1: return "Command Specific Status";
    case 2: return "Media and Data Integrity Error";
    case 3: return "Path Related Status";
    case 7: return "Vendor Specific Status";
    default: return "Reserved Status Code Type";
    }
}

class NvmeCategory final : public std::error_category {
public:
    const char* name() const noexcept override { return "nvme"; }
    std::string message(int v) const override {
        char num[16];
        std::snprintf(num, sizeof num, "0x%x", static_cast<unsigned>(v));
        std::string s = status_words(static_cast<uint16_t>(v));
        s.append(" (").append(num).append(")");
        return s;
    }
};

class NvfenceCategory final : public std::error_category {
public:
    const char* name() const noexcept override { return "nvfence"; }
    std::string message(int v) const override {
        switch (static_cast<Errc>(v)) {
        case Errc::not_found: return "no such device";
        case Errc::not_nvme: return "not an NVMe namespace";
        case Errc::controller_node: return "an NVMe controller node, not a namespace";
        case Errc::no_reservations: return "the namespace has no reservation support";
        case Errc::type_unsupported: return "the namespace does not support this reservation type";
        case Errc::invalid_argument: return "invalid argument";
        case Errc::invalid_key: return "invalid reservation key";
        case Errc::malformed_data: return "the device returned malformed data";
        case Errc::not_registered: return "this host is not registered";
        case Errc::not_holder: return "this host does not hold the reservation";
        case Errc::held_by_other: return "another host holds the reservation";
        case Errc::lost_race: return "another host won the takeover race";
        case Errc::verify_failed: return "the reservation report contradicts the command";
        case Errc::host_id_conflict: return "another registrant uses this host's host identifier";
        case Errc::host_id_unknown: return "this host's host identifier could not be read";
        case Errc::device_gone: return "the device disappeared";
        case Errc::fenced: return "fenced: the device refused this host (Reservation Conflict)";
        case Errc::timeout: return "timed out";
        case Errc::queue_full: return "queue full";
        case Errc::misaligned: return "buffer, offset or length not aligned to the block size";
        case Errc::out_of_bounds: return "I/O past the end of the namespace";
        case Errc::epoch_exhausted: return "no larger epoch fits in a key";
        case Errc::state_io: return "a state file does not parse (corrupt or not nvfence's)";
        case Errc::refused: return "refused";
        case Errc::protocol: return "malformed control message";
        case Errc::epoch_out_of_range: return "epoch out of range (above the ceiling or too far above this host's floor)";
        case Errc::unsafe_state_dir:
            return "the state directory is not safe (writable by group or others, or not owned by this user)";
        case Errc::own_key: return "the key named is this host's own key";
        case Errc::permission_denied: return "permission denied: only root may change the reservation or the agent";
        case Errc::view_lost: return "lost the view of the device (every check failed for too long)";
        }
        return "unknown nvfence error " + std::to_string(v);
    }
};

class StateCategory final : public std::error_category {
public:
    const char* name() const noexcept override { return "state"; }
    std::string message(int v) const override { return "state directory: " + std::system_category().message(v); }
};

}  // namespace

const std::error_category& state_category() noexcept {
    static const StateCategory c;
    return c;
}

bool is_state_error(std::error_code ec) noexcept {
    return ec.category() == state_category() || ec == Errc::state_io || ec == Errc::unsafe_state_dir;
}

bool completion_uncertain(std::error_code ec) noexcept {
    if (is_nvme(ec, NvmeStatus::reservation_conflict)) return true;
    if (ec.category() == nvme_category()) return (ec.value() >> 8) == 3;
    return ec.category() == std::system_category() &&
           (ec.value() == EINTR || ec.value() == ETIMEDOUT || ec.value() == EIO || ec.value() == ENOTCONN ||
            ec.value() == ECONNRESET);
}

const std::error_category& nvme_category() noexcept {
    static const NvmeCategory c;
    return c;
}

const std::error_category& nvfence_category() noexcept {
    static const NvfenceCategory c;
    return c;
}

std::error_code make_nvme_error(uint16_t raw_status) noexcept {
    return {raw_status & kStatusMask, nvme_category()};
}

std::string nvme_status_name(uint16_t status) { return status_words(status & kStatusMask); }

std::error_code make_error_code(Errc e) noexcept {
    return {static_cast<int>(e), nvfence_category()};
}

bool is_nvme(std::error_code ec, NvmeStatus s) noexcept {
    return ec.category() == nvme_category() && ec.value() == static_cast<int>(s);
}

bool is_fenced(std::error_code ec) noexcept {
    return is_nvme(ec, NvmeStatus::reservation_conflict) || ec == Errc::fenced ||
           (ec.category() == std::system_category() && ec.value() == EBADE);
}

ExitCode exit_code_for(std::error_code ec) noexcept {
    if (!ec) return ExitCode::ok;
    if (is_fenced(ec)) return ExitCode::conflict;
    if (ec.category() == nvme_category()) {
        if (is_nvme(ec, NvmeStatus::invalid_opcode)) return ExitCode::unsupported;
        return ExitCode::failure;
    }
    if (ec.category() == std::system_category() || ec.category() == std::generic_category() ||
        ec.category() == state_category()) {
        if (ec.value() == EACCES || ec.value() == EPERM) return ExitCode::permission;
        return ExitCode::failure;
    }
    if (ec.category() == nvfence_category()) {
        switch (static_cast<Errc>(ec.value())) {
        case Errc::not_nvme:
        case Errc::controller_node:
        case Errc::no_reservations:
        case Errc::type_unsupported: return ExitCode::unsupported;
        case Errc::not_holder:
        case Errc::held_by_other:
        case Errc::not_registered:
        case Errc::host_id_conflict: return ExitCode::conflict;
        case Errc::lost_race: return ExitCode::lost_race;
        case Errc::permission_denied: return ExitCode::permission;
        case Errc::own_key:
        case Errc::epoch_out_of_range: return ExitCode::usage;
        case Errc::not_found:
        case Errc::invalid_argument:
        case Errc::invalid_key: return ExitCode::usage;
        default: return ExitCode::failure;
        }
    }
    return ExitCode::failure;
}

}  // namespace nvfence
