// SPDX-License-Identifier: MIT
#pragma once
/// @file bounded_passthru.hpp
/// A Passthru whose caller never waits for a device command past the
/// command's timeout, whatever the kernel does.
///
/// Linux does not end a command at its timeout: the block layer rounds
/// the timer up to the next whole second, and NVMe/TCP or RDMA run their
/// error recovery (queue teardown, reconnect) before the command
/// completes, so the ioctl returns up to a second or more late. The agent
/// runs on one thread and its lease's watchdog runs between its calls: a
/// HOLDER whose lease runs out while it waits would step down late, its
/// writers running on. This decorator runs each command on a worker
/// thread it owns and waits for it only until the command's timeout
/// (which TimedPassthru has already cut to the lease's act-before point);
/// a command still in the kernel then is abandoned: the caller gets
/// Errc::timeout and goes on.
///
/// The abandoned command writes into the worker's copy of the data, never
/// into the caller's buffer. While it has not returned, every new command
/// fails at once with Errc::timeout (nothing is sent). Destruction never
/// waits for a command: a worker still inside one is detached and owns
/// everything it uses (shared state, the target it was given).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "nvfence/passthru.hpp"

namespace nvfence {

/// See the file comment. Call from one thread.
class BoundedPassthru final : public Passthru {
public:
    /// One line for the log (a command given up, a command refused, an
    /// abandoned command that returned), on the caller's thread.
    using NoteFn = std::function<void(const std::string& line)>;

    /// Commands go to @p inner (shared: a worker still inside a command
    /// keeps it alive); a command without a timeout waits
    /// @p default_timeout_ms.
    explicit BoundedPassthru(std::shared_ptr<Passthru> inner, uint32_t default_timeout_ms = 30000,
                             NoteFn note = {});
    /// Joins an idle worker; detaches one still inside a command.
    ~BoundedPassthru() override;
    BoundedPassthru(const BoundedPassthru&) = delete;
    BoundedPassthru& operator=(const BoundedPassthru&) = delete;

    /// See Passthru::submit: waits at most cmd.timeout_ms (or the default).
    Result<uint32_t> submit(const Command& cmd, std::span<uint8_t> data) override;
    /// As submit(), to @p target instead of the inner passthru.
    Result<uint32_t> submit_to(std::shared_ptr<Passthru> target, const Command& cmd, std::span<uint8_t> data);
    /// True while an abandoned command has not returned from the device.
    bool busy() const;
    /// Commands abandoned at their timeout since construction.
    uint64_t abandoned() const { return abandoned_; }

private:
    struct State;
    static void work(std::shared_ptr<State> st);
    bool start_worker();

    std::shared_ptr<State> st_;
    std::shared_ptr<Passthru> inner_;
    uint32_t default_timeout_ms_;
    NoteFn note_;
    std::thread worker_;
    uint64_t abandoned_ = 0;
    bool refused_noted_ = false;  ///< The refusal of the current abandonment was noted.
};

}  // namespace nvfence
