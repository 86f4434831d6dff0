// SPDX-License-Identifier: MIT
#include "nvfence/state_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>

#include "nvfence/error.hpp"
#include "nvfence/fd.hpp"
#include "internal/invariant.hpp"

namespace nvfence {

Status check_state_dir(const std::string& dir) {
    Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
    if (!dfd) return state_error(errno);
    struct stat st {};
    if (::fstat(dfd.get(), &st) != 0) return state_error(errno);
    // Anyone else who can write here can swap a state file for one that
    // lowers the epoch or clears FENCED.
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 || st.st_uid != ::geteuid())
        return make_error_code(Errc::unsafe_state_dir);
    return Ok{};
}

Status write_file_atomic(const std::string& dir, const std::string& path, std::string_view text) {
    // Every store names a file directly in its directory: syncing @p dir
    // after the rename is what makes the new content durable.
    NVF_INVARIANT(path.size() > dir.size() + 1 && path.compare(0, dir.size(), dir) == 0);
    NVF_INVARIANT(path[dir.size()] == '/' && path.find('/', dir.size() + 1) == std::string::npos);
    // Create missing parents too: a fresh host may have no /var/lib/nvfence.
    for (size_t pos = 1; pos <= dir.size(); ++pos) {
        if (pos != dir.size() && dir[pos] != '/') continue;
        const std::string part = dir.substr(0, pos);
        if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return state_error(errno);
    }
    if (auto ok = check_state_dir(dir); !ok) return ok;
    // A name no other writer uses (pid and a counter), created exclusively
    // and never through a symlink: two writers never share a temporary file.
    static std::atomic<uint64_t> counter{0};
    const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(++counter);
    {
        Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
        if (!fd) return state_error(errno);
        if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
            ::fsync(fd.get()) != 0) {
            const int e = errno ? errno : EIO;
            ::unlink(tmp.c_str());
            return state_error(e);
        }
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const int e = errno;
        ::unlink(tmp.c_str());
        return state_error(e);
    }
    Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
    if (!dfd || ::fsync(dfd.get()) != 0) return state_error(errno);
    return Ok{};
}

Result<std::string> read_state_file(const std::string& path, size_t max_bytes, bool& absent) {
    absent = false;
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) {
        if (errno == ENOENT) {
            absent = true;
            return std::string();
        }
        return state_error(errno);
    }
    std::string text;
    char buf[1024];
    for (;;) {
        const ssize_t n = ::read(fd.get(), buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) continue;
            return state_error(errno);
        }
        if (n == 0) break;
        text.append(buf, static_cast<size_t>(n));
        if (text.size() > max_bytes) return make_error_code(Errc::state_io);
    }
    NVF_INVARIANT(text.size() <= max_bytes);  // callers size their parse for max_bytes
    return text;
}

namespace {

class FileStateMedium final : public StateMedium {
public:
    Status write_atomic(const std::string& dir, const std::string& path, std::string_view text) const override {
        return write_file_atomic(dir, path, text);
    }
    Result<std::string> read(const std::string& path, size_t max_bytes, bool& absent) const override {
        return read_state_file(path, max_bytes, absent);
    }
    Result<Fd> lock(const std::string& dir, const std::string& lock_path) const override {
        return lock_state_store(dir, lock_path);
    }
};

}  // namespace

const StateMedium& file_state_medium() {
    static const FileStateMedium medium;
    return medium;
}

}  // namespace nvfence
