// SPDX-License-Identifier: MIT
#include "elector/agent_elector.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "nvfence/error.hpp"
#include "elector/elector_run.hpp"
#include "nvfence/key.hpp"
#include "internal/invariant.hpp"

namespace nvfence {

using std::chrono::milliseconds;

namespace {
// A leader lookup with less time than this before the next renewal is skipped.
constexpr milliseconds kMinLookup{100};
// The shortest campaign call: less is spent connecting.
constexpr milliseconds kMinSlice{100};
// Elector calls that take this long are logged: the figure an operator
// needs when leaders step down on a slow coordination service.
constexpr milliseconds kSlowCall{500};

uint32_t epoch_of(uint64_t key) {
    auto f = decode_key(key);
    return f ? f->epoch : 0;
}
}  // namespace

const char* win_answer_name(WinAnswer a) {
    switch (a) {
    case WinAnswer::none: return "none";
    case WinAnswer::holding: return "holding";
    case WinAnswer::stale: return "stale";
    case WinAnswer::reissue: return "reissue";
    case WinAnswer::failed: return "failed";
    }
    return "?";
}

std::string describe_elector(const ElectorSnapshot& s) {
    std::string out = "etcd: " + s.phase;
    if (s.self_leads) out += " (this host leads)";
    else if (!s.leader.empty()) out += ", leader " + s.leader;
    else out += ", no leader known";
    if (s.term) out += ", term " + std::to_string(s.term);
    if (s.lease_left_ms >= 0) {
        char buf[48];
        std::snprintf(buf, sizeof buf, ", lease %.1f s left", static_cast<double>(s.lease_left_ms) / 1000.0);
        out += buf;
    }
    if (!s.last_error.empty()) out += ", last error: " + s.last_error;
    return out;
}

// ---------------------------------------------------------------- bridge

ElectorBridge::ElectorBridge(uint8_t tag, HostId self, const EpochStore* epochs)
    : tag_(tag), self_(self), epochs_(epochs), wake_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

bool ElectorBridge::post(ElectorEvent e, milliseconds wait) {
    std::unique_lock lk(mu_);
    // A win or a loss never waits behind log lines: the oldest note makes
    // room (an agent stuck in a device command while the lease ran out
    // found its loss dropped behind 16 keepalive notes: simulator, seed 11563).
    if (e.kind != ElectorEventKind::note && queue_.size() >= kElectorQueueCap) {
        const auto n = std::find_if(queue_.begin(), queue_.end(),
                                    [](const ElectorEvent& q) { return q.kind == ElectorEventKind::note; });
        if (n != queue_.end()) {
            queue_.erase(n);
            ++dropped_;
        }
    }
    if (!wait_for(lk, wait, [&] { return stop_ || queue_.size() < kElectorQueueCap; }) || stop_) {
        ++dropped_;
        return false;
    }
    queue_.push_back(std::move(e));
    lk.unlock();
    if (wake_) {
        const uint64_t one = 1;
        (void)!::write(wake_.get(), &one, sizeof one);
    }
    return true;
}

AgentState ElectorBridge::agent_state() const {
    std::lock_guard lk(mu_);
    return state_;
}

bool ElectorBridge::agent_candidate() const {
    std::lock_guard lk(mu_);
    return candidate_;
}

uint64_t ElectorBridge::agent_key() const {
    std::lock_guard lk(mu_);
    return agent_key_;
}

uint64_t ElectorBridge::agent_restarts() const {
    std::lock_guard lk(mu_);
    return agent_restarts_;
}

uint32_t ElectorBridge::device_epoch() const {
    std::lock_guard lk(mu_);
    return device_epoch_;
}

WinReply ElectorBridge::take_answer(uint32_t token, milliseconds wait) {
    std::unique_lock lk(mu_);
    // An answer for another term (a win given up before the agent answered
    // it) is dropped: it says nothing about this one.
    wait_for(lk, wait, [&] {
        if (answer_ && answer_->token != token) {
            if (stale_answers_.size() >= kElectorQueueCap) stale_answers_.erase(stale_answers_.begin());
            stale_answers_.push_back(std::move(*answer_));
            answer_.reset();
        }
        return stop_ || answer_.has_value();
    });
    if (!answer_) return WinReply{};
    WinReply r = std::move(*answer_);
    answer_.reset();
    return r;
}

std::vector<WinReply> ElectorBridge::take_dropped_answers() {
    std::lock_guard lk(mu_);
    std::vector<WinReply> out;
    out.swap(stale_answers_);
    return out;
}

void ElectorBridge::nap(milliseconds wait) {
    std::unique_lock lk(mu_);
    const uint64_t seen = publishes_;
    const AgentState st = state_;
    // Woken by a state change, not by every publish (the agent publishes on
    // every wake).
    wait_for(lk, wait, [&] { return stop_ || (publishes_ != seen && state_ != st); });
}

void ElectorBridge::set_term(uint32_t token, Clock::TimePoint act_before) {
    std::lock_guard lk(mu_);
    term_ = token;
    term_act_before_ = token == 0 ? Clock::TimePoint{} : act_before;
}

void ElectorBridge::renew_term(uint32_t token, Clock::TimePoint act_before) {
    std::lock_guard lk(mu_);
    if (token != 0 && token == term_) term_act_before_ = std::max(term_act_before_, act_before);
}

Clock::TimePoint ElectorBridge::act_before(uint32_t token) const {
    std::lock_guard lk(mu_);
    return token != 0 && token == term_ ? term_act_before_ : Clock::TimePoint{};
}

void ElectorBridge::bind(Agent& agent) {
    agent.bound_commands_by_lease([this] {
        std::lock_guard lk(mu_);
        return term_ != 0 ? term_act_before_ : Clock::TimePoint{};
    });
}

uint32_t ElectorBridge::term() const {
    std::lock_guard lk(mu_);
    return term_;
}

void ElectorBridge::set_wait_cap(milliseconds cap) {
    std::lock_guard lk(mu_);
    wait_cap_ = cap;
}

void ElectorBridge::set_snapshot(const ElectorSnapshot& s) {
    std::lock_guard lk(mu_);
    snap_ = s;
}

ElectorSnapshot ElectorBridge::snapshot() const {
    std::lock_guard lk(mu_);
    return snap_;
}

void ElectorBridge::stop() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
}

