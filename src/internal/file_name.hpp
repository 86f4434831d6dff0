// SPDX-License-Identifier: MIT
#pragma once
/// @file file_name.hpp
/// A volume name (any bytes an operator or udev gave) as one file-name
/// component under a state directory: the agent's state file, the etcd
/// elector's token file, nvfenced's lock and default instance name.

#include <cstddef>
#include <string>

namespace nvfence {

/// @p volume with every byte outside [A-Za-z0-9._-] replaced by '_', and
/// "v" put in front when the result would be empty or start with '.' (no
/// hidden file, never "." or ".."). The names of existing state files
/// depend on it: never change what it returns for a name.
std::string volume_file_stem(const std::string& volume);

/// volume_file_stem(), also with "v" in front of a leading '-' (the name
/// could be taken for an option) and cut to @p max_bytes (at least 2):
/// nvfenced's instance name and lock file.
std::string volume_name(const std::string& volume, std::size_t max_bytes = 64);

}  // namespace nvfence
