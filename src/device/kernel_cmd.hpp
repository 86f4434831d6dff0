// SPDX-License-Identifier: MIT
#pragma once
// One Command into the kernel's command structs: nvme_passthru_cmd (the
// ioctl) and nvme_uring_cmd (io_uring passthrough) carry the same fields
// under the same names. Internal to libnvfence, not installed.
#include <cstring>

#include "nvfence/command.hpp"

namespace nvfence::detail {

/// The opcode, namespace, command dwords 10-15 and data length of @p c in
/// a zeroed kernel struct K; the caller sets addr (and timeout_ms).
template <class K>
K to_kernel_cmd(const Command& c) {
    K k;
    std::memset(&k, 0, sizeof k);
    k.opcode = c.opcode;
    k.nsid = c.nsid;
    k.cdw10 = c.cdw[0];
    k.cdw11 = c.cdw[1];
    k.cdw12 = c.cdw[2];
    k.cdw13 = c.cdw[3];
    k.cdw14 = c.cdw[4];
    k.cdw15 = c.cdw[5];
    k.data_len = c.data_len;
    return k;
}

}  // namespace nvfence::detail