bool ElectorBridge::stopping() const {
    std::lock_guard lk(mu_);
    return stop_;
}

void ElectorBridge::publish(const Agent& agent) {
    const auto& rep = agent.last_report();
    const uint32_t epoch = rep ? max_epoch_of_tag(*rep, tag_) : 0;
    {
        std::lock_guard lk(mu_);
        state_ = agent.state();
        candidate_ = agent.candidate();
        agent_key_ = agent.key();
        agent_restarts_ = agent.restarts_seen();
        device_epoch_ = std::max(device_epoch_, epoch);
        ++publishes_;
    }
    cv_.notify_all();
}

bool ElectorBridge::watch_lease(Agent& agent, Clock& clock) {
    if (!agent.options().holder_needs_lease || agent.state() != AgentState::holder) return false;
    const uint32_t token = term();
    if (clock.now() < act_before(token)) return false;
    const std::string why = token == 0 ? std::string("the elector holds no term for this host")
                                       : "the lease of term " + std::to_string(token) +
                                             " may run out: its act-before point passed by this host's clock "
                                             "without a renewal from the elector";
    (void)agent.lose_lease(why);
    NVF_INVARIANT(agent.state() != AgentState::holder);
    publish(agent);
    return true;
}

std::chrono::milliseconds ElectorBridge::until_lease_watch(const Agent& agent, Clock& clock) const {
    if (!agent.options().holder_needs_lease || agent.state() != AgentState::holder)
        return std::chrono::milliseconds::max();
    const auto left = act_before(term()) - clock.now();
    return std::max(std::chrono::milliseconds(0), std::chrono::ceil<std::chrono::milliseconds>(left));
}

size_t ElectorBridge::drain(Agent& agent, AgentHooks& hooks, Clock& clock) {
    if (wake_) {
        uint64_t n = 0;
        (void)!::read(wake_.get(), &n, sizeof n);
    }
    (void)watch_lease(agent, clock);
    publish(agent);
    size_t served = 0;
    for (; served < kElectorQueueCap; ++served) {
        ElectorEvent e;
        {
            std::lock_guard lk(mu_);
            if (queue_.empty()) break;
            e = std::move(queue_.front());
            queue_.pop_front();
        }
        cv_.notify_all();
        switch (e.kind) {
        case ElectorEventKind::note: {
            AgentEvent ev;
            ev.kind = AgentEventKind::info;
            ev.level = e.level;
            ev.from = ev.to = agent.state();
            ev.text = "elector: " + e.text;
            hooks.event(ev);
            break;
        }
        case ElectorEventKind::lost: step_down(agent, hooks, e); break;
        case ElectorEventKind::won: {
            WinReply r;
            if (e.term.epoch != term()) {
                r.answer = WinAnswer::failed;
                r.token = e.term.epoch;
                r.why = "the elector gave the term up before the agent got to it: not acting on it";
            } else {
                r = carry_out(agent, hooks, clock, e);
            }
            AgentEvent ev;
            ev.kind = AgentEventKind::info;
            ev.level = r.answer == WinAnswer::holding ? EventLevel::info : EventLevel::warning;
            ev.from = ev.to = agent.state();
            ev.text = "elector: elected with token " + std::to_string(e.term.epoch) + ": " + win_answer_name(r.answer) +
                      ": " + r.why;
            hooks.event(ev);
            // The driver reads the agent's new state before the answer.
            publish(agent);
            {
                std::lock_guard lk(mu_);
                answer_ = std::move(r);
            }
            cv_.notify_all();
            break;
        }
        }
    }
    if (served > 0) publish(agent);
    return served;
}

