// SPDX-License-Identifier: MIT
#include "host_io.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "nvfence/error.hpp"

extern char** environ;

namespace nvfence::fence_agent {
namespace {

constexpr size_t kMaxOutputBytes = 1 << 20;

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left <= 0 ? 0 : static_cast<int>(left);
}

// Reads @p fd until EOF or @p deadline; false when the deadline passed first.
bool read_until(int fd, Clock::time_point deadline, std::string& out) {
    for (;;) {
        const int left = ms_left(deadline);
        if (left == 0) return false;
        pollfd p{fd, POLLIN, 0};
        const int n = ::poll(&p, 1, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) continue;
        char buf[4096];
        const ssize_t r = ::read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return true;
        if (out.size() < kMaxOutputBytes) out.append(buf, static_cast<size_t>(r));
    }
}

}  // namespace

Result<std::string> run_bounded(const std::string& prog, const std::vector<std::string>& args, int timeout_ms) {
    int pipefd[2];
    if (::pipe2(pipefd, O_CLOEXEC) != 0) return errno_error(errno);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(prog.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, prog.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(pipefd[1]);
    if (rc != 0) {
        ::close(pipefd[0]);
        return errno_error(rc);
    }
    std::string out;
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    bool timed_out = !read_until(pipefd[0], deadline, out);
    ::close(pipefd[0]);
    // Its output closed is not its exit: wait for that within the same
    // bound, then kill it. The reap after SIGKILL is prompt.
    int status = 0;
    while (!timed_out) {
        const pid_t w = ::waitpid(pid, &status, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR)) break;
        if (ms_left(deadline) == 0) timed_out = true;
        else ::usleep(10000);
    }
    if (timed_out) {
        ::kill(pid, SIGKILL);
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        return make_error_code(Errc::timeout);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return errno_error(EIO);
    return out;
}

Result<Fd> open_debug_file(const std::string& path) {
    Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600));
    if (!fd) return errno_error(errno);
    return fd;
}

}  // namespace nvfence::fence_agent
