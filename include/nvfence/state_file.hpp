// SPDX-License-Identifier: MIT
#pragma once
/// @file state_file.hpp
/// Crash-safe small state files (epochs, agent state): a reader sees the old
/// contents or the new, never a mix, after a crash at any point.

#include <string>
#include <string_view>

#include "nvfence/result.hpp"

namespace nvfence {

/// Replaces the file @p path in directory @p dir with @p text: creates @p dir
/// and its missing parents (mode 0700), writes `<path>.tmp` (mode 0600),
/// fsyncs it, renames it over @p path and fsyncs @p dir. Errc::state_io on
/// any failure.
Status write_file_atomic(const std::string& dir, const std::string& path, std::string_view text);

}  // namespace nvfence