WinReply ElectorBridge::carry_out(Agent& agent, AgentHooks&, Clock& clock, const ElectorEvent& e) {
    WinReply r;
    r.answer = WinAnswer::failed;
    const uint32_t token = e.term.epoch;
    r.token = token;
    if (clock.now() >= act_before(token)) {
        r.why = "the lease may have expired before the win reached the agent: not acting on token " +
                std::to_string(token);
        return r;
    }
    // The win was decided for the host as it was then. A key made since (a
    // rejoin after a fence) belongs to another story, and its epoch may even
    // equal the token, which the token rule would take for the term's own
    // key (the simulator's seed 393135: a win delivered 8.6 s late, after a
    // frozen VM, a target restart and a rejoin to the token's epoch). The
    // win carries the key the host had when it asked for the token (seed
    // 827: the rejoin came while etcd's answer was on its way).
    if (e.agent_key != agent.key()) {
        r.why = "this host's key changed since the win was posted (" + format_key(e.agent_key) + " -> " +
                format_key(agent.key()) + "): not acting on token " + std::to_string(token);
        return r;
    }
    // Read again after the device was: the driver renews the lease meanwhile.
    const TermResult t =
        agent.take_term(token, "etcd elector", [this, token] { return act_before(token); }, e.agent_restarts);
    if (!t.decision) {
        r.why = t.reply.message;
        return r;
    }
    const WinDecision& d = *t.decision;
    r.floor = d.device_max_epoch;
    r.why = std::string(win_action_name(d.action)) + ": " + d.why;
    if (d.action == WinAction::stale || d.action == WinAction::reissue) {
        r.answer = d.action == WinAction::stale ? WinAnswer::stale : WinAnswer::reissue;
        return r;
    }
    if (t.reply.exit_code != 0) r.why += "; " + t.reply.message;
    if (agent.state() != AgentState::holder) return r;
    return left_holding(agent, clock, token, r);
}

// The agent holds after carrying the term out (or after a failed takeover
// whose command was done though its answer was lost: the simulator's seed
// 49). Holding with the token's own key inside the term's lease is the term
// carried out. Otherwise no lease backs the reservation (the commands ended
// after the lease may have expired: seed 427, by the agent's own clock),
// and the agent steps down at once, as on a loss.
WinReply ElectorBridge::left_holding(Agent& agent, Clock& clock, uint32_t token, WinReply r) {
    const std::string k = format_key(agent.key());
    if (epoch_of(agent.key()) == token && clock.now() < act_before(token)) {
        r.answer = WinAnswer::holding;
        r.key_epoch = token;
        r.why += "; holding with " + k;
        return r;
    }
    r.answer = WinAnswer::failed;
    (void)agent.lose_lease("the takeover for token " + std::to_string(token) + " left this host holding with " + k +
                           ", which no live lease backs");
    r.why += "; left holding with " + k + " without a lease: stepped down";
    return r;
}

void ElectorBridge::step_down(Agent& agent, AgentHooks& hooks, const ElectorEvent& e) {
    const std::string reason = "etcd leadership lost (" + std::string(loss_reason_name(e.reason)) + ")" +
                               (e.text.empty() ? "" : ": " + e.text);
    if (agent.state() == AgentState::holder) {
        // The agent's own transition: FENCED persisted before the action.
        (void)agent.lose_lease(reason);
        return;
    }
    AgentEvent ev;
    ev.kind = AgentEventKind::info;
    ev.level = EventLevel::warning;
    ev.from = ev.to = agent.state();
    ev.text = "elector: " + reason + "; not holding: nothing to do";
    hooks.event(ev);
}

// ---------------------------------------------------------------- driver

ElectorDriver::ElectorDriver(Elector& elector, ElectorBridge& bridge, Clock& clock, LeaseGuardOptions guard,
                             milliseconds call)
    : elector_(elector), bridge_(bridge), clock_(clock), gopts_(guard), call_(call) {}

namespace {

using Phase = ElectorDriver::Phase;
using DEv = ElectorDriver::Event;

struct PhaseRow {
    Phase from;
    DEv event;
    Phase to;
};

// The driver's state-by-event table: every phase change it makes, and
// nothing else (ElectorDriver::enter aborts on a pair not listed).
constexpr PhaseRow kPhaseTable[] = {
    {Phase::idle, DEv::candidate, Phase::campaigning},
    {Phase::backoff, DEv::candidate, Phase::campaigning},
    {Phase::backoff, DEv::not_candidate, Phase::idle},
    {Phase::campaigning, DEv::campaign_failed, Phase::backoff},
    {Phase::campaigning, DEv::won, Phase::winning},
    {Phase::winning, DEv::holding, Phase::leader},
    {Phase::winning, DEv::withdraw, Phase::withdrawing},
    {Phase::winning, DEv::lose, Phase::losing},
    {Phase::leader, DEv::lose, Phase::losing},
    {Phase::withdrawing, DEv::lose, Phase::losing},
    {Phase::losing, DEv::resign, Phase::idle},
    {Phase::losing, DEv::resign_back_off, Phase::backoff},
    {Phase::losing, DEv::shutdown, Phase::idle},
    {Phase::campaigning, DEv::resign, Phase::idle},
    {Phase::winning, DEv::resign, Phase::idle},
    {Phase::leader, DEv::resign, Phase::idle},
    {Phase::withdrawing, DEv::resign, Phase::idle},
    {Phase::campaigning, DEv::resign_back_off, Phase::backoff},
    {Phase::winning, DEv::resign_back_off, Phase::backoff},
    {Phase::leader, DEv::resign_back_off, Phase::backoff},
    {Phase::withdrawing, DEv::resign_back_off, Phase::backoff},
    {Phase::idle, DEv::shutdown, Phase::idle},
    {Phase::campaigning, DEv::shutdown, Phase::idle},
    {Phase::winning, DEv::shutdown, Phase::idle},
    {Phase::leader, DEv::shutdown, Phase::idle},
    {Phase::backoff, DEv::shutdown, Phase::idle},
    {Phase::withdrawing, DEv::shutdown, Phase::idle},
};

}  // namespace

