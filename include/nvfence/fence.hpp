// SPDX-License-Identifier: MIT
#pragma once
/// @file fence.hpp
/// The ownership protocol on one namespace: join (register), acquire,
/// takeover (preempt-and-abort the holder), evict a cluster node (fencing),
/// release, leave (unregister), clear, verify. Every change is followed by a Report, and the outcome says
/// what the Report showed: the device decides, this object only remembers
/// what the device last said.
///
/// Safety rules kept here:
///  - every registration made here takes a fresh epoch, above every epoch of
///    this cluster tag on the device and every epoch the EpochStore holds,
///    persisted before the key is sent;
///  - takeover uses preempt-and-abort unless told otherwise;
///  - nothing here re-acquires by itself;
///  - operations are idempotent: taking over when already holder, releasing
///    when nothing is held, leaving when not registered change nothing.

#include <cstdint>
#include <functional>
#include <optional>
#include <system_error>
#include <vector>

#include "nvfence/export.h"
#include "nvfence/command.hpp"
#include "nvfence/epoch_store.hpp"
#include "nvfence/report.hpp"
#include "nvfence/reservation.hpp"
#include "nvfence/result.hpp"

namespace nvfence {

/// How this host takes part.
struct NVFENCE_API FenceOptions {
    uint8_t tag = 0;                 ///< Cluster tag of our keys.
    uint8_t node = 0;                ///< Node id; 0: reuse the one registered.
    ResvType type = ResvType::write_exclusive;  ///< Type to acquire.
    bool abort = true;               ///< Takeover with preempt-and-abort.
    Cptpl cptpl = Cptpl::no_change;  ///< CPTPL on register.
};

/// What one operation did and what the device reported afterwards.
struct NVFENCE_API Outcome {
    bool changed = false;                   ///< A command changed state.
    uint64_t key = 0;                       ///< This host's key after (0: none).
    std::optional<uint64_t> previous_holder;///< Holder key before.
    std::vector<uint64_t> removed;          ///< Other hosts' keys registered before, gone after
                                            ///< (and this host's own when it left).
    std::optional<uint64_t> replaced;       ///< This host's earlier key, replaced by `key`.
    ReservationStatus before;               ///< Report before.
    ReservationStatus after;                ///< Report after (the verification).
    /// Set when a command's own completion was an error although the Report
    /// shows that it took effect: the Linux host re-sends a command that a
    /// controller reset cancelled, and the re-sent copy of a Register
    /// (replace), Preempt, Unregister or Clear whose first copy succeeded is
    /// refused with Reservation Conflict; or the completion was lost
    /// (path-related status, EINTR/ETIMEDOUT/EIO). A Register or Preempt is
    /// trusted this way only with a fresh key, used by no one else; a
    /// Preempt is confirmed by one more Acquire. A Release, Unregister or
    /// Clear is trusted when the Report shows the state it asked for
    /// (nobody holds; this host not registered; no registrant and no
    /// reservation), which an idempotent re-run would accept as well.
    std::optional<std::error_code> completion_error;
};

/// How Fence::evict_node treats a victim node that has no key of this
/// Fence's tag in the first Report.
enum class EvictAbsent : uint8_t {
    /// Still a fence: when nobody holds, this host takes the reservation
    /// (nobody holding lets every host write, the victim too); when a
    /// reservation is held, success without change. fence_nvfence's 'off'.
    fence,
    /// A failed compare (as Fence::takeover's victim): nothing is sent;
    /// success without change when this host holds, Errc::lost_race when
    /// another host holds, Errc::invalid_key when nobody holds. `nvfence
    /// preempt --victim-node`.
    compare,
};

/// Rounds of Fence::evict_node (Report, preempts, Report) before it gives
/// up: a victim that registers again between rounds is preempted again, a
/// bounded number of times.
inline constexpr int kEvictRounds = 3;

/// Keys of node @p node of cluster tag @p tag registered in @p st, each
/// once, in the Report's order. Foreign keys and other tags' are never
/// decoded as a node's.
NVFENCE_API std::vector<uint64_t> node_keys(const ReservationStatus& st, uint8_t tag, uint8_t node);

/// The ownership protocol for this host on one namespace.
class Fence {
public:
    /// Uses @p resv for commands and @p self as this host's id. @p store may
    /// be null (epochs then come from the device alone).
    Fence(Reservations& resv, HostId self, FenceOptions opts, const EpochStore* store)
        : resv_(resv), self_(self), opts_(opts), store_(store) {}

