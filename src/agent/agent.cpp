// SPDX-License-Identifier: MIT
#include "agent/agent.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "agent/agent_text.hpp"
#include "internal/invariant.hpp"
#include "nvfence/error.hpp"
#include "nvfence/fd.hpp"
#include "nvfence/key.hpp"

namespace nvfence {
namespace {

using detail::broken;
using agent_detail::clean_text;
using agent_detail::key_text;
using agent_detail::kMaxReasonBytes;

uint32_t epoch_of(uint64_t key) {
    auto f = decode_key(key);
    return f ? f->epoch : 0;
}

int64_t unix_ms(Clock::WallPoint w) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(w.time_since_epoch()).count();
}

uint64_t ms(Clock::Ms d) { return d.count() < 0 ? 0 : static_cast<uint64_t>(d.count()); }

Clock::Ms since(Clock::TimePoint a, Clock::TimePoint b) {
    return std::chrono::duration_cast<Clock::Ms>(b - a);
}

bool notifications_unsupported(std::error_code ec) {
    return is_nvme(ec, NvmeStatus::invalid_log_page) || is_nvme(ec, NvmeStatus::invalid_field) ||
           is_nvme(ec, NvmeStatus::invalid_opcode);
}

FenceOptions fence_options(const AgentOptions& o) {
    FenceOptions f;
    f.tag = o.tag;
    f.node = o.node;
    f.type = o.type;
    f.abort = true;
    f.cptpl = o.ptpl ? Cptpl::set : Cptpl::no_change;
    return f;
}

}  // namespace

// ---- TimedPassthru ------------------------------------------------------------

Result<uint32_t> TimedPassthru::submit(const Command& cmd, std::span<uint8_t> data) {
    Command c = cmd;
    if (c.timeout_ms == 0) c.timeout_ms = timeout_ms_;
    const auto t0 = clock_.now();
    if (const auto d = deadline_ ? deadline_() : std::nullopt) {
        if (t0 >= *d) return make_error_code(Errc::timeout);  // never sent
        const auto left = std::chrono::ceil<Clock::Ms>(*d - t0).count();
        c.timeout_ms = static_cast<uint32_t>(std::clamp<int64_t>(left, 1, c.timeout_ms));
    }
    auto r = inner_.submit(c, data);
    const auto t1 = clock_.now();
    slowest_ = std::max(slowest_, since(t0, t1));
    latency_.observe(std::chrono::duration<double>(t1 - t0).count());
    return r;
}

// ---- Agent --------------------------------------------------------------------

Agent::Agent(Passthru& dev, uint32_t nsid, const HostId& self, AgentOptions opts, Clock& clock,
             AgentHooks& hooks, const EpochStore* epochs, const AgentStateFile* state)
    : opts_(std::move(opts)),
      clock_(clock),
      hooks_(hooks),
      epochs_(epochs),
      statefile_(state),
      self_(self),
      timed_(dev, clock, opts_.device_timeout_ms),
      resv_(timed_, nsid),
      fence_(resv_, self, fence_options(opts_), epochs) {
    NVF_INVARIANT(opts_.node != 0);
    NVF_INVARIANT(opts_.interval_ms >= kMinIntervalMs && opts_.interval_ms <= kMaxIntervalMs);
    NVF_INVARIANT(opts_.device_timeout_ms >= kMinDeviceTimeoutMs &&
                  opts_.device_timeout_ms <= kMaxDeviceTimeoutMs);
    NVF_INVARIANT(opts_.type == ResvType::write_exclusive ||
                  opts_.type == ResvType::write_exclusive_reg_only);
    NVF_INVARIANT(opts_.max_notification_pages >= 1 &&
                  opts_.max_notification_pages <= kMaxNotificationPages);
    NVF_INVARIANT(!host_id_is_zero(self_));
    // A check-only watcher registers nothing, so nothing that registers,
    // keeps a registration or campaigns applies to it (the parser refuses
    // these combinations with the key named).
    NVF_INVARIANT(!check_only() ||
                  (!opts_.keep_registration && !opts_.ptpl && !opts_.rejoin_auto && !opts_.holder_needs_lease));
    started_ = clock_.now();
    next_check_ = started_;
}

void Agent::emit(AgentEventKind kind, EventLevel level, const std::string& text,
                 const ReservationStatus* st) {
    AgentEvent e;
    e.kind = kind;
    e.level = level;
    e.from = e.to = state_;
    e.text = text;
    if (st) e.report = *st;
    e.self = self_;
    e.key = key_;
    e.volume = opts_.volume;
    e.node = opts_.node;
    hooks_.event(e);
}

AgentView Agent::view() const {
    AgentView v;
    v.state = state_;
    v.key = key_;
    v.type = opts_.type;
    v.self = self_;
    v.fence_on_view_loss = opts_.fence_on_view_loss;
    v.holder_needs_lease = opts_.holder_needs_lease;
    v.check_only = check_only();
    v.tag = opts_.tag;
    v.node = opts_.node;
    return v;
}

Status Agent::decide(const Observation& o) {
    auto t = decide_transition(view(), o);
    if (!t) return Ok{};
    return apply(*t, o.report);
}

Status Agent::apply(const Transition& t, const ReservationStatus* st) {
    if (t.from != state_ || !agent_transition_allowed(t.from, t.to)) {
        const std::string what = std::string("transition ") + agent_state_name(t.from) + " -> " +
                                 agent_state_name(t.to) +
                                 (t.from != state_ ? std::string(" applied while the agent is ") + agent_state_name(state_)
                                                   : std::string(" is not in the table of allowed transitions"));
        broken(what.c_str(), __FILE__, __LINE__);
    }
    // A watcher's states are its own: it never stands by or holds, and an
    // agent that registers never waits for or watches a key it did not take.
    const bool watch_state = t.to == AgentState::waiting || t.to == AgentState::watching;
    NVF_INVARIANT(check_only() ? t.to != AgentState::standby && t.to != AgentState::holder : !watch_state);
    if (t.fence == FenceEntry::fresh) {
        ++fences_;
        stop_writers_at_fence(t.why);
    }
    if (t.to == AgentState::standby || t.to == AgentState::holder || t.to == AgentState::watching) {
        action_ = FenceActionState::none;
        fenced_boot_id_.clear();
        fence_reason_.clear();
        fenced_at_.reset();
        fenced_unix_ms_ = 0;
    }
    key_ = t.key;
    AgentEvent e;
    e.kind = AgentEventKind::state_changed;
    e.level = t.level;
    e.from = state_;
    e.to = t.to;
    e.text = t.why;
    if (st) e.report = *st;
    e.self = self_;
    e.key = key_;
    e.volume = opts_.volume;
    e.node = opts_.node;
    state_ = t.to;
    hooks_.event(e);
    // Persist before acting: the action may be a reboot, or the watchdog
    // may kill us mid-way; a pending action is run again after a restart.
    const Status saved = t.persist ? save(*t.persist) : Status(Ok{});
    if (t.fence == FenceEntry::fresh) run_fence_actions(false);
    return saved;
}

