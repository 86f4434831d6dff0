// SPDX-License-Identifier: MIT
#pragma once
/// @file sim_invariants.hpp
/// The invariants nvfence-sim checks after every step, as a checker fed
/// with what happened (device, elector, hosts). It knows nothing of the
/// simulator, so its unit tests feed it hand-made violating histories.
///
/// Invariants (issue 25):
///  - holder_highest_epoch: the device's holder has the highest epoch that
///    ever held the reservation;
///  - write_after_preempt (safety rule 3, as the docs promise it, whatever
///    command the code chose): once a command that removed a key completed
///    on the device (a preempt, with or without the abort), no write of
///    that key lands; and once another host's takeover with epoch E
///    completed (etcd schedules: a preempt of the holder or an Acquire of
///    a free reservation), no write of an older epoch lands (until a target
///    restart wiped the keys: writes in flight then are sent again, to a
///    device that refuses nobody);
///  - epoch_not_token: a key that takes the reservation has an epoch equal
///    to a token the elector issued to that host;
///  - epoch_went_back: a host's key epoch never goes back;
///  - acted_on_resigned_term: a host never takes the reservation with a
///    command sent after its own elector side resigned the term of that
///    token (an answer applied to the wrong term). A command already in
///    flight when the term was resigned may land later (a fabric queue, a
///    stalled submission): the device and the loss the driver posts are the
///    fence for it, not this rule;
///  - older_token_holds: a host never takes the reservation with a token
///    older than one already used on the device;
///  - acked_write_lost: a write acknowledged ok landed, and no landed write
///    is overwritten by one of an older epoch;
///  - holder_past_lease: an agent whose lease ran out by its own clock is
///    not HOLDER (its writers stopped), judged when it had its turn (not
///    inside a call, frozen, due or with elector events queued) and while
///    it waits in a device command (its writers run on meanwhile: the
///    step-down must not wait for a command to return);
///  - liveness: after the world healed, within a bounded simulated time,
///    exactly one live host holds (on the device and in its agent) and
///    every live host is a candidate (STANDBY, HOLDER, or FENCED with its
///    own key still holding and its fence action done: Agent::candidate);
///  - holder_without_view (safety rule 8, unknown is not owned): an idle
///    agent does not report HOLDER when its last successful Report is older
///    than its view timeout plus one check (interval + device timeouts);
///  - fence_action_pending: an idle, started agent's state file never says
///    the fence action is pending (a pending action runs again at start);
///  - fence_unverified (Pacemaker schedules): when fence_nvfence `off`
///    exits 0, no key of the victim node is registered on the device (what
///    Pacemaker is told is fenced is fenced);
///  - leader_unstable (etcd schedules): once a healed cluster is live (every
///    call in flight at the heal ended; the holder leads in etcd with its
///    key's token, on that leadership's lease renewed by etcd after those
///    calls ended, and has read the device since), the key holding the reservation stays the same for two
///    leases (a leader that steps down without a fault is a needless
///    failover: the lease watchdog's defect of bba280b).

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "nvfence/control.hpp"

