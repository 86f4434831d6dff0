// SPDX-License-Identifier: MIT
#pragma once
// The C API's writer handle (nvf_writer of nvfence/nvfence.h): internal to
// libnvfence and its tests, which wrap a FencedWriter of the testing kit in
// one to drive the C functions over the reservation model.
#include <memory>

#include "nvfence/nvfence.h"
#include "nvfence/writer.hpp"

struct nvf_writer {
    std::unique_ptr<nvfence::FencedWriter> w;
};
