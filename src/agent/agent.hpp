// SPDX-License-Identifier: MIT
#pragma once
/// @file agent.hpp
/// The core of nvfenced, the host agent: one Agent per shared namespace
/// registers this host, holds the reservation or stands by, watches the
/// device every interval, self-fences when it lost, and answers control
/// requests. It has no clock, device, socket or process of its own: the
/// caller gives it a Clock, a Passthru and AgentHooks, so unit tests replay
/// failure schedules exactly and nvfenced supplies the real ones.
///
/// State machine (AgentState):
///
///     STARTING --start()--> STANDBY | HOLDER | FENCED
///     STANDBY  --takeover request--> HOLDER
///     HOLDER   --release request---> STANDBY
///     STANDBY, HOLDER --check(): registration gone, key replaced,
///                       target restarted, or (exclusive mode) the
///                       reservation lost--> FENCED
///     HOLDER   --check(), shared mode, reservation lost but still
///                registered--> STANDBY
///     FENCED   --rejoin request (operator)--> STANDBY (new epoch)
///     any      --stop()--> STOPPING
///
/// A check-only watcher (role = watch) has its own states and never
/// touches the device's registrations:
///
///     STARTING --start()--> WAITING (the node's key never seen)
///                         | WATCHING (the node's key registered)
///                         | FENCED (seen before, gone now; or still FENCED)
///     WAITING  --check(): the node's key registered--> WATCHING
///     WATCHING --check(): the node's key gone--> FENCED (fence action once)
///     FENCED   --check(): the node's key back (unfenced)--> WATCHING
///     any      --stop()--> STOPPING (device and state file unchanged)
///
/// A takeover request is refused while FENCED: only a rejoin leaves it.
/// Every change goes through decide_transition() (agent_transition.hpp),
/// one pure function of the state and what was observed, and apply(), the
/// only code that changes the state and aborts on a change outside the
/// static table of allowed transitions.
///
/// Safety rules (docs/CONTRACTS.md) kept here:
///  - the device decides: every state is derived from a Report;
///  - nothing but an explicit request (takeover, rejoin) or the configured
///    role at the first start of a fresh state ever registers or acquires;
///    FENCED is left only by a rejoin request, and survives restarts
///    through the state file (with the fence action's progress);
///  - unknown is not owned: a HOLDER that cannot read the device for
///    view_timeout_ms stops claiming HOLDER (by default it fences itself);
///  - writers stop before anything else when the keys are gone, and before
///    the release on a handoff or a clean stop;
///  - every acquisition uses a fresh epoch (Fence persists it first);
///  - on restart the agent resumes from the device, never from memory: it
///    is holder only if the device shows this host holding.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "agent/agent_event.hpp"
#include "agent/agent_state_file.hpp"
#include "agent/agent_transition.hpp"
#include "agent/metrics.hpp"
#include "internal/clock.hpp"
#include "nvfence/control.hpp"
#include "agent/term.hpp"
#include "nvfence/epoch_store.hpp"
#include "nvfence/fence.hpp"
#include "nvfence/passthru.hpp"
#include "nvfence/report.hpp"
#include "nvfence/reservation.hpp"
#include "nvfence/result.hpp"

