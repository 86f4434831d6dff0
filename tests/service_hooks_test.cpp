// SPDX-License-Identifier: MIT
// Unit tests of nvfenced's hooks (ServiceHooks): what the agent tells
// systemd, and when, checked against a model of systemd's start timeout and
// watchdog; the actions run through a slow ProcessRunner on a ManualClock.

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent_sim.hpp"
#include "agent/agent.hpp"
#include "agent/fence_actions.hpp"
#include "agent/service_hooks.hpp"

namespace nvfence::test {
namespace {

constexpr uint8_t kTag = 7;

// Records every message with the simulated time it was sent at.
class RecordingNotifier final : public ServiceNotifier {
public:
    explicit RecordingNotifier(ManualClock& c) : clock_(c) {}
    std::vector<std::pair<int64_t, std::string>> sent;
    void notify(const std::string& m) override { sent.emplace_back(clock_.elapsed_ms(), m); }
    std::string dump() const {
        std::string s;
        for (const auto& [t, m] : sent) {
            std::string one = m;
            for (auto& c : one)
                if (c == '\n') c = '|';
            s += "  " + std::to_string(t) + " ms: " + one + "\n";
        }
        return s;
    }

private:
    ManualClock& clock_;
};

// Every child takes its configured time on the clock (whole seconds, the
// tick called each second as run_bounded does) and succeeds.
class SlowRunner final : public ProcessRunner {
public:
    explicit SlowRunner(ManualClock& c) : clock_(c) {}
    int64_t writer_stop_ms = 0;  // each `systemctl stop`
    int64_t action_ms = 0;       // the fence command
    std::vector<std::pair<int64_t, std::string>> started;  // clock ms, argv[0..]
    Status run(const std::vector<std::string>& argv, const ChildEnv&, uint32_t timeout_ms,
               const std::function<void()>& tick) override {
        started.emplace_back(clock_.elapsed_ms(), describe_argv(argv));
        const int64_t take = std::min<int64_t>(argv[0] == "systemctl" ? writer_stop_ms : action_ms, timeout_ms);
        for (int64_t done = 0; done < take; done += 1000) {
            if (tick) tick();
            clock_.advance(Clock::Ms(std::min<int64_t>(1000, take - done)));
        }
        return Ok{};
    }
    void sysrq_reboot() override {}

private:
    ManualClock& clock_;
};

// systemd's view of a Type=notify unit's start: a start timeout from the
// start, pushed out by EXTEND_TIMEOUT_USEC, and a watchdog that each
// WATCHDOG=1 (and EXTEND_TIMEOUT_USEC) re-arms. Fed the recorded messages in
// order; says what systemd would have done first.
struct SystemdModel {
    int64_t start_timeout_ms = 0;
    int64_t watchdog_ms = 0;

    std::string verdict(const std::vector<std::pair<int64_t, std::string>>& sent) const {
        int64_t start_deadline = start_timeout_ms;
        int64_t watchdog_deadline = watchdog_ms;
        for (const auto& [t, m] : sent) {
            if (t > start_deadline)
                return "start timed out at " + std::to_string(start_deadline) + " ms (next message at " +
                       std::to_string(t) + " ms)";
            if (t > watchdog_deadline)
                return "watchdog timeout at " + std::to_string(watchdog_deadline) + " ms";
            if (m.find("WATCHDOG=1") != std::string::npos) watchdog_deadline = t + watchdog_ms;
            if (auto p = m.find("EXTEND_TIMEOUT_USEC="); p != std::string::npos) {
                const int64_t ext_ms = std::stoll(m.substr(p + 20)) / 1000;
                start_deadline = std::max(start_deadline, t + ext_ms);
                watchdog_deadline = std::max(watchdog_deadline, t + ext_ms);
            }
            if (m.find("READY=1") != std::string::npos) return "ready at " + std::to_string(t) + " ms";
        }
        return "never ready";
    }
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

// Issue 13 (found after defect 7): a fence action that was pending when
// nvfenced died runs again during the next start, before READY=1. With
// TimeoutStartSec=10s and a 20 s action systemd must not time the start out
// (it would kill and restart the agent in a loop): the agent extends the
// start timeout by each action's bound before it runs, and feeds the
// watchdog while it runs.
TEST(ServiceHooksTest, APendingActionAtStartOutlastsAShortStartTimeout) {
    TempDir tmp;
    FakeTarget t;
    ManualClock clock;
    SimHost a(t, clock, 1, options(1, StartRole::acquire), tmp.path());
    a.start_ok();
    SimHost b(t, clock, 2, options(2, StartRole::standby), tmp.path());
    b.start_ok();
    ASSERT_EQ(b.request(ControlOp::takeover).exit_code, 0);
    a.agent->check();
    ASSERT_EQ(a.agent->state(), AgentState::fenced);
    // Killed (kill -9, watchdog) while the action ran: the file says pending.
    auto saved = a.statefile.load();
    ASSERT_TRUE(saved.ok() && saved->has_value());
    PersistedState p = **saved;
    p.action = FenceActionState::pending;
    ASSERT_TRUE(a.statefile.save(p));
    a.agent.reset();

    AgentSettings s;
    s.writer_units = {"db.service"};
    s.fence_action = FenceActionKind::command;
    s.fence_command = "slow-fence";
    s.fence_timeout_ms = 30000;
    SlowRunner runner(clock);
    runner.writer_stop_ms = 5000;
    runner.action_ms = 20000;
    FenceActions actions(s, {{"NVFENCE_VOLUME", "vol-test"}}, runner);
    RecordingNotifier sent(clock);
    ServiceHooks hooks(actions, sent, true, {}, {});
    const int64_t t0 = clock.elapsed_ms();
    Agent agent(a.slow, t.nsid, a.id, a.opts, clock, hooks, &a.epochs, &a.statefile);
    ASSERT_TRUE(agent.start().ok()) << agent.last_error();
    hooks.ready("FENCED");  // as nvfenced does once start() returns
    for (auto& [at, m] : sent.sent) at -= t0;

    ASSERT_EQ(runner.started.size(), 2u) << "the writer stop and the pending action ran again";
    EXPECT_EQ(runner.started[1].second, "/bin/sh -c slow-fence");
    EXPECT_EQ(agent.state(), AgentState::fenced);
    auto after = a.statefile.load();
    ASSERT_TRUE(after.ok() && after->has_value());
    EXPECT_EQ((*after)->action, FenceActionState::done);
    const SystemdModel systemd{10000, 10000};
    const std::string verdict = systemd.verdict(sent.sent);
    EXPECT_EQ(verdict.rfind("ready at ", 0), 0u) << verdict << "\n" << sent.dump();
    EXPECT_GE(sent.sent.back().first, 25000) << "READY=1 came after the writer stop and the action";
    // The status systemd shows while the unit is activating says FENCED.
    ASSERT_FALSE(sent.sent.empty());
    EXPECT_NE(sent.sent.front().second.find("STATUS=FENCED"), std::string::npos) << sent.dump();
}

}  // namespace
}  // namespace nvfence::test
