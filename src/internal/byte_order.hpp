// SPDX-License-Identifier: MIT
#pragma once
// Little-endian loads and stores: the byte order of every NVMe data
// structure and of the agent's control protocol. The one implementation
// (issue 26); header-only, so the engine library uses it without linking
// the internal helpers.

#include <concepts>
#include <cstddef>
#include <cstdint>

namespace nvfence {

/// The unsigned integer stored little-endian at @p p (sizeof(T) bytes).
template <std::unsigned_integral T>
constexpr T load_le(const uint8_t* p) noexcept {
    T v = 0;
    for (size_t i = sizeof(T); i-- > 0;) v = static_cast<T>((v << 8) | T{p[i]});
    return v;
}

/// Stores @p v little-endian at @p p (sizeof(T) bytes).
template <std::unsigned_integral T>
constexpr void store_le(uint8_t* p, T v) noexcept {
    for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace nvfence