namespace nvfence {

/// What the agent does at start when it is not already registered.
enum class StartRole : uint8_t {
    standby,  ///< Register and stand by.
    acquire,  ///< Register, then acquire if nobody holds the reservation.
    /// Check-only watcher (fence_scsi_check's part): never registers,
    /// acquires, releases or unregisters; runs the fence action when the
    /// node's key, once seen, is gone. See the state machine above.
    watch,
};

/// Bounds of AgentOptions::interval_ms.
inline constexpr uint32_t kMinIntervalMs = 50;
/// Bounds of AgentOptions::interval_ms.
inline constexpr uint32_t kMaxIntervalMs = 60000;
/// Bounds of AgentOptions::device_timeout_ms.
inline constexpr uint32_t kMinDeviceTimeoutMs = 100;
/// Bounds of AgentOptions::device_timeout_ms.
inline constexpr uint32_t kMaxDeviceTimeoutMs = 120000;
/// Most notification log pages read per check.
inline constexpr uint32_t kMaxNotificationPages = 64;

/// How the agent takes part. Invalid options are a broken invariant: the
/// constructor aborts (validate with parse_agent_settings first).
struct AgentOptions {
    uint8_t tag = 0;                               ///< Cluster tag of our keys.
    uint8_t node = 0;                              ///< Node id, 1..255.
    ResvType type = ResvType::write_exclusive;     ///< write_exclusive or write_exclusive_reg_only.
    StartRole role = StartRole::standby;           ///< Role at start.
    uint32_t interval_ms = 1000;                   ///< Watch period.
    uint32_t device_timeout_ms = 5000;             ///< Bound on each device command.
    bool keep_registration = false;                ///< stop(): stay registered.
    /// Every Register the agent sends sets CPTPL (11b): the device keeps
    /// the registrations and the reservation through power loss.
    bool ptpl = false;
    /// rejoin = auto: a FENCED host whose registration is gone registers
    /// again (a candidate, never a holder) once its writers are stopped and
    /// its fence action has completed; off: only `nvfence rejoin` does.
    bool rejoin_auto = false;
    /// HOLDER only under a live elector lease (elector = etcd with
    /// lease_loss = fence): a start that finds this host holding goes
    /// FENCED (the lease ended with the process that held it); the writers
    /// are stopped and the fence action run, then (rejoin_auto) the host is
    /// a candidate again and a won term re-keys it.
    bool holder_needs_lease = false;
    uint32_t max_notification_pages = 16;          ///< Log pages read per check, 1..64.
    /// After this long without a successful check (0: 3 x interval_ms +
    /// device_timeout_ms) the agent has lost its view of the device.
    uint32_t view_timeout_ms = 0;
    /// A HOLDER that lost its view fences itself (as sbd does when it loses
    /// its disk); off: it only stops claiming HOLDER (STANDBY).
    bool fence_on_view_loss = true;
    /// The fence action reboots this host (fence_action = reboot). One
    /// found pending at start in another boot than the one that set it
    /// pending (boot_id), or where the boot cannot be told, has happened:
    /// it is done, not run again (a reboot would loop).
    bool fence_action_reboots = false;
    /// This boot's id (current_boot_id(); "" unknown): persisted with
    /// FENCED, and compared with the boot of fence_nvfence's record of an
    /// unfencing (a record of another boot is not this boot's unfencing).
    std::string boot_id;
    std::string volume;                            ///< Volume name (status only).
    std::string device;                            ///< Device path (status only).
};

/// What Agent::take_term did: the decision on the Report, and the outcome
/// as a takeover request's reply (exit_code 0: holding with the token).
struct TermResult {
    std::optional<WinDecision> decision;  ///< Decided on the Report the commands followed (none: refused before).
    ControlReply reply;    ///< The outcome.
};

/// What the agent needs from its host process besides the device.
class AgentHooks {
public:
    virtual ~AgentHooks() = default;
    /// Reports one event (nvfenced logs it). Must not call back into the agent.
    virtual void event(const AgentEvent& e) = 0;
    /// Stops every writer the agent manages; bounded. Called once on each
    /// entry to FENCED, before fence_action(), and again when a restart
    /// finds the state file FENCED.
    virtual Status stop_writers(const std::string& reason) = 0;
    /// Runs the configured fence action (command, unit stop, reboot, none);
    /// bounded. Called once on each entry to FENCED, and again after a
    /// restart that finds it pending (persisted before it runs).
    virtual Status fence_action(const std::string& reason) = 0;
    /// Called after every completed check and around every bounded action:
    /// the watchdog keep-alive (the hooks also feed it while an action runs).
    virtual void keepalive() {}
};

/// A Passthru decorator for the agent: gives every command a timeout (when
/// it has none) so no device wait is unbounded, and measures each command
/// on the agent's Clock.
class TimedPassthru final : public Passthru {
public:
    /// Forwards to @p inner (borrowed), timing with @p clock.
    TimedPassthru(Passthru& inner, Clock& clock, uint32_t timeout_ms)
        : inner_(inner), clock_(clock), timeout_ms_(timeout_ms) {}
    /// See Passthru::submit; sets cmd.timeout_ms when it is 0. With a
    /// deadline (set_deadline()), the timeout is cut to the time left
    /// before it, and once it passed nothing is sent (Errc::timeout).
    Result<uint32_t> submit(const Command& cmd, std::span<uint8_t> data) override;
    /// @p deadline (asked before every command; nullopt: none) bounds
    /// every command: none runs past it.
    void set_deadline(std::function<std::optional<Clock::TimePoint>()> deadline) { deadline_ = std::move(deadline); }
    /// Duration of the slowest command since reset_slowest().
    Clock::Ms slowest() const { return slowest_; }
    /// Forgets the slowest duration.
    void reset_slowest() { slowest_ = Clock::Ms(0); }
    /// Every command's duration since the agent started.
    const LatencyHistogram& latency() const { return latency_; }

private:
    Passthru& inner_;
    Clock& clock_;
    uint32_t timeout_ms_;
    Clock::Ms slowest_{0};
    std::function<std::optional<Clock::TimePoint>()> deadline_;
    LatencyHistogram latency_;
};

/// The host agent for one namespace. Single-threaded: call every member
/// from one thread.
class Agent {
public:
    /// Commands go to @p dev for namespace @p nsid as host @p self. @p epochs
    /// and @p state may be null (nothing persisted; tests only). Aborts on
    /// invalid @p opts.
    Agent(Passthru& dev, uint32_t nsid, const HostId& self, AgentOptions opts, Clock& clock,
          AgentHooks& hooks, const EpochStore* epochs, const AgentStateFile* state);
    Agent(const Agent&) = delete;
    Agent& operator=(const Agent&) = delete;