std::optional<ElectorDriver::Phase> ElectorDriver::next_phase(Phase from, Event e) {
    for (const PhaseRow& r : kPhaseTable)
        if (r.from == from && r.event == e) return r.to;
    return std::nullopt;
}

const char* ElectorDriver::event_name(Event e) {
    switch (e) {
    case Event::candidate: return "candidate";
    case Event::not_candidate: return "not_candidate";
    case Event::campaign_failed: return "campaign_failed";
    case Event::won: return "won";
    case Event::holding: return "holding";
    case Event::withdraw: return "withdraw";
    case Event::lose: return "lose";
    case Event::resign: return "resign";
    case Event::resign_back_off: return "resign_back_off";
    case Event::shutdown: return "shutdown";
    }
    return "?";
}

// The only place the phase changes: a pair outside the table is a broken
// invariant, and so is a phase whose facts do not hold after it.
void ElectorDriver::enter(Event e) {
    const std::optional<Phase> to = next_phase(phase_, e);
    if (!to) {
        const std::string what = std::string("elector driver: event ") + event_name(e) + " in phase " +
                                 phase_name(phase_) + " is not in the table";
        detail::broken(what.c_str(), __FILE__, __LINE__);
    }
    phase_ = *to;
    check_postconditions();
}

void ElectorDriver::check_postconditions() const {
    // A won term is held exactly while winning, leading or withdrawing it.
    const bool in_term = phase_ == Phase::winning || phase_ == Phase::leader || phase_ == Phase::withdrawing ||
                         phase_ == Phase::losing;
    NVF_INVARIANT(in_term == (term_.epoch != 0));
    NVF_INVARIANT(!awaiting_answer_ || phase_ == Phase::winning || phase_ == Phase::withdrawing);
    NVF_INVARIANT(phase_ != Phase::winning || (guard_ && won_));
    NVF_INVARIANT(phase_ != Phase::leader || (guard_ && won_));
    NVF_INVARIANT(phase_ != Phase::withdrawing || awaiting_answer_);
    NVF_INVARIANT(phase_ != Phase::losing || (guard_ && !awaiting_answer_));
}

const char* ElectorDriver::phase_name(Phase p) {
    switch (p) {
    case Phase::idle: return "idle";
    case Phase::campaigning: return "campaigning";
    case Phase::winning: return "winning";
    case Phase::leader: return "leader";
    case Phase::backoff: return "backoff";
    case Phase::withdrawing: return "withdrawing";
    case Phase::losing: return "losing";
    }
    return "?";
}

milliseconds ElectorDriver::until(Clock::TimePoint t) const {
    const auto now = clock_.now();
    if (t <= now) return milliseconds(0);
    return std::chrono::duration_cast<milliseconds>(t - now) + milliseconds(1);
}

milliseconds ElectorDriver::lease_budget() const {
    if (!guard_) return call_;
    // etcd in a loaded guest answers in seconds: cutting a renewal at
    // etcd_timeout_ms stepped leaders down with most of their lease left.
    const auto left = until(guard_->lease_deadline() - milliseconds(gopts_.margin_ms));
    // Acting on the lease (winning, leading): no call runs past the point
    // where the agent must be told to step down, or the agent would still
    // say HOLDER when the lease ends (the simulator's seed 14: a keepalive
    // given etcd_timeout_ms 170 ms before that point blocked past the lease).
    if (phase_ == Phase::winning || phase_ == Phase::leader) return std::min(left, milliseconds(gopts_.ttl_ms));
    return std::min(std::max(call_, left), milliseconds(gopts_.ttl_ms));
}

template <class Call>
auto ElectorDriver::timed(const char* what, milliseconds bound, Call&& call) {
    const auto t0 = clock_.now();
    auto r = call(bound);
    const auto took = std::chrono::duration_cast<milliseconds>(clock_.now() - t0);
    if (took >= kSlowCall)
        note(std::string("slow answer: ") + what + " took " + std::to_string(took.count()) + " ms (bound " +
                 std::to_string(bound.count()) + " ms)" + (r ? "" : ": " + words(r.error())),
             EventLevel::info);
    return r;
}

