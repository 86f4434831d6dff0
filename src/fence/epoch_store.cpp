// SPDX-License-Identifier: MIT
#include "nvfence/epoch_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string_view>

#include "nvfence/error.hpp"
#include "nvfence/fd.hpp"
#include "nvfence/key.hpp"
#include "nvfence/state_file.hpp"
#include "internal/file_name.hpp"
#include "internal/invariant.hpp"

namespace nvfence {
namespace {

constexpr size_t kMaxEpochFileBytes = 31;

bool plausible(uint32_t e, uint32_t floor) {
    if (e >= kEpochCeiling) return false;
    return floor == 0 || e <= floor || e - floor <= kMaxEpochJump;
}

// An exclusive flock on the store's lock file, released with the Fd. Bounded.
Result<Fd> lock_store(const std::string& dir, const std::string& lock_path) {
    for (size_t pos = 1; pos <= dir.size(); ++pos) {
        if (pos != dir.size() && dir[pos] != '/') continue;
        const std::string part = dir.substr(0, pos);
        if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return state_error(errno);
    }
    if (auto ok = check_state_dir(dir); !ok) return ok.error();
    Fd fd(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) return state_error(errno);
    // A blocking lock: the kernel queues waiters, so neither process starves
    // (a polling LOCK_NB loser did, in the stress test). The wait is bounded
    // by the holder's work: one load and one fsync'd write, never a wait on
    // anything else.
    while (::flock(fd.get(), LOCK_EX) != 0) {
        if (errno != EINTR) return state_error(errno);
    }
    return fd;
}

}  // namespace

Result<Fd> lock_state_store(const std::string& dir, const std::string& lock_path) {
    return lock_store(dir, lock_path);
}

Result<uint32_t> parse_epoch_text(std::string_view s) {
    if (s.size() > kMaxEpochFileBytes) return make_error_code(Errc::state_io);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
    auto v = parse_uint(s, 0, kMaxEpoch);
    if (!v) return make_error_code(Errc::state_io);
    return static_cast<uint32_t>(*v);
}

EpochObservation observe_epochs(const ReservationStatus& st, uint8_t tag, uint32_t floor) {
    EpochObservation o;
    for (const auto& r : st.registrants) {
        auto f = decode_key(r.key);
        if (!f || f->tag != tag) continue;
        if (plausible(f->epoch, floor)) o.highest = std::max(o.highest, f->epoch);
        else o.implausible.push_back(r.key);
    }
    // Only plausible epochs count: a store raised to this never reaches the
    // ceiling (this host could never take over again) nor jumps past the bound.
    NVF_INVARIANT(o.highest < kEpochCeiling);
    NVF_INVARIANT(floor == 0 || o.highest <= floor || o.highest - floor <= kMaxEpochJump);
    return o;
}

EpochStore::EpochStore(std::string dir, const std::string& volume)
    : EpochStore(std::move(dir), volume, file_state_medium()) {}

EpochStore::EpochStore(std::string dir, const std::string& volume, const StateMedium& medium)
    : dir_(std::move(dir)), medium_(&medium) {
    path_ = dir_ + "/" + volume_file_stem(volume) + ".epoch";
    // The file lies directly in dir_: write_atomic's rename is made durable by
    // syncing dir_. volume_file_stem() leaves no '/' in a name.
    NVF_INVARIANT(path_.find('/', dir_.size() + 1) == std::string::npos);
}

Result<uint32_t> EpochStore::load() const {
    bool absent = false;
    auto text = medium_->read(path_, kMaxEpochFileBytes, absent);
    if (!text) return text.error();
    if (absent) return uint32_t{0};
    return parse_epoch_text(*text);
}

Status EpochStore::raise_to(uint32_t epoch) const {
    auto lock = medium_->lock(dir_, path_ + ".lock");
    if (!lock) return lock.error();
    auto cur = load();
    if (!cur) return cur.error();
    if (*cur >= epoch) return Ok{};
    // What load() reads back must be this epoch.
    const std::string text = std::to_string(epoch) + "\n";
    const auto back = parse_epoch_text(text);
    NVF_INVARIANT(back && *back == epoch);
    return medium_->write_atomic(dir_, path_, text);
}

Result<EpochObservation> EpochStore::raise_from(const ReservationStatus& st, uint8_t tag) const {
    auto cur = load();
    if (!cur) return cur.error();
    EpochObservation o = observe_epochs(st, tag, *cur);
    if (o.highest > *cur) {
        if (auto r = raise_to(o.highest); !r) return r.error();
    }
    return o;
}

}  // namespace nvfence
