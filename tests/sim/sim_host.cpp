// SPDX-License-Identifier: MIT
#include "sim_host.hpp"

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstdlib>

#include "nvfence/error.hpp"

namespace nvfence::sim {

void HostClock::sleep_for(Ms) {
    std::fputs("nvfence-sim: the product slept on a simulated clock (nothing may)\n", stderr);
    std::abort();
}

int64_t HostClock::local_ms() {
    const int64_t g = global_;
    if (g <= last_) return local_;
    int64_t d = g - last_;
    if (stops_) {
        const int64_t a = std::max(last_, freeze_from_), b = std::min(g, freeze_to_);
        if (b > a) d -= b - a;
    }
    drift_acc_ += d * drift_ppm_;
    local_ += d + drift_acc_ / 1000000;
    drift_acc_ %= 1000000;
    last_ = g;
    return local_;
}

void HostClock::freeze(int64_t from_ms, int64_t to_ms, bool stops) {
    assert(from_ms <= to_ms);
    (void)local_ms();  // account for any earlier freeze first
    freeze_from_ = from_ms;
    freeze_to_ = to_ms;
    stops_ = stops;
}

void HostClock::thaw(int64_t at_ms) {
    (void)local_ms();
    if (freeze_to_ > at_ms) freeze_to_ = std::max(at_ms, freeze_from_);
}

Status SimDisk::write_atomic(const std::string&, const std::string& path, std::string_view text) const {
    const int crash = on_write ? on_write() : 0;
    if (crash == 1) throw SimCrash{};
    ++writes_;
    bool found = false;
    for (auto& f : files_)
        if (f.first == path) {
            f.second.assign(text);
            found = true;
        }
    if (!found) files_.emplace_back(path, std::string(text));
    if (crash == 2) throw SimCrash{};
    return Ok{};
}

Result<std::string> SimDisk::read(const std::string& path, size_t max_bytes, bool& absent) const {
    absent = false;
    for (const auto& f : files_)
        if (f.first == path) {
            if (f.second.size() > max_bytes) return make_error_code(Errc::state_io);
            return f.second;
        }
    absent = true;
    return std::string();
}

Result<Fd> SimDisk::lock(const std::string&, const std::string&) const { return Fd(); }

}  // namespace nvfence::sim
