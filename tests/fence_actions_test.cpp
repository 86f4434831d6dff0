// SPDX-License-Identifier: MIT
// Unit tests of nvfenced's host-side actions (FenceActions): which child
// processes run for writer stops and each fence action, with which
// environment and bounds, through a recording ProcessRunner; and the real
// run_bounded() on short-lived children.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "nvfence/error.hpp"
#include "agent/fence_actions.hpp"

namespace nvfence {
namespace {

struct Run {
    std::vector<std::string> argv;
    ChildEnv env;
    uint32_t timeout_ms = 0;
    bool tick = false;
};

class RecordingRunner final : public ProcessRunner {
public:
    std::vector<Run> runs;
    std::vector<Status> results;  // one per run, in order; Ok when exhausted
    int sysrq = 0;
    Status run(const std::vector<std::string>& argv, const ChildEnv& env, uint32_t timeout_ms,
               const std::function<void()>& tick) override {
        runs.push_back({argv, env, timeout_ms, static_cast<bool>(tick)});
        if (tick) tick();
        if (results.size() >= runs.size()) return results[runs.size() - 1];
        return Ok{};
    }
    void sysrq_reboot() override { ++sysrq; }
};

std::string env_of(const Run& r, const std::string& k) {
    for (const auto& [n, v] : r.env)
        if (n == k) return v;
    return "<unset>";
}

struct Logged {
    std::vector<std::pair<bool, std::string>> lines;
    std::function<void(bool, const std::string&)> fn() {
        return [this](bool ok, const std::string& l) { lines.emplace_back(ok, l); };
    }
};

AgentSettings settings() {
    AgentSettings s;
    s.fence_timeout_ms = 1234;
    return s;
}

TEST(FenceActionsTest, StopsEveryWriterUnitBoundedAndReportsEachFailure) {
    AgentSettings s = settings();
    s.writer_units = {"db.service", "app.service", "cache.service"};
    RecordingRunner r;
    r.results = {Ok{}, make_error_code(Errc::timeout), Ok{}};
    FenceActions a(s, {{"NVFENCE_VOLUME", "vol-1"}}, r);
    int ticks = 0;
    a.set_tick([&] { ++ticks; });
    Logged log;
    auto st = a.stop_writers("preempted", log.fn());
    EXPECT_EQ(st.error(), Errc::timeout) << "a failed stop is reported, the others still run";
    ASSERT_EQ(r.runs.size(), 3u);
    EXPECT_EQ(r.runs[0].argv, (std::vector<std::string>{"systemctl", "stop", "db.service"}));
    EXPECT_EQ(r.runs[2].argv, (std::vector<std::string>{"systemctl", "stop", "cache.service"}));
    for (const auto& run : r.runs) {
        EXPECT_EQ(run.timeout_ms, 1234u);
        EXPECT_EQ(env_of(run, "NVFENCE_REASON"), "preempted");
        EXPECT_EQ(env_of(run, "NVFENCE_VOLUME"), "vol-1");
    }
    EXPECT_EQ(ticks, 3) << "the watchdog tick reaches every child's wait";
    ASSERT_EQ(log.lines.size(), 3u);
    EXPECT_EQ(log.lines[0], std::make_pair(true, std::string("stopped writer unit db.service")));
    EXPECT_FALSE(log.lines[1].first);
    EXPECT_NE(log.lines[1].second.find("stopping writer unit app.service ('systemctl stop app.service') failed"),
              std::string::npos)
        << log.lines[1].second;
}

TEST(FenceActionsTest, NoWriterUnitsRunNothing) {
    RecordingRunner r;
    FenceActions a(settings(), {}, r);
    Logged log;
    EXPECT_TRUE(a.stop_writers("x", log.fn()).ok());
    EXPECT_TRUE(r.runs.empty());
}

TEST(FenceActionsTest, EachFenceActionRunsItsCommand) {
    struct Case {
        FenceActionKind kind;
        RebootMethod method;
        std::vector<std::string> argv;
        int sysrq;
    };
    const std::vector<Case> cases = {
        {FenceActionKind::command, RebootMethod::sysrq, {"/bin/sh", "-c", "logger fenced"}, 0},
        {FenceActionKind::stop_unit, RebootMethod::sysrq, {"systemctl", "stop", "app.target"}, 0},
        {FenceActionKind::reboot, RebootMethod::force, {"reboot", "-f"}, 0},
        // sysrq first; when it returns, the reboot did not happen: reboot -ff.
        {FenceActionKind::reboot, RebootMethod::sysrq, {"reboot", "-ff"}, 1},
    };
    for (const auto& c : cases) {
        AgentSettings s = settings();
        s.fence_action = c.kind;
        s.fence_command = "logger fenced";
        s.fence_unit = "app.target";
        s.reboot_method = c.method;
        RecordingRunner r;
        FenceActions a(s, {{"NVFENCE_NODE", "3"}}, r);
        Logged log;
        EXPECT_TRUE(a.fence_action("gone", log.fn()).ok());
        ASSERT_EQ(r.runs.size(), 1u) << fence_action_name(c.kind);
        EXPECT_EQ(r.runs[0].argv, c.argv);
        EXPECT_EQ(r.runs[0].timeout_ms, 1234u);
        EXPECT_EQ(env_of(r.runs[0], "NVFENCE_REASON"), "gone");
        EXPECT_EQ(env_of(r.runs[0], "NVFENCE_NODE"), "3");
        EXPECT_EQ(r.sysrq, c.sysrq);
        ASSERT_FALSE(log.lines.empty());
        EXPECT_EQ(log.lines.back().second, "fence action '" + describe_argv(c.argv) + "' done");
    }
}

TEST(FenceActionsTest, NoneRunsNothingAndAFailureIsReturned) {
    RecordingRunner r;
    AgentSettings s = settings();
    FenceActions none(s, {}, r);
    Logged log;
    EXPECT_TRUE(none.fence_action("x", log.fn()).ok());
    EXPECT_TRUE(r.runs.empty());
    ASSERT_EQ(log.lines.size(), 1u);
    EXPECT_NE(log.lines[0].second.find("none configured"), std::string::npos);

    s.fence_action = FenceActionKind::command;
    s.fence_command = "exit 3";
    r.results = {std::error_code(3, child_category())};
    FenceActions cmd(s, {}, r);
    Logged log2;
    auto st = cmd.fence_action("x", log2.fn());
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().message(), "exited with status 3");
    EXPECT_FALSE(log2.lines.back().first);
    EXPECT_EQ(log2.lines.back().second, "fence action '/bin/sh -c exit 3' failed: exited with status 3");
}

// The real runner, on children that end at once.
TEST(RunBoundedTest, ExitStatusEnvironmentAndTimeout) {
    EXPECT_TRUE(run_bounded({"/bin/sh", "-c", "exit 0"}, {}, 5000).ok());
    auto st = run_bounded({"/bin/sh", "-c", "exit 7"}, {}, 5000);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error(), std::error_code(7, child_category()));
    EXPECT_TRUE(run_bounded({"/bin/sh", "-c", "test \"$NVFENCE_X\" = y"}, {{"NVFENCE_X", "y"}}, 5000).ok());
    EXPECT_FALSE(run_bounded({"/bin/sh", "-c", "test \"$NVFENCE_X\" = y"}, {{"NVFENCE_X", "n"}}, 5000).ok());
    st = run_bounded({"/bin/sh", "-c", "kill -9 $$"}, {}, 5000);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().message(), "killed by signal 9");
    const auto t0 = std::chrono::steady_clock::now();
    int ticks = 0;
    st = run_bounded({"sleep", "30"}, {}, 300, [&] { ++ticks; });
    EXPECT_EQ(st.error(), Errc::timeout);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)) << "killed at the bound";
    EXPECT_GE(ticks, 1);
    EXPECT_FALSE(run_bounded({"/nonexistent/nvfence-no-such-program"}, {}, 5000).ok());
    EXPECT_EQ(run_bounded({}, {}, 5000).error(), Errc::invalid_argument);
}

}  // namespace
}  // namespace nvfence
