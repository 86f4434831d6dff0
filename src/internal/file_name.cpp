// SPDX-License-Identifier: MIT
#include "internal/file_name.hpp"

#include "internal/invariant.hpp"

namespace nvfence {

std::string volume_name(const std::string& volume, std::size_t max_bytes) {
    NVF_INVARIANT(max_bytes >= 2);
    std::string v = volume_file_stem(volume);
    if (v[0] == '-') v = "v" + v;  // not insert(): GCC 12 -Wrestrict false positive
    return v.substr(0, max_bytes);
}

}  // namespace nvfence
