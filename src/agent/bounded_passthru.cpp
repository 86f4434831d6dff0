// SPDX-License-Identifier: MIT
#include "agent/bounded_passthru.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <vector>

#include "nvfence/error.hpp"

namespace nvfence {

// Everything the worker uses: shared with it, so that a detached worker
// still inside a command touches nothing its owner freed.
struct BoundedPassthru::State {
    std::mutex m;
    std::condition_variable job_cv;   // the worker waits for a job or the stop
    std::condition_variable done_cv;  // the caller waits for its job's end
    bool stop = false;
    bool has_job = false;  // handed over, not yet taken by the worker
    bool running = false;  // the worker is inside a command
    uint64_t seq = 0;      // jobs handed over
    uint64_t done = 0;     // jobs ended
    std::shared_ptr<Passthru> target;
    Command cmd;
    std::vector<uint8_t> buf;  // the job's copy of the caller's data
    Result<uint32_t> result = uint32_t{0};
    std::chrono::steady_clock::time_point abandoned_at{};
};

BoundedPassthru::BoundedPassthru(std::shared_ptr<Passthru> inner, uint32_t default_timeout_ms, NoteFn note)
    : st_(std::make_shared<State>()),
      inner_(std::move(inner)),
      default_timeout_ms_(default_timeout_ms ? default_timeout_ms : 30000),
      note_(std::move(note)) {}

BoundedPassthru::~BoundedPassthru() {
    bool running = false;
    {
        std::lock_guard lk(st_->m);
        st_->stop = true;
        running = st_->running;
    }
    st_->job_cv.notify_all();
    if (!worker_.joinable()) return;
    // An idle worker sees the stop at once; one inside a command may stay
    // there for long (that is why it was abandoned): it is left to end on
    // its own, with its shared state.
    if (running) worker_.detach();
    else worker_.join();
}

void BoundedPassthru::work(std::shared_ptr<State> st) {
    std::unique_lock lk(st->m);
    for (;;) {
        st->job_cv.wait(lk, [&] { return st->stop || st->has_job; });
        if (st->stop) return;  // a job not yet taken is dropped: nobody waits for it
        st->has_job = false;
        st->running = true;
        auto target = std::move(st->target);
        const Command cmd = st->cmd;
        std::vector<uint8_t> buf = std::move(st->buf);
        lk.unlock();
        Result<uint32_t> r = target->submit(cmd, buf);
        target.reset();
        lk.lock();
        st->buf = std::move(buf);
        st->result = r;
        st->running = false;
        ++st->done;
        st->done_cv.notify_all();
    }
}

bool BoundedPassthru::start_worker() {
    if (worker_.joinable()) return true;
    try {
        worker_ = std::thread(&BoundedPassthru::work, st_);
    } catch (const std::system_error&) {
        return false;
    }
    return true;
}

bool BoundedPassthru::busy() const {
    std::lock_guard lk(st_->m);
    return st_->running || st_->has_job;
}

Result<uint32_t> BoundedPassthru::submit(const Command& cmd, std::span<uint8_t> data) {
    return submit_to(inner_, cmd, data);
}

Result<uint32_t> BoundedPassthru::submit_to(std::shared_ptr<Passthru> target, const Command& cmd,
                                            std::span<uint8_t> data) {
    Command c = cmd;
    if (c.timeout_ms == 0) c.timeout_ms = default_timeout_ms_;
    if (!target) return std::make_error_code(std::errc::invalid_argument);
    if (!start_worker()) return std::make_error_code(std::errc::resource_unavailable_try_again);
    std::unique_lock lk(st_->m);
    if (st_->running || st_->has_job) {
        if (note_ && !refused_noted_)
            note_("device command refused: an earlier command has not returned from the device (given up " +
                  std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::steady_clock::now() - st_->abandoned_at)
                                     .count()) +
                  " ms ago)");
        refused_noted_ = true;
        return make_error_code(Errc::timeout);  // nothing sent
    }
    if (refused_noted_ && note_) note_("the device command given up earlier has returned");
    refused_noted_ = false;
    st_->target = std::move(target);
    st_->cmd = c;
    st_->buf.assign(data.begin(), data.end());
    st_->has_job = true;
    const uint64_t mine = ++st_->seq;
    st_->job_cv.notify_one();
    const bool ended = st_->done_cv.wait_for(lk, std::chrono::milliseconds(c.timeout_ms),
                                             [&] { return st_->done == mine; });
    if (!ended) {
        ++abandoned_;
        st_->abandoned_at = std::chrono::steady_clock::now();
        if (note_)
            note_("device command (opcode " + std::to_string(c.opcode) + ") did not return within its " +
                  std::to_string(c.timeout_ms) + " ms: given up, the kernel still has it");
        return make_error_code(Errc::timeout);
    }
    if (!c.host_to_device) std::copy(st_->buf.begin(), st_->buf.end(), data.begin());
    return st_->result;
}

}  // namespace nvfence