VolumeMetrics Agent::metrics() {
    VolumeMetrics m;
    m.volume = opts_.volume;
    m.state = state_;
    const auto k = key_ ? decode_key(key_) : std::nullopt;
    m.epoch = k ? k->epoch : 0;
    m.node = opts_.node;
    if (last_ok_) m.last_ok_age_s = std::chrono::duration<double>(clock_.now() - *last_ok_).count();
    m.fences = fences_;
    m.checks = checks_;
    m.check_failures = failures_;
    m.latency = timed_.latency();
    return m;
}

Status Agent::save(PersistedRole role) {
    if (!statefile_) return Ok{};
    PersistedState s;
    s.node = opts_.node;
    s.tag = opts_.tag;
    s.role = role;
    s.key = role == PersistedRole::none ? 0 : key_;
    if (role == PersistedRole::fenced) {
        s.reason = fence_reason_;
        s.fenced_unix_ms = fenced_unix_ms_;
        s.action = action_;
        s.boot_id = fenced_boot_id_;
    }
    auto r = statefile_->save(s);
    if (!r) {
        last_error_ = "cannot write the state file " + statefile_->path() + ": " + r.error().message();
        emit(AgentEventKind::info, EventLevel::error, last_error_);
    }
    return r;
}

Status Agent::persist() {
    switch (state_) {
    case AgentState::standby: return save(PersistedRole::standby);
    case AgentState::holder: return save(PersistedRole::holder);
    case AgentState::fenced: return save(PersistedRole::fenced);
    case AgentState::watching: return save(PersistedRole::standby);  // the key seen
    case AgentState::waiting: return Ok{};                           // nothing seen yet
    case AgentState::starting:
    case AgentState::stopping: break;
    }
    broken("persist() in a transient state", __FILE__, __LINE__);
}

bool Agent::holds(const ReservationStatus& st, const Registrant& me) const {
    return me.holder && st.type == opts_.type;
}

bool Agent::ours(uint64_t key) const {
    auto f = decode_key(key);
    return f && f->tag == opts_.tag && f->node == opts_.node;
}

// A key under this host id that this agent may have registered itself just
// before a crash or a failed request: this node's key, not older than the
// one we know, and not above the highest epoch persisted (Fence persists an
// epoch before the key reaches the device, so anything above it is not ours).
bool Agent::our_newer_key(uint64_t key, uint64_t known) const {
    auto f = decode_key(key);
    if (!f || f->tag != opts_.tag || f->node != opts_.node) return false;
    if (f->epoch < epoch_of(known)) return false;
    if (!epochs_) return true;
    // The floor also rises with epochs seen on the device, so compare with
    // what this host used: the floor read before this run's first Report,
    // or a fresh key this run persisted.
    return f->epoch <= std::max(start_floor_, fence_.last_fresh_epoch());
}

void Agent::set_baseline(const ReservationStatus& st) {
    report_ = st;
    last_gen_ = st.generation;
    const Registrant* h = st.holder();
    last_holder_ = h ? h->key : 0;
    self_entries_ = static_cast<size_t>(std::count_if(
        st.registrants.begin(), st.registrants.end(),
        [&](const Registrant& r) { return r.host_id == self_; }));
}

CheckNotes Agent::drain_notifications(bool report_events) {
    CheckNotes n;
    if (!notifications_supported_) return n;
    for (uint32_t i = 0; i < opts_.max_notification_pages; ++i) {
        auto log = resv_.notification_log();
        if (!log) {
            if (notifications_unsupported(log.error())) {
                notifications_supported_ = false;
                emit(AgentEventKind::info, EventLevel::info,
                     "the device has no Reservation Notification log (" + log.error().message() +
                         "): watching by Report alone");
            }
            return n;
        }
        if (log->type == NotificationType::empty || log->log_page_count == 0) return n;
        if (last_notice_count_ != 0 && log->log_page_count > last_notice_count_ + 1)
            n.lost += log->log_page_count - last_notice_count_ - 1;
        last_notice_count_ = log->log_page_count;
        ++n.pages;
        ++notifications_;
        if (log->nsid == resv_.nsid() || log->nsid == 0xffffffffu) {
            switch (log->type) {
            case NotificationType::registration_preempted: n.registration_preempted = true; break;
            case NotificationType::reservation_released: n.reservation_released = true; break;
            case NotificationType::reservation_preempted: n.reservation_preempted = true; break;
            case NotificationType::empty: break;
            }
        }
        if (report_events)
            emit(AgentEventKind::notification, EventLevel::info,
                 "reservation notification #" + std::to_string(log->log_page_count) + ": " +
                     notification_type_name(log->type) + " (nsid " + std::to_string(log->nsid) + ")");
        if (log->available == 0) return n;
    }
    n.more_pending = true;
    return n;
}

void Agent::report_epochs() {
    if (const auto ec = fence_.floor_error(); ec && !floor_error_reported_) {
        floor_error_reported_ = true;
        emit(AgentEventKind::info, EventLevel::error,
             "cannot raise this host's epoch floor" + (epochs_ ? " in " + epochs_->path() : std::string()) + ": " +
                 ec.message() + "; a key taken later may not be above every epoch seen");
    } else if (!ec) {
        floor_error_reported_ = false;
    }
    for (uint64_t k : fence_.implausible_keys()) {
        if (std::find(implausible_seen_.begin(), implausible_seen_.end(), k) != implausible_seen_.end()) continue;
        if (implausible_seen_.size() < 64) implausible_seen_.push_back(k);
        emit(AgentEventKind::info, EventLevel::error,
             "key " + key_text(k) + " carries an implausible epoch (at or above " + std::to_string(kEpochCeiling) +
                 " or more than " + std::to_string(kMaxEpochJump) +
                 " above this host's floor): it does not raise the floor; remove it with a takeover or "
                 "'nvfence preempt --victim' (docs/CONTRACTS.md, epochs)");
    }
}

void Agent::stop_writers_at_fence(const std::string& reason) {
    // Unknown is not owned: the writers stop before anything else, even
    // before the state change is written down.
    auto s = hooks_.stop_writers(clean_text(reason, kMaxReasonBytes));
    if (!s)
        emit(AgentEventKind::action_failed, EventLevel::error,
             "stopping the writers failed: " + s.error().message());
    writers_stopped_ = s.ok();
    hooks_.keepalive();
    fence_reason_ = clean_text(reason, kMaxReasonBytes);
    fenced_at_ = clock_.now();
    fenced_unix_ms_ = unix_ms(clock_.wall_now());
    fenced_boot_id_ = opts_.boot_id;
    action_ = FenceActionState::pending;
}

