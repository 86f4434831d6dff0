// SPDX-License-Identifier: MIT
// Fuzzes the agent's state file parser (parse_persisted_state). Properties:
// whatever parses is consistent (a registered role has a key and a node, an
// action only when fenced) and encodes to text that parses to the same
// state; whatever does not parse is Errc::state_io.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "agent/agent.hpp"
#include "nvfence/error.hpp"

using namespace nvfence;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    auto s = parse_persisted_state(text);
    if (!s) {
        FUZZ_CHECK(s.error() == Errc::state_io);
        return 0;
    }
    const bool registered = s->role == PersistedRole::standby || s->role == PersistedRole::holder;
    if (registered) FUZZ_CHECK(s->key != 0 && s->node != 0);
    if (s->role == PersistedRole::none) FUZZ_CHECK(s->key == 0);
    if (s->action != FenceActionState::none) FUZZ_CHECK(s->role == PersistedRole::fenced);
    FUZZ_CHECK(s->reason.size() <= 512);
    auto again = parse_persisted_state(encode_persisted_state(*s));
    FUZZ_CHECK(again && *again == *s);
    return 0;
}
