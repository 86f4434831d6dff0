// SPDX-License-Identifier: MIT
#pragma once
// NVF_INVARIANT: a broken invariant means the program no longer knows what
// the device or the election thinks; continuing could write without a
// grant, so it stops loudly (TigerBeetle's style: assert pre- and
// postconditions). Internal to the library, not installed.
#include <cstdio>
#include <cstdlib>

namespace nvfence::detail {
[[noreturn]] inline void broken(const char* what, const char* file, int line) {
    std::fprintf(stderr, "nvfence: broken invariant: %s (%s:%d); aborting\n", what, file, line);
    std::fflush(stderr);
    std::abort();
}
}  // namespace nvfence::detail

#define NVF_INVARIANT(c)                                                   \
    do {                                                                   \
        if (!(c)) ::nvfence::detail::broken(#c, __FILE__, __LINE__);       \
    } while (0)