void Agent::run_fence_actions(bool stop_writers_first) {
    hooks_.keepalive();
    if (stop_writers_first) {
        auto s = hooks_.stop_writers(fence_reason_);
        if (!s)
            emit(AgentEventKind::action_failed, EventLevel::error,
                 "stopping the writers failed: " + s.error().message());
        writers_stopped_ = s.ok();
        hooks_.keepalive();
    }
    if (auto s = hooks_.fence_action(fence_reason_); !s)
        emit(AgentEventKind::action_failed, EventLevel::error,
             "the fence action failed: " + s.error().message() +
                 "; the device still refuses this host's writes");
    hooks_.keepalive();
    // Writers that did not stop keep this host out: no automatic rejoin,
    // no candidacy, until a restart or a rejoin stops them.
    action_ = writers_stopped_ ? FenceActionState::done : FenceActionState::writers_running;
    if (!writers_stopped_)
        emit(AgentEventKind::action_failed, EventLevel::error,
             "the writers did not stop: this host stays FENCED (no automatic rejoin) until they are stopped "
             "('nvfence rejoin' stops them first, as does a restart)");
    (void)persist();
}

// A FENCED host's writers stop again (a restart: they may have been started
// at boot; a rejoin after they did not stop); the action's state records
// whether they did, persisted when it changed.
Status Agent::stop_writers_again() {
    hooks_.keepalive();
    auto s = hooks_.stop_writers(fence_reason_);
    hooks_.keepalive();
    if (!s)
        emit(AgentEventKind::action_failed, EventLevel::error,
             "stopping the writers failed: " + s.error().message() + "; this host stays FENCED");
    const FenceActionState now = s ? FenceActionState::done : FenceActionState::writers_running;
    if (now != action_) {
        action_ = now;
        (void)persist();
    }
    return s;
}

// A pending reboot action found at start in another boot than the one that
// set it pending happened (it never returns, so nothing marked it done);
// where either boot is unknown (a file of an older agent) it is taken as
// happened too: running it again could reboot at every boot, for ever.
bool Agent::reboot_happened(const PersistedState& saved) const {
    if (saved.action != FenceActionState::pending || !opts_.fence_action_reboots) return false;
    return saved.boot_id.empty() || opts_.boot_id.empty() || saved.boot_id != opts_.boot_id;
}

Status Agent::stop_writers_before_release(const char* why) {
    hooks_.keepalive();
    auto s = hooks_.stop_writers(why);
    hooks_.keepalive();
    if (!s) {
        last_error_ = std::string("stopping the writers failed (") + s.error().message() +
                      "): the reservation is kept, so they cannot write in a window nobody fences";
        emit(AgentEventKind::action_failed, EventLevel::error, last_error_);
    }
    return s;
}

bool Agent::generation_went_back(const ReservationStatus& st) {
    if (!last_gen_ || st.generation >= *last_gen_) return false;
    // GEN is 32 bits and may wrap; only a fall from near the top to near
    // zero is a wrap, anything else is lost state.
    if (*last_gen_ >= 0xf0000000u && st.generation < 0x10000000u) return false;
    emit(AgentEventKind::generation_reset, EventLevel::warning,
         "generation went backwards (" + std::to_string(*last_gen_) + " -> " + std::to_string(st.generation) +
             "): the target restarted or lost its reservation state",
         &st);
    ++restarts_seen_;
    return true;
}

void Agent::note_report(const ReservationStatus& st, const CheckNotes& notes) {
    const Registrant* h = st.holder();
    const uint64_t holder = h ? h->key : 0;
    if (last_gen_ && holder != last_holder_)
        emit(AgentEventKind::holder_changed, EventLevel::info,
             "holder changed: " + key_text(last_holder_) + " -> " + key_text(holder), &st);
    const auto entries = static_cast<size_t>(std::count_if(
        st.registrants.begin(), st.registrants.end(),
        [&](const Registrant& r) { return r.host_id == self_; }));
    if (entries > self_entries_ && self_entries_ > 0 && !host_id_shared_reported_) {
        host_id_shared_reported_ = true;
        emit(AgentEventKind::host_id_shared, EventLevel::warning,
             std::to_string(entries) + " registrant entries carry this host's host id " +
                 format_host_id(self_) + " (was " + std::to_string(self_entries_) +
                 "): another host may share this host id; give every host a unique "
                 "/etc/nvme/hostid",
             &st);
    }
    if (notes.lost > 0 || notes.more_pending)
        emit(AgentEventKind::notification_overflow, EventLevel::warning,
             "reservation notification log overflow: " +
                 (notes.lost ? std::to_string(notes.lost) + " notification(s) lost"
                             : std::string("more pages pending than read per check")) +
                 "; the Report decides");
    report_ = st;
    last_gen_ = st.generation;
    last_holder_ = holder;
    self_entries_ = std::max(self_entries_, entries);
    // Fence::verify() raised the floor from this Report; say loudly what it
    // could not use.
    report_epochs();
}

void Agent::observe(const ReservationStatus& st, const CheckNotes& notes) {
    Observation o;
    o.kind = ObservationKind::report;
    o.generation_reset = generation_went_back(st);
    note_report(st, notes);
    if (check_only()) {
        // Every check of a watcher decides, FENCED included (the key back).
        if (state_ == AgentState::starting || state_ == AgentState::stopping) return;
        o.report = &st;
        o.notes = notes;
        o.unfenced_key = unfenced_key_;
        (void)decide(o);
        NVF_INVARIANT(state_ != AgentState::watching || key_ != 0);
        return;
    }
    if (state_ != AgentState::standby && state_ != AgentState::holder) return;
    NVF_INVARIANT(key_ != 0);
    o.report = &st;
    o.notes = notes;
    (void)decide(o);
}

void Agent::check() {
    if (state_ == AgentState::starting) return;
    const auto interval = Clock::Ms(opts_.interval_ms);
    const auto t0 = clock_.now();
    if (checks_ > 0 && t0 > next_check_ + interval)
        emit(AgentEventKind::loop_stalled, EventLevel::warning,
             "check ran " + std::to_string(ms(since(next_check_, t0))) + " ms late (interval " +
                 std::to_string(opts_.interval_ms) +
                 " ms): the agent was paused or starved; checking now");
    timed_.reset_slowest();
    const CheckNotes notes = drain_notifications(true);
    // Before the Report: `on` records after it registers, so a record read
    // now names a registration the Report shows (or its removal).
    const bool unseen = state_ == AgentState::waiting || state_ == AgentState::fenced;
    unfenced_key_ = check_only() && unseen ? read_unfenced_key() : 0;
    auto st = fence_.verify();
    ++checks_;
    if (!st) {
        ++failures_;
        last_error_ = "reading the reservation failed: " + st.error().message();
        if (failures_ == 1)
            emit(AgentEventKind::check_failed, EventLevel::warning,
                 last_error_ + "; state " + agent_state_name(state_) + " kept, retrying every interval");
        else if (failures_ % 60 == 0)
            emit(AgentEventKind::check_failed, EventLevel::warning,
                 "still failing after " + std::to_string(failures_) + " checks: " + last_error_);
        check_view();
    } else {
        view_lost_ = false;
        if (failures_ > 0)
            emit(AgentEventKind::check_recovered, EventLevel::info,
                 "reservation readable again after " + std::to_string(failures_) + " failed check(s)");
        failures_ = 0;
        last_ok_ = clock_.now();
        last_ok_wall_ = clock_.wall_now();
        observe(*st, notes);
        rejoin_if_auto(*st);
    }
    const auto t1 = clock_.now();
    check_timing(t0, t1);
    next_check_ = std::max(t0 + interval, t1);
    hooks_.keepalive();
}

