// SPDX-License-Identifier: MIT
// libFuzzer target for the control protocol decoders (control.hpp): any
// bytes a local peer sends to nvfenced, or an agent sends back to nvfence.
// Properties: decoding never crashes or reads out of bounds; whatever
// decodes re-encodes to the very same bytes (the format has one encoding);
// encoding whatever decodes stays within kControlMaxMessage.
#include <algorithm>
#include <cstdint>
#include <span>

#include "fuzz_check.hpp"
#include "nvfence/control.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::span<const uint8_t> in(data, size);
    (void)nvfence::decode_control_header(in);
    if (auto q = nvfence::decode_request(in)) {
        const auto again = nvfence::encode_request(*q);
        FUZZ_CHECK(again.size() == size && std::equal(again.begin(), again.end(), data));
        auto back = nvfence::decode_request(again);
        FUZZ_CHECK(back && *back == *q);
    }
    if (auto r = nvfence::decode_reply(in)) {
        const auto again = nvfence::encode_reply(*r);
        FUZZ_CHECK(again.size() <= nvfence::kControlMaxMessage);
        FUZZ_CHECK(again.size() == size && std::equal(again.begin(), again.end(), data));
        auto back = nvfence::decode_reply(again);
        FUZZ_CHECK(back && *back == *r);
    }
    return 0;
}