    /// Resumes from the device and the state file, or registers with a
    /// fresh epoch and applies the start role. Ends in STANDBY, HOLDER or
    /// FENCED. Errors (the agent stays STARTING; last_error() says why):
    /// Errc::host_id_conflict when this host id is registered with a key
    /// that is not this node's, Errc::state_io, Errc::refused (the state
    /// file belongs to another node id), or the device's error.
    Status start();
    /// One watch: reads the notification log and the Report, detects
    /// preemption, unregistration, a replaced key, a holder change, a
    /// generation going backwards, and acts (FENCED). Never registers or
    /// acquires. Schedules the next check one interval after this one began.
    void check();
    /// Makes the next check due now (e.g. a writer saw a fenced completion).
    void request_check();
    /// Time until the next check is due (0 when due), at most one interval.
    Clock::Ms until_next_check();
    /// Runs checks when due; between them calls @p wait with the time to
    /// wait (it may serve requests meanwhile and must return within about
    /// that time). Returns when @p wait returns false.
    void run(const std::function<bool(Clock::Ms)>& wait);
    /// Serves one control request; @p who names the peer for the log.
    ControlReply handle(const ControlRequest& req, const std::string& who = {});
    /// Carries out an election won with @p token (the elector's term), for
    /// @p who (the log): a check reads the Report, decide_on_win() decides on
    /// it with the EpochStore's floor, and acquire/preempt/rekey take the
    /// reservation with the key of epoch @p token exactly
    /// (Fence::takeover_with_token) following that same Report. stale and
    /// reissue change nothing (reply Errc::lost_race). Only a candidate()
    /// acts (a FENCED one only by re-keying its own holding key; any other
    /// FENCED host is left by rejoin alone). Nothing is done when the
    /// check changed this host's state or key, or when it ended at or after
    /// act_before() (the term's lease deadline minus the margin, asked after
    /// the check: the elector may have renewed the lease meanwhile).
    /// @p restarts_at_ask: restarts_seen() when the token was asked for;
    /// if the target restarted since, the win is answered reissue (the
    /// device may have lost every later term's key: only the elector can
    /// still tell whether the token is the newest).
    TermResult take_term(uint32_t token, const std::string& who, const std::function<Clock::TimePoint()>& act_before,
                         std::optional<uint64_t> restarts_at_ask = std::nullopt);
    /// Under AgentOptions::holder_needs_lease: @p act_before gives the
    /// current term's act-before point (its lease deadline minus the
    /// margin; the elector renews it meanwhile). While HOLDER no device
    /// command runs past that point: each one's timeout is cut to the time
    /// left, and none is sent after it (Errc::timeout), so the lease's
    /// watchdog (ElectorBridge::watch_lease) never waits behind a slow
    /// device past the point it must step down at.
    void bound_commands_by_lease(std::function<Clock::TimePoint()> act_before);
    /// The elector's lease of this host's leadership ended, or may have
    /// (@p why: the elector's words). A HOLDER goes FENCED like on any fence:
    /// writers stopped, FENCED persisted with the action pending, the action
    /// run (and run again by a restart that finds it pending). The
    /// reservation stays: the next leader preempts-and-aborts exactly this
    /// key. Any other state: nothing. Fails when persisting did.
    Status lose_lease(const std::string& why);
    /// May this host stand in an election now (the elector campaigns only
    /// then): STANDBY, HOLDER, or (rejoin_auto) FENCED with its fence action
    /// done while the last Report still shows this host's own key holding:
    /// fenced by a lease loss (or a lost view) that no takeover followed.
    /// take_term of such a host re-keys it to the token (FENCED -> HOLDER).
    bool candidate() const;
    /// Clean stop: releases the reservation if held; unregisters unless
    /// keep_registration; persists; ends STOPPING. A FENCED agent, and a
    /// check-only watcher always, leaves the device alone. Fails (device error) when the release failed.
    Status stop();

