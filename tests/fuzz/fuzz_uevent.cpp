// SPDX-License-Identifier: MIT
// Fuzzes parse_uevent and is_aen_for (kernel uevent datagrams).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "fuzz_check.hpp"
#include "nvfence/error.hpp"
#include "agent/uevent.hpp"

using namespace nvfence;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto e = parse_uevent(std::span<const uint8_t>(data, size));
    if (size == 0 || size > kMaxUeventBytes) FUZZ_CHECK(!e);
    if (!e) {
        FUZZ_CHECK(e.error() == Errc::malformed_data);
        return 0;
    }
    FUZZ_CHECK(!e->action.empty() && !e->devpath.empty());
    FUZZ_CHECK(e->action.size() + e->devpath.size() < size);
    FUZZ_CHECK(e->action.find('@') == std::string::npos);
    if (is_aen_for(*e, e->devname.empty() ? std::string("nvme0") : e->devname)) {
        FUZZ_CHECK(e->nvme_aen.has_value());
        FUZZ_CHECK(e->subsystem == "nvme");
    }
    if (e->nvme_aen) {
        const AenInfo a = decode_aen(*e->nvme_aen);
        FUZZ_CHECK(a.type <= 7);
        FUZZ_CHECK(((uint32_t{a.log_page} << 16) | (uint32_t{a.info} << 8) | a.type) ==
                   (*e->nvme_aen & 0xffff07u));
    }
    FUZZ_CHECK(!is_aen_for(*e, ""));
    return 0;
}