// A token above @p floor. What the win will be for is recorded as the
// token is asked for: the host's key (a rejoin while the answer is on its
// way makes a key the token may equal, which is not this term's: the
// simulator's seed 827) and the target restarts its agent has seen (a win
// asked for before one is asked again: seed 128160025063069).
Result<Term> ElectorDriver::ask_for_token(uint32_t floor) {
    term_key_ = bridge_.agent_key();
    term_restarts_ = bridge_.agent_restarts();
    return timed("token", lease_budget(), [&](milliseconds b) { return elector_.term(floor, b); });
}

bool ElectorDriver::renew_candidacy() {
    if (guard_->verdict(clock_.now()) == GuardVerdict::hold) return true;
    // A candidate's place in the queue is its key on its lease, and etcd's
    // answer to a renewal says whether that is still there; the guard's
    // deadline (counted from our send times) is for acting as leader.
    // Resigning on it sent candidates whose renewals were slow to the back
    // of the queue, again and again (lab, TTL 2 s).
    const auto ks = clock_.now();
    auto k = renew_lease();
    if (!k && k.error() == make_error_code(ElectorErrc::not_campaigning)) {
        // No lease exists yet (every grant so far failed): the lease the
        // next campaign call grants is counted from now, before its grant is
        // sent, not from the first attempt (nvfence-sim seed 8: a leader
        // stepped down a second after its win, its deadline that old).
        guard_.emplace(gopts_, ks);
        return true;
    }
    guard_->on_keepalive(ks, k);
    if (k || k.error() != make_error_code(ElectorErrc::lease_expired)) return true;
    // The lease (and the key on it) is gone: the next campaign call grants a new one.
    last_error_ = "keepalive: " + words(k.error());
    guard_.reset();
    publish_snapshot(leader_value_, false);
    return false;
}

Result<LeaseStatus> ElectorDriver::renew_lease() {
    const auto t0 = clock_.now();
    auto r = timed("keepalive", lease_budget(), [&](milliseconds b) { return elector_.keepalive(b); });
    // When the lease was last renewed is what a failover's lease expiry
    // counts from (measure_etcd.py reads this line).
    if (r)
        note("keepalive: lease renewed for " + std::to_string(r->ttl_ms) + " ms, request sent " +
                 std::to_string(std::chrono::duration_cast<milliseconds>(clock_.now() - t0).count()) + " ms ago",
             EventLevel::debug);
    return r;
}

std::string ElectorDriver::words(std::error_code ec) const {
    const std::string d = elector_.failure_detail();
    return d.empty() ? ec.message() : ec.message() + " (" + d + ")";
}

void ElectorDriver::note(const std::string& text, EventLevel level) {
    ElectorEvent e;
    e.kind = ElectorEventKind::note;
    e.text = text;
    e.level = level;
    (void)bridge_.post(std::move(e), call_);
}

void ElectorDriver::publish_snapshot(const std::string& leader, bool self) {
    ElectorSnapshot s;
    s.phase = phase_name(phase_);
    s.leader = leader;
    s.self_leads = self;
    s.term = phase_ == Phase::leader || phase_ == Phase::winning ? term_.epoch : 0;
    if (guard_) s.lease_left_ms = std::max<int64_t>(0, until(guard_->lease_deadline()).count());
    s.last_error = last_error_;
    bridge_.set_snapshot(s);
}

void ElectorDriver::give_up(const std::string& why, bool back_off) {
    if (phase_ == Phase::winning && awaiting_answer_) {
        withdraw(why, back_off, LossReason::none);
        return;
    }
    resign_now(why, back_off);
}

// A term whose win the agent may be carrying out right now (a command of
// it may be in flight): withdrawn at once, so the agent does not start on
// it, but resigned only once the agent answered (or kWithdrawWait passed),
// so that no command of the term lands after the elector resigned it.
void ElectorDriver::withdraw(const std::string& why, bool back_off, LossReason loss) {
    NVF_INVARIANT(phase_ == Phase::winning && awaiting_answer_);
    bridge_.set_term(0, {});
    if (!why.empty()) note(why + " (withdrawn; resigning once the agent answers)", EventLevel::warning);
    enter(Event::withdraw);
    withdraw_until_ = clock_.now() + kWithdrawWait;
    withdraw_back_off_ = back_off;
    withdraw_loss_ = loss == LossReason::none ? LossReason::lease_may_expire : loss;
    // Told at once, behind the win in the queue: an agent that comes to hold
    // for this term steps down right after, whenever the driver looks next.
    post_loss(withdraw_loss_, "token " + std::to_string(term_.epoch) + " was given up while the agent carried it out");
    publish_snapshot(leader_value_, false);
}

milliseconds ElectorDriver::step_withdrawing() {
    NVF_INVARIANT(phase_ == Phase::withdrawing);
    const WinReply a = bridge_.take_answer(term_.epoch, milliseconds(200));
    if (a.answer == WinAnswer::none && clock_.now() < withdraw_until_) return milliseconds(0);
    awaiting_answer_ = false;
    if (a.answer == WinAnswer::none)
        note("no answer from the agent for token " + std::to_string(term_.epoch) + " in " +
                 std::to_string(kWithdrawWait.count()) + " ms: resigning",
             EventLevel::error);
    if (a.answer == WinAnswer::holding || a.answer == WinAnswer::none) {
        // The agent holds (or may come to hold) for a term given up: the
        // loss posted at the withdrawal steps it down; resigned once it did.
        enter(Event::lose);
        return milliseconds(0);
    }
    resign_now("", withdraw_back_off_);
    return milliseconds(0);
}

