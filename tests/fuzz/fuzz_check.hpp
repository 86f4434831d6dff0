// SPDX-License-Identifier: MIT
#pragma once
// A property check for fuzz targets: prints what failed and aborts, so
// libFuzzer records the input as a crash (also in release builds).

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                              \
    do {                                                                              \
        if (!(cond)) {                                                                \
            std::fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #cond); \
            std::abort();                                                             \
        }                                                                             \
    } while (0)
