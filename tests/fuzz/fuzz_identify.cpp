// SPDX-License-Identifier: MIT
// Fuzzes parse_identify_controller and parse_identify_namespace. The first
// byte picks the structure and whether the rest is zero-padded to 4096
// bytes (to reach the field checks) or passed as it is (to hit the length
// checks).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.hpp"
#include "nvfence/error.hpp"
#include "nvfence/report.hpp"

using namespace nvfence;

namespace {

bool clean(const std::string& s, size_t max) {
    if (s.size() > max) return false;
    for (char c : s)
        if (c < 0x20 || c > 0x7e) return false;
    return s.empty() || (s.front() != ' ' && s.back() != ' ');
}

void controller(const std::vector<uint8_t>& b) {
    auto c = parse_identify_controller(b);
    if (b.size() < 4096) {
        FUZZ_CHECK(!c && c.error() == Errc::malformed_data);
        return;
    }
    FUZZ_CHECK(c);
    FUZZ_CHECK(c->vid == (b[0] | (b[1] << 8)));
    FUZZ_CHECK(clean(c->serial, 20));
    FUZZ_CHECK(clean(c->model, 40));
    FUZZ_CHECK(clean(c->firmware, 8));
    FUZZ_CHECK(clean(c->subnqn, 256));
    FUZZ_CHECK(c->multi_controller == ((b[76] & 2) != 0));
    FUZZ_CHECK(c->cntlid == (b[78] | (b[79] << 8)));
    FUZZ_CHECK(c->hostid_128 == ((b[96] & 1) != 0));
    FUZZ_CHECK(c->reservations == ((b[520] & 0x20) != 0));
    if (auto v = ebs_volume_id(c->serial)) {
        FUZZ_CHECK(v->size() > 4 && v->size() <= 36 && v->compare(0, 4, "vol-") == 0);
        FUZZ_CHECK(clean(*v, 36));
    }
    (void)is_ebs_model(c->model);
}

void name_space(const std::vector<uint8_t>& b) {
    auto n = parse_identify_namespace(b);
    if (b.size() < 4096) {
        FUZZ_CHECK(!n && n.error() == Errc::malformed_data);
        return;
    }
    if (std::all_of(b.begin(), b.begin() + 4096, [](uint8_t x) { return x == 0; })) {
        FUZZ_CHECK(!n && n.error() == Errc::device_gone);  // an inactive namespace
        return;
    }
    const unsigned idx = (b[26] & 0xfu) | (((b[26] >> 5) & 0x3u) << 4);
    if (idx > b[25]) {
        FUZZ_CHECK(!n);
        return;
    }
    const unsigned lbads = b[128 + 4 * idx + 2];
    if (lbads < 9 || lbads > 16) {
        FUZZ_CHECK(!n && n.error() == Errc::malformed_data);
        return;
    }
    FUZZ_CHECK(n);
    FUZZ_CHECK(n->lba_bytes == (1u << lbads));
    FUZZ_CHECK(n->lba_bytes >= 512 && n->lba_bytes <= 65536);
    FUZZ_CHECK(n->metadata_bytes == (b[128 + 4 * idx] | (b[128 + 4 * idx + 1] << 8)));
    FUZZ_CHECK(n->shared == ((b[30] & 1) != 0));
    FUZZ_CHECK(n->rescap_raw == b[31]);
    const ResvType types[] = {ResvType::write_exclusive, ResvType::exclusive_access,
                              ResvType::write_exclusive_reg_only, ResvType::exclusive_access_reg_only,
                              ResvType::write_exclusive_all_regs, ResvType::exclusive_access_all_regs};
    bool any = false;
    for (unsigned i = 0; i < 6; ++i) {
        const bool bit = (b[31] >> (i + 1)) & 1;
        FUZZ_CHECK(n->rescap.supports(types[i]) == bit);
        any = any || bit;
    }
    FUZZ_CHECK(n->rescap.any() == any);
    FUZZ_CHECK(!n->rescap.supports(ResvType::none));
    FUZZ_CHECK(n->rescap.ptpl == ((b[31] & 1) != 0));
    FUZZ_CHECK(n->rescap.iekey == ((b[31] & 0x80) != 0));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const uint8_t sel = data[0];
    std::vector<uint8_t> b(data + 1, data + size);
    if (sel & 2) b.resize(4096, 0);
    if (sel & 1) name_space(b);
    else controller(b);
    return 0;
}
