// SPDX-License-Identifier: MIT
#pragma once
/// @file agent_elector.hpp
/// nvfenced with `elector = etcd`: the elector (elector.hpp) wired to the
/// host agent (agent.hpp).
///
/// Two sides, one owner each:
///  - ElectorDriver, run by one thread that alone calls the Elector:
///    campaigns while the agent stands by, gets the token of a won
///    election, renews the lease, and notices the loss of leadership
///    (LeaseGuard). It never touches the device or the Agent.
///  - ElectorBridge::drain(), called by the agent's thread (the only one
///    that changes the Agent): carries a won election out on the device
///    through the Agent's own takeover request, so the Agent's key and
///    state follow, and steps down on a loss.
/// Between them a bounded mailbox (ElectorBridge): events from the driver
/// (at most kElectorQueueCap; the driver waits, bounded, when it is full),
/// the agent's view (state, highest epoch of our tag on the device) and the
/// answer to a win, the other way. An eventfd wakes the agent's poll.
///
/// A won election on the agent's thread (Agent::take_term, the rule of
/// term.hpp, so that the Agent owns the key):
///  1. the term must still be the driver's and its lease alive (the win
///     carries its token and deadline);
///  2. a fresh check (Report), then decide_on_win() with the token;
///  3. stale: answer so, the driver resigns and backs off; reissue: the
///     driver asks for a token above the device's epochs (kWinRounds);
///     acquire / preempt / rekey: Fence::takeover_with_token following the
///     Report of 2: the key's epoch is the token, exactly.
/// Every answer names its token; the driver takes only its current term's.
/// Losing (lease expired, leader key gone, another leader, or no renewal
/// for TTL minus margin): the agent goes FENCED through its own transition
/// (Agent::lose_lease: writers stopped, FENCED persisted with the action
/// pending, the action run; with lease_loss = hold only once the lease is
/// surely gone); the driver resigns (the candidacy ends even if etcd cannot
/// be told). The reservation stays until the next leader preempts-and-aborts
/// exactly our key: while we hold it nobody else can write. Once the action
/// is done a host whose own key still holds is a candidate again
/// (Agent::candidate) and a won term re-keys it. docs/ETCD.md "Failure
/// behaviour".

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.hpp"
#include "internal/clock.hpp"
#include "elector/elector.hpp"
#include "elector/elector_config.hpp"
#include "elector/elector_policy.hpp"
#include "nvfence/fd.hpp"

namespace nvfence {

/// Most events waiting for the agent's thread.
inline constexpr size_t kElectorQueueCap = 16;
/// After a handoff (the agent released the reservation), the driver stays
/// out of the election this many lease TTLs, so another host wins it.
inline constexpr int64_t kHandoffHoldoffTtls = 3;
/// How long a driver that gave up a term waits for the agent's answer to
/// its win before resigning anyway: a takeover's four device commands at
/// the kernel's 30 s I/O timeout each.
inline constexpr std::chrono::milliseconds kWithdrawWait{120000};

/// What the elector side tells the agent's thread.
enum class ElectorEventKind : uint8_t {
    won,   ///< Elected with a token: carry it out on the device.
    lost,  ///< Leadership ended (or may have): step down.
    note,  ///< One line for the log.
};

/// One event from the driver.
struct ElectorEvent {
    ElectorEventKind kind = ElectorEventKind::note;  ///< What.
    Term term;                                 ///< won: the token and leadership.
    uint64_t agent_key = 0;                    ///< won: the agent's key as published when the token was asked for.
    uint64_t agent_restarts = 0;               ///< won: the agent's restarts_seen() as published then.
    LossReason reason = LossReason::none;      ///< lost: why.
    std::string text;                          ///< note/lost: in words.
    EventLevel level = EventLevel::info;       ///< note: how loud.
};

/// The agent's answer to a won event.
enum class WinAnswer : uint8_t {
    none,     ///< Not answered yet.
    holding,  ///< The device shows this host holding (the token's epoch, or older: rekey).
    stale,    ///< A holder at or above the token: resign and back off.
    reissue,  ///< A registrant at or above the token: ask again above WinReply::floor.
    failed,   ///< Could not carry it out (device error, lost race, lease may be gone).
};

/// Words for a WinAnswer.
const char* win_answer_name(WinAnswer a);

/// The agent's answer and what it saw.
struct WinReply {
    WinAnswer answer = WinAnswer::none;  ///< The outcome.
    uint32_t token = 0;                  ///< The term (token) answered.
    uint32_t floor = 0;                  ///< reissue: the device's highest epoch of our tag.
    uint32_t key_epoch = 0;              ///< holding: our key's epoch.
    std::string why;                     ///< One line for the log.
};

/// What the driver shows in `nvfence status`.
struct ElectorSnapshot {
    std::string phase = "starting";  ///< idle, campaigning, winning, leader, backoff, withdrawing, losing, stopped.
    std::string leader;              ///< The current leader's identity ("" unknown / none).
    bool self_leads = false;         ///< This host leads.
    uint32_t term = 0;               ///< The token of our leadership (0: none).
    int64_t lease_left_ms = -1;      ///< Until our lease may expire (-1: no lease).
    std::string last_error;          ///< The last elector error ("" none).
};

/// One line of a snapshot, e.g.
/// `etcd: leader (this host), term 7, lease 1.4 s left`.
std::string describe_elector(const ElectorSnapshot& s);

/// The mailbox between the driver's thread and the agent's thread, and
/// the agent's side of the wiring. All members are thread-safe except
/// drain(), which only the agent's thread calls.
class ElectorBridge {
public:
    /// Agent-side options: the cluster tag (to read epochs), this host's
    /// id and the store of epochs (may be null).
    ElectorBridge(uint8_t tag, HostId self, const EpochStore* epochs);
    ElectorBridge(const ElectorBridge&) = delete;
    ElectorBridge& operator=(const ElectorBridge&) = delete;