void ElectorDriver::post_loss(LossReason r, const std::string& text) {
    ElectorEvent e;
    e.kind = ElectorEventKind::lost;
    e.reason = r;
    e.text = text;
    // A loss must reach the agent: wait up to a TTL for room.
    if (!bridge_.post(std::move(e), milliseconds(gopts_.ttl_ms))) last_error_ = "event queue full: loss not delivered";
}

// The agent was told to step down: the term is resigned once it no longer
// says HOLDER, or at the lease's deadline by our clock (its fence action
// may still run then), so that it never claims HOLDER past the lease.
milliseconds ElectorDriver::step_losing() {
    NVF_INVARIANT(phase_ == Phase::losing && guard_);
    const auto deadline = guard_->lease_deadline();
    if (bridge_.agent_state() == AgentState::holder && clock_.now() < deadline)
        return std::min(until(deadline), milliseconds(50));
    resign_now("", true);
    return milliseconds(0);
}

void ElectorDriver::resign_now(const std::string& why, bool back_off) {
    // First: the agent no longer starts carrying this term out.
    bridge_.set_term(0, {});
    awaiting_answer_ = false;
    if (!why.empty()) note(why, EventLevel::warning);
    if (auto s = timed("resign", call_, [&](milliseconds b) { return elector_.resign(b); }); !s)
        last_error_ = "resign: " + words(s.error());
    guard_.reset();
    won_.reset();
    term_ = Term{};
    hold_noted_ = false;
    if (back_off) backoff_until_ = clock_.now() + milliseconds(backoff_.next_ms());
    enter(back_off ? Event::resign_back_off : Event::resign);
    publish_snapshot(leader_value_, false);
}

void ElectorDriver::lose(LossReason r) {
    if (phase_ == Phase::winning && awaiting_answer_) {
        withdraw("the lease is lost (" + std::string(loss_reason_name(r)) + ")", true, r);
        return;
    }
    NVF_INVARIANT(phase_ == Phase::winning || phase_ == Phase::leader);
    // The agent acts on no win of this term any more.
    bridge_.set_term(0, {});
    post_loss(r, "token " + std::to_string(term_.epoch));
    enter(Event::lose);
    publish_snapshot(leader_value_, false);
}

void ElectorDriver::drop_old_answers() {
    for (const WinReply& a : bridge_.take_dropped_answers()) {
        note("answer for token " + std::to_string(a.token) + " dropped (" + win_answer_name(a.answer) +
                 "): not the current term" + (term_.epoch ? " " + std::to_string(term_.epoch) : std::string()),
             EventLevel::warning);
        // The agent took the reservation for a term given up meanwhile: it
        // holds without a lease. Step it down as on any loss; the next leader
        // preempts exactly its key.
        if (a.answer == WinAnswer::holding && phase_ != Phase::leader && phase_ != Phase::winning) {
            ElectorEvent e;
            e.kind = ElectorEventKind::lost;
            e.reason = LossReason::lease_may_expire;
            e.text = "token " + std::to_string(a.token) + " was carried out after the elector gave it up";
            if (!bridge_.post(std::move(e), milliseconds(gopts_.ttl_ms))) last_error_ = "event queue full: loss not delivered";
        }
    }
}

milliseconds ElectorDriver::step() {
    drop_old_answers();
    const AgentState as = bridge_.agent_state();
    const bool candidate = bridge_.agent_candidate();
    switch (phase_) {
    case Phase::idle: return step_idle(candidate);
    case Phase::withdrawing: return step_withdrawing();
    case Phase::losing: return step_losing();
    case Phase::backoff: return step_backoff(candidate);
    case Phase::campaigning: return step_campaigning(as, candidate);
    case Phase::winning: return step_winning();
    case Phase::leader: return step_leader(as);
    }
    return milliseconds(0);
}

milliseconds ElectorDriver::step_idle(bool candidate) {
    NVF_INVARIANT(phase_ == Phase::idle);
    if (!candidate) {
        publish_snapshot("", false);
        return milliseconds(gopts_.renew_interval_ms);
    }
    enter(Event::candidate);
    return milliseconds(0);
}

milliseconds ElectorDriver::step_backoff(bool candidate) {
    NVF_INVARIANT(phase_ == Phase::backoff);
    if (clock_.now() < backoff_until_) return until(backoff_until_);
    enter(candidate ? Event::candidate : Event::not_candidate);
    return milliseconds(0);
}

// Posts the win of term_ to the agent, its term first (the agent acts on a
// win only while it is the driver's term).
void ElectorDriver::post_win() {
    ElectorEvent e;
    e.kind = ElectorEventKind::won;
    e.term = term_;
    e.agent_key = term_key_;
    e.agent_restarts = term_restarts_;
    bridge_.set_term(term_.epoch, guard_->lease_deadline() - milliseconds(gopts_.margin_ms));
    if (bridge_.post(std::move(e), call_)) awaiting_answer_ = true;
    else give_up("event queue full: win dropped", true);
}