// Registrants Only with role = acquire, on a rejoin (the operator's or the
// cluster manager's explicit act: fence_nvfence `on` asks it): the holder
// has nothing the other registrants lack, the reservation only keeps
// unregistered hosts out, and unfencing promises one. A namespace nobody
// reserves (the first start's Acquire failed or crashed, a target restart
// without PTPL wiped it) is taken (nvfence-sim, Pacemaker schedules 301 and
// 4). Under Write Exclusive holding is writing: only the first start of a
// fresh state acquires; and no check ever does (safety rule 2).
void Agent::keep_reserved(const ReservationStatus& st) {
    if (opts_.type != ResvType::write_exclusive_reg_only || opts_.role != StartRole::acquire) return;
    if (state_ != AgentState::standby || st.type != ResvType::none || !st.find_host(self_)) return;
    (void)acquire_for_start_role();
}

void Agent::check_timing(Clock::TimePoint t0, Clock::TimePoint t1) {
    const auto took = since(t0, t1);
    if (took > Clock::Ms(opts_.interval_ms)) {
        if (!slow_)
            emit(AgentEventKind::slow_check, EventLevel::warning,
                 "check took " + std::to_string(ms(took)) + " ms, longer than the interval (" +
                     std::to_string(opts_.interval_ms) + " ms): the device is slow (slowest command " +
                     std::to_string(ms(timed_.slowest())) + " ms)");
        slow_ = true;
    } else if (slow_) {
        slow_ = false;
        emit(AgentEventKind::slow_check, EventLevel::info,
             "the device is responsive again: check took " + std::to_string(ms(took)) + " ms");
    }
}

void Agent::check_view() {
    if (view_lost_ || !last_ok_) return;
    if (state_ != AgentState::holder && state_ != AgentState::standby) return;
    const uint32_t bound_ms = opts_.view_timeout_ms
                                  ? opts_.view_timeout_ms
                                  : 3 * opts_.interval_ms + opts_.device_timeout_ms;
    const auto blind = since(*last_ok_, clock_.now());
    if (blind < Clock::Ms(bound_ms)) return;
    view_lost_ = true;
    Observation o;
    o.kind = ObservationKind::view_lost;
    o.text = "lost the view of the device: no check succeeded for " + std::to_string(ms(blind)) +
             " ms (bound " + std::to_string(bound_ms) + " ms; last error: " + last_error_ + ")";
    emit(AgentEventKind::check_failed, EventLevel::error, o.text);
    (void)decide(o);
}

void Agent::request_check() { next_check_ = clock_.now(); }

Clock::Ms Agent::until_next_check() {
    const auto now = clock_.now();
    if (now >= next_check_) return Clock::Ms(0);
    return std::min(since(now, next_check_), Clock::Ms(opts_.interval_ms));
}

void Agent::run(const std::function<bool(Clock::Ms)>& wait) {
    for (;;) {
        if (clock_.now() >= next_check_) check();
        if (!wait(until_next_check())) return;
    }
}

Status Agent::apply_start_role(const ReservationStatus& st, bool resumed, bool fresh) {
    if (opts_.role != StartRole::acquire || state_ != AgentState::standby) return Ok{};
    if (!fresh) {
        // After a preemption, handoff, rejoin or any restart, taking the
        // reservation is the operator's (or cluster manager's) act only.
        emit(AgentEventKind::info, EventLevel::info,
             "role acquire applies to the first start of a fresh state only; standing by", &st);
        return Ok{};
    }
    if (const Registrant* h = st.holder()) {
        emit(AgentEventKind::info, EventLevel::info,
             "role acquire: " + key_text(h->key) + " holds the reservation; standing by", &st);
        return Ok{};
    }
    if (resumed) {
        // An acquisition always takes a fresh epoch, also with a key kept
        // from before the restart. The agent takes the new key when the
        // acquire succeeds, or from the Report when it fails (a crash in
        // between resumes with it: it is this node's, persisted first).
        auto j = fence_.join(std::nullopt, true);
        if (!j) {
            emit(AgentEventKind::info, EventLevel::warning,
                 "role acquire: taking a fresh key failed (" + j.error().message() + "); standing by");
            sync_after_request("re-key");
            return Ok{};
        }
        set_baseline(j->after);
    }
    return acquire_for_start_role();
}

Status Agent::acquire_for_start_role() {
    auto a = fence_.acquire();
    if (!a) {
        if (a.error() == Errc::held_by_other) {
            const auto& lr = fence_.last_report();
            const Registrant* h = lr ? lr->holder() : nullptr;
            emit(AgentEventKind::info, EventLevel::info,
                 "role acquire: " + (h ? key_text(h->key) : std::string("another host")) +
                     " acquired first; standing by",
                 lr ? &*lr : nullptr);
        } else {
            emit(AgentEventKind::info, EventLevel::warning,
                 "role acquire: acquiring failed (" + a.error().message() + "); standing by");
        }
        sync_after_request("acquire");
        return Ok{};
    }
    set_baseline(a->after);
    const Registrant* me = a->after.find_host(self_);
    NVF_INVARIANT(me && me->key == a->key && holds(a->after, *me));
    Observation o;
    o.kind = ObservationKind::acquired;
    o.report = &a->after;
    o.key = a->key;
    o.text = std::string("acquired the reservation (") + resv_type_short(opts_.type) + ") with " +
             key_text(a->key) + ": nobody held it";
    (void)decide(o);
    return Ok{};
}

// fence_nvfence's record of this node's unfencing (check-only watchers):
// its key when it is one of this node's and the record is of this boot,
// else 0. A record of an earlier boot (or of a fence_nvfence that did not
// say its boot) is not an unfencing of this boot: a node the cluster
// manager has not unfenced since it booted is not fenced (a reinstall, a
// state file removed, would otherwise fence it at once).
uint64_t Agent::read_unfenced_key() const {
    if (!statefile_) return 0;
    const UnfencedRecord r = statefile_->unfenced_record();
    const auto f = decode_key(r.key);
    if (!f || f->tag != opts_.tag || f->node != opts_.node) return 0;
    return r.boot_id == opts_.boot_id ? r.key : 0;
}

