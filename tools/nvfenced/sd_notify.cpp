// SPDX-License-Identifier: MIT
#include "sd_notify.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "nvfence/fd.hpp"
#include "nvfence/key.hpp"

namespace nvfenced {

bool sd_notify(const std::string& state) {
    const char* e = std::getenv("NOTIFY_SOCKET");
    if (!e || !*e || (e[0] != '/' && e[0] != '@')) return false;
    const std::string path(e);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (path.size() >= sizeof a.sun_path) return false;
    std::memcpy(a.sun_path, path.data(), path.size());
    // '@' names a socket in the abstract namespace, whose name starts with NUL.
    if (a.sun_path[0] == '@') a.sun_path[0] = '\0';
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
    nvfence::Fd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) return false;
    const ssize_t n = ::sendto(fd.get(), state.data(), state.size(), MSG_NOSIGNAL,
                               reinterpret_cast<const sockaddr*>(&a), len);
    return n == static_cast<ssize_t>(state.size());
}

std::chrono::microseconds watchdog_timeout() {
    const char* usec = std::getenv("WATCHDOG_USEC");
    if (!usec || !*usec) return std::chrono::microseconds(0);
    if (const char* pid = std::getenv("WATCHDOG_PID"); pid && *pid) {
        auto p = nvfence::parse_uint(pid, 1, UINT32_MAX);
        if (!p || *p != static_cast<uint64_t>(::getpid())) return std::chrono::microseconds(0);
    }
    auto v = nvfence::parse_uint(usec, 1, UINT64_MAX / 2);
    if (!v) return std::chrono::microseconds(0);
    return std::chrono::microseconds(static_cast<int64_t>(*v));
}

bool under_systemd() {
    const char* j = std::getenv("JOURNAL_STREAM");
    const char* i = std::getenv("INVOCATION_ID");
    return (j && *j) || (i && *i);
}

}  // namespace nvfenced
