// SPDX-License-Identifier: MIT
#pragma once
/// @file agent_sim.hpp
/// Simulation helpers for the host agent's unit tests, on top of
/// fake_passthru.hpp's FakeTarget (the shared namespace model):
///  - RecordingHooks: records events, writer stops, fence actions and
///    keep-alives;
///  - SlowPort: a Passthru that makes every command take a given time on a
///    ManualClock (a slow device);
///  - SimHost: one host with its own state directory, epoch store, state
///    file and Agent; boot() again is a process restart (kill -9);
///  - Peer: another host acting with the plain Fence protocol, as the
///    `nvfence` CLI does;
///  - Schedule / run_schedule: replays timed events against an agent
///    running its own loop on the ManualClock, to the millisecond.

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fake_passthru.hpp"
#include "agent/agent.hpp"
#include "internal/clock.hpp"
#include "nvfence/epoch_store.hpp"
#include "nvfence/fence.hpp"
#include "nvfence/key.hpp"
#include "nvfence/reservation.hpp"

namespace nvfence::test {

using namespace std::chrono_literals;

/// AgentHooks that remember everything.
class RecordingHooks final : public AgentHooks {
public:
    std::vector<AgentEvent> events;     ///< Every event, in order.
    std::vector<std::string> lines;     ///< format_event() of each.
    int writers_stopped = 0;            ///< stop_writers() calls.
    int fence_actions = 0;              ///< fence_action() calls.
    int keepalives = 0;                 ///< keepalive() calls.
    std::vector<std::string> reasons;   ///< Reasons given to fence_action().
    Status writer_result = Ok{};        ///< What stop_writers() returns.
    Status action_result = Ok{};        ///< What fence_action() returns.
    ManualClock* clock = nullptr;       ///< Stamps events when set.
    /// Runs inside stop_writers() ("writers") and fence_action() ("action"):
    /// a slow hook, or a look at what was persisted at that moment.
    std::function<void(const std::string&)> during;
    std::vector<int64_t> at_ms;         ///< clock->elapsed_ms() of each event.

    void event(const AgentEvent& e) override {
        events.push_back(e);
        lines.push_back(format_event(e));
        at_ms.push_back(clock ? clock->elapsed_ms() : 0);
    }
    /// Clock time of the first change into @p to (-1: none).
    int64_t entered_ms(AgentState to) const {
        for (size_t i = 0; i < events.size(); ++i)
            if (events[i].kind == AgentEventKind::state_changed && events[i].to == to) return at_ms[i];
        return -1;
    }
    Status stop_writers(const std::string&) override {
        ++writers_stopped;
        if (during) during("writers");
        return writer_result;
    }
    Status fence_action(const std::string& reason) override {
        ++fence_actions;
        reasons.push_back(reason);
        if (during) during("action");
        return action_result;
    }
    void keepalive() override { ++keepalives; }