milliseconds ElectorDriver::step_campaigning(AgentState as, bool candidate) {
    NVF_INVARIANT(phase_ == Phase::campaigning);
    const auto now = clock_.now();
    if (!candidate) {
        give_up(std::string("the agent is ") + agent_state_name(as) + " and no candidate: not campaigning", false);
        return milliseconds(0);
    }
    if (!guard_) guard_.emplace(gopts_, now);
    else if (!renew_candidacy()) return milliseconds(0);
    auto r = elector_.campaign(std::max(until(guard_->renew_due()), kMinSlice));
    if (r) return on_campaign_won(*r);
    if (r.error() == make_error_code(Errc::timeout)) {
        last_error_.clear();
        if (!renew_candidacy()) return milliseconds(0);
        // Who leads, for the status: at most once a TTL, and never in
        // the way of the next renewal.
        const auto t = clock_.now();
        const auto left = until(guard_->renew_due());
        if ((!looked_up_ || t - *looked_up_ >= milliseconds(gopts_.ttl_ms)) && left >= kMinLookup) {
            looked_up_ = t;
            auto l = timed("leader lookup", std::min(left, call_), [&](milliseconds b) { return elector_.leader(b); });
            if (l) leader_value_ = l->value;
            else if (l.error() == make_error_code(ElectorErrc::no_leader)) leader_value_.clear();
        }
        backoff_.reset();
        publish_snapshot(leader_value_, false);
        return milliseconds(0);
    }
    last_error_ = "campaign: " + words(r.error());
    if (r.error() == make_error_code(ElectorErrc::lease_expired)) guard_.reset();
    backoff_until_ = now + milliseconds(backoff_.next_ms());
    enter(Event::campaign_failed);
    publish_snapshot(leader_value_, false);
    return milliseconds(0);
}

milliseconds ElectorDriver::on_campaign_won(const LeaderInfo& won) {
    won_ = won;
    won_at_ = clock_.now();
    rounds_ = 0;
    note("elected: leader key " + won_->key + " rev " + std::to_string(won_->revision) + "; asking for the token",
         EventLevel::debug);
    // Acting on this leadership needs a lease etcd renewed lately: a renewal
    // that is due goes first, and the token transaction and the device work
    // then have a whole TTL - margin. A keepalive that failed moved the
    // renewal schedule on but not the deadline, so after one "not due" says
    // nothing of the lease's age: renew first (nvfence-sim seed
    // 272601258885307: a win after a renewal failed while etcd was down
    // was acted on 56 ms before its act-before point, and the new leader
    // stepped down right after taking the reservation).
    if (guard_->verdict(won_at_) != GuardVerdict::hold || guard_->failures() > 0)
        guard_->on_keepalive(won_at_, renew_lease());
    if (guard_->verdict(clock_.now()) == GuardVerdict::step_down ||
        guard_->verdict(clock_.now()) == GuardVerdict::hold_until_preempted) {
        give_up("won, but the lease could not be renewed: not acting on this leadership", true);
        return milliseconds(0);
    }
    auto term = ask_for_token(bridge_.device_epoch());
    if (!term) {
        last_error_ = "token: " + words(term.error());
        give_up("elected, but no token: " + words(term.error()), true);
        return milliseconds(0);
    }
    term_ = *term;
    leader_value_ = won_->value;
    note("won the election: token " + std::to_string(term_.epoch) + " (leader key " + won_->key + " rev " +
         std::to_string(won_->revision) + (term_.rollback_seen ? "; etcd's counter was behind ours" : "") + ")");
    enter(Event::won);
    publish_snapshot(leader_value_, true);
    post_win();
    return milliseconds(0);
}

milliseconds ElectorDriver::step_winning() {
    NVF_INVARIANT(phase_ == Phase::winning && guard_);
    WinReply a = bridge_.take_answer(term_.epoch, milliseconds(std::min<int64_t>(gopts_.renew_interval_ms, 200)));
    if (a.answer != WinAnswer::none) awaiting_answer_ = false;
    const auto t = clock_.now();
    if (guard_->verdict(t) == GuardVerdict::renew) {
        guard_->on_keepalive(t, renew_lease());
        bridge_.renew_term(term_.epoch, guard_->lease_deadline() - milliseconds(gopts_.margin_ms));
    }
    const GuardVerdict v = guard_->verdict(clock_.now());
    if (v == GuardVerdict::step_down) {
        lose(guard_->reason(clock_.now()));
        return milliseconds(0);
    }
    switch (a.answer) {
    case WinAnswer::none:
        if (v == GuardVerdict::hold_until_preempted) {
            give_up("the lease may have expired before the win was carried out", true);
            return milliseconds(0);
        }
        publish_snapshot(leader_value_, true);
        return milliseconds(0);
    case WinAnswer::holding:
        enter(Event::holding);
        backoff_.reset();
        note("leading with token " + std::to_string(term_.epoch) + " (key epoch " + std::to_string(a.key_epoch) + ")");
        publish_snapshot(leader_value_, true);
        return milliseconds(0);
    case WinAnswer::stale:
    case WinAnswer::failed:
        give_up(std::string("token ") + std::to_string(term_.epoch) + " " + win_answer_name(a.answer) + ": " + a.why +
                    "; resigning",
                true);
        return milliseconds(0);
    case WinAnswer::reissue: return on_reissue(a.floor);
    }
    return milliseconds(0);
}

