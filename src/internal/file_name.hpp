// SPDX-License-Identifier: MIT
#pragma once
/// @file file_name.hpp
/// A volume name (any bytes an operator or udev gave) as one file-name
/// component under a state directory: the agent's state file, the epoch
/// store, the etcd elector's token file, nvfenced's lock and default
/// instance name; and a serial as part of a volume name (volume_id()). The
/// one sanitiser; its header-only part serves the engine library too.

#include <cstddef>
#include <string>
#include <string_view>

namespace nvfence {

/// @p text with every byte outside [A-Za-z0-9._-] replaced by '_'.
inline std::string file_name_bytes(std::string_view text) {
    std::string v;
    v.reserve(text.size() + 1);
    for (char c : text) {
        const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                          c == '.' || c == '_' || c == '-';
        v.push_back(keep ? c : '_');
    }
    return v;
}

/// file_name_bytes(@p volume), with "v" put in front when the result would
/// be empty or start with '.' (no hidden file, never "." or ".."). The names
/// of existing state files depend on it: never change what it returns for a
/// name.
inline std::string volume_file_stem(const std::string& volume) {
    std::string v = file_name_bytes(volume);
    if (v.empty() || v[0] == '.') v = "v" + v;  // not insert(): GCC 12 -Wrestrict false positive
    return v;
}

/// volume_file_stem(), also with "v" in front of a leading '-' (the name
/// could be taken for an option) and cut to @p max_bytes (at least 2):
/// nvfenced's instance name and lock file.
std::string volume_name(const std::string& volume, std::size_t max_bytes = 64);

}  // namespace nvfence