Status Agent::load_start_state(std::optional<PersistedState>& saved) {
    if (statefile_) {
        auto l = statefile_->load();
        if (!l) {
            last_error_ = "cannot use the state file " + statefile_->path() + ": " + l.error().message() +
                          " (it is never guessed around: inspect it, or remove it to start afresh)";
            return l.error();
        }
        saved = *l;
    }
    if (epochs_) {
        auto f = epochs_->load();
        if (!f) {
            last_error_ = "cannot read the epoch file " + epochs_->path() + ": " + f.error().message();
            return f.error();
        }
        start_floor_ = *f;
    }
    const PersistedRole role = saved ? saved->role : PersistedRole::none;
    if (role != PersistedRole::none && (saved->node != opts_.node || saved->tag != opts_.tag)) {
        last_error_ = "the state file " + statefile_->path() + " belongs to node " +
                      std::to_string(saved->node) + " (cluster tag " + std::to_string(saved->tag) +
                      ", role " + persisted_role_name(role) + ") but this agent is node " +
                      std::to_string(opts_.node) + " (cluster tag " + std::to_string(opts_.tag) +
                      "): unregister with the old identity first, or fix node_id/cluster_tag";
        return make_error_code(Errc::refused);
    }
    return Ok{};
}

Status Agent::start() {
    NVF_INVARIANT(state_ == AgentState::starting);
    std::optional<PersistedState> saved;
    if (auto l = load_start_state(saved); !l) return l;
    if (auto m = resv_.set_notification_mask(NotificationMask{}); !m)
        emit(AgentEventKind::info, EventLevel::info,
             "could not enable reservation notifications (" + m.error().message() + ")");
    const CheckNotes stale = drain_notifications(false);
    if (stale.pages > 0)
        emit(AgentEventKind::info, EventLevel::info,
             "discarded " + std::to_string(stale.pages) + " reservation notification(s) from before this start");
    unfenced_key_ = check_only() ? read_unfenced_key() : 0;  // before the Report, as in check()
    auto st = fence_.verify();
    if (!st) {
        last_error_ = "cannot read the reservation: " + st.error().message();
        return st.error();
    }
    set_baseline(*st);
    last_ok_ = clock_.now();
    last_ok_wall_ = clock_.wall_now();
    next_check_ = clock_.now() + Clock::Ms(opts_.interval_ms);
    if (saved && saved->role == PersistedRole::fenced) return resume_fenced(*saved, *st);
    return resume(saved, *st, !saved.has_value());
}

Status Agent::resume_fenced(const PersistedState& saved, const ReservationStatus& st) {
    fence_reason_ = saved.reason;
    fenced_unix_ms_ = saved.fenced_unix_ms;
    fenced_boot_id_ = saved.boot_id;
    action_ = saved.action;
    const bool rebooted = reboot_happened(saved);
    if (rebooted) action_ = FenceActionState::done;
    const int64_t age = std::max<int64_t>(0, unix_ms(clock_.wall_now()) - fenced_unix_ms_);
    fenced_at_ = clock_.now() - Clock::Ms(age);
    Observation o;
    o.kind = ObservationKind::resumed_fenced;
    o.report = &st;
    o.key = saved.key;
    o.text = saved.reason;
    (void)decide(o);
    if (state_ != AgentState::fenced) return Ok{};  // a watcher whose node was unfenced meanwhile
    if (action_ == FenceActionState::pending) {
        // Killed (watchdog, crash) before the action finished: run it now.
        emit(AgentEventKind::info, EventLevel::warning,
             "the fence action was pending when the agent stopped: running it again");
        run_fence_actions(true);
        return Ok{};
    }
    if (rebooted) {
        emit(AgentEventKind::info, EventLevel::warning,
             "the reboot fence action was pending when the agent stopped, and this is " +
                 std::string(saved.boot_id.empty() || opts_.boot_id.empty() ? "a boot that cannot be told from it"
                                                                           : "a later boot") +
                 ": the reboot happened; not rebooting again. FENCED until 'nvfence rejoin' (or fence_nvfence "
                 "'on') brings this host back");
        (void)persist();
    }
    // The writers may have been started again at boot; a done action is
    // not repeated, or a reboot action would loop.
    (void)stop_writers_again();
    return Ok{};
}

Status Agent::resume(const std::optional<PersistedState>& saved, const ReservationStatus& st, bool fresh) {
    const PersistedRole role = saved ? saved->role : PersistedRole::none;
    if (check_only()) {
        // Nothing is registered or adopted: the Report and the file decide.
        Observation w;
        w.kind = ObservationKind::resumed;
        w.report = &st;
        w.persisted = role;
        w.key = saved ? saved->key : 0;
        w.unfenced_key = unfenced_key_;
        (void)decide(w);
        NVF_INVARIANT(state_ == AgentState::waiting || state_ == AgentState::watching ||
                      state_ == AgentState::fenced);
        return Ok{};
    }
    const Registrant* me = st.find_host(self_);
    Observation o;
    o.kind = ObservationKind::resumed;
    o.report = &st;
    o.persisted = role;
    o.found_key = me ? me->key : 0;
    if (role == PersistedRole::standby || role == PersistedRole::holder) {
        o.key = saved->key;
        o.found_ours = me && (me->key == saved->key || our_newer_key(me->key, saved->key));
        o.text = "resumed after a restart";
        (void)decide(o);
        // A holder that came back without the reservation lost it while
        // it was down: the start role must not win it back.
        if (role == PersistedRole::holder) return Ok{};
        return apply_start_role(st, true, fresh);
    }
    if (!me) return register_fresh(fresh);
    if (!ours(me->key)) {
        last_error_ = "this host's host id " + format_host_id(self_) + " is already registered with key " +
                      key_text(me->key) + ", which is not node " + std::to_string(opts_.node) +
                      "'s (cluster tag " + std::to_string(opts_.tag) +
                      "): another host shares this host id, or another tool registered it";
        return make_error_code(Errc::host_id_conflict);
    }
    o.key = me->key;
    o.found_ours = true;
    o.text = "found this host registered with " + key_text(me->key);
    (void)decide(o);
    return apply_start_role(st, true, fresh);
}

Status Agent::register_fresh(bool fresh) {
    auto j = fence_.join(std::nullopt, false);
    if (!j) {
        last_error_ = "registering failed: " + j.error().message();
        return j.error();
    }
    NVF_INVARIANT(j->key != 0 && ours(j->key));
    set_baseline(j->after);
    Observation o;
    o.kind = ObservationKind::registered;
    o.report = &j->after;
    o.key = j->key;
    o.text = "registered with fresh key " + key_text(j->key) + " (epoch " + std::to_string(epoch_of(j->key)) + ")";
    (void)decide(o);
    return apply_start_role(j->after, false, fresh);
}

void Agent::sync_after_request(const char* op) {
    const auto& lr = fence_.last_report();
    if (!lr) return;
    const ReservationStatus st = *lr;
    const Registrant* me = st.find_host(self_);
    if (me && me->key != key_ && our_newer_key(me->key, key_)) {
        set_baseline(st);
        Observation o;
        o.kind = ObservationKind::rekeyed;
        o.report = &st;
        o.key = me->key;
        o.holding = holds(st, *me);
        o.text = o.holding ? std::string(op) + " left this host holding with " + key_text(me->key)
                           : std::string(op) + " left this host registered with fresh key " + key_text(me->key) +
                                 ", not holding";
        (void)decide(o);
        return;
    }
    observe(st, CheckNotes{});
}

