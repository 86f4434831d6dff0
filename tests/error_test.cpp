// SPDX-License-Identifier: MIT
// The error model (error.hpp): NVMe status decoding, nvfence's own errors,
// is_fenced, and the CLI exit-code contract (docs/CONTRACTS.md): 0 ok, 2 usage,
// 3 reservation conflict / not the holder, 4 unsupported, 5 permission,
// 6 lost a takeover race, 1 anything else.

#include <gtest/gtest.h>

#include <cerrno>
#include <future>
#include <set>
#include <string>

#include "nvfence/error.hpp"

namespace nvfence {
namespace {

TEST(NvmeCategory, NameAndMessages) {
    EXPECT_STREQ(nvme_category().name(), "nvme");
    EXPECT_EQ(make_nvme_error(0x83).message(), "Reservation Conflict (0x83)");
    EXPECT_EQ(make_nvme_error(0x02).message(), "Invalid Field in Command (0x2)");
    EXPECT_EQ(make_nvme_error(0x01).message(), "Invalid Command Opcode (0x1)");
    EXPECT_EQ(make_nvme_error(0x18).message(), "Host Identifier Inconsistent Format (0x18)");
    EXPECT_EQ(make_nvme_error(0x109).message(), "Invalid Log Page (0x109)");
    EXPECT_EQ(make_nvme_error(0x286).message(), "Access Denied (0x286)");
    EXPECT_EQ(make_nvme_error(0x371).message(), "Command Aborted By Host (0x371)");
}

TEST(NvmeCategory, UnknownStatusesNameTheirType) {
    EXPECT_EQ(make_nvme_error(0x0ff).message(), "Generic Command Status (0xff)");
    EXPECT_EQ(make_nvme_error(0x1ff).message(), "Command Specific Status (0x1ff)");
    EXPECT_EQ(make_nvme_error(0x2ff).message(), "Media and Data Integrity Error (0x2ff)");
    EXPECT_EQ(make_nvme_error(0x3ff).message(), "Path Related Status (0x3ff)");
    EXPECT_EQ(make_nvme_error(0x7c0).message(), "Vendor Specific Status (0x7c0)");
    // Status code types 4h..6h are reserved, not vendor specific.
    EXPECT_EQ(make_nvme_error(0x401).message(), "Reserved Status Code Type (0x401)");
    EXPECT_EQ(make_nvme_error(0x601).message(), "Reserved Status Code Type (0x601)");
}

TEST(MakeNvmeError, DropsDnrAndMoreBits) {
    auto ec = make_nvme_error(0x6083);
    EXPECT_EQ(ec.value(), 0x83);
    EXPECT_EQ(&ec.category(), &nvme_category());
    EXPECT_EQ(ec.message(), "Reservation Conflict (0x83)");
    EXPECT_EQ(make_nvme_error(0x4002).value(), 0x002);
    EXPECT_EQ(make_nvme_error(0x2002).value(), 0x002);
    EXPECT_EQ(make_nvme_error(0x7fff).value(), 0x7ff);
    EXPECT_TRUE(make_nvme_error(0x83));
    EXPECT_TRUE(is_nvme(make_nvme_error(0x4083), NvmeStatus::reservation_conflict));
    EXPECT_FALSE(is_nvme(make_nvme_error(0x4083), NvmeStatus::invalid_field));
}

TEST(NvmeStatusName, WordsWithoutTheNumber) {
    EXPECT_EQ(nvme_status_name(0x83), "Reservation Conflict");
    EXPECT_EQ(nvme_status_name(0x4083), "Reservation Conflict");
    EXPECT_EQ(nvme_status_name(0x000), "Successful Completion");
    EXPECT_EQ(nvme_status_name(0x280), "Write Fault");
}

TEST(NvmeStatus, EveryNamedStatusHasDistinctWords) {
    const NvmeStatus all[] = {
        NvmeStatus::success, NvmeStatus::invalid_opcode, NvmeStatus::invalid_field,
        NvmeStatus::command_id_conflict, NvmeStatus::data_transfer_error,
        NvmeStatus::power_loss_abort, NvmeStatus::internal_error, NvmeStatus::abort_requested,
        NvmeStatus::sq_deletion_abort, NvmeStatus::invalid_namespace,
        NvmeStatus::command_sequence_error, NvmeStatus::host_id_inconsistent_format,
        NvmeStatus::lba_out_of_range, NvmeStatus::capacity_exceeded,
        NvmeStatus::namespace_not_ready, NvmeStatus::reservation_conflict,
        NvmeStatus::format_in_progress, NvmeStatus::invalid_log_page,
        NvmeStatus::feature_not_saveable, NvmeStatus::feature_not_changeable,
        NvmeStatus::feature_not_namespace_specific, NvmeStatus::write_fault,
        NvmeStatus::unrecovered_read_error, NvmeStatus::access_denied,
        NvmeStatus::internal_path_error, NvmeStatus::ana_persistent_loss,
        NvmeStatus::ana_inaccessible, NvmeStatus::ana_transition,
        NvmeStatus::controller_pathing_error, NvmeStatus::host_pathing_error,
        NvmeStatus::command_aborted_by_host};
    std::set<std::string> seen;
    for (auto s : all) {
        const std::string name = nvme_status_name(static_cast<uint16_t>(s));
        EXPECT_TRUE(seen.insert(name).second) << name;
        EXPECT_NE(name.find_first_of("abcdefghijklmnopqrstuvwxyz"), std::string::npos);
    }
    // Spot checks of the values against the specification.
    EXPECT_EQ(static_cast<int>(NvmeStatus::reservation_conflict), 0x83);
    EXPECT_EQ(static_cast<int>(NvmeStatus::invalid_field), 0x02);
    EXPECT_EQ(static_cast<int>(NvmeStatus::host_id_inconsistent_format), 0x18);
    EXPECT_EQ(static_cast<int>(NvmeStatus::lba_out_of_range), 0x80);
    EXPECT_EQ(static_cast<int>(NvmeStatus::invalid_log_page), 0x109);
    EXPECT_EQ(static_cast<int>(NvmeStatus::ana_inaccessible), 0x302);
    EXPECT_EQ(kStatusDnr, 0x4000);
    EXPECT_EQ(kStatusMore, 0x2000);
    EXPECT_EQ(kStatusMask, 0x07ff);
}

TEST(NvfenceCategory, NameAndEveryMessage) {
    EXPECT_STREQ(nvfence_category().name(), "nvfence");
    std::set<std::string> seen;
    for (int v = static_cast<int>(Errc::not_found); v <= static_cast<int>(Errc::protocol); ++v) {
        const std::string m = make_error_code(static_cast<Errc>(v)).message();
        EXPECT_FALSE(m.empty());
        EXPECT_EQ(m.find("unknown"), std::string::npos) << v;
        EXPECT_TRUE(seen.insert(m).second) << "duplicate message " << m;
    }
    EXPECT_EQ(make_error_code(static_cast<Errc>(999)).message(), "unknown nvfence error 999");
    EXPECT_EQ(make_error_code(Errc::fenced).message(),
              "fenced: the device refused this host (Reservation Conflict)");
}

TEST(NvfenceCategory, ErrcConvertsImplicitly) {
    std::error_code ec = Errc::lost_race;
    EXPECT_EQ(&ec.category(), &nvfence_category());
    EXPECT_EQ(ec, Errc::lost_race);
    EXPECT_NE(ec, Errc::held_by_other);
    EXPECT_NE(make_nvme_error(static_cast<uint16_t>(Errc::lost_race)), Errc::lost_race)
        << "same number, other category";
}

TEST(IsFenced, ConflictEbadeAndFenced) {
    EXPECT_TRUE(is_fenced(make_nvme_error(0x83)));
    EXPECT_TRUE(is_fenced(make_nvme_error(0x4083)));
    EXPECT_TRUE(is_fenced(errno_error(EBADE)));
    EXPECT_TRUE(is_fenced(make_error_code(Errc::fenced)));
    EXPECT_FALSE(is_fenced(std::error_code{}));
    EXPECT_FALSE(is_fenced(make_nvme_error(0x02)));
    EXPECT_FALSE(is_fenced(make_nvme_error(0x183)));
    EXPECT_FALSE(is_fenced(errno_error(EIO)));
    EXPECT_FALSE(is_fenced(make_error_code(Errc::held_by_other)));
    EXPECT_FALSE(is_fenced({EBADE, nvfence_category()}));
    EXPECT_FALSE(is_fenced({0x83, std::system_category()}));
}

TEST(ExitCodeFor, Contract) {
    EXPECT_EQ(exit_code_for({}), ExitCode::ok);
    EXPECT_EQ(static_cast<int>(ExitCode::ok), 0);
    EXPECT_EQ(static_cast<int>(ExitCode::failure), 1);
    EXPECT_EQ(static_cast<int>(ExitCode::usage), 2);
    EXPECT_EQ(static_cast<int>(ExitCode::conflict), 3);
    EXPECT_EQ(static_cast<int>(ExitCode::unsupported), 4);
    EXPECT_EQ(static_cast<int>(ExitCode::permission), 5);
    EXPECT_EQ(static_cast<int>(ExitCode::lost_race), 6);

    // 3: reservation conflict / not the holder.
    EXPECT_EQ(exit_code_for(make_nvme_error(0x4083)), ExitCode::conflict);
    EXPECT_EQ(exit_code_for(errno_error(EBADE)), ExitCode::conflict);
    EXPECT_EQ(exit_code_for(Errc::fenced), ExitCode::conflict);
    EXPECT_EQ(exit_code_for(Errc::not_holder), ExitCode::conflict);
    EXPECT_EQ(exit_code_for(Errc::held_by_other), ExitCode::conflict);
    EXPECT_EQ(exit_code_for(Errc::not_registered), ExitCode::conflict);
    // 4: not NVMe, no reservations.
    EXPECT_EQ(exit_code_for(Errc::not_nvme), ExitCode::unsupported);
    EXPECT_EQ(exit_code_for(Errc::controller_node), ExitCode::unsupported);
    EXPECT_EQ(exit_code_for(Errc::no_reservations), ExitCode::unsupported);
    EXPECT_EQ(exit_code_for(Errc::type_unsupported), ExitCode::unsupported);
    EXPECT_EQ(exit_code_for(make_nvme_error(0x4001)), ExitCode::unsupported);
    // 5: permission.
    EXPECT_EQ(exit_code_for(errno_error(EACCES)), ExitCode::permission);
    EXPECT_EQ(exit_code_for(errno_error(EPERM)), ExitCode::permission);
    EXPECT_EQ(exit_code_for(std::make_error_code(std::errc::permission_denied)), ExitCode::permission);
    EXPECT_EQ(exit_code_for(std::make_error_code(std::errc::operation_not_permitted)),
              ExitCode::permission);
    // 6: lost race.
    EXPECT_EQ(exit_code_for(Errc::lost_race), ExitCode::lost_race);
    // 2: usage.
    EXPECT_EQ(exit_code_for(Errc::invalid_argument), ExitCode::usage);
    EXPECT_EQ(exit_code_for(Errc::invalid_key), ExitCode::usage);
    EXPECT_EQ(exit_code_for(Errc::not_found), ExitCode::usage);
    // 1: everything else.
    EXPECT_EQ(exit_code_for(errno_error(EIO)), ExitCode::failure);
    EXPECT_EQ(exit_code_for(errno_error(ENOENT)), ExitCode::failure);
    EXPECT_EQ(exit_code_for(make_nvme_error(0x02)), ExitCode::failure);
    EXPECT_EQ(exit_code_for(make_nvme_error(0x281)), ExitCode::failure);
    // 3: another host's registration owns this host's id: not ours to use.
    EXPECT_EQ(exit_code_for(Errc::host_id_conflict), ExitCode::conflict);
    for (Errc e : {Errc::malformed_data, Errc::verify_failed,
                   Errc::host_id_unknown, Errc::device_gone, Errc::timeout, Errc::queue_full,
                   Errc::misaligned, Errc::out_of_bounds, Errc::epoch_exhausted, Errc::state_io,
                   Errc::refused, Errc::protocol})
        EXPECT_EQ(exit_code_for(e), ExitCode::failure) << make_error_code(e).message();
    EXPECT_EQ(exit_code_for(std::make_error_code(std::future_errc::broken_promise)), ExitCode::failure);
}

}  // namespace
}  // namespace nvfence
