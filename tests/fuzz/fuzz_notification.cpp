// SPDX-License-Identifier: MIT
// Fuzzes parse_notification_log (Reservation Notification log page 80h).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_check.hpp"
#include "nvfence/error.hpp"
#include "nvfence/report.hpp"

using namespace nvfence;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<uint8_t> buf(data, data + size);
    auto n = parse_notification_log(buf);
    if (size < 64 || buf[8] > 3) {
        FUZZ_CHECK(!n);
        FUZZ_CHECK(n.error() == Errc::malformed_data);
        return 0;
    }
    FUZZ_CHECK(n);
    uint64_t count = 0;
    for (int i = 7; i >= 0; --i) count = (count << 8) | buf[static_cast<size_t>(i)];
    uint32_t nsid = 0;
    for (int i = 15; i >= 12; --i) nsid = (nsid << 8) | buf[static_cast<size_t>(i)];
    FUZZ_CHECK(n->log_page_count == count);
    FUZZ_CHECK(static_cast<uint8_t>(n->type) == buf[8]);
    FUZZ_CHECK(n->available == buf[9]);
    FUZZ_CHECK(n->nsid == nsid);
    FUZZ_CHECK(std::strcmp(notification_type_name(n->type), "unknown") != 0);
    return 0;
}