    /// Readable (POLLIN) while events wait; the agent's poll watches it.
    /// -1 when no eventfd could be made (the agent then drains on its
    /// interval).
    int wake_fd() const { return wake_.get(); }

    /// Driver: queues @p e, waiting at most @p wait while the queue is full.
    /// False when it stayed full (the event is dropped; a note is kept).
    bool post(ElectorEvent e, std::chrono::milliseconds wait);
    /// Driver: the agent's last published state and device epoch.
    AgentState agent_state() const;
    /// Driver: whether the agent was a candidate (Agent::candidate()) when
    /// it last published: the driver campaigns only then.
    bool agent_candidate() const;
    /// Driver: the highest epoch of our tag the agent last saw on the device.
    uint32_t device_epoch() const;
    /// Driver: the agent's key when it last published (0: none).
    uint64_t agent_key() const;
    /// Driver: the agent's restarts_seen() when it last published.
    uint64_t agent_restarts() const;
    /// Driver: waits at most @p wait for the answer to the won event of
    /// @p token and takes it (WinAnswer::none when none came). Answers for
    /// other terms are dropped (take_dropped_answers() hands them over).
    WinReply take_answer(uint32_t token, std::chrono::milliseconds wait);
    /// Driver: the answers take_answer() dropped since the last call (at
    /// most one per won event: the queue bounds them).
    std::vector<WinReply> take_dropped_answers();
    /// Driver: sleeps at most @p wait; returns early when the agent
    /// published a new state or stop() was called.
    void nap(std::chrono::milliseconds wait);
    /// Driver: the term (token) it stands behind now, 0 for none. The agent
    /// acts on a won event only while it is the driver's term; the driver
    /// sets it before posting the win and clears it before resigning.
    /// @p act_before: the term's lease deadline minus the margin.
    void set_term(uint32_t token, Clock::TimePoint act_before);
    /// Driver: etcd renewed the lease of term @p token (ignored when it is
    /// no longer the term): the agent may act until @p act_before.
    void renew_term(uint32_t token, Clock::TimePoint act_before);
    /// The driver's current term (0: none).
    uint32_t term() const;
    /// Agent: until when term @p token may be acted on; the clock's epoch
    /// (long past) when it is not the driver's term.
    Clock::TimePoint act_before(uint32_t token) const;
    /// Driver: the status shown by `nvfence status`.
    void set_snapshot(const ElectorSnapshot& s);
    /// Anyone: the status.
    ElectorSnapshot snapshot() const;
    /// Asks the driver to end (nap() and take_answer() return at once).
    void stop();
    /// Bounds every wait of post(), take_answer() and nap() by @p cap: a
    /// single-threaded caller that steps the driver and drains the bridge
    /// itself (the simulator, tests/sim/) passes 0 so nothing waits on the
    /// real clock. Default: no bound beyond each call's own.
    void set_wait_cap(std::chrono::milliseconds cap);
    /// True after stop().
    bool stopping() const;