namespace nvfence::sim {

/// The invariants.
enum class Inv : uint8_t {
    holder_highest_epoch,
    write_after_preempt,
    epoch_not_token,
    epoch_went_back,
    acted_on_resigned_term,
    older_token_holds,
    acked_write_lost,
    holder_past_lease,
    liveness,
    holder_without_view,
    fence_action_pending,
    fence_unverified,
    leader_unstable,
    /// Not a property of the product: the violation SimOptions::fail_at_step
    /// asks for, so the reporting path (seed, trace, exit code) is tested.
    self_test,
};
/// Number of Inv values.
inline constexpr size_t kInvCount = 14;
/// Words for an invariant ("epoch_not_token", ...).
const char* inv_name(Inv i);
/// The issue-24 defect that breaks @p i on the code this simulator was
/// built against (5b205f7 and its successors until issue 24 lands), 0 when
/// none is known. See docs/RELIABILITY.md "Simulator".
int known_defect(Inv i);

/// A broken invariant.
struct Violation {
    Inv inv = Inv::liveness;  ///< Which.
    std::string what;         ///< In words, with hosts, keys, epochs.
};

/// One host as the checker sees it after a step.
struct HostView {
    bool alive = false;                        ///< Its agent process runs (not crashed).
    AgentState state = AgentState::starting;   ///< The agent's state.
    int64_t local_ms = 0;                      ///< Its own clock.
    int64_t lease_deadline_ms = INT64_MIN;     ///< Its lease may live until this (own clock).
    bool idle = true;                          ///< Its agent had its turn: not in a call, frozen, due or with events queued.
    bool in_device_call = false;               ///< Its agent waits in a device command (not frozen): its writers run on.
    bool candidate = false;                    ///< Its agent may stand in an election (Agent::candidate()).
    int64_t last_view_ms = 0;                  ///< Its last successful Report (own clock).
    int64_t view_bound_ms = INT64_MAX;         ///< How stale a HOLDER's view may get (own clock).
    bool action_pending = false;               ///< Its state file says the fence action is pending.
};

/// Feeds on events, answers with the first broken invariant.
class InvariantChecker {
public:
    /// The elector issued @p token to @p host.
    void token_issued(uint32_t token, int host);
    /// @p host's elector side resigned the term of @p token at @p at_ms.
    void term_resigned(uint32_t token, int host, int64_t at_ms = 0);
    /// The device's holder became @p host with a key of epoch @p epoch;
    /// @p previous is the key that held before (0: nobody); @p sent_ms is
    /// when the command that made it holder was sent (nullopt: now, after
    /// any resignation).
    std::optional<Violation> new_holder(int host, uint64_t key, uint32_t epoch, uint64_t previous = 0,
                                        std::optional<int64_t> sent_ms = std::nullopt);
    /// After every step: the device's holder epoch (nullopt: nobody holds).
    std::optional<Violation> holder_now(std::optional<uint32_t> epoch) const;
    /// @p host's agent has a key of epoch @p epoch (0: none).
    std::optional<Violation> agent_key(int host, uint32_t epoch);
    /// A completed command (preempt or preempt-and-abort) removed @p key.
    void preempted(uint64_t key);
    /// Write Exclusive (etcd schedules): @p host's takeover with a key of
    /// epoch @p epoch completed on the device: from now on no write of
    /// another host with an older epoch may land.
    void took_over(int host, uint32_t epoch);
    /// The target lost every key (restart without PTPL): epochs held before
    /// no longer bind holder_highest_epoch and older_token_holds, and
    /// preempted keys no longer bind write_after_preempt.
    void target_restarted();
    /// A write of @p host under @p key (epoch @p epoch) landed at @p lba.
    /// @p unfenced: the device admitted it while nobody held the
    /// reservation (after a target restart without PTPL wiped the keys):
    /// nothing can fence it, so it is recorded but not judged.
    std::optional<Violation> write_landed(int host, uint64_t key, uint32_t epoch, uint32_t lba, uint64_t seq,
                                          bool unfenced = false);
    /// @p host's writer reported write @p seq ok.
    std::optional<Violation> write_acked(int host, uint64_t seq) const;
    /// One host's state against its own lease.
    std::optional<Violation> lease(int host, const HostView& h) const;
    /// One host's view of the device and its fence action's progress.
    std::optional<Violation> view(int host, const HostView& h) const;
    /// fence_nvfence `off` of @p victim, run on @p fencer, exited @p exit;
    /// @p victim_keys keys of the victim node were registered as it did.
    std::optional<Violation> fence_done(int fencer, int victim, int exit, size_t victim_keys) const;
    /// Liveness: @p device_holder is the host the device shows holding (-1: none).
    std::optional<Violation> live(const std::vector<HostView>& hosts, int device_holder) const;
    /// Liveness of check-only watchers (role = watch): every live host's
    /// watcher sees its node's key (WATCHING: the node is unfenced) and a
    /// reservation is held (@p device_holder >= 0), so that a host that is
    /// not registered cannot write.
    std::optional<Violation> watch_live(const std::vector<HostView>& hosts, int device_holder) const;
    /// Checks performed so far.
    uint64_t checks() const { return checks_; }

private:
    struct Issued {
        uint32_t token;
        int host;
        bool resigned;
        int64_t resigned_at_ms;
    };
    struct Block {
        int host = -1;
        uint32_t epoch = 0;
        uint64_t seq = 0;
    };
    const Issued* find(uint32_t token) const;

    std::vector<Issued> issued_;
    std::vector<uint64_t> preempted_;
    struct Takeover {
        int host = -1;
        uint32_t epoch = 0;
    };
    Takeover newest_takeover_;
    std::vector<uint32_t> last_epoch_;
    std::array<Block, 16> media_{};
    std::unordered_set<uint64_t> landed_;
    uint32_t max_held_ = 0;
    mutable uint64_t checks_ = 0;
};

/// The key of write @p seq of @p host in the landed set.
inline uint64_t write_id(int host, uint64_t seq) { return (static_cast<uint64_t>(host) << 48) | seq; }

}  // namespace nvfence::sim
