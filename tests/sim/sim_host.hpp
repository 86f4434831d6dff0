// SPDX-License-Identifier: MIT
#pragma once
/// @file sim_host.hpp
/// Internal to the simulator (sim_world.cpp and its tests): the pieces of
/// one simulated host that stand in for the outside world of the product
/// code: its clock (drift, VM freeze), its disk (a StateMedium whose
/// contents after a crash the simulator decides).

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "internal/clock.hpp"
#include "nvfence/state_file.hpp"

namespace nvfence::sim {

/// Never (a time far in the future, still safe to add to).
inline constexpr int64_t kNever = INT64_MAX / 4;

/// Thrown inside a host's call when its process died there; caught where
/// the simulator started that process's step. Never crosses a schedule.
struct SimCrash {};

/// A host's clock over the world's global time @p global (milliseconds):
/// it drifts by drift_ppm and stops while the VM is frozen (or, with
/// stops = false, keeps counting so it jumps at resume).
class HostClock final : public Clock {
public:
    /// Reads the global time from @p global (borrowed).
    explicit HostClock(const int64_t& global) : global_(global) {}
    /// The host's monotonic time.
    TimePoint now() override { return TimePoint(std::chrono::milliseconds(local_ms())); }
    /// Wall time: a fixed epoch plus the host's time.
    WallPoint wall_now() override { return WallPoint(std::chrono::milliseconds(kWallBaseMs + local_ms())); }
    /// Nothing of the product sleeps on the simulated paths: a sleep is a
    /// simulator bug (it would stall the whole world).
    void sleep_for(Ms) override;
    /// The host's time in milliseconds (1,000,000 at global 0).
    int64_t local_ms();
    /// Freezes the VM over global [from, to); @p stops: its clock stops too.
    void freeze(int64_t from_ms, int64_t to_ms, bool stops);
    /// Ends a freeze at global @p at (healing).
    void thaw(int64_t at_ms);
    /// Parts per million the host's clock runs fast (negative: slow).
    void set_drift_ppm(int64_t ppm) { drift_ppm_ = ppm; }

private:
    static constexpr int64_t kWallBaseMs = 1704067200000;
    const int64_t& global_;
    int64_t local_ = 1000000;
    int64_t last_ = 0;
    int64_t drift_ppm_ = 0;
    int64_t drift_acc_ = 0;
    int64_t freeze_from_ = kNever;
    int64_t freeze_to_ = kNever;
    bool stops_ = true;
};

/// A host's disk for the state files: a map of path to contents. Every
/// write first asks @p on_write whether the process dies at it: 0 no, 1
/// dies before the write reached the disk, 2 dies after (SimCrash thrown).
class SimDisk final : public StateMedium {
public:
    /// Decides a crash at each write (may be empty: never).
    std::function<int()> on_write;
    Status write_atomic(const std::string& dir, const std::string& path, std::string_view text) const override;
    Result<std::string> read(const std::string& path, size_t max_bytes, bool& absent) const override;
    /// Nothing to exclude: one process per host at a time.
    Result<Fd> lock(const std::string& dir, const std::string& lock_path) const override;
    /// Writes that reached the disk.
    uint64_t writes() const { return writes_; }

private:
    mutable std::vector<std::pair<std::string, std::string>> files_;
    mutable uint64_t writes_ = 0;
};

}  // namespace nvfence::sim
