// SPDX-License-Identifier: MIT
#include "agent/hardware_watchdog.hpp"

#include <fcntl.h>
#include <linux/watchdog.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "nvfence/error.hpp"
#include "nvfence/fd.hpp"

namespace nvfence {

namespace {

// Linux's watchdog API on one open device node.
class LinuxWatchdogDevice final : public WatchdogDevice {
public:
    explicit LinuxWatchdogDevice(Fd fd) : fd_(std::move(fd)) {}
    Result<uint32_t> set_timeout(uint32_t seconds) override {
        int t = static_cast<int>(seconds);
        if (::ioctl(fd_.get(), WDIOC_SETTIMEOUT, &t) != 0) return errno_error(errno);
        if (::ioctl(fd_.get(), WDIOC_GETTIMEOUT, &t) != 0) return errno_error(errno);
        return static_cast<uint32_t>(t);
    }
    Status keepalive() override {
        int dummy = 0;
        if (::ioctl(fd_.get(), WDIOC_KEEPALIVE, &dummy) != 0) return errno_error(errno);
        return Ok{};
    }
    Status disarm() override {
        if (!fd_) return Ok{};
        // The magic close: 'V' then close() stops the watchdog (unless the
        // kernel was built or loaded with nowayout).
        const bool wrote = ::write(fd_.get(), "V", 1) == 1;
        const int e = errno;
        fd_.reset();
        if (!wrote) return errno_error(e);
        return Ok{};
    }

private:
    Fd fd_;
};

}  // namespace

Result<std::unique_ptr<WatchdogDevice>> open_watchdog_device(const std::string& path) {
    Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd) return errno_error(errno);
    return std::unique_ptr<WatchdogDevice>(std::make_unique<LinuxWatchdogDevice>(std::move(fd)));
}

HardwareWatchdog::HardwareWatchdog(std::unique_ptr<WatchdogDevice> dev, std::string path, LineLog log)
    : dev_(std::move(dev)), path_(std::move(path)), log_(std::move(log)) {
    if (!log_) log_ = [](bool, const std::string&) {};
}

HardwareWatchdog::~HardwareWatchdog() { close(); }

Status HardwareWatchdog::arm(uint32_t timeout_s) {
    auto took = dev_->set_timeout(timeout_s);
    if (took && *took == timeout_s) {
        timeout_s_ = timeout_s;
        if (auto s = dev_->keepalive(); !s) {
            why_ = path_ + ": keep-alive failed: " + s.error().message();
            (void)dev_->disarm();
            closed_ = true;
            return s.error();
        }
        log_(true, "hardware watchdog " + path_ + " armed: the host is reset " + std::to_string(timeout_s) +
                       " s after nvfenced last fed it");
        return Ok{};
    }
    why_ = path_ + ": cannot set the timeout to " + std::to_string(timeout_s) + " s: " +
           (took ? "the device took " + std::to_string(*took) + " s" : took.error().message());
    (void)dev_->disarm();
    closed_ = true;
    if (took) return make_error_code(Errc::invalid_argument);
    return took.error();
}

void HardwareWatchdog::feed() {
    if (given_up_ || closed_) return;
    if (auto s = dev_->keepalive(); !s && failed_feeds_++ % 60 == 0)
        log_(false, "hardware watchdog " + path_ + ": keep-alive failed: " + s.error().message());
}

void HardwareWatchdog::give_up(const std::string& why) {
    if (given_up_ || closed_) return;
    given_up_ = true;
    log_(false, "hardware watchdog " + path_ + " is no longer fed (" + why + "): the hardware resets this host within " +
                    std::to_string(timeout_s_) + " s");
}

void HardwareWatchdog::close() {
    if (closed_) return;
    closed_ = true;
    if (given_up_) return;  // the reset still comes: the fd closes without the magic 'V'
    if (auto s = dev_->disarm(); !s)
        log_(false, "hardware watchdog " + path_ + ": disarming failed (" + s.error().message() +
                        "): the host may be reset");
    else
        log_(true, "hardware watchdog " + path_ + " disarmed");
}

}  // namespace nvfence