    /// Reads the reservation (Report) and remembers it as last_report().
    /// With a store, every Report raises this host's epoch floor to the
    /// highest plausible epoch of its tag (observe_epochs); a failure to do
    /// so does not fail the read but is kept in floor_error().
    NVFENCE_API Result<ReservationStatus> verify();
    /// Keys of this host's tag in the last Report whose epoch was
    /// implausible (above kEpochCeiling or too far above the floor): they
    /// did not raise the floor. Callers warn about them.
    const std::vector<uint64_t>& implausible_keys() const { return implausible_; }
    /// The epoch of the last fresh key this Fence persisted (0: none yet).
    uint32_t last_fresh_epoch() const { return last_fresh_epoch_; }
    /// Why the last Report could not raise the floor (empty when it did).
    std::error_code floor_error() const { return floor_error_; }
    /// This host's registration in @p st, if any.
    const Registrant* mine(const ReservationStatus& st) const { return st.find_host(self_); }
    /// The epoch a new key would take given @p st: one above the largest
    /// plausible epoch of our tag on the device and in the store.
    /// Errc::epoch_exhausted when that would pass kEpochCeiling.
    NVFENCE_API Result<uint32_t> next_epoch(const ReservationStatus& st) const;

    /// Registers with a fresh key (or the key of @p epoch when given;
    /// Errc::epoch_out_of_range when @p epoch is above kEpochCeiling or more
    /// than kMaxEpochJump above the highest epoch known). When
    /// this host is already registered: with @p replace, replaces the key;
    /// otherwise succeeds unchanged if the registered key is ours for this
    /// node, and fails with Errc::host_id_conflict when the host id is
    /// bound to another node's or a foreign key.
    NVFENCE_API Result<Outcome> join(std::optional<uint32_t> epoch, bool replace);
    /// Acquires the reservation of opts.type with the registered key.
    /// Errc::not_registered, Errc::held_by_other.
    NVFENCE_API Result<Outcome> acquire();
    /// Takes the reservation over: registers or re-keys with a fresh epoch,
    /// then preempts (and aborts) @p victim or, by default, the holder.
    /// Errc::lost_race when another host holds afterwards.
    /// A @p victim is a compare-and-swap: when the Report read first shows
    /// no registrant with that key, nothing is sent and the result is
    /// success without change if this host already holds, Errc::lost_race
    /// if another host holds, Errc::invalid_key if nobody holds.
    /// Errc::own_key when @p victim is this host's own current key.
    /// When nobody holds, every other registrant (a key of an earlier term)
    /// is preempted-and-aborted before this host acquires, so no write of a
    /// previous holder is still in flight when this host holds.
    NVFENCE_API Result<Outcome> takeover(std::optional<uint64_t> victim);
    /// takeover() by a host that believes it is registered with @p own_key
    /// (an agent, from its last check): when the Report read first shows
    /// this host not registered with exactly that key (another host
    /// preempted it, or it was replaced, after the caller looked), nothing
    /// is sent and the result is Errc::not_registered. A host fenced while
    /// it was not looking must not come back by registering again and
    /// preempting the host that fenced it; coming back is a rejoin.
    /// A preempt between that Report and the Register is refused by the
    /// device: the Register replaces exactly @p own_key.
    NVFENCE_API Result<Outcome> takeover_registered(uint64_t own_key, std::optional<uint64_t> victim);
    /// The takeover of a host elected with @p token: the key's epoch is the
    /// token, exactly, and every command follows from @p seen, the Report the
    /// election's decision was made on (decide_on_win, elector_policy.hpp):
    ///  - this host holds with the token's key: success, nothing sent (a
    ///    retry of the term);
    ///  - otherwise registers or re-keys to the token's key (the EpochStore
    ///    raised to the token first), then: another holder in @p seen is
    ///    preempted (and aborted) by compare-and-swap on exactly its key;
    ///    nobody holding means a plain Acquire; holding already, the
    ///    reservation follows the new key. Nobody else's key is removed:
    ///    standbys stay registered, candidates of the next election.
    /// Errc::lost_race when a key of our tag at or above the token is
    /// registered (but ours of this token), the store's floor is at or above
    /// it, our registration read in @p seen is gone, or another host holds
    /// afterwards; Errc::epoch_out_of_range for 0 or a token above
    /// kEpochCeiling; Errc::held_by_other when every registrant holds.
    /// @p may_act, when given, is asked right before the Register and right
    /// before the Acquire: false (the term's lease may have run out during a
    /// pause between them) ends the takeover with Errc::timeout, the device
    /// left as those commands left it. A pause between that answer and the
    /// command reaching the device stays possible; then the device is the
    /// fence: a newer leader's preempt removes exactly the key acquired.
    NVFENCE_API Result<Outcome> takeover_with_token(const ReservationStatus& seen, uint32_t token,
                                                    const std::function<bool()>& may_act = nullptr);
    /// Evicts node @p victim_node of this Fence's tag (fencing): removes
    /// every key of that node, whatever its epoch, and leaves a reservation
    /// held. What a cluster manager knows is the node, not its current key.
    ///  - This host must be registered: it never registers to evict (a
    ///    fenced host whose stale cluster stack comes back must not be able
    ///    to fence the healthy nodes). Not registered: Errc::not_registered,
    ///    nothing sent. Its own node (options().node, or the node of its
    ///    registered key): Errc::own_key, nothing sent.
    ///  - Each victim key is preempted (and aborted, options().abort) with
    ///    this host's current registered key. When the victim holds the
    ///    reservation, or nobody holds (under Write Exclusive every host
    ///    then writes), this host takes it: first it re-keys with a fresh
    ///    epoch (a Register that replaces exactly its current key, refused
    ///    by the device when that key was preempted meanwhile), then the
    ///    preempt of the holder, or an Acquire of options().type, gives it
    ///    the reservation. A third host's reservation is kept, and so are
    ///    every other registrant (standbys stay candidates): this is not a
    ///    takeover.
    ///  - An error completion that may hide a command that ran (see
    ///    Outcome::completion_error) is decided by the Report that follows:
    ///    the victim's keys gone and a reservation held is success, the
    ///    error kept in completion_error.
    ///  - Each round is verified by a Report; a victim key still (or again)
    ///    registered gets another round, at most kEvictRounds in all, then
    ///    the last uncertain error or Errc::verify_failed.
    /// A victim node with no key in the first Report: see EvictAbsent.
    /// Outcome::removed lists the victim's keys gone (and any other key that
    /// disappeared meanwhile), Outcome::replaced this host's key before the
    /// re-key.
    NVFENCE_API Result<Outcome> evict_node(uint8_t victim_node, EvictAbsent absent = EvictAbsent::fence);
    /// Releases the reservation if this host holds it. An error completion
    /// that may hide a Release that ran (see Outcome::completion_error) is
    /// success when the Report then shows nobody holding.
    NVFENCE_API Result<Outcome> release();
    /// Unregisters this host (releasing first if it holds). An error
    /// completion that may hide an Unregister that ran is success when the
    /// Report then shows this host not registered.
    NVFENCE_API Result<Outcome> leave();
    /// Clears the reservation and every registration (needs registration).
    /// An error completion that may hide a Clear that ran is success when
    /// the Report then shows no registrant and no reservation.
    NVFENCE_API Result<Outcome> clear();

