// SPDX-License-Identifier: MIT
// Fuzzes the epoch file's parser (parse_epoch_text). Properties: whatever
// parses is at most kMaxEpoch and its decimal text parses back to it;
// whatever does not parse is Errc::state_io.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "nvfence/epoch_store.hpp"
#include "nvfence/error.hpp"

using namespace nvfence;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    auto v = parse_epoch_text(text);
    if (!v) {
        FUZZ_CHECK(v.error() == Errc::state_io);
        return 0;
    }
    FUZZ_CHECK(*v <= kMaxEpoch);
    auto again = parse_epoch_text(std::to_string(*v) + "\n");
    FUZZ_CHECK(again && *again == *v);
    for (char c : text) FUZZ_CHECK((c >= '0' && c <= '9') || c == ' ' || c == '\n');
    return 0;
}
