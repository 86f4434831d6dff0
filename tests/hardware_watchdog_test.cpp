// SPDX-License-Identifier: MIT
// Unit tests of the hardware watchdog behind the fence action
// (HardwareWatchdog, ServiceHooks::set_hardware_watchdog and the
// hardware_watchdog settings): a fake watchdog device records every
// keep-alive on a ManualClock, and a model of the hardware says whether and
// when it would have reset the host.

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent_sim.hpp"
#include "agent/agent.hpp"
#include "agent/agent_config.hpp"
#include "agent/fence_actions.hpp"
#include "agent/hardware_watchdog.hpp"
#include "agent/service_hooks.hpp"

namespace nvfence::test {
namespace {

constexpr uint8_t kTag = 7;

// What the device saw, shared with the test after the watchdog owns the fake.
struct WatchdogLog {
    std::vector<int64_t> feeds;   // clock ms of every keep-alive
    uint32_t timeout_s = 30;      // the device's timeout (its default until set)
    bool disarmed = false;
    std::optional<uint32_t> clamp;  // the device takes this instead of what it is asked
};

class FakeWatchdog final : public WatchdogDevice {
public:
    FakeWatchdog(WatchdogLog& log, ManualClock& c) : log_(log), clock_(c) {}
    Result<uint32_t> set_timeout(uint32_t s) override {
        log_.timeout_s = log_.clamp.value_or(s);
        return log_.timeout_s;
    }
    Status keepalive() override {
        EXPECT_FALSE(log_.disarmed) << "fed after the magic close";
        log_.feeds.push_back(clock_.elapsed_ms());
        return Ok{};
    }
    Status disarm() override {
        log_.disarmed = true;
        return Ok{};
    }

private:
    WatchdogLog& log_;
    ManualClock& clock_;
};

// The hardware: armed at @p armed_ms, reset one timeout after the last
// keep-alive unless disarmed; the reset time (ms) or nullopt up to @p now_ms.
std::optional<int64_t> reset_at(const WatchdogLog& w, int64_t armed_ms, int64_t now_ms) {
    int64_t last = armed_ms;
    for (int64_t f : w.feeds) {
        if (f - last > int64_t{w.timeout_s} * 1000) return last + int64_t{w.timeout_s} * 1000;
        last = f;
    }
    if (w.disarmed) return std::nullopt;
    if (now_ms - last > int64_t{w.timeout_s} * 1000) return last + int64_t{w.timeout_s} * 1000;
    return std::nullopt;
}

std::string feeds_text(const WatchdogLog& w) {
    std::string s;
    for (int64_t f : w.feeds) s += std::to_string(f) + " ";
    return s;
}

// Every child takes its time on the clock (ticking each second, as
// run_bounded does); the fence command fails when @c action_fails.
class TimedRunner final : public ProcessRunner {
public:
    explicit TimedRunner(ManualClock& c) : clock_(c) {}
    int64_t action_ms = 0;
    bool action_fails = false;
    int actions = 0;
    Status run(const std::vector<std::string>& argv, const ChildEnv&, uint32_t timeout_ms,
               const std::function<void()>& tick) override {
        if (argv[0] == "systemctl") return Ok{};
        ++actions;
        const int64_t take = std::min<int64_t>(action_ms, timeout_ms);
        for (int64_t done = 0; done < take; done += 1000) {
            if (tick) tick();
            clock_.advance(Clock::Ms(std::min<int64_t>(1000, take - done)));
        }
        if (action_fails) return std::error_code(1, child_category());
        return Ok{};
    }
    void sysrq_reboot() override {}

private:
    ManualClock& clock_;
};

class NullNotifier final : public ServiceNotifier {
public:
    void notify(const std::string&) override {}
};

AgentOptions options(uint8_t node, StartRole role) {
    AgentOptions o;
    o.tag = kTag;
    o.node = node;
    o.role = role;
    o.interval_ms = 1000;
    o.device_timeout_ms = 5000;
    o.volume = "vol-test";
    o.device = "/dev/sim";
    return o;
}

AgentSettings action_settings(int64_t timeout_ms) {
    AgentSettings s;
    s.fence_action = FenceActionKind::command;
    s.fence_command = "fence-it";
    s.fence_timeout_ms = static_cast<uint32_t>(timeout_ms);
    return s;
}

// Host a (node 1) runs nvfenced's hooks with a hardware watchdog of
// kTimeoutS; host b is a plain agent that takes over from it.
struct WatchdogScene {
    static constexpr uint32_t kTimeoutS = 15;
    TempDir tmp;
    FakeTarget t;
    ManualClock clock;
    SimHost a{t, clock, 1, options(1, StartRole::acquire), tmp.path()};
    SimHost b{t, clock, 2, options(2, StartRole::standby), tmp.path()};
    AgentSettings settings = action_settings(30000);
    TimedRunner runner{clock};
    FenceActions actions{settings, {{"NVFENCE_VOLUME", "vol-test"}}, runner};
    NullNotifier notifier;
    ServiceHooks hooks{actions, notifier, false, {}, {}};
    WatchdogLog wd;
    std::vector<std::string> lines;
    std::optional<HardwareWatchdog> hw;
    std::optional<Agent> agent;
    int64_t armed_ms = 0;

