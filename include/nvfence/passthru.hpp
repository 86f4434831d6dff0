// SPDX-License-Identifier: MIT
#pragma once
/// @file passthru.hpp
/// The boundary between nvfence and a device: send one encoded Command,
/// get its completion dword 0 or an error_code. The real implementation
/// uses the kernel's NVMe passthrough ioctls on a namespace node; unit tests
/// put a scripted fake here.

#include <cstdint>
#include <span>

#include "nvfence/export.h"
#include "nvfence/command.hpp"
#include "nvfence/fd.hpp"
#include "nvfence/result.hpp"

namespace nvfence {

/// Sends encoded commands to one namespace.
class NVFENCE_API Passthru {
public:
    virtual ~Passthru() = default;
    /// Sends @p cmd. For device-to-host commands @p data receives
    /// cmd.data_len bytes (it must be at least that large). For host-to-device
    /// commands @p data is the data sent, or empty to send cmd.payload.
    /// Returns completion dword 0, or an NVMe status error (nvme_category)
    /// or an errno (system_category).
    virtual Result<uint32_t> submit(const Command& cmd, std::span<uint8_t> data) = 0;
};

/// Passthru over the kernel's NVME_IOCTL_ADMIN_CMD / NVME_IOCTL_IO_CMD on an
/// open namespace node (block or generic char device). The fd is borrowed.
class NVFENCE_API IoctlPassthru final : public Passthru {
public:
    /// Uses @p fd, which must outlive this object.
    explicit IoctlPassthru(int fd) : fd_(fd) {}
    /// See Passthru::submit.
    Result<uint32_t> submit(const Command& cmd, std::span<uint8_t> data) override;
    /// As submit(), and stores in @p raw_status the status exactly as the
    /// ioctl returned it: the 15-bit NVMe status including Do Not Retry
    /// (0x4000) and More (0x2000), which the error_code drops; 0 when the
    /// command succeeded or failed with an errno.
    Result<uint32_t> submit_raw(const Command& cmd, std::span<uint8_t> data, uint16_t& raw_status);

private:
    int fd_;
};

}  // namespace nvfence
