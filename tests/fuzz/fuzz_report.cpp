// SPDX-License-Identifier: MIT
// Fuzzes parse_report, both forms, against a reference reading of the same
// bytes (NVMe Base Specification offsets) and the parser's own promises.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "fuzz_check.hpp"
#include "nvfence/error.hpp"
#include "nvfence/report.hpp"
#include "internal/byte_order.hpp"

using namespace nvfence;

namespace {

uint64_t rd(const uint8_t* p, int n) {
    switch (n) {
    case 2: return load_le<uint16_t>(p);
    case 4: return load_le<uint32_t>(p);
    case 8: return load_le<uint64_t>(p);
    default: std::abort();
    }
}

void check(std::span<const uint8_t> buf, bool ext) {
    const size_t header = ext ? 64 : 24;
    const size_t entry = ext ? 64 : 24;
    auto st = parse_report(buf, ext);
    if (buf.size() < header || buf[4] > 6) {
        FUZZ_CHECK(!st);
        FUZZ_CHECK(st.error() == Errc::malformed_data);
        return;
    }
    FUZZ_CHECK(st);
    FUZZ_CHECK(st->extended == ext);
    FUZZ_CHECK(st->generation == rd(&buf[0], 4));
    FUZZ_CHECK(st->raw_type == buf[4]);
    FUZZ_CHECK(static_cast<uint8_t>(st->type) == buf[4]);
    FUZZ_CHECK(resv_type_valid(st->raw_type) || st->type == ResvType::none);
    FUZZ_CHECK(st->num_registrants == rd(&buf[5], 2));
    FUZZ_CHECK(st->ptpl == ((buf[9] & 1) != 0));
    const size_t fit = (buf.size() - header) / entry;
    const size_t n = std::min<size_t>(fit, st->num_registrants);
    FUZZ_CHECK(st->registrants.size() == n);
    FUZZ_CHECK(st->truncated() == (n < st->num_registrants));
    FUZZ_CHECK(header + n * entry <= buf.size());
    const Registrant* first_holder = nullptr;
    for (size_t i = 0; i < n; ++i) {
        const uint8_t* e = &buf[header + i * entry];
        const Registrant& r = st->registrants[i];
        FUZZ_CHECK(r.cntlid == rd(e, 2));
        FUZZ_CHECK(r.holder == ((e[2] & 1) != 0));
        HostId want{};
        if (ext) {
            FUZZ_CHECK(r.key == rd(e + 8, 8));
            std::memcpy(want.data(), e + 16, 16);
        } else {
            FUZZ_CHECK(r.key == rd(e + 16, 8));
            std::memcpy(want.data(), e + 8, 8);
        }
        FUZZ_CHECK(r.host_id == want);
        if (r.holder && !first_holder) first_holder = &r;
        const Registrant* f = st->find_host(r.host_id);
        FUZZ_CHECK(f != nullptr && f->host_id == r.host_id && f <= &r);
    }
    FUZZ_CHECK(st->holder() == first_holder);
    // Every whole entry fits: the size helper agrees with the parser.
    FUZZ_CHECK(report_size_for(static_cast<uint16_t>(n), ext) <= buf.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // Exact-size copies so ASan sees any read past the end.
    std::vector<uint8_t> buf(data, data + size);
    check(buf, false);
    check(buf, true);
    return 0;
}