ControlReply Agent::status() {
    ControlReply r;
    const auto now = clock_.now();
    r.state = state_;
    r.mode = opts_.type;
    r.node = opts_.node;
    r.tag = opts_.tag;
    r.key = key_;
    if (report_) {
        const Registrant* h = report_->holder();
        r.holder = h ? h->key : 0;
        r.holder_self = h && h->host_id == self_;
        r.generation = report_->generation;
        r.registrants = static_cast<uint16_t>(std::min<size_t>(report_->registrants.size(), UINT16_MAX));
        r.resv_type = report_->type;
    }
    r.check_only = check_only();
    r.check_failures = failures_;
    r.pid = static_cast<uint32_t>(::getpid());
    r.checks = checks_;
    r.notifications = notifications_;
    if (last_ok_) {
        r.last_check_age_ms = ms(since(*last_ok_, now));
        r.last_check_unix_ms = static_cast<uint64_t>(std::max<int64_t>(0, unix_ms(last_ok_wall_)));
    }
    if (state_ == AgentState::fenced && fenced_at_) r.fenced_for_ms = ms(since(*fenced_at_, now));
    r.uptime_ms = ms(since(started_, now));
    r.volume = opts_.volume;
    r.device = opts_.device;
    r.fence_reason = state_ == AgentState::fenced ? fence_reason_ : std::string();
    r.last_error = failures_ > 0 ? last_error_ : std::string();
    return r;
}

ControlReply Agent::reply_for(const ControlRequest& req) {
    ControlReply r = status();
    r.op = req.op;
    r.id = req.id;
    return r;
}

ControlReply Agent::fail_reply(const ControlRequest& req, std::error_code ec, const std::string& msg) {
    ControlReply r = reply_for(req);
    r.exit_code = static_cast<uint8_t>(exit_code_for(ec));
    if (r.exit_code == 0) r.exit_code = static_cast<uint8_t>(ExitCode::failure);
    r.message = msg;
    return r;
}

ControlReply Agent::handle(const ControlRequest& req, const std::string& who) {
    const std::string by = who.empty() ? std::string("request") : "request from " + who;
    if (req.op == ControlOp::status) {
        ControlReply r = reply_for(req);
        r.message = std::string(agent_state_name(state_)) + (key_ ? " with " + key_text(key_) : "");
        return r;
    }
    if (check_only()) return refuse_check_only(req, by);
    if (state_ == AgentState::starting || state_ == AgentState::stopping)
        return fail_reply(req, make_error_code(Errc::refused),
                          std::string("the agent is ") + agent_state_name(state_) + "; try again");
    switch (req.op) {
    case ControlOp::takeover: return do_takeover(req, by);
    case ControlOp::handoff: return do_handoff(req, by);
    case ControlOp::rejoin: return do_rejoin(req, by);
    case ControlOp::status: break;
    }
    return fail_reply(req, make_error_code(Errc::protocol), "unknown request");
}

// A check-only watcher changes nothing on the device: takeover, handoff
// and rejoin are the cluster manager's (fence_nvfence acts on the device
// directly) or the operator's ('nvfence' without the agent).
ControlReply Agent::refuse_check_only(const ControlRequest& req, const std::string& by) {
    const std::string msg = std::string("nvfenced is a check-only watcher (role = watch): it never registers, ") +
                            "takes over, releases or rejoins; '" + control_op_name(req.op) +
                            "' is refused. Unfence with fence_nvfence 'on' (or 'nvfence register'), fence with "
                            "fence_nvfence 'off' (or 'nvfence preempt'): they act on the device directly";
    emit(AgentEventKind::request, EventLevel::warning, by + ": " + msg);
    return fail_reply(req, make_error_code(Errc::refused), msg);
}

ControlReply Agent::do_takeover(const ControlRequest& req, const std::string& by) {
    // A host fenced while it was not looking (a frozen VM, its next check
    // not due yet) must not take over: Fence::takeover would register it
    // again with a fresh key and preempt the host that fenced it
    // (nvfence-sim, a two-node Pacemaker cluster's frozen node that resumed
    // and fenced the healthy one through this agent). A check first: a key
    // that is gone makes it FENCED, refused below.
    if (state_ == AgentState::standby || state_ == AgentState::holder) {
        check();
        if (failures_ > 0 || !report_)
            return fail_reply(req, make_error_code(Errc::timeout), "cannot read the reservation: " + last_error_);
    }
    if (state_ == AgentState::fenced) {
        // Leaving FENCED is the operator's deliberate act (rejoin), after
        // making sure the writers are stopped; a takeover is not that act.
        const std::string msg = "this host is FENCED (" + fence_reason_ +
                                "); run 'nvfence rejoin' first, then 'nvfence takeover'";
        emit(AgentEventKind::request, EventLevel::warning, by + ": takeover refused: " + msg);
        return fail_reply(req, make_error_code(Errc::fenced), msg);
    }
    std::optional<uint64_t> victim;
    if (req.victim) victim = req.victim;
    // The takeover is exactly this key's (nvfence-sim seed 39191188853768:
    // a preempt between the check above and the takeover's own Report must
    // not let it register this host again).
    NVF_INVARIANT(state_ == AgentState::standby || state_ == AgentState::holder);
    auto out = fence_.takeover_registered(key_, victim);
    if (!out) return takeover_failed(req, out.error(), victim, by);
    return took_over(req, *out, by);
}

// The target restarted since the token was asked for: its reservations
// are gone, with the key of any term after this one, so the device can no
// longer refuse a stale token; the elector can (a new token needs a live
// leadership). Asked again (the simulator's seed 128160025063069: a winner
// paused past its lease, a peer took over with the next token, the target
// restarted before the winner resumed, and the stale token took the
// emptied device).
std::optional<WinDecision> Agent::reissue_after_restart(uint32_t token, std::optional<uint64_t> restarts_at_ask) const {
    if (!restarts_at_ask || restarts_seen_ == *restarts_at_ask) return std::nullopt;
    NVF_INVARIANT(restarts_seen_ > *restarts_at_ask);
    return WinDecision{WinAction::reissue, std::nullopt, token,
                       "the target restarted since token " + std::to_string(token) +
                           " was asked for: asking the elector again"};
}

