// SPDX-License-Identifier: MIT
#pragma once
/// @file hardware_watchdog.hpp
/// The hardware watchdog behind the fence action (`hardware_watchdog =
/// /dev/watchdogN`): nvfenced opens the device, which arms it, and feeds it
/// after every check and about once a second while a bounded child runs.
/// A host whose user space stops running (SIGSTOP, a hang, a crash that is
/// not restarted in time) is reset by the hardware one timeout after the
/// last feed; a fence action that failed (or overran its bound) stops the
/// feeding for good, so a host whose key was removed and that could not run
/// its action is reset too. A clean stop disarms it (the magic close).
/// The device is behind a seam (WatchdogDevice) that unit tests replace.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "nvfence/result.hpp"

namespace nvfence {

/// One open watchdog device (Linux's watchdog API: WDIOC_SETTIMEOUT,
/// WDIOC_KEEPALIVE, the magic close). Opening it arms it.
class WatchdogDevice {
public:
    virtual ~WatchdogDevice() = default;
    /// Asks for @p seconds; returns the timeout the device took.
    virtual Result<uint32_t> set_timeout(uint32_t seconds) = 0;
    /// One keep-alive.
    virtual Status keepalive() = 0;
    /// Stops the watchdog (writes 'V' and closes). After it, nothing is fed.
    virtual Status disarm() = 0;
};

/// Opens @p path (O_WRONLY): the watchdog starts counting. EBUSY: another
/// process (a watchdog daemon, sbd, another nvfenced) has it.
Result<std::unique_ptr<WatchdogDevice>> open_watchdog_device(const std::string& path);

/// The logic: arm, feed, give up, disarm. Not thread-safe (the agent's
/// thread only).
class HardwareWatchdog {
public:
    /// One line to the log (true: informational, false: an error).
    using LineLog = std::function<void(bool, const std::string&)>;

    /// Owns @p dev (opened from @p path, named in messages).
    HardwareWatchdog(std::unique_ptr<WatchdogDevice> dev, std::string path, LineLog log);
    /// Disarms unless it gave up (close()).
    ~HardwareWatchdog();
    HardwareWatchdog(const HardwareWatchdog&) = delete;
    HardwareWatchdog& operator=(const HardwareWatchdog&) = delete;

    /// Sets the timeout to @p timeout_s and feeds once. Errc::invalid_argument
    /// (with why()) when the device took another timeout: the documented bound
    /// would not hold. On failure the device is disarmed.
    Status arm(uint32_t timeout_s);
    /// A keep-alive, unless it gave up or is closed. A failed keep-alive is
    /// logged (the first, then every 60th).
    void feed();
    /// Stops feeding for good: the hardware resets the host one timeout
    /// after the last feed. Logged once with @p why.
    void give_up(const std::string& why);
    /// A clean stop: disarms, unless it gave up (then the reset still comes).
    void close();

    bool given_up() const { return given_up_; }
    uint32_t timeout_s() const { return timeout_s_; }
    const std::string& why() const { return why_; }

private:
    std::unique_ptr<WatchdogDevice> dev_;
    std::string path_;
    LineLog log_;
    uint32_t timeout_s_ = 0;
    bool given_up_ = false;
    bool closed_ = false;
    uint64_t failed_feeds_ = 0;
    std::string why_;
};

}  // namespace nvfence