    /// The last Report read, if any: who holds, for error messages.
    const std::optional<ReservationStatus>& last_report() const { return last_; }
    /// The options in force.
    const FenceOptions& options() const { return opts_; }
    /// CPTPL of the Registers sent from now on (FenceOptions::cptpl).
    void set_cptpl(Cptpl c) { opts_.cptpl = c; }

private:
    // Register with the fresh key a.nrkey; an error completion that the
    // Report contradicts (this host registered with that key) is recorded in
    // o.completion_error instead.
    Status register_fresh(const RegisterArgs& a, Outcome& o);
    RegisterArgs register_args(const Registrant* me, uint64_t key) const;
    Result<uint8_t> node_for(const ReservationStatus& st) const;
    Result<uint64_t> fresh_key(const ReservationStatus& st, uint8_t node,
                               std::optional<uint32_t> epoch);
    Result<Outcome> start();  // Report, remembered as Outcome::before
    Result<Outcome> takeover_after(Outcome o, std::optional<uint64_t> victim);
    Result<Outcome> after_acquire_failure(std::error_code ec, const Outcome& o, uint64_t key);
    Result<Outcome> acquire_verified(const Outcome& o, uint64_t key, std::optional<uint64_t> prkey,
                                     std::optional<uint64_t> held_before);
    Status token_usable(const ReservationStatus& seen, uint32_t token, uint64_t key) const;
    Result<Outcome> verify_rekeyed(Outcome& o, uint64_t key);
    Outcome finish(Outcome o, const ReservationStatus& after) const;
    Status evict_allowed(const ReservationStatus& st, uint8_t victim_node) const;
    Result<ReservationStatus> evict_round(Outcome& o, const ReservationStatus& st, uint8_t victim_node,
                                          std::error_code& uncertain);
    Result<uint64_t> evict_rekey(Outcome& o, const ReservationStatus& st, const Registrant& me);
    Status evict_send(const AcquireArgs& a, std::error_code& uncertain);

    Reservations& resv_;
    HostId self_;
    FenceOptions opts_;
    const EpochStore* store_;
    std::optional<ReservationStatus> last_;
    std::vector<uint64_t> implausible_;
    std::error_code floor_error_;
    uint32_t last_fresh_epoch_ = 0;
};

}  // namespace nvfence
