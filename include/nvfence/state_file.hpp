// SPDX-License-Identifier: MIT
#pragma once
/// @file state_file.hpp
/// Crash-safe small state files (epochs, agent state): a reader sees the old
/// contents or the new, never a mix, after a crash at any point.

#include <cstddef>
#include <string>
#include <string_view>

#include "nvfence/result.hpp"

namespace nvfence {

/// Checks that @p dir is a directory (not a symlink) owned by this user and
/// not writable by group or others. Errc::unsafe_state_dir when it is
/// writable by others or owned by another user; the errno (state_category())
/// when it cannot be opened.
Status check_state_dir(const std::string& dir);

/// Replaces the file @p path in directory @p dir with @p text: creates @p dir
/// and its missing parents (mode 0700), refuses an unsafe @p dir
/// (check_state_dir), writes a temporary file of a unique name created with
/// O_EXCL|O_NOFOLLOW (mode 0600), fsyncs it, renames it over @p path and
/// fsyncs @p dir. Errors keep the failing call's errno (state_category()).
Status write_file_atomic(const std::string& dir, const std::string& path, std::string_view text);

/// Reads the whole state file @p path without following a symlink. Sets
/// @p absent (and returns "") when it does not exist; Errc::state_io when
/// it is longer than @p max_bytes; the errno (state_category()) otherwise.
Result<std::string> read_state_file(const std::string& path, size_t max_bytes, bool& absent);

}  // namespace nvfence
