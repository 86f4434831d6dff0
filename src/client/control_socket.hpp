// SPDX-License-Identifier: MIT
#pragma once
// The unix-socket helpers that the control protocol's client
// (src/client/control.cpp, in libnvfence) and its server
// (src/agent/control_server.cpp, nvfenced's) share. Inline: each side has
// its own copy of the code, one source. Never installed.

#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "nvfence/error.hpp"
#include "nvfence/result.hpp"

namespace nvfence::control_socket {

using Deadline = std::chrono::steady_clock::time_point;

inline int remaining_ms(Deadline d) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        d - std::chrono::steady_clock::now());
    if (left.count() <= 0) return 0;
    return static_cast<int>(std::min<int64_t>(left.count(), 600000));
}

inline Result<sockaddr_un> unix_address(const std::string& path) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof a.sun_path) return make_error_code(Errc::invalid_argument);
    std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
    return a;
}

}  // namespace nvfence::control_socket
