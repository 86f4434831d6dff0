// SPDX-License-Identifier: MIT
#include "sim_fiber.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cassert>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define NVFENCE_SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NVFENCE_SIM_ASAN 1
#endif
#endif

#ifdef NVFENCE_SIM_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace nvfence::sim {
namespace {

void start_switch([[maybe_unused]] void** save, [[maybe_unused]] const void* bottom, [[maybe_unused]] size_t size) {
#ifdef NVFENCE_SIM_ASAN
    __sanitizer_start_switch_fiber(save, bottom, size);
#endif
}

void finish_switch([[maybe_unused]] void* save, [[maybe_unused]] const void** bottom, [[maybe_unused]] size_t* size) {
#ifdef NVFENCE_SIM_ASAN
    __sanitizer_finish_switch_fiber(save, bottom, size);
#endif
}

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "nvfence-sim: fiber: %s\n", what);
    std::abort();
}

size_t page_bytes() {
    static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return p;
}

// Stacks of this thread's fibers, kept for the next schedule.
struct StackPool {
    std::vector<void*> free;
    ~StackPool() {
        for (void* s : free) munmap(static_cast<char*>(s) - page_bytes(), Fiber::kStackBytes + page_bytes());
    }
    void* take() {
        if (!free.empty()) {
            void* s = free.back();
            free.pop_back();
            return s;
        }
        const size_t guard = page_bytes();
        void* m = mmap(nullptr, Fiber::kStackBytes + guard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) die("cannot map a stack");
        if (mprotect(m, guard, PROT_NONE) != 0) die("cannot protect a stack's guard page");
        return static_cast<char*>(m) + guard;
    }
    void give(void* s) { free.push_back(s); }
};

thread_local StackPool pool;
thread_local Fiber* running = nullptr;

}  // namespace

Fiber::Fiber() : stack_(pool.take()) {
    if (getcontext(&ctx_) != 0) die("getcontext failed");
}

Fiber::~Fiber() {
    // A suspended fiber's frames would never be unwound: its owner must end
    // it first (the world unwinds every host's fibers before it goes).
    if (active_) die("a fiber destroyed while suspended");
    pool.give(stack_);
}

Fiber* Fiber::current() { return running; }

void Fiber::start(Fn fn, void* arg) {
    assert(!active_ && fn);
    fn_ = fn;
    arg_ = arg;
    ctx_.uc_stack.ss_sp = stack_;
    ctx_.uc_stack.ss_size = kStackBytes;
    ctx_.uc_link = nullptr;
    const auto p = reinterpret_cast<uintptr_t>(this);
    makecontext(&ctx_, reinterpret_cast<void (*)()>(&Fiber::entry), 2, static_cast<unsigned>(p & 0xffffffffu),
                static_cast<unsigned>(static_cast<uint64_t>(p) >> 32));
    active_ = true;
}

void Fiber::entry(unsigned lo, unsigned hi) {
    const uintptr_t p = static_cast<uintptr_t>((static_cast<uint64_t>(hi) << 32) | lo);
    reinterpret_cast<Fiber*>(p)->run();
}

void Fiber::run() {
    finish_switch(nullptr, &caller_bottom_, &caller_size_);
    try {
        fn_(arg_);
    } catch (...) {
        error_ = std::current_exception();
    }
    active_ = false;
    start_switch(nullptr, caller_bottom_, caller_size_);  // this run's frames are gone
    swapcontext(&ctx_, &caller_);
    die("a returned fiber was resumed");
}

void Fiber::resume() {
    if (!active_) die("resume of a fiber that is not started");
    if (running) die("a fiber resumed from another fiber");
    running = this;
    void* save = nullptr;
    start_switch(&save, stack_, kStackBytes);
    if (swapcontext(&caller_, &ctx_) != 0) die("swapcontext failed");
    finish_switch(save, nullptr, nullptr);
    running = nullptr;
    if (error_) {
        std::exception_ptr e = error_;
        error_ = nullptr;
        std::rethrow_exception(e);
    }
}

void Fiber::suspend() {
    if (running != this) die("suspend from outside the fiber");
    start_switch(&fake_stack_, caller_bottom_, caller_size_);
    if (swapcontext(&ctx_, &caller_) != 0) die("swapcontext failed");
    finish_switch(fake_stack_, &caller_bottom_, &caller_size_);
}

}  // namespace nvfence::sim