TermResult Agent::take_term(uint32_t token, const std::string& who,
                             const std::function<Clock::TimePoint()>& act_before,
                             std::optional<uint64_t> restarts_at_ask) {
    const std::string by = "request from " + who + " (token " + std::to_string(token) + ")";
    ControlRequest req;
    req.op = ControlOp::takeover;
    TermResult t;
    const auto refuse = [&](std::error_code ec, const std::string& msg) {
        t.reply = fail_reply(req, ec, msg);
        return t;
    };
    if (!candidate())
        return refuse(make_error_code(state_ == AgentState::fenced ? Errc::fenced : Errc::refused),
                      std::string("the agent is ") + agent_state_name(state_) +
                          (state_ == AgentState::fenced ? " (" + fence_reason_ + ")" : std::string()) +
                          ": not acting on token " + std::to_string(token));
    // One Report, read by this check, decides and is the one every command
    // below follows; the check also notices a preemption of this host first.
    const AgentState before = state_;
    const uint64_t key_before = key_;
    check();
    if (failures_ > 0 || !report_) return refuse(make_error_code(Errc::timeout), "cannot read the reservation: " + last_error_);
    // Anything that happened to this host during the check (fenced, rejoined
    // with a fresh key that may even equal the token) belongs to another
    // story than this term's: not acted on.
    if (state_ != before || key_ != key_before)
        return refuse(make_error_code(Errc::fenced), std::string("the agent went from ") + agent_state_name(before) +
                                                         " to " + agent_state_name(state_) +
                                                         " while reading the device: not acting on token " +
                                                         std::to_string(token));
    if (auto again = reissue_after_restart(token, restarts_at_ask)) {
        t.decision = std::move(again);
        return refuse(make_error_code(Errc::lost_race), t.decision->why);
    }
    // The lease may have run out while the device was read (a stall, a
    // paused VM): only a term whose lease may still live acts.
    if (clock_.now() >= act_before())
        return refuse(make_error_code(Errc::timeout), "the lease may have expired while reading the device: "
                                                      "not acting on token " + std::to_string(token));
    uint32_t floor = 0;
    if (epochs_) {
        auto f = epochs_->load();
        if (!f) return refuse(f.error(), "cannot read the epoch floor: " + f.error().message());
        floor = *f;
    }
    const ReservationStatus seen = *report_;
    t.decision = decide_on_win(token, seen, self_, opts_.tag, floor);
    if (t.decision->action == WinAction::stale || t.decision->action == WinAction::reissue)
        return refuse(make_error_code(Errc::lost_race), t.decision->why);
    // Asked again right before each command: a pause between them (the
    // simulator's seed 1049508: 23 minutes between the Register and the
    // Acquire) must not carry the term out after its lease.
    bool ran_out = false;
    auto out = fence_.takeover_with_token(seen, token, [&] {
        ran_out = clock_.now() >= act_before();
        return !ran_out;
    });
    if (!out) {
        t.reply = takeover_failed(req, out.error(), t.decision->victim, by,
                                  ran_out ? "the lease may have expired during the takeover: not acting on token " +
                                                std::to_string(token)
                                          : std::string());
        return t;
    }
    // The key's epoch is the token, exactly: anything else is a broken rule.
    NVF_INVARIANT(decode_key(out->key) && decode_key(out->key)->epoch == token);
    t.reply = took_over(req, *out, by);
    return t;
}

void Agent::bound_commands_by_lease(std::function<Clock::TimePoint()> act_before) {
    timed_.set_deadline([this, f = std::move(act_before)]() -> std::optional<Clock::TimePoint> {
        if (!f || !opts_.holder_needs_lease || state_ != AgentState::holder) return std::nullopt;
        return f();
    });
}

Status Agent::lose_lease(const std::string& why) {
    Observation o;
    o.kind = ObservationKind::lease_lost;
    o.report = report_ ? &*report_ : nullptr;
    o.text = why;
    return decide(o);
}

bool Agent::candidate() const {
    if (state_ == AgentState::standby || state_ == AgentState::holder) return true;
    if (state_ != AgentState::fenced || !opts_.rejoin_auto || action_ != FenceActionState::done || !report_)
        return false;
    const Registrant* me = report_->find_host(self_);
    return me && me->key == key_ && key_ != 0 && holds(*report_, *me);
}

ControlReply Agent::takeover_failed(const ControlRequest& req, std::error_code ec, std::optional<uint64_t> victim,
                                    const std::string& by, std::string why) {
    const auto& lr = fence_.last_report();
    const Registrant* h = lr ? lr->holder() : nullptr;
    std::string msg = std::move(why);
    if (msg.empty()) {  // no words from the caller
        if (ec == Errc::lost_race)
            msg = "lost the takeover race: " + (h ? key_text(h->key) : std::string("another host")) + " holds now";
        else if (ec == Errc::own_key && victim)
            msg = "the victim " + key_text(*victim) + " is this host's own key";
        else if (ec == Errc::not_registered)
            msg = "this host's key " + key_text(key_) + " was removed (preempted by another host) before the "
                  "takeover; nothing was sent: run 'nvfence rejoin' first, then 'nvfence takeover'";
        else
            msg = "takeover failed: " + ec.message();
    }
    emit(AgentEventKind::request, EventLevel::warning, by + ": takeover: " + msg, lr ? &*lr : nullptr);
    sync_after_request("the failed takeover");
    return fail_reply(req, ec, msg);
}

ControlReply Agent::took_over(const ControlRequest& req, const Outcome& out, const std::string& by) {
    const Registrant* me = out.after.find_host(self_);
    NVF_INVARIANT(me && me->key == out.key && holds(out.after, *me));
    set_baseline(out.after);
    Observation o;
    o.kind = ObservationKind::acquired;
    o.report = &out.after;
    o.key = out.key;
    std::string msg;
    if (!out.changed) {
        msg = "already the holder with " + key_text(out.key) + "; nothing changed";
        emit(AgentEventKind::request, EventLevel::info, by + ": takeover: " + msg);
        // The device showed this host holding before the next check did.
        if (state_ != AgentState::holder || key_ != out.key) {
            o.text = by + ": takeover: " + msg;
            (void)decide(o);
        }
    } else {
        const bool rekeyed = out.replaced && out.previous_holder == out.replaced;
        msg = std::string(rekeyed ? "re-keyed the reservation to " : "took the reservation with fresh key ") +
              key_text(out.key);
        if (out.previous_holder && *out.previous_holder != out.replaced.value_or(0))
            msg += ", preempted-and-aborted " + key_text(*out.previous_holder);
        if (!out.removed.empty()) {
            msg += " (removed";
            for (auto k : out.removed) msg += " " + key_text(k);
            msg += ")";
        }
        o.text = by + ": takeover: " + msg;
        (void)decide(o);
    }
    ControlReply r = reply_for(req);
    r.changed = out.changed;
    r.previous_holder = out.previous_holder.value_or(0);
    r.message = msg;
    return r;
}