    /// Events of kind @p k.
    size_t count(AgentEventKind k) const {
        return static_cast<size_t>(std::count_if(events.begin(), events.end(),
                                                 [&](const AgentEvent& e) { return e.kind == k; }));
    }
    /// True when an event of kind @p k has @p text in its line.
    bool saw(AgentEventKind k, const std::string& text) const {
        for (size_t i = 0; i < events.size(); ++i)
            if (events[i].kind == k && lines[i].find(text) != std::string::npos) return true;
        return false;
    }
    /// The state changes, in order.
    std::vector<std::pair<AgentState, AgentState>> transitions() const {
        std::vector<std::pair<AgentState, AgentState>> t;
        for (const auto& e : events)
            if (e.kind == AgentEventKind::state_changed) t.emplace_back(e.from, e.to);
        return t;
    }
    /// Everything logged, one line per event (for failure messages).
    std::string dump() const {
        std::string s;
        for (const auto& l : lines) s += "  " + l + "\n";
        return s;
    }
};

/// A Passthru whose every command takes @p delay on @p clock.
class SlowPort final : public Passthru {
public:
    SlowPort(Passthru& inner, ManualClock& clock) : inner_(inner), clock_(clock) {}
    Clock::Ms delay{0};            ///< Added to the clock per command.
    std::vector<uint32_t> timeouts;///< timeout_ms of every command seen.
    std::function<void()> during;  ///< Run after the delay (another thread's work meanwhile).
    /// A command whose delay exceeds its timeout spends the timeout and
    /// fails with ETIMEDOUT, as the kernel's; the device has not run it.
    bool bounded = false;
    Result<uint32_t> submit(const Command& cmd, std::span<uint8_t> data) override {
        timeouts.push_back(cmd.timeout_ms);
        if (bounded && cmd.timeout_ms && delay > Clock::Ms(cmd.timeout_ms)) {
            clock_.advance(Clock::Ms(cmd.timeout_ms));
            return std::error_code(ETIMEDOUT, std::system_category());
        }
        clock_.advance(delay);
        if (during) during();
        return inner_.submit(cmd, data);
    }

private:
    Passthru& inner_;
    ManualClock& clock_;
};

/// Another host using the plain Fence protocol (like `nvfence preempt`).
struct Peer {
    Peer(FakeTarget& t, uint8_t n, uint8_t tag, uint8_t node)
        : id(make_host(n)), port(t, id, static_cast<uint16_t>(100 + n)), resv(port, t.nsid),
          fence(resv, id, FenceOptions{tag, node, ResvType::write_exclusive, true, Cptpl::no_change}, nullptr) {}
    HostId id;
    HostPort port;
    Reservations resv;
    Fence fence;
};

/// One simulated host running the agent.
class SimHost {
public:
    /// Host number @p n (make_host(n)) on @p t with @p opts; state lives in
    /// its own directory under @p root.
    SimHost(FakeTarget& t, ManualClock& c, uint8_t n, AgentOptions o, const std::string& root)
        : target(t), clock(c), id(make_host(n)), port(t, id, static_cast<uint16_t>(n)), slow(port, c),
          dir(root + "/host" + std::to_string(n)), epochs(dir, "vol-test"), statefile(dir, "vol-test"),
          opts(std::move(o)) {
        boot();
    }
    /// A new agent process on the same state directory (the old one is
    /// dropped without stop(): a crash or kill -9).
    void boot() {
        hooks = std::make_unique<RecordingHooks>();
        hooks->clock = &clock;
        agent = std::make_unique<Agent>(slow, target.nsid, id, opts, clock, *hooks, &epochs, &statefile);
    }
    /// Starts the agent; fails the test on error.
    void start_ok() {
        auto s = agent->start();
        ASSERT_TRUE(s.ok()) << s.error().message() << ": " << agent->last_error() << "\n" << hooks->dump();
    }
    /// Commands with @p op this host sent on the I/O queue.
    size_t sent(uint8_t op) const {
        size_t n = 0;
        for (const auto& s : target.log)
            if (s.host == id && s.cmd.opcode == op && s.cmd.queue == Queue::io) ++n;
        return n;
    }
    /// Register + Acquire commands this host sent (rule 2 counts these).
    size_t grabs() const { return sent(opcode::kResvRegister) + sent(opcode::kResvAcquire); }
    /// A one-block write from this host, as the device answers it.
    Result<uint32_t> write() {
        std::vector<uint8_t> buf(512);
        return port.submit(encode_rw(true, target.nsid, 0, 1, 512), buf);
    }
    /// The key this host is registered with on the device (0: none).
    uint64_t device_key() const {
        const auto* r = target.find(id);
        return r ? r->key : 0;
    }
    /// A control request.
    ControlReply request(ControlOp op, uint64_t victim = 0) {
        ControlRequest q;
        q.op = op;
        q.id = 77;
        q.victim = victim;
        return agent->handle(q, "test");
    }

    FakeTarget& target;
    ManualClock& clock;
    HostId id;
    HostPort port;
    SlowPort slow;
    std::string dir;
    EpochStore epochs;
    AgentStateFile statefile;
    AgentOptions opts;
    std::unique_ptr<RecordingHooks> hooks;
    std::unique_ptr<Agent> agent;
};

/// Timed events for run_schedule: at `at_ms` (since the schedule began) run
/// `fn`.
struct Step {
    int64_t at_ms;
    std::function<void()> fn;
};
using Schedule = std::vector<Step>;

/// Runs @p a's own loop (Agent::run) on @p clock for @p total_ms (a check
/// due at exactly @p total_ms runs), firing each step of @p s exactly at its
/// time (before a check due at the same time). Returns the number of waits.
inline int run_schedule(Agent& a, ManualClock& clock, int64_t total_ms, Schedule s = {}) {
    std::sort(s.begin(), s.end(), [](const Step& x, const Step& y) { return x.at_ms < y.at_ms; });
    const auto t0 = clock.now();
    size_t next = 0;
    int waits = 0;
    auto fire_due = [&] {
        while (next < s.size() && clock.now() - t0 >= std::chrono::milliseconds(s[next].at_ms)) s[next++].fn();
    };
    fire_due();
    a.run([&](Clock::Ms w) {
        ++waits;
        fire_due();  // steps that fell inside a check (the clock moved during it)
        const auto elapsed = std::chrono::duration_cast<Clock::Ms>(clock.now() - t0);
        if (elapsed.count() >= total_ms) return false;
        Clock::Ms step = std::min(w, Clock::Ms(total_ms) - elapsed);
        if (next < s.size()) step = std::min(step, Clock::Ms(s[next].at_ms) - elapsed);
        clock.advance(std::max(step, Clock::Ms(0)));
        fire_due();
        return true;  // the next wait ends the run, after a check due at the very end
    });
    return waits;
}

/// Runs several agents side by side on one clock in steps of @p step_ms
/// for @p total_ms: each checks when due; @p each runs after every step.
inline void run_together(const std::vector<Agent*>& agents, ManualClock& clock, int64_t total_ms,
                         int64_t step_ms = 10, const std::function<void()>& each = {}) {
    for (int64_t t = 0; t < total_ms; t += step_ms) {
        for (Agent* a : agents)
            if (a->until_next_check() == Clock::Ms(0)) a->check();
        if (each) each();
        clock.advance(Clock::Ms(step_ms));
    }
}

}  // namespace nvfence::test
