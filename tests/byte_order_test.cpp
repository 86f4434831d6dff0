// SPDX-License-Identifier: MIT
// The one little-endian helper (src/internal/byte_order.hpp).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>

#include "internal/byte_order.hpp"

namespace nvfence {
namespace {

TEST(ByteOrder, LoadsLittleEndianAtEveryWidth) {
    const std::array<uint8_t, 8> b = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
    EXPECT_EQ(load_le<uint8_t>(b.data()), 0x01u);
    EXPECT_EQ(load_le<uint16_t>(b.data()), 0x2301u);
    EXPECT_EQ(load_le<uint32_t>(b.data()), 0x67452301u);
    EXPECT_EQ(load_le<uint64_t>(b.data()), 0xefcdab8967452301ull);
    EXPECT_EQ(load_le<uint32_t>(b.data() + 4), 0xefcdab89u);  // unaligned offsets are fine
}

TEST(ByteOrder, StoresAndRoundTrips) {
    std::array<uint8_t, 8> b{};
    store_le<uint64_t>(b.data(), 0x0102030405060708ull);
    EXPECT_EQ(b, (std::array<uint8_t, 8>{8, 7, 6, 5, 4, 3, 2, 1}));
    store_le<uint16_t>(b.data() + 1, 0xbeef);
    EXPECT_EQ(b[1], 0xef);
    EXPECT_EQ(b[2], 0xbe);
    EXPECT_EQ(b[3], 5) << "a store writes sizeof(T) bytes, no more";
    for (uint64_t v : {0ull, 1ull, 0x80ull, 0xffffffffffffffffull, 0x8000000000000001ull}) {
        store_le(b.data(), v);
        EXPECT_EQ(load_le<uint64_t>(b.data()), v);
    }
    static_assert(load_le<uint16_t>(std::array<uint8_t, 2>{0xff, 0xff}.data()) == 0xffff);
}

}  // namespace
}  // namespace nvfence