    /// Agent's thread: publishes the Agent's state and device epoch, then
    /// serves every queued event (bounded: at most kElectorQueueCap), using
    /// only the Agent's public requests and @p hooks for the fence action.
    /// Returns the events served.
    size_t drain(Agent& agent, AgentHooks& hooks, Clock& clock);
    /// Agent's thread: publishes the Agent's state and device epoch.
    void publish(const Agent& agent);
    /// Agent's thread, the lease's watchdog (drain() runs it first): with
    /// AgentOptions::holder_needs_lease, a HOLDER whose term's act-before
    /// point (its lease deadline minus the margin, by this host's clock) has
    /// passed steps down by itself (Agent::lose_lease), whether or not the
    /// driver has posted the loss yet: a driver stalled in a call or behind
    /// a frozen VM never keeps the agent saying HOLDER past its lease.
    /// True when it stepped the agent down.
    bool watch_lease(Agent& agent, Clock& clock);
    /// Once, before the agent runs: while the agent is HOLDER, none of its
    /// device commands runs past the driver's current term's act-before
    /// point (Agent::bound_commands_by_lease), the point watch_lease()
    /// steps it down at: a slow device never holds the step-down (with no
    /// term, the point is long past: nothing is sent). @p agent must
    /// outlive this bridge's use by it.
    void bind(Agent& agent);
    /// Agent's thread: how long the agent may sleep before watch_lease()
    /// has to run (its poll's bound; max() when nothing is to watch).
    std::chrono::milliseconds until_lease_watch(const Agent& agent, Clock& clock) const;

private:
    // cv_.wait_for bounded by wait_cap_; a bound of 0 only tests @p pred
    // (no futex call: the simulator's single thread never waits).
    template <class Pred>
    bool wait_for(std::unique_lock<std::mutex>& lk, std::chrono::milliseconds wait, Pred pred) {
        wait = std::min(wait, wait_cap_);
        if (wait.count() <= 0) return pred();
        return cv_.wait_for(lk, wait, pred);
    }
    WinReply carry_out(Agent& agent, AgentHooks& hooks, Clock& clock, const ElectorEvent& e);
    void step_down(Agent& agent, AgentHooks& hooks, const ElectorEvent& e);
    WinReply left_holding(Agent& agent, Clock& clock, uint32_t token, WinReply r);

    uint8_t tag_;
    HostId self_;
    const EpochStore* epochs_;
    Fd wake_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<ElectorEvent> queue_;
    std::optional<WinReply> answer_;
    std::vector<WinReply> stale_answers_;
    AgentState state_ = AgentState::starting;
    bool candidate_ = false;
    uint64_t agent_key_ = 0;
    uint64_t agent_restarts_ = 0;
    uint32_t device_epoch_ = 0;
    uint32_t term_ = 0;
    Clock::TimePoint term_act_before_{};
    uint64_t publishes_ = 0;
    ElectorSnapshot snap_;
    bool stop_ = false;
    uint64_t dropped_ = 0;
    std::chrono::milliseconds wait_cap_ = std::chrono::milliseconds::max();
};

/// The elector's side: one step() at a time, each bounded by the elector
/// call timeouts, never sleeping itself (it returns how long to wait), so
/// tests drive it on a ManualClock with a scripted Elector.
class ElectorDriver {
public:
    /// Drives @p elector (owned by the caller, used only by this driver)
    /// with the timing @p guard, reporting to @p bridge; @p clock is the
    /// monotonic time source. @p call bounds each elector call; a call made
    /// for a live lease (keepalive, leader lookup, token) may instead run
    /// until the guard would step down (lease deadline minus margin), since
    /// the guard counts from the send time and a slow answer in time is as
    /// good as a fast one; no call is given more than the TTL.
    ElectorDriver(Elector& elector, ElectorBridge& bridge, Clock& clock, LeaseGuardOptions guard,
                  std::chrono::milliseconds call);
    /// One step; returns how long the caller may wait before the next one
    /// (ElectorBridge::nap).
    std::chrono::milliseconds step();
    /// Resigns if leading or campaigning (bounded by the call timeout).
    void shutdown();

