// SPDX-License-Identifier: MIT
// A cooperative fiber for nvfence-sim's simulated threads (ucontext).
//
// Each simulated thread that can wait (a host's agent loop and its elector
// driver) runs its step on a fiber of its own: a wait suspends the fiber and
// returns to the scheduler, which resumes it when the world's time reaches
// the wait's end. So waits end in the order of their ends, whoever began
// first (one C++ stack would end them last in, first out). Everything stays
// on one OS thread: a schedule remains deterministic.
//
// A fiber runs one function at a time: start() arms it, resume() runs it
// until it suspends or returns. An exception that leaves the function is
// carried to the scheduler and thrown again from resume(). Stacks come from
// a per-thread pool (no system call per step) with a guard page below each,
// so an overflow crashes at once. AddressSanitizer is told of every switch.
#pragma once

#include <ucontext.h>

#include <cstddef>
#include <exception>

namespace nvfence::sim {

class Fiber {
public:
    using Fn = void (*)(void*);

    Fiber();
    ~Fiber();
    Fiber(const Fiber&) = delete;
    Fiber& operator=(const Fiber&) = delete;

    /// Arms the fiber: the next resume() calls fn(arg) on the fiber's stack.
    /// Precondition: !active().
    void start(Fn fn, void* arg);
    /// Scheduler side: runs the fiber until it suspends or its function
    /// returns; rethrows an exception that left the function.
    void resume();
    /// Fiber side: back to the scheduler until the next resume().
    void suspend();
    /// Started and not yet returned.
    bool active() const { return active_; }
    /// The fiber whose function runs now on this thread (nullptr: the scheduler).
    static Fiber* current();

    static constexpr size_t kStackBytes = size_t{1} << 20;

private:
    static void entry(unsigned lo, unsigned hi);
    void run();

    ucontext_t ctx_{};
    ucontext_t caller_{};
    void* stack_ = nullptr;  // usable part (above the guard page)
    Fn fn_ = nullptr;
    void* arg_ = nullptr;
    bool active_ = false;
    std::exception_ptr error_;
    // AddressSanitizer's bookkeeping of the switches.
    void* fake_stack_ = nullptr;
    const void* caller_bottom_ = nullptr;
    size_t caller_size_ = 0;
};

}  // namespace nvfence::sim
