// SPDX-License-Identifier: MIT
#include "nvfence/state_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "nvfence/error.hpp"
#include "nvfence/fd.hpp"

namespace nvfence {

Status write_file_atomic(const std::string& dir, const std::string& path, std::string_view text) {
    // Create missing parents too: a fresh host may have no /var/lib/nvfence.
    for (size_t pos = 1; pos <= dir.size(); ++pos) {
        if (pos != dir.size() && dir[pos] != '/') continue;
        const std::string part = dir.substr(0, pos);
        if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return make_error_code(Errc::state_io);
    }
    const std::string tmp = path + ".tmp";
    {
        Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
        if (!fd) return make_error_code(Errc::state_io);
        if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
            ::fsync(fd.get()) != 0)
            return make_error_code(Errc::state_io);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) return make_error_code(Errc::state_io);
    Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dfd || ::fsync(dfd.get()) != 0) return make_error_code(Errc::state_io);
    return Ok{};
}

}  // namespace nvfence
