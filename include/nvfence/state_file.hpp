// SPDX-License-Identifier: MIT
#pragma once
/// @file state_file.hpp
/// Crash-safe small state files (epochs, agent state): a reader sees the old
/// contents or the new, never a mix, after a crash at any point.

#include <cstddef>
#include <string>
#include <string_view>

#include "nvfence/export.h"
#include "nvfence/fd.hpp"
#include "nvfence/result.hpp"

namespace nvfence {

/// Checks that @p dir is a directory (not a symlink) owned by this user and
/// not writable by group or others. Errc::unsafe_state_dir when it is
/// writable by others or owned by another user; the errno (state_category())
/// when it cannot be opened.
NVFENCE_API Status check_state_dir(const std::string& dir);

/// Replaces the file @p path in directory @p dir with @p text: creates @p dir
/// and its missing parents (mode 0700), refuses an unsafe @p dir
/// (check_state_dir), writes a temporary file of a unique name created with
/// O_EXCL|O_NOFOLLOW (mode 0600), fsyncs it, renames it over @p path and
/// fsyncs @p dir. Errors keep the failing call's errno (state_category()).
NVFENCE_API Status write_file_atomic(const std::string& dir, const std::string& path, std::string_view text);

/// Reads the whole state file @p path without following a symlink. Sets
/// @p absent (and returns "") when it does not exist; Errc::state_io when
/// it is longer than @p max_bytes; the errno (state_category()) otherwise.
NVFENCE_API Result<std::string> read_state_file(const std::string& path, size_t max_bytes, bool& absent);

/// Where the small state files live: the real file system (file_state_medium(),
/// the default of EpochStore and AgentStateFile) or, in the simulator
/// (tests/sim/), memory whose contents after a simulated crash the simulator
/// decides, so no real file is touched. The members keep the contracts of
/// the functions above.
class NVFENCE_API StateMedium {
public:
    virtual ~StateMedium() = default;
    /// write_file_atomic()'s contract: afterwards a reader sees @p text.
    virtual Status write_atomic(const std::string& dir, const std::string& path, std::string_view text) const = 0;
    /// read_state_file()'s contract.
    virtual Result<std::string> read(const std::string& path, size_t max_bytes, bool& absent) const = 0;
    /// An exclusive lock (file @p lock_path in @p dir, created with @p dir
    /// if missing, checked with check_state_dir) held until the returned Fd
    /// is closed. A medium with nothing to exclude returns an empty Fd.
    virtual Result<Fd> lock(const std::string& dir, const std::string& lock_path) const = 0;
};

/// An exclusive flock(2) of @p lock_path in @p dir (created with its missing
/// parents, mode 0700, and checked with check_state_dir), held until the Fd
/// is closed; blocking, bounded by the holder's work (EpochStore's lock).
NVFENCE_API Result<Fd> lock_state_store(const std::string& dir, const std::string& lock_path);

/// The real file system: write_file_atomic(), read_state_file(),
/// lock_state_store().
NVFENCE_API const StateMedium& file_state_medium();

}  // namespace nvfence