    /// The driver's phases.
    enum class Phase : uint8_t { idle, campaigning, winning, leader, backoff, withdrawing, losing };
    /// What moves the driver from one phase to another.
    enum class Event : uint8_t {
        candidate,        ///< The agent is a candidate (idle, or a backoff ran out): campaign.
        not_candidate,    ///< A backoff ran out and the agent is no candidate: idle.
        campaign_failed,  ///< A campaign call failed (not a timeout): back off.
        won,              ///< Elected, the token got and the win posted to the agent.
        holding,          ///< The agent answered: holding with the token.
        withdraw,         ///< The term was given up while the agent may carry it out.
        lose,             ///< The lease ended or may have: the agent told to step down first.
        resign,           ///< Resigned: idle.
        resign_back_off,  ///< Resigned: back off.
        shutdown,         ///< The driver ends.
    };
    /// The current phase.
    Phase phase() const { return phase_; }
    /// Words for a phase.
    static const char* phase_name(Phase p);
    /// Words for an event.
    static const char* event_name(Event e);
    /// The driver's one transition function: the phase @p e leads to from
    /// @p from, or std::nullopt when @p e cannot happen in @p from (the
    /// driver aborts on that: a broken invariant). Pure; the table is in
    /// agent_elector.cpp and tested pair by pair.
    static std::optional<Phase> next_phase(Phase from, Event e);

private:
    void enter(Event e);
    void check_postconditions() const;
    void note(const std::string& text, EventLevel level = EventLevel::info);
    std::string words(std::error_code ec) const;
    void give_up(const std::string& why, bool back_off);
    void resign_now(const std::string& why, bool back_off);
    void withdraw(const std::string& why, bool back_off, LossReason loss);
    std::chrono::milliseconds step_withdrawing();
    std::chrono::milliseconds step_losing();
    void post_loss(LossReason r, const std::string& text);
    std::chrono::milliseconds step_idle(bool candidate);
    std::chrono::milliseconds step_backoff(bool candidate);
    std::chrono::milliseconds step_campaigning(AgentState as, bool candidate);
    std::chrono::milliseconds on_campaign_won(const LeaderInfo& won);
    std::chrono::milliseconds step_winning();
    std::chrono::milliseconds on_reissue(uint32_t floor);
    std::chrono::milliseconds step_leader(AgentState as);
    GuardVerdict renew_leadership();
    void post_win();
    void drop_old_answers();
    void lose(LossReason r);
    void publish_snapshot(const std::string& leader, bool self);
    std::chrono::milliseconds until(Clock::TimePoint t) const;
    std::chrono::milliseconds lease_budget() const;
    Result<LeaseStatus> renew_lease();
    bool renew_candidacy();
    template <class Call>
    auto timed(const char* what, std::chrono::milliseconds bound, Call&& call);
    Result<Term> ask_for_token(uint32_t floor);  ///< Records term_key_ and term_restarts_ as it asks.

    Elector& elector_;
    ElectorBridge& bridge_;
    Clock& clock_;
    LeaseGuardOptions gopts_;
    std::chrono::milliseconds call_;
    Phase phase_ = Phase::idle;
    std::optional<LeaseGuard> guard_;
    std::optional<LeaderInfo> won_;
    Term term_;
    uint64_t term_restarts_ = 0;  ///< The agent's restarts_seen() then, likewise.
    uint64_t term_key_ = 0;  ///< The agent's key when term_'s token was asked for: the key its win is for.
    int rounds_ = 0;
    Clock::TimePoint won_at_{};
    Clock::TimePoint backoff_until_{};
    std::optional<Clock::TimePoint> looked_up_;
    Backoff backoff_{200, 5000};
    std::string leader_value_;
    std::string last_error_;
    bool hold_noted_ = false;
    bool awaiting_answer_ = false;  // a won event posted, its answer not taken
    Clock::TimePoint withdraw_until_{};
    bool withdraw_back_off_ = true;
    LossReason withdraw_loss_ = LossReason::none;
};

/// The driver on its own thread (RAII: the destructor stops it, resigns
/// and joins, bounded by the elector call timeouts).
class ElectorThread {
public:
    /// Starts driving @p elector (borrowed; must outlive this object).
    ElectorThread(Elector& elector, ElectorBridge& bridge, LeaseGuardOptions guard, std::chrono::milliseconds call);
    ~ElectorThread();
    ElectorThread(const ElectorThread&) = delete;
    ElectorThread& operator=(const ElectorThread&) = delete;

private:
    SystemClock clock_;
    ElectorBridge& bridge_;
    ElectorDriver driver_;
    std::thread thread_;
};

}  // namespace nvfence
