// SPDX-License-Identifier: MIT
// placeholder: replaced by the FencedWriter implementation
#include "nvfence/writer.hpp"
