// SPDX-License-Identifier: MIT
#include "nvfence/passthru.hpp"

#include <linux/nvme_ioctl.h>
#include <sys/ioctl.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "nvfence/error.hpp"
#include "internal/invariant.hpp"
#include "device/kernel_cmd.hpp"

namespace nvfence {

Result<uint32_t> IoctlPassthru::submit(const Command& cmd, std::span<uint8_t> data) {
    uint16_t raw = 0;
    return submit_raw(cmd, data, raw);
}

Result<uint32_t> IoctlPassthru::submit_raw(const Command& cmd, std::span<uint8_t> data,
                                           uint16_t& raw_status) {
    raw_status = 0;
    nvme_passthru_cmd pc = detail::to_kernel_cmd<nvme_passthru_cmd>(cmd);
    pc.timeout_ms = cmd.timeout_ms;
    // The kernel may write the payload buffer for bidirectional opcodes, so
    // send a private copy rather than casting away const.
    std::array<uint8_t, 16> payload = cmd.payload;
    if (cmd.data_len > 0) {
        if (cmd.host_to_device && data.empty()) {
            NVF_INVARIANT(cmd.data_len <= payload.size());
            pc.addr = reinterpret_cast<uintptr_t>(payload.data());
        } else {
            NVF_INVARIANT(data.size() >= cmd.data_len);
            pc.addr = reinterpret_cast<uintptr_t>(data.data());
        }
    }
    const unsigned long req = cmd.queue == Queue::admin ? NVME_IOCTL_ADMIN_CMD : NVME_IOCTL_IO_CMD;
    int rc;
    do {
        rc = ::ioctl(fd_, req, &pc);
    } while (rc < 0 && errno == EINTR);
    if (rc < 0) {
        if (errno == ENODEV || errno == ENXIO) return make_error_code(Errc::device_gone);
        return errno_error(errno);
    }
    if (rc > 0) {
        raw_status = static_cast<uint16_t>(rc);
        return make_nvme_error(raw_status);
    }
    return pc.result;
}

}  // namespace nvfence
