// SPDX-License-Identifier: MIT
#pragma once
/// @file fd.hpp
/// RAII owner of a file descriptor.

#include <unistd.h>

#include <utility>

#include "nvfence/export.h"

namespace nvfence {

/// Owns one file descriptor and closes it on destruction.
class NVFENCE_API Fd {
public:
    /// An empty owner.
    Fd() = default;
    /// Takes ownership of @p fd (-1 for none).
    explicit Fd(int fd) noexcept : fd_(fd) {}
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    /// Moves ownership.
    Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    /// Moves ownership, closing what this owned.
    Fd& operator=(Fd&& o) noexcept {
        if (this != &o) reset(std::exchange(o.fd_, -1));
        return *this;
    }
    ~Fd() { reset(); }
    /// The descriptor, or -1.
    int get() const noexcept { return fd_; }
    /// True when a descriptor is owned.
    explicit operator bool() const noexcept { return fd_ >= 0; }
    /// Closes the owned descriptor and owns @p fd instead.
    void reset(int fd = -1) noexcept {
        if (fd_ >= 0) ::close(fd_);
        fd_ = fd;
    }
    /// Gives up ownership.
    int release() noexcept { return std::exchange(fd_, -1); }

private:
    int fd_ = -1;
};

}  // namespace nvfence
