// SPDX-License-Identifier: MIT
#include "nvfence/stamp.hpp"

#include <array>
#include <cstdlib>
#include <cstring>

#include "nvfence/error.hpp"
#include "internal/invariant.hpp"

namespace nvfence {
namespace {

constexpr char kMagic[8] = {'N', 'V', 'F', 'S', 'T', 'A', 'M', 'P'};
constexpr size_t kCrcOff = 88;

constexpr std::array<uint32_t, 256> make_table() {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        t[i] = c;
    }
    return t;
}
constexpr auto kTable = make_table();

void put(std::span<uint8_t> b, size_t off, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; ++i) b[off + i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get(std::span<const uint8_t> b, size_t off, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t{b[off + i]} << (8 * i);
    return v;
}

}  // namespace

uint32_t crc32c(std::span<const uint8_t> data, uint32_t crc) {
    crc = ~crc;
    for (uint8_t b : data) crc = kTable[(crc ^ b) & 0xff] ^ (crc >> 8);
    return ~crc;
}

void write_stamp(std::span<uint8_t> block, const Stamp& s) {
    NVF_INVARIANT(block.size() >= kStampMinBlock && block.size() % kStampMinBlock == 0);
    std::memcpy(block.data(), kMagic, sizeof kMagic);
    put(block, 8, s.key, 8);
    put(block, 16, s.epoch, 4);
    block[20] = s.node;
    block[21] = s.tag;
    put(block, 22, 0, 2);
    put(block, 24, s.lba, 8);
    put(block, 32, s.seq, 8);
    put(block, 40, s.time_ns, 8);
    std::memset(block.data() + 48, 0, 32);
    std::memcpy(block.data() + 48, s.host.data(), std::min<size_t>(s.host.size(), 31));
    put(block, 80, s.writer_id, 8);
    put(block, kCrcOff, 0, 4);
    put(block, 92, block.size(), 4);
    uint64_t x = s.lba * 0x9E3779B97F4A7C15ull ^ s.seq;
    for (size_t i = 96; i < block.size(); ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        block[i] = static_cast<uint8_t>(x);
    }
    put(block, kCrcOff, crc32c(block), 4);
}

Result<Stamp> read_stamp(std::span<const uint8_t> block) {
    if (block.size() < 96 || std::memcmp(block.data(), kMagic, sizeof kMagic) != 0)
        return make_error_code(Errc::malformed_data);
    if (get(block, 92, 4) != block.size()) return make_error_code(Errc::malformed_data);
    const uint32_t stored = static_cast<uint32_t>(get(block, kCrcOff, 4));
    uint32_t crc = crc32c(block.first(kCrcOff));
    const uint8_t zero[4] = {0, 0, 0, 0};
    crc = crc32c(zero, crc);
    crc = crc32c(block.subspan(kCrcOff + 4), crc);
    if (crc != stored) return make_error_code(Errc::malformed_data);
    Stamp s;
    s.key = get(block, 8, 8);
    s.epoch = static_cast<uint32_t>(get(block, 16, 4));
    s.node = block[20];
    s.tag = block[21];
    s.lba = get(block, 24, 8);
    s.seq = get(block, 32, 8);
    s.time_ns = get(block, 40, 8);
    const char* h = reinterpret_cast<const char*>(block.data() + 48);
    s.host.assign(h, strnlen(h, 32));
    for (char& c : s.host)
        if (c < 0x20 || c >= 0x7f) c = '?';
    s.writer_id = get(block, 80, 8);
    return s;
}

}  // namespace nvfence
