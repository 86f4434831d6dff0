// SPDX-License-Identifier: MIT
#include "nvfence/key.hpp"

#include <cstdio>

#include "nvfence/error.hpp"
#include "internal/invariant.hpp"

namespace nvfence {
namespace {

uint8_t crc8(uint64_t low48) {
    uint8_t crc = 0;
    for (int i = 5; i >= 0; --i) {
        crc ^= static_cast<uint8_t>(low48 >> (8 * i));
        for (int b = 0; b < 8; ++b)
            crc = static_cast<uint8_t>((crc & 0x80) ? (crc << 1) ^ 0x07 : crc << 1);
    }
    return crc;
}

bool parse_digits(std::string_view s, int base, uint64_t& out) {
    if (s.empty()) return false;
    uint64_t v = 0;
    for (char c : s) {
        unsigned d;
        if (c >= '0' && c <= '9') d = static_cast<unsigned>(c - '0');
        else if (base == 16 && c >= 'a' && c <= 'f') d = static_cast<unsigned>(c - 'a' + 10);
        else if (base == 16 && c >= 'A' && c <= 'F') d = static_cast<unsigned>(c - 'A' + 10);
        else return false;
        if (v > (UINT64_MAX - d) / static_cast<unsigned>(base)) return false;
        v = v * static_cast<unsigned>(base) + d;
    }
    out = v;
    return true;
}

}  // namespace

Result<uint64_t> make_key(const KeyFields& f) {
    if (f.node == 0 || f.epoch == 0) return make_error_code(Errc::invalid_argument);
    const uint64_t low = (uint64_t{f.tag} << 40) | (uint64_t{f.node} << 32) | f.epoch;
    const uint64_t key = (uint64_t{kKeyMagic} << 56) | (uint64_t{crc8(low)} << 48) | low;
    const auto back = decode_key(key);
    NVF_INVARIANT(back && back->tag == f.tag && back->node == f.node && back->epoch == f.epoch);
    return key;
}

std::optional<KeyFields> decode_key(uint64_t key) noexcept {
    if ((key >> 56) != kKeyMagic) return std::nullopt;
    const uint64_t low = key & 0xffffffffffffull;
    if (static_cast<uint8_t>(key >> 48) != crc8(low)) return std::nullopt;
    KeyFields f{static_cast<uint8_t>(low >> 40), static_cast<uint8_t>(low >> 32),
                static_cast<uint32_t>(low)};
    if (f.node == 0 || f.epoch == 0) return std::nullopt;
    return f;
}

std::string format_key_hex(uint64_t key) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(key));
    return buf;
}

std::string format_key(uint64_t key) {
    if (auto f = decode_key(key)) {
        return "nf:" + std::to_string(f->tag) + ":" + std::to_string(f->node) + ":" +
               std::to_string(f->epoch);
    }
    return format_key_hex(key);
}

Result<uint64_t> parse_uint(std::string_view text, uint64_t min, uint64_t max) {
    uint64_t v;
    if (!parse_digits(text, 10, v) || v < min || v > max)
        return make_error_code(Errc::invalid_argument);
    return v;
}

Result<uint64_t> parse_key(std::string_view text) {
    const auto bad = make_error_code(Errc::invalid_key);
    if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
        auto hex = text.substr(2);
        uint64_t v;
        if (hex.size() > 16 || !parse_digits(hex, 16, v) || v == 0) return bad;
        return v;
    }
    if (text.substr(0, 3) != "nf:") return bad;
    auto rest = text.substr(3);
    uint64_t field[3];
    for (int i = 0; i < 3; ++i) {
        auto colon = rest.find(':');
        auto part = (i < 2) ? rest.substr(0, colon) : rest;
        if ((i < 2 && colon == std::string_view::npos) || part.size() > 10 ||
            !parse_digits(part, 10, field[i]))
            return bad;
        if (i < 2) rest = rest.substr(colon + 1);
    }
    if (field[0] > 255 || field[1] < 1 || field[1] > kMaxNode || field[2] < 1 ||
        field[2] > kMaxEpoch)
        return bad;
    auto k = make_key({static_cast<uint8_t>(field[0]), static_cast<uint8_t>(field[1]),
                       static_cast<uint32_t>(field[2])});
    if (!k) return bad;
    return *k;
}

}  // namespace nvfence