ControlReply Agent::do_handoff(const ControlRequest& req, const std::string& by) {
    if (state_ == AgentState::fenced)
        return fail_reply(req, make_error_code(Errc::not_holder),
                          "this host is FENCED and holds nothing (" + fence_reason_ + ")");
    if (state_ == AgentState::standby) {
        const Registrant* h = report_ ? report_->holder() : nullptr;
        if (h && h->host_id != self_)
            return fail_reply(req, make_error_code(Errc::not_holder),
                              "this host does not hold the reservation; " + key_text(h->key) + " does");
        ControlReply r = reply_for(req);
        r.message = "not holding the reservation; nothing to release";
        return r;
    }
    if (auto w = stop_writers_before_release("handoff"); !w)
        return fail_reply(req, w.error(), "handoff refused: " + last_error_);
    auto out = fence_.release();
    if (!out) {
        const std::string msg = "release failed: " + out.error().message();
        emit(AgentEventKind::request, EventLevel::warning, by + ": handoff: " + msg);
        sync_after_request("the failed release");
        return fail_reply(req, out.error(), msg);
    }
    set_baseline(out->after);
    const std::string msg = "released the reservation; still registered with " + key_text(key_);
    Observation o;
    o.kind = ObservationKind::released;
    o.report = &out->after;
    o.text = by + ": handoff: " + msg;
    (void)decide(o);
    ControlReply r = reply_for(req);
    r.changed = out->changed;
    r.message = msg;
    return r;
}

ControlReply Agent::do_rejoin(const ControlRequest& req, const std::string& by) {
    if (state_ != AgentState::fenced) {
        const AgentState before = state_;
        if (state_ == AgentState::standby)
            if (auto st = fence_.verify()) keep_reserved(*st);
        ControlReply r = reply_for(req);
        r.changed = before != AgentState::holder && state_ == AgentState::holder;
        r.message = std::string("not fenced (") + agent_state_name(state_) + ")" +
                    (r.changed ? "; took the reservation nobody held" : ": nothing to do");
        return r;
    }
    if (action_ == FenceActionState::writers_running)
        if (auto w = stop_writers_again(); !w)
            return fail_reply(req, w.error(),
                              "rejoin refused: this host's writers did not stop (" + w.error().message() +
                                  "); still FENCED");
    (void)drain_notifications(false);
    auto out = fence_.join(std::nullopt, true);
    if (!out) {
        const std::string msg = "rejoin failed: " + out.error().message() + "; still FENCED";
        emit(AgentEventKind::request, EventLevel::warning, by + ": " + msg);
        return fail_reply(req, out.error(), msg);
    }
    if (auto r = release_kept_hold(out->after); !r) {
        const std::string msg = "rejoin failed: releasing the reservation this host still holds failed: " +
                                r.error().message() + "; still FENCED";
        emit(AgentEventKind::request, EventLevel::warning, by + ": " + msg);
        return fail_reply(req, r.error(), msg);
    }
    const Registrant* me = out->after.find_host(self_);
    NVF_INVARIANT(me && me->key == out->key);
    set_baseline(out->after);
    host_id_shared_reported_ = false;
    const std::string msg = "rejoined with fresh key " + key_text(out->key) + " (epoch " +
                            std::to_string(epoch_of(out->key)) + ")";
    Observation o;
    o.kind = ObservationKind::rejoined;
    o.report = &out->after;
    o.key = out->key;
    o.holding = holds(out->after, *me);
    o.text = by + ": " + msg;
    (void)decide(o);
    // A rejoin after a target restart without PTPL finds no reservation:
    // under Registrants Only, role = acquire takes it now (keep_reserved).
    keep_reserved(out->after);
    ControlReply r = reply_for(req);
    r.changed = true;
    r.message = state_ == AgentState::holder ? msg + "; took the reservation nobody held" : msg;
    return r;
}

// A FENCED host that still held the reservation (fenced by a lease loss or
// a lost view that no takeover followed; its writers are stopped) holds it
// with the key its rejoin just registered (@p after): it gives it up, as a
// rejoin gives STANDBY and never a hold, which only a takeover (under an
// elector: a won term) grants. Ok when it holds nothing; @p after becomes
// the Report after the release.
Status Agent::release_kept_hold(ReservationStatus& after) {
    const Registrant* me = after.find_host(self_);
    if (!me || !me->holder) return Ok{};
    const uint64_t k = me->key;
    auto out = fence_.release();
    if (!out) return out.error();
    after = out->after;
    emit(AgentEventKind::info, EventLevel::info,
         "rejoin: released the reservation this host still held (re-keyed to " + key_text(k) +
             "): a rejoin never keeps a hold, only a takeover grants one",
         &after);
    return Ok{};
}

// rejoin = auto: the takeover of the next leader removed this host's key;
// once the writers are stopped and the fence action completed (a pending
// action is re-run first, at start), the host is a candidate again. Also
// when this node's own key is registered but not holding (a rejoin that a
// crash cut before the state file said so). Not when the host id is
// registered with another node's key (another host shares it, or the key
// was changed outside the agent): the operator decides then.
void Agent::rejoin_if_auto(const ReservationStatus& st) {
    if (!opts_.rejoin_auto || state_ != AgentState::fenced || action_ != FenceActionState::done) return;
    if (const Registrant* me = st.find_host(self_); me && (!ours(me->key) || me->holder)) return;
    ControlRequest req;
    req.op = ControlOp::rejoin;
    (void)do_rejoin(req, "automatic rejoin (rejoin = auto: writers stopped, fence action done)");
}

Status Agent::stop() {
    const AgentState before = state_;
    Observation o;
    o.kind = ObservationKind::stopped;
    if (check_only() || before == AgentState::starting || before == AgentState::stopping ||
        before == AgentState::fenced) {
        // A watcher sends nothing: the device keeps the node's key as it is.
        o.text = "stopped before the start finished";
        (void)decide(o);
        return Ok{};
    }
    const std::string k = key_text(key_);
    if (before == AgentState::holder) {
        if (auto w = stop_writers_before_release("clean stop"); !w) {
            emit(AgentEventKind::info, EventLevel::error, "stop: the state file keeps HOLDER");
            return w.error();
        }
        auto r = fence_.release();
        if (!r) {
            last_error_ = "releasing the reservation failed: " + r.error().message();
            emit(AgentEventKind::info, EventLevel::error,
                 "stop: " + last_error_ + "; the state file keeps HOLDER");
            return r.error();
        }
        set_baseline(r->after);
    }
    const char* released = before == AgentState::holder ? "released and " : "";
    if (opts_.keep_registration) {
        o.report = report_ ? &*report_ : nullptr;
        o.text = std::string("clean stop: ") + (before == AgentState::holder ? "released; " : "") +
                 "still registered with " + k + " (keep_registration)";
        (void)decide(o);
        return Ok{};
    }
    auto l = fence_.leave();
    if (!l) {
        last_error_ = "unregistering failed: " + l.error().message();
        emit(AgentEventKind::info, EventLevel::error, "stop: " + last_error_);
        Observation failed;
        failed.kind = ObservationKind::unregister_failed;
        failed.text = "stop: unregistering failed; still registered";
        (void)decide(failed);
        return l.error();
    }
    set_baseline(l->after);
    o.report = &l->after;
    o.unregistered = true;
    o.text = std::string("clean stop: ") + released + "unregistered " + k;
    (void)decide(o);
    return Ok{};
}

}  // namespace nvfence