    void start() {
        hw.emplace(std::make_unique<FakeWatchdog>(wd, clock), "/dev/watchdog0",
                   [this](bool, const std::string& l) { lines.push_back(l); });
        armed_ms = clock.elapsed_ms();
        ASSERT_TRUE(hw->arm(kTimeoutS).ok()) << hw->why();
        hooks.set_hardware_watchdog(&*hw);
        a.agent.reset();
        agent.emplace(a.slow, t.nsid, a.id, a.opts, clock, hooks, &a.epochs, &a.statefile);
        ASSERT_TRUE(agent->start().ok()) << agent->last_error();
        ASSERT_EQ(agent->state(), AgentState::holder);
        b.start_ok();
    }
    // @p n checks of a, one interval apart.
    void checks(int n) {
        for (int i = 0; i < n; ++i) {
            clock.advance(Clock::Ms(1000));
            agent->check();
        }
    }
    std::string story() const {
        std::string s = "feeds (ms): " + feeds_text(wd) + "\nlog:\n";
        for (const auto& l : lines) s += "  " + l + "\n";
        return s;
    }
};

TEST(HardwareWatchdogTest, ArmSetsTheTimeoutAndFeedsOnce) {
    ManualClock clock;
    WatchdogLog w;
    HardwareWatchdog hw(std::make_unique<FakeWatchdog>(w, clock), "/dev/watchdog0", {});
    ASSERT_TRUE(hw.arm(20).ok());
    EXPECT_EQ(w.timeout_s, 20u);
    EXPECT_EQ(w.feeds.size(), 1u);
    hw.feed();
    EXPECT_EQ(w.feeds.size(), 2u);
    EXPECT_FALSE(w.disarmed);
}

// The documented bound is the timeout asked for: a device that takes another
// one (out of its range) is refused and disarmed, not run with a bound
// nobody wrote down.
TEST(HardwareWatchdogTest, ADeviceThatTakesAnotherTimeoutIsRefusedAndDisarmed) {
    ManualClock clock;
    WatchdogLog w;
    w.clamp = 10;
    HardwareWatchdog hw(std::make_unique<FakeWatchdog>(w, clock), "/dev/watchdog0", {});
    auto st = hw.arm(60);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error(), Errc::invalid_argument);
    EXPECT_NE(hw.why().find("cannot set the timeout to 60 s: the device took 10 s"), std::string::npos) << hw.why();
    EXPECT_TRUE(w.disarmed);
    hw.feed();
    EXPECT_TRUE(w.feeds.empty());
}

TEST(HardwareWatchdogTest, ACleanStopDisarmsAndAGivenUpOneIsNeverDisarmed) {
    ManualClock clock;
    {
        WatchdogLog w;
        {
            HardwareWatchdog hw(std::make_unique<FakeWatchdog>(w, clock), "/dev/watchdog0", {});
            ASSERT_TRUE(hw.arm(20).ok());
        }  // nvfenced's run() returns: the destructor is the clean stop
        EXPECT_TRUE(w.disarmed);
    }
    WatchdogLog w;
    std::vector<std::string> lines;
    {
        HardwareWatchdog hw(std::make_unique<FakeWatchdog>(w, clock), "/dev/watchdog0",
                            [&](bool, const std::string& l) { lines.push_back(l); });
        ASSERT_TRUE(hw.arm(20).ok());
        hw.give_up("the fence action failed");
        hw.feed();
        hw.close();
    }
    EXPECT_EQ(w.feeds.size(), 1u) << "fed after giving up";
    EXPECT_FALSE(w.disarmed) << "a given-up watchdog must still reset the host";
    ASSERT_FALSE(lines.empty());
    EXPECT_NE(lines.back().find("no longer fed (the fence action failed): the hardware resets this host within 20 s"),
              std::string::npos)
        << lines.back();
}

// A healthy host is never reset: five minutes of checks, a takeover that
// fences it, a fence action that runs 25 s (the feeds go on while it runs),
// then five more minutes FENCED with the action done.
TEST(HardwareWatchdogTest, AHealthyHostIsNeverReset) {
    WatchdogScene s;
    s.start();
    s.runner.action_ms = 25000;
    s.checks(300);
    ASSERT_EQ(s.b.request(ControlOp::takeover).exit_code, 0);
    s.checks(1);
    ASSERT_EQ(s.agent->state(), AgentState::fenced);
    EXPECT_EQ(s.runner.actions, 1);
    s.checks(300);
    const auto reset = reset_at(s.wd, s.armed_ms, s.clock.elapsed_ms());
    EXPECT_FALSE(reset) << "reset at " << *reset << " ms\n" << s.story();
    EXPECT_FALSE(s.hw->given_up());
    s.hw->close();
    EXPECT_TRUE(s.wd.disarmed);
}

// A slow device (each command takes most of device_timeout_ms) keeps the
// host fed as long as the timeout is above 2 x (interval + device timeout),
// the least the settings accept.
TEST(HardwareWatchdogTest, ASlowDeviceAtTheLeastTimeoutDoesNotResetTheHost) {
    WatchdogScene s;
    s.start();
    s.a.slow.delay = Clock::Ms(4000);
    s.checks(100);
    const auto reset = reset_at(s.wd, s.armed_ms, s.clock.elapsed_ms());
    EXPECT_FALSE(reset) << "reset at " << *reset << " ms\n" << s.story();
}

// A host whose key was removed and whose fence action fails (here: it runs
// into fence_timeout_ms) stops feeding: the hardware resets it within the
// documented bound from the takeover, interval_ms + the check + the action's
// bound + the watchdog's timeout. The watchdog is not disarmed at the stop.
TEST(HardwareWatchdogTest, AHostWhoseFenceActionFailsIsResetWithinTheBound) {
    WatchdogScene s;
    s.start();
    s.runner.action_ms = 60000;  // overruns fence_timeout_ms (30 s)
    s.runner.action_fails = true;
    s.checks(5);
    ASSERT_EQ(s.b.request(ControlOp::takeover).exit_code, 0);
    const int64_t removed_ms = s.clock.elapsed_ms();
    s.checks(1);
    ASSERT_EQ(s.agent->state(), AgentState::fenced);
    EXPECT_TRUE(s.hw->given_up()) << s.story();
    const size_t fed = s.wd.feeds.size();
    s.checks(120);
    EXPECT_EQ(s.wd.feeds.size(), fed) << "fed after the fence action failed\n" << s.story();
    s.hw->close();
    EXPECT_FALSE(s.wd.disarmed);
    const auto reset = reset_at(s.wd, s.armed_ms, s.clock.elapsed_ms());
    ASSERT_TRUE(reset) << s.story();
    const int64_t bound = 1000 + 5000 + 30000 + int64_t{WatchdogScene::kTimeoutS} * 1000;
    EXPECT_LE(*reset - removed_ms, bound) << s.story();
    EXPECT_GT(*reset, removed_ms) << "reset before the key was removed";
}

// A user space that stops (SIGSTOP) feeds nothing: reset one timeout after
// the last feed, whatever the key.
TEST(HardwareWatchdogTest, AStoppedAgentIsResetOneTimeoutAfterItsLastFeed) {
    WatchdogScene s;
    s.start();
    s.checks(10);
    const int64_t last = s.wd.feeds.back();
    s.clock.advance(Clock::Ms(60000));  // nvfenced does not run
    const auto reset = reset_at(s.wd, s.armed_ms, s.clock.elapsed_ms());
    ASSERT_TRUE(reset);
    EXPECT_EQ(*reset, last + int64_t{WatchdogScene::kTimeoutS} * 1000);
}

TEST(HardwareWatchdogSettingsTest, TheTimeoutMustOutlastTwoSlowChecks) {
    std::string why;
    auto ok = parse_agent_settings({{"device", "/dev/nvme0n1"}, {"hardware_watchdog", "/dev/watchdog0"}}, why);
    ASSERT_TRUE(ok.ok()) << why;
    EXPECT_EQ(ok->hardware_watchdog, "/dev/watchdog0");
    EXPECT_EQ(ok->hardware_watchdog_timeout_s, 60u);
    EXPECT_EQ(min_hardware_watchdog_timeout_s(1000, 5000), 13u);

    auto short_one = parse_agent_settings({{"device", "/dev/nvme0n1"},
                                           {"hardware_watchdog", "/dev/watchdog0"},
                                           {"hardware_watchdog_timeout_s", "12"}},
                                          why);
    ASSERT_FALSE(short_one.ok());
    EXPECT_EQ(why, "hardware_watchdog_timeout_s = \"12\": the timeout (12 s) must be above 2 x (interval_ms + "
                   "device_timeout_ms): at least 13 s, or a slow check gets a healthy host reset");
    // The default timeout against a long interval: the device key is named.
    auto slow = parse_agent_settings(
        {{"device", "/dev/nvme0n1"}, {"hardware_watchdog", "/dev/watchdog0"}, {"interval_ms", "30000"}}, why);
    ASSERT_FALSE(slow.ok());
    EXPECT_EQ(why.rfind("hardware_watchdog = \"/dev/watchdog0\": the timeout (60 s)", 0), 0u) << why;
}

TEST(HardwareWatchdogSettingsTest, BadValuesAreNamed) {
    std::string why;
    EXPECT_FALSE(parse_agent_settings({{"device", "/dev/nvme0n1"}, {"hardware_watchdog", "watchdog0"}}, why).ok());
    EXPECT_NE(why.find("hardware_watchdog = \"watchdog0\": must be an absolute path"), std::string::npos) << why;
    EXPECT_FALSE(
        parse_agent_settings({{"device", "/dev/nvme0n1"}, {"hardware_watchdog_timeout_s", "30"}}, why).ok());
    EXPECT_NE(why.find("is set but hardware_watchdog is not"), std::string::npos) << why;
    EXPECT_FALSE(parse_agent_settings({{"device", "/dev/nvme0n1"},
                                       {"hardware_watchdog", "/dev/watchdog0"},
                                       {"hardware_watchdog_timeout_s", "0"}},
                                      why)
                     .ok());
    EXPECT_NE(why.find("must be a whole number from 1 to 3600"), std::string::npos) << why;
}

}  // namespace
}  // namespace nvfence::test
