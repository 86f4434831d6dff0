// SPDX-License-Identifier: MIT
#include "internal/file_name.hpp"

#include "internal/invariant.hpp"

namespace nvfence {

std::string volume_file_stem(const std::string& volume) {
    std::string v;
    v.reserve(volume.size() + 1);
    for (char c : volume) {
        const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                          c == '.' || c == '_' || c == '-';
        v.push_back(keep ? c : '_');
    }
    if (v.empty() || v[0] == '.') v.insert(0, "v");
    return v;
}

std::string volume_name(const std::string& volume, std::size_t max_bytes) {
    NVF_INVARIANT(max_bytes >= 2);
    std::string v = volume_file_stem(volume);
    if (v[0] == '-') v.insert(0, "v");
    return v.substr(0, max_bytes);
}

}  // namespace nvfence
