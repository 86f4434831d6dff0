// SPDX-License-Identifier: MIT
#pragma once
/// @file clock.hpp
/// The time source of the host agent. The agent never reads a clock or
/// sleeps by itself: it asks a Clock, so unit tests drive time exactly
/// (ManualClock) and replay failure schedules to the millisecond.

#include <chrono>
#include <cstdint>
#include <thread>

namespace nvfence {

/// A monotonic clock that can also sleep, plus the wall-clock time used
/// only for display and for timestamps persisted across restarts.
class Clock {
public:
    /// Milliseconds: the agent's unit of time.
    using Ms = std::chrono::milliseconds;
    /// A point on the monotonic timeline.
    using TimePoint = std::chrono::steady_clock::time_point;
    /// A point on the wall-clock timeline.
    using WallPoint = std::chrono::system_clock::time_point;

    virtual ~Clock() = default;
    /// Monotonic now.
    virtual TimePoint now() = 0;
    /// Wall-clock now (never used to order events).
    virtual WallPoint wall_now() = 0;
    /// Blocks for @p d (a non-positive duration returns at once).
    virtual void sleep_for(Ms d) = 0;
};

/// The real clocks: std::chrono::steady_clock and system_clock.
class SystemClock final : public Clock {
public:
    /// steady_clock::now().
    TimePoint now() override { return std::chrono::steady_clock::now(); }
    /// system_clock::now().
    WallPoint wall_now() override { return std::chrono::system_clock::now(); }
    /// std::this_thread::sleep_for.
    void sleep_for(Ms d) override {
        if (d.count() > 0) std::this_thread::sleep_for(d);
    }
};

/// A clock that moves only when told: sleep_for() and advance() add to it.
/// Both timelines move together. For tests and simulations.
class ManualClock final : public Clock {
public:
    /// Starts at an arbitrary fixed point (monotonic 1000 s, wall
    /// 2024-01-01T00:00:00Z).
    ManualClock()
        : now_(TimePoint(std::chrono::seconds(1000))),
          wall_(WallPoint(std::chrono::seconds(1704067200))) {}
    /// The current simulated time.
    TimePoint now() override { return now_; }
    /// The current simulated wall time.
    WallPoint wall_now() override { return wall_; }
    /// Advances by @p d.
    void sleep_for(Ms d) override { advance(d); }
    /// Advances by @p d (ignored when not positive).
    void advance(Ms d) {
        if (d.count() <= 0) return;
        now_ += d;
        wall_ += d;
    }
    /// Milliseconds elapsed since construction.
    int64_t elapsed_ms() const {
        return std::chrono::duration_cast<Ms>(now_ - TimePoint(std::chrono::seconds(1000))).count();
    }

private:
    TimePoint now_;
    WallPoint wall_;
};

}  // namespace nvfence