    /// The status snapshot a status request returns.
    ControlReply status();
    /// The metrics sample of this volume (metrics.hpp); elector_term is
    /// left for the caller, which runs the elector.
    VolumeMetrics metrics();
    /// Updates the device path reported by status() (the daemon's device
    /// followed its volume to a new namespace node).
    void set_device(std::string path) { opts_.device = std::move(path); }
    /// Current state.
    AgentState state() const { return state_; }
    /// This host's key (0: none).
    uint64_t key() const { return key_; }
    /// How many times this agent saw the target restart (a Report whose
    /// generation went back): a win asked for before one is asked again.
    uint64_t restarts_seen() const { return restarts_seen_; }
    /// Why the agent is FENCED ("" otherwise).
    const std::string& fence_reason() const { return fence_reason_; }
    /// The last error, in words ("" if none).
    const std::string& last_error() const { return last_error_; }
    /// The last Report read, if any.
    const std::optional<ReservationStatus>& last_report() const { return report_; }
    /// Consecutive failed checks.
    uint32_t check_failures() const { return failures_; }
    /// Completed checks (successful or not).
    uint64_t checks() const { return checks_; }
    /// The options in force.
    const AgentOptions& options() const { return opts_; }
    /// A check-only watcher (role = watch).
    bool check_only() const { return opts_.role == StartRole::watch; }

