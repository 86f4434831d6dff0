// SPDX-License-Identifier: MIT
#include "nvfence/epoch_store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string_view>

#include "nvfence/error.hpp"
#include "nvfence/fd.hpp"
#include "nvfence/key.hpp"
#include "nvfence/state_file.hpp"

namespace nvfence {

EpochStore::EpochStore(std::string dir, const std::string& volume) : dir_(std::move(dir)) {
    std::string v;
    for (char c : volume) {
        const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                          (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
        v.push_back(keep ? c : '_');
    }
    if (v.empty() || v[0] == '.') v = "v" + v;  // not insert(): GCC 12 -Wrestrict false positive
    path_ = dir_ + "/" + v + ".epoch";
}

Result<uint32_t> EpochStore::load() const {
    Fd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
        if (errno == ENOENT) return uint32_t{0};
        return make_error_code(Errc::state_io);
    }
    char buf[32];
    ssize_t n = ::read(fd.get(), buf, sizeof buf - 1);
    if (n <= 0) return make_error_code(Errc::state_io);
    std::string_view s(buf, static_cast<size_t>(n));
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
    auto v = parse_uint(s, 0, kMaxEpoch);
    if (!v) return make_error_code(Errc::state_io);
    return static_cast<uint32_t>(*v);
}

Status EpochStore::raise_to(uint32_t epoch) const {
    auto cur = load();
    if (!cur) return cur.error();
    if (*cur >= epoch) return Ok{};
    return write_file_atomic(dir_, path_, std::to_string(epoch) + "\n");
}

}  // namespace nvfence
