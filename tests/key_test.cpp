// SPDX-License-Identifier: MIT
// The key scheme (key.hpp): layout, CRC, text forms, parse rejections.

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "nvfence/error.hpp"
#include "nvfence/key.hpp"

namespace nvfence {
namespace {

// CRC-8, polynomial x^8+x^2+x+1 (0x07), init 0, no reflection, no final
// xor ("CRC-8/SMBUS"), over the bytes MSB first; written here bit by bit
// on the 48-bit value, independently of key.cpp.
uint8_t ref_crc8(uint64_t value, int nbytes) {
    unsigned crc = 0;
    for (int bit = nbytes * 8 - 1; bit >= 0; --bit) {
        const unsigned in = static_cast<unsigned>((value >> bit) & 1u);
        const unsigned top = (crc >> 7) & 1u;
        crc = (crc << 1) & 0xffu;
        if (top ^ in) crc ^= 0x07u;
    }
    return static_cast<uint8_t>(crc);
}

uint64_t ref_key(uint8_t tag, uint8_t node, uint32_t epoch) {
    const uint64_t low = (uint64_t{tag} << 40) | (uint64_t{node} << 32) | epoch;
    return (uint64_t{0xf5} << 56) | (uint64_t{ref_crc8(low, 6)} << 48) | low;
}

uint8_t bytewise_crc8(const std::string& bytes) {
    uint8_t crc = 0;
    for (char ch : bytes) {
        crc = static_cast<uint8_t>(crc ^ static_cast<uint8_t>(ch));
        for (int i = 0; i < 8; ++i)
            crc = static_cast<uint8_t>((crc & 0x80) ? (crc << 1) ^ 0x07 : crc << 1);
    }
    return crc;
}

TEST(RefCrc, MatchesTheCatalogueCheckValue) {
    // "123456789" has check value 0xf4 for CRC-8/SMBUS.
    EXPECT_EQ(bytewise_crc8("123456789"), 0xf4);
    // The bitwise reference agrees with the bytewise one.
    EXPECT_EQ(ref_crc8(0x3132333435363738ull, 8), bytewise_crc8("12345678"));
    EXPECT_EQ(ref_crc8(0x070200000029ull, 6), 0xc4);
}

TEST(MakeKey, LayoutMagicCrcTagNodeEpoch) {
    auto k = make_key({.tag = 7, .node = 2, .epoch = 41});
    ASSERT_TRUE(k);
    EXPECT_EQ(*k, 0xf5c4070200000029ull);
    EXPECT_EQ(*k, ref_key(7, 2, 41));
    EXPECT_EQ(*k >> 56, 0xf5u);
    EXPECT_EQ((*k >> 40) & 0xff, 7u);
    EXPECT_EQ((*k >> 32) & 0xff, 2u);
    EXPECT_EQ(*k & 0xffffffff, 41u);
    EXPECT_EQ(format_key(*k), "nf:7:2:41");
    EXPECT_EQ(format_key_hex(*k), "0xf5c4070200000029");
}

TEST(MakeKey, MatchesReferenceAcrossTheRange) {
    std::mt19937_64 rng(12345);
    for (int i = 0; i < 2000; ++i) {
        const auto tag = static_cast<uint8_t>(rng());
        const auto node = static_cast<uint8_t>(rng() % 255 + 1);
        const auto epoch = static_cast<uint32_t>(rng() % 0xffffffffu + 1);
        auto k = make_key({tag, node, epoch});
        ASSERT_TRUE(k);
        ASSERT_EQ(*k, ref_key(tag, node, epoch)) << int{tag} << ":" << int{node} << ":" << epoch;
    }
}

TEST(MakeKey, RejectsNodeOrEpochZero) {
    EXPECT_EQ(make_key({1, 0, 1}).error(), Errc::invalid_argument);
    EXPECT_EQ(make_key({1, 1, 0}).error(), Errc::invalid_argument);
    EXPECT_EQ(make_key({0, 0, 0}).error(), Errc::invalid_argument);
}

TEST(KeyRoundTrip, EdgeValues) {
    const uint8_t tags[] = {0, 1, 127, 128, 254, 255};
    const uint8_t nodes[] = {1, 2, 128, 254, 255};
    const uint32_t epochs[] = {1, 2, 255, 256, 65535, 65536, 0x7fffffff, 0x80000000, 0xfffffffe,
                               0xffffffff};
    for (uint8_t tag : tags) {
        for (uint8_t node : nodes) {
            for (uint32_t epoch : epochs) {
                const KeyFields f{tag, node, epoch};
                auto k = make_key(f);
                ASSERT_TRUE(k);
                EXPECT_NE(*k, 0u);
                auto d = decode_key(*k);
                ASSERT_TRUE(d);
                EXPECT_EQ(*d, f);
                EXPECT_FALSE(is_foreign(*k));
                const std::string text = format_key(*k);
                EXPECT_EQ(text, "nf:" + std::to_string(tag) + ":" + std::to_string(node) + ":" +
                                    std::to_string(epoch));
                auto p = parse_key(text);
                ASSERT_TRUE(p) << text;
                EXPECT_EQ(*p, *k);
                auto h = parse_key(format_key_hex(*k));
                ASSERT_TRUE(h);
                EXPECT_EQ(*h, *k);
            }
        }
    }
}

TEST(DecodeKey, RandomValuesAlmostNeverDecode) {
    // A random value has the magic with probability 1/256 and then the right
    // check with 1/256: about 1.5 in 100000.
    std::mt19937_64 rng(2024);
    int decoded = 0;
    for (int i = 0; i < 100000; ++i) {
        const uint64_t k = rng();
        if (auto f = decode_key(k)) {
            ++decoded;
            EXPECT_EQ(*make_key(*f), k);
        } else {
            EXPECT_TRUE(is_foreign(k));
            EXPECT_EQ(format_key(k), format_key_hex(k));
        }
    }
    EXPECT_LE(decoded, 12);
}

TEST(DecodeKey, RightMagicWrongCrcIsForeign) {
    std::mt19937_64 rng(7);
    for (int i = 0; i < 50; ++i) {
        const uint64_t low = rng() & 0xffffffffffffull;
        const uint8_t good = ref_crc8(low, 6);
        for (unsigned check = 0; check < 256; ++check) {
            const uint64_t k = (uint64_t{0xf5} << 56) | (uint64_t{check} << 48) | low;
            const bool ours = check == good && ((low >> 32) & 0xff) != 0 && (low & 0xffffffff) != 0;
            EXPECT_EQ(decode_key(k).has_value(), ours) << std::hex << k;
        }
    }
}

TEST(DecodeKey, WrongMagicIsForeign) {
    const uint64_t good = ref_key(3, 4, 5);
    for (unsigned magic = 0; magic < 256; ++magic) {
        const uint64_t k = (good & 0x00ffffffffffffffull) | (uint64_t{magic} << 56);
        EXPECT_EQ(decode_key(k).has_value(), magic == 0xf5) << magic;
    }
}

TEST(DecodeKey, SingleBitFlipsAreForeign) {
    const uint64_t good = ref_key(9, 3, 123456);
    for (int bit = 0; bit < 64; ++bit) {
        const uint64_t k = good ^ (uint64_t{1} << bit);
        EXPECT_FALSE(decode_key(k).has_value()) << "bit " << bit;
    }
}

TEST(DecodeKey, NodeOrEpochZeroWithAValidCrcIsForeign) {
    for (uint64_t low : {uint64_t{0x070000000029}, uint64_t{0x070200000000}, uint64_t{0}}) {
        const uint64_t k = (uint64_t{0xf5} << 56) | (uint64_t{ref_crc8(low, 6)} << 48) | low;
        EXPECT_FALSE(decode_key(k)) << std::hex << k;
        EXPECT_EQ(format_key(k), format_key_hex(k));
    }
    EXPECT_FALSE(decode_key(0));
    EXPECT_FALSE(decode_key(~uint64_t{0}));
}

TEST(FormatKey, ForeignKeysPrintAsSixteenHexDigits) {
    EXPECT_EQ(format_key(0), "0x0000000000000000");
    EXPECT_EQ(format_key(1), "0x0000000000000001");
    EXPECT_EQ(format_key(0xdeadbeefcafef00dull), "0xdeadbeefcafef00d");
    EXPECT_EQ(format_key(~uint64_t{0}), "0xffffffffffffffff");
    EXPECT_EQ(format_key_hex(ref_key(0, 1, 1)), "0xf565000100000001");
}

TEST(ParseKey, AcceptsBothForms) {
    EXPECT_EQ(*parse_key("0x1"), 1u);
    EXPECT_EQ(*parse_key("0X1"), 1u);
    EXPECT_EQ(*parse_key("0xDEADbeef"), 0xdeadbeefu);
    EXPECT_EQ(*parse_key("0xffffffffffffffff"), ~uint64_t{0});
    EXPECT_EQ(*parse_key("0x0000000000000001"), 1u);
    EXPECT_EQ(*parse_key("nf:7:2:41"), 0xf5c4070200000029ull);
    EXPECT_EQ(*parse_key("nf:0:1:1"), ref_key(0, 1, 1));
    EXPECT_EQ(*parse_key("nf:255:255:4294967295"), ref_key(255, 255, 0xffffffff));
    // Hex of one of our keys is the same key.
    EXPECT_EQ(*parse_key("0xf5c4070200000029"), *parse_key("nf:7:2:41"));
}

TEST(ParseKey, Rejections) {
    const char* bad[] = {
        "", "-1", "+1", " 1", "1", "0", "0x", "0x0", "0x0000000000000000", "0x00000000000000001",
        "0x10000000000000000", "0x-1", "0x+1", "0x 1", "0x1 ", " 0x1", "0xg", "0x1g", "0x1\n",
        "x1", "0b1", "nf:1:0:1", "nf:256:1:1", "nf:1:256:1", "nf:1:1:0", "nf:1:1:4294967296",
        "nf:1:1:99999999999", "nf:1:1:18446744073709551616", "nf:1:1:1:", "nf:1:1:1:1", "nf:1:1",
        "nf:1", "nf:", "nf", "nf::1:1", "nf:1::1", "nf:1:1:", "NF:1:1:1", "nf:-1:1:1",
        "nf:+1:1:1", "nf: 1:1:1", "nf:1:1:1 ", "nf:1:1:1x", "nf:0x1:1:1", "nf:1:1:1\n", "nf;1:1:1",
        "1:1:1", "nf:1.0:1:1"};
    for (const char* s : bad) {
        auto k = parse_key(s);
        EXPECT_FALSE(k) << "'" << s << "' gave " << (k ? format_key_hex(*k) : "");
        if (!k) {
            EXPECT_EQ(k.error(), Errc::invalid_key) << s;
        }
    }
}

TEST(ParseKey, EmbeddedNulIsRejected) {
    using namespace std::literals;
    EXPECT_FALSE(parse_key("nf:1:1:1\0"sv));
    EXPECT_FALSE(parse_key("0x1\0"sv));
}

TEST(ParseUint, RangeAndSyntax) {
    EXPECT_EQ(*parse_uint("0", 0, 10), 0u);
    EXPECT_EQ(*parse_uint("10", 0, 10), 10u);
    EXPECT_EQ(*parse_uint("007", 0, 10), 7u);
    EXPECT_EQ(*parse_uint("18446744073709551615", 0, UINT64_MAX), UINT64_MAX);
    EXPECT_EQ(*parse_uint("4294967295", 1, 0xffffffff), 0xffffffffu);
    const char* bad[] = {"", "-1", "+1", " 1", "1 ", "1a", "0x10", "1.0", "1e3", "\t1", "1\n",
                         "18446744073709551616", "99999999999999999999999"};
    for (const char* s : bad) {
        auto v = parse_uint(s, 0, UINT64_MAX);
        EXPECT_FALSE(v) << "'" << s << "'";
        if (!v) {
            EXPECT_EQ(v.error(), Errc::invalid_argument);
        }
    }
    EXPECT_EQ(parse_uint("11", 0, 10).error(), Errc::invalid_argument);
    EXPECT_EQ(parse_uint("0", 1, 10).error(), Errc::invalid_argument);
    EXPECT_EQ(parse_uint("4294967296", 1, 0xffffffff).error(), Errc::invalid_argument);
}

}  // namespace
}  // namespace nvfence