    /// Performs @p t, the only way the agent's state changes: aborts with a
    /// message unless t.from is the current state and the change is in
    /// agent_allowed_transitions(); on entry to FENCED stops the writers
    /// first; sets the key; emits the state event (with @p st); persists
    /// t.persist; then runs a fresh fence action. Fails when persisting did
    /// (the error is also logged and kept as last_error()).
    Status apply(const Transition& t, const ReservationStatus* st = nullptr);

private:
    Status decide(const Observation& o);
    AgentView view() const;
    CheckNotes drain_notifications(bool report_events);
    bool generation_went_back(const ReservationStatus& st);
    std::optional<WinDecision> reissue_after_restart(uint32_t token, std::optional<uint64_t> restarts_at_ask) const;
    void note_report(const ReservationStatus& st, const CheckNotes& notes);
    void observe(const ReservationStatus& st, const CheckNotes& notes);
    void report_epochs();
    void run_fence_actions(bool stop_writers_first);
    void stop_writers_at_fence(const std::string& reason);
    Status stop_writers_again();
    bool reboot_happened(const PersistedState& saved) const;
    void check_view();
    void check_timing(Clock::TimePoint t0, Clock::TimePoint t1);
    Status stop_writers_before_release(const char* why);
    void emit(AgentEventKind kind, EventLevel level, const std::string& text,
              const ReservationStatus* st = nullptr);
    Status persist();
    Status save(PersistedRole role);
    bool holds(const ReservationStatus& st, const Registrant& me) const;
    bool ours(uint64_t key) const;
    bool our_newer_key(uint64_t key, uint64_t known) const;
    void sync_after_request(const char* op);
    void set_baseline(const ReservationStatus& st);
    Status load_start_state(std::optional<PersistedState>& saved);
    Status resume_fenced(const PersistedState& saved, const ReservationStatus& st);
    Status resume(const std::optional<PersistedState>& saved, const ReservationStatus& st, bool fresh);
    Status register_fresh(bool fresh);
    ControlReply refuse_check_only(const ControlRequest& req, const std::string& who);
    uint64_t read_unfenced_key() const;
    Status apply_start_role(const ReservationStatus& st, bool resumed, bool fresh);
    Status acquire_for_start_role();
    ControlReply do_takeover(const ControlRequest& req, const std::string& who);
    /// Registrants Only with role = acquire: a STANDBY agent takes the
    /// reservation nobody holds (the namespace stays reserved).
    void keep_reserved(const ReservationStatus& st);
    ControlReply takeover_failed(const ControlRequest& req, std::error_code ec, std::optional<uint64_t> victim,
                                 const std::string& by, std::string why = {});
    ControlReply took_over(const ControlRequest& req, const Outcome& out, const std::string& by);
    ControlReply do_handoff(const ControlRequest& req, const std::string& who);
    ControlReply do_rejoin(const ControlRequest& req, const std::string& who);
    void rejoin_if_auto(const ReservationStatus& st);
    Status release_kept_hold(ReservationStatus& after);
    ControlReply reply_for(const ControlRequest& req);
    ControlReply fail_reply(const ControlRequest& req, std::error_code ec, const std::string& msg);

    AgentOptions opts_;
    Clock& clock_;
    AgentHooks& hooks_;
    const EpochStore* epochs_;
    const AgentStateFile* statefile_;
    uint64_t unfenced_key_ = 0;  ///< Check-only: fence_nvfence's record, read before the last Report.
    HostId self_;
    TimedPassthru timed_;
    Reservations resv_;
    Fence fence_;

    AgentState state_ = AgentState::starting;
    uint64_t key_ = 0;
    std::optional<ReservationStatus> report_;
    std::optional<uint32_t> last_gen_;
    uint64_t restarts_seen_ = 0;  ///< Times a Report showed the generation gone back (target restarts).
    uint64_t last_holder_ = 0;
    size_t self_entries_ = 0;
    bool host_id_shared_reported_ = false;
    bool floor_error_reported_ = false;
    bool view_lost_ = false;
    uint32_t start_floor_ = 0;  // epoch floor before this run's first Report
    FenceActionState action_ = FenceActionState::none;
    bool writers_stopped_ = true;   ///< The last writer stop of the fence worked.
    std::string fenced_boot_id_;    ///< The boot that entered FENCED ("" unknown).
    std::vector<uint64_t> implausible_seen_;
    bool notifications_supported_ = true;
    uint64_t last_notice_count_ = 0;
    uint64_t notifications_ = 0;
    uint32_t failures_ = 0;
    uint64_t checks_ = 0;
    uint64_t fences_ = 0;  ///< Fresh entries to FENCED since start (metrics).
    bool slow_ = false;
    std::string last_error_;
    std::string fence_reason_;
    std::optional<Clock::TimePoint> fenced_at_;
    int64_t fenced_unix_ms_ = 0;
    std::optional<Clock::TimePoint> last_ok_;
    Clock::WallPoint last_ok_wall_{};
    Clock::TimePoint started_;
    Clock::TimePoint next_check_;
};

}  // namespace nvfence
