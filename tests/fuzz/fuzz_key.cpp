// SPDX-License-Identifier: MIT
// Fuzzes the parsers of user input: parse_key, parse_uint, parse_host_id,
// and the key scheme on arbitrary 64-bit values. Properties: whatever
// parses prints back to text that parses to the same value.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "nvfence/error.hpp"
#include "nvfence/key.hpp"
#include "nvfence/namespace.hpp"
#include "nvfence/report.hpp"

using namespace nvfence;

namespace {

void key_value(uint64_t k) {
    const std::string text = format_key(k);
    const std::string hex = format_key_hex(k);
    FUZZ_CHECK(hex.size() == 18);
    if (auto f = decode_key(k)) {
        FUZZ_CHECK(f->node != 0 && f->epoch != 0);
        FUZZ_CHECK(make_key(*f) && *make_key(*f) == k);
        FUZZ_CHECK(text.compare(0, 3, "nf:") == 0);
        FUZZ_CHECK(!is_foreign(k));
    } else {
        FUZZ_CHECK(text == hex);
        FUZZ_CHECK(is_foreign(k));
    }
    if (k == 0) {
        FUZZ_CHECK(!parse_key(text) && !parse_key(hex));
        return;
    }
    auto p = parse_key(text);
    FUZZ_CHECK(p && *p == k);
    auto h = parse_key(hex);
    FUZZ_CHECK(h && *h == k);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);

    if (auto k = parse_key(text)) {
        FUZZ_CHECK(*k != 0);
        key_value(*k);
        if (text.substr(0, 3) == "nf:") FUZZ_CHECK(decode_key(*k).has_value());
        for (char c : text) FUZZ_CHECK(c > 0x20 && c < 0x7f);
    } else {
        FUZZ_CHECK(k.error() == Errc::invalid_key);
    }

    if (auto v = parse_uint(text, 0, UINT64_MAX)) {
        for (char c : text) FUZZ_CHECK(c >= '0' && c <= '9');
        auto again = parse_uint(std::to_string(*v), 0, UINT64_MAX);
        FUZZ_CHECK(again && *again == *v);
        auto bounded = parse_uint(text, *v, *v);
        FUZZ_CHECK(bounded && *bounded == *v);
        if (*v > 0) FUZZ_CHECK(!parse_uint(text, 0, *v - 1));
    } else {
        FUZZ_CHECK(v.error() == Errc::invalid_argument);
    }

    if (auto id = parse_host_id(text)) {
        auto again = parse_host_id(format_host_id(*id));
        FUZZ_CHECK(again && *again == *id);
    } else {
        FUZZ_CHECK(id.error() == Errc::invalid_argument);
    }

    if (size >= 8) {
        uint64_t k = 0;
        for (int i = 7; i >= 0; --i) k = (k << 8) | data[i];
        key_value(k);
        // Force the magic and a valid check byte half of the time, so the
        // decoder's accepting paths are reached too.
        if (size >= 9 && (data[8] & 1)) {
            const KeyFields f{static_cast<uint8_t>(k >> 40), static_cast<uint8_t>(k >> 32),
                              static_cast<uint32_t>(k)};
            if (auto m = make_key(f)) {
                FUZZ_CHECK(decode_key(*m) == f);
                key_value(*m);
            } else {
                FUZZ_CHECK(f.node == 0 || f.epoch == 0);
            }
        }
    }
    return 0;
}