// The agent saw a key at or above the token: a token above @p floor, at
// most kWinRounds times.
milliseconds ElectorDriver::on_reissue(uint32_t floor) {
    if (++rounds_ >= kWinRounds) {
        give_up("the token kept falling behind the device's epochs; resigning", true);
        return milliseconds(0);
    }
    auto term = ask_for_token(floor);
    if (!term) {
        last_error_ = "token: " + words(term.error());
        give_up("no token above " + std::to_string(floor) + ": " + words(term.error()), true);
        return milliseconds(0);
    }
    term_ = *term;
    post_win();
    return milliseconds(0);
}

milliseconds ElectorDriver::step_leader(AgentState as) {
    NVF_INVARIANT(phase_ == Phase::leader && guard_ && won_);
    // A leader's agent holds; anything else ends the term (a FENCED agent
    // that is a candidate again campaigns for a new one).
    if (as != AgentState::holder && as != AgentState::standby) {
        give_up(std::string("the agent is ") + agent_state_name(as) + ": resigning", false);
        return milliseconds(0);
    }
    if (as == AgentState::standby) {
        // A handoff (the only way from HOLDER to STANDBY under Write
        // Exclusive): stay out of the election long enough for another host
        // to win, or the handoff is undone within a campaign call.
        give_up("the agent no longer holds the reservation (handoff): resigning and staying out of the election for " +
                    std::to_string(kHandoffHoldoffTtls) + " lease TTLs",
                true);
        backoff_until_ = std::max(backoff_until_, clock_.now() + milliseconds(kHandoffHoldoffTtls * gopts_.ttl_ms));
        publish_snapshot(leader_value_, false);
        return milliseconds(0);
    }
    GuardVerdict v = guard_->verdict(clock_.now());
    if (v == GuardVerdict::renew || v == GuardVerdict::hold_until_preempted) v = renew_leadership();
    if (v == GuardVerdict::step_down) {
        lose(guard_->reason(clock_.now()));
        return milliseconds(0);
    }
    if (v == GuardVerdict::hold_until_preempted) {
        if (!hold_noted_)
            note("the lease may have expired (etcd unreachable): holding until preempted (lease_loss = hold)",
                 EventLevel::warning);
        hold_noted_ = true;
        publish_snapshot(leader_value_, true);
        return milliseconds(gopts_.renew_interval_ms);
    }
    hold_noted_ = false;
    publish_snapshot(leader_value_, true);
    // Wake for the next renewal or for the step-down deadline, whichever first.
    const auto wake = std::min(guard_->renew_due(), guard_->lease_deadline() - milliseconds(gopts_.margin_ms));
    return until(wake);
}

// A leader's renewal, then (when it cannot delay the next renewal) a look
// at who leads; the guard's verdict after both.
GuardVerdict ElectorDriver::renew_leadership() {
    const auto ks = clock_.now();
    auto k = renew_lease();
    guard_->on_keepalive(ks, k);
    if (!k) last_error_ = "keepalive: " + words(k.error());
    else last_error_.clear();
    // The agent acts, and its lease watchdog lets it hold, until the
    // renewed deadline minus the margin.
    if (k) bridge_.renew_term(term_.epoch, guard_->lease_deadline() - milliseconds(gopts_.margin_ms));
    // The keepalive is the proof that counts (our key lives on our lease);
    // the lookup only may tell sooner, so it never delays the next renewal.
    if (const auto left = until(guard_->renew_due()); left >= kMinLookup)
        guard_->on_leader(
            timed("leader lookup", std::min(left, lease_budget()), [&](milliseconds b) { return elector_.leader(b); }),
            *won_);
    return guard_->verdict(clock_.now());
}

void ElectorDriver::shutdown() {
    if (phase_ != Phase::idle) (void)elector_.resign(call_);
    bridge_.set_term(0, {});
    awaiting_answer_ = false;
    guard_.reset();
    won_.reset();
    term_ = Term{};
    enter(Event::shutdown);
    ElectorSnapshot s;
    s.phase = "stopped";
    bridge_.set_snapshot(s);
}

// ---------------------------------------------------------------- thread

ElectorThread::ElectorThread(Elector& elector, ElectorBridge& bridge, LeaseGuardOptions guard, milliseconds call)
    : bridge_(bridge), driver_(elector, bridge, clock_, guard, call) {
    thread_ = std::thread([this] {
        while (!bridge_.stopping()) {
            const auto wait = driver_.step();
            if (wait.count() > 0) bridge_.nap(wait);
        }
        driver_.shutdown();
    });
}

ElectorThread::~ElectorThread() {
    bridge_.stop();
    if (thread_.joinable()) thread_.join();
}

}  // namespace nvfence
