// SPDX-License-Identifier: MIT
#pragma once
// Text helpers shared by the agent's sources (not installed).
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "nvfence/key.hpp"

namespace nvfence::agent_detail {

// The persisted reason and every fence reason are cut to this.
constexpr size_t kMaxReasonBytes = 512;

inline std::string key_text(uint64_t k) { return k ? format_key(k) : "none"; }

inline std::string clean_text(std::string_view s, size_t max) {
    std::string out;
    for (char c : s.substr(0, std::min(s.size(), max))) {
        const auto u = static_cast<unsigned char>(c);
        out.push_back((u < 0x20 || u == 0x7f) ? '?' : c);
    }
    return out;
}

}  // namespace nvfence::agent_detail
