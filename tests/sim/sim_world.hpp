// SPDX-License-Identifier: MIT
#pragma once
/// @file sim_world.hpp
/// nvfence-sim's core: one schedule of a whole cluster, deterministic from a
/// seed, over the real product code (Agent with Fence, EpochStore and
/// AgentStateFile; ElectorDriver and ElectorBridge; the FencedWriter's
/// RingWriter) and a simulated outside world:
///  - the device: FakeTarget (tests/fake_passthru.hpp) behind per-host ports
///    that add delays, lost completions (executed or not), partitions,
///    commands that execute after their host gave up on them, writes in
///    flight aborted by a preempt-and-abort, and target restarts that lose
///    every key (no PTPL);
///  - the election: an etcd-like Elector per host over one shared model
///    (leases with TTL on the simulated clock, revocation, a monotonic token
///    counter, unavailability, partitions, answers that arrive late);
///  - hosts: clocks that drift and pause (VM freeze), processes that crash
///    (between steps, inside a device command, inside a state write) and
///    restart from what reached their simulated disk.
/// No threads and no wall clock inside a schedule: the simulator steps the
/// driver and drains the bridge itself. A call that waits (device, elector)
/// lets the rest of the world run meanwhile (nested, see sim_world.cpp).

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "sim_invariants.hpp"

namespace nvfence::sim {

/// Outside-world faults the simulator injects.
enum class Fault : uint8_t {
    freeze,              ///< A host's VM pauses (its clock stops or jumps).
    crash,               ///< A host's agent process dies between steps, restarts later.
    crash_in_command,    ///< ... inside a device command (sent or not).
    crash_in_write,      ///< ... inside a state file write (reached the disk or not).
    etcd_partition,      ///< One host cannot reach etcd for a while.
    etcd_down,           ///< etcd answers nobody for a while.
    device_partition,    ///< One host cannot reach the device for a while.
    device_delay,        ///< A device command takes long (maybe past its timeout).
    lost_done,           ///< A completion is lost (controller reset); the command ran.
    lost_not_done,       ///< A completion is lost; the command never ran.
    late_answer,         ///< An elector answer arrives after the caller's bound.
    target_restart,      ///< The target restarts without PTPL: every key is lost.
    /// One host cannot reach the other hosts' cluster network (Corosync)
    /// for a while; its path to the device stays (Pacemaker schedules).
    cluster_partition,
    /// One host's network link degrades for a while (a flapping or
    /// congested NIC or switch port that carries both its cluster or etcd
    /// traffic and its NVMe/TCP path): its cluster traffic is cut
    /// (Pacemaker), its etcd answers come late (many past their bound),
    /// and its device commands and writes are slow (retransmissions: 50 ms
    /// to 4 s, some past their timeout), not lost. Off by default (not in
    /// kDefaultFaults).
    link_degraded,
    /// The target crashes and restarts without PTPL two to four times,
    /// 0.5-5 s apart (a crash loop: systemd restarting a target that
    /// fails again), every key lost each time. Off by default.
    target_crash_loop,
    /// Pacemaker: pcmk_delay_max, as two-node clusters configure it
    /// against fence races: each fencing action waits a random 0 to 1-5 s
    /// (the schedule's maximum) before it starts, so that two nodes that
    /// lost each other fence at staggered times. Not an event: counted per
    /// delayed action. Off by default.
    fence_delay,
    /// Pacemaker: two fencers race (two nodes that lost each other, each
    /// the controller of its side, fence each other through their
    /// nvfenced): when a node's takeover of a peer has re-keyed it (its
    /// Register ran, its preempt-and-abort is next) and that peer's
    /// controller has the node to fence, the peer's fence starts now (its
    /// pcmk_delay_max delay, if any, drawn as 0); the Register's
    /// completion comes once the peer's nvfenced read the Report of the
    /// check before its own takeover, and that Report's completion once
    /// the node's preempt-and-abort removed the peer's key (each within
    /// its command's bound): the fence lands between the peer's check and
    /// its takeover, whose victim is the node's new key. Drawn per
    /// takeover that re-keys with such a peer. Off by default.
    fence_race,
    /// etcd: a winner's VM pauses (its clock stopped) right after its
    /// driver posted the win, for one to three lease TTLs (a peer is
    /// elected and takes over meanwhile), and the target restarts without
    /// PTPL 1-20 ms before it resumes: the win is carried out, if at all,
    /// on a device that forgot every key, by an agent whose check then
    /// finds its key gone and rejoins. Drawn per win posted. Off by
    /// default.
    paused_win,
    /// etcd: as paused_win, but the VM pauses inside the token call, after
    /// etcd granted the token and before its answer reached the driver,
    /// which gets it 5-300 ms after the resume: the agent's check may
    /// rejoin (after the target's restart) before the win is posted.
    /// Drawn per token granted. Off by default.
    paused_token,
    /// Linux: a device command that times out is ended by the kernel late,
    /// not at its timeout: the block layer's timer rounds the expiry up to
    /// the next whole second (blk_add_timer) and NVMe/TCP and RDMA run
    /// their error recovery (queue teardown, reconnect) before the command
    /// completes: 1 ms to 1 s late, one in ten up to 3 s more. Drawn per
    /// command that times out. Off by default.
    late_timeout,
};
/// Number of Fault values.
inline constexpr size_t kFaultCount = 20;
/// Words for a fault kind.
const char* fault_name(Fault f);
/// Parses a fault name; nullopt when unknown.
std::optional<Fault> parse_fault(const std::string& name);
/// Every fault kind.
inline constexpr uint32_t kAllFaults = (1u << kFaultCount) - 1;
/// The kinds on by default (SimOptions::fault_mask, nvfence-sim without
/// --faults): the thirteen before link_degraded and target_crash_loop, so
/// that the seeds recorded before those kinds replay as they were. CI's
/// slice names every kind (scripts/test.sh).
inline constexpr uint32_t kDefaultFaults = (1u << static_cast<unsigned>(Fault::link_degraded)) - 1;

/// Who decides which host writes.
enum class Cluster : uint8_t {
    any,        ///< The seed decides: one schedule in four Pacemaker, the others etcd.
    etcd,       ///< nvfenced with elector = etcd on every host (leases, tokens).
    /// Corosync/Pacemaker: a membership whose quorate side fences a lost
    /// node with fence_nvfence (the agent's real actions), one resource
    /// (the writer) placed by the designated controller, nvfenced as each
    /// node's watcher (elector = none, registrants-only, role = acquire,
    /// its fence action kills corosync), as docs/PACEMAKER.md configures it.
    pacemaker,
};
/// "any", "etcd", "pacemaker".
const char* cluster_name(Cluster c);

/// How a Pacemaker schedule runs each node's nvfenced.
enum class Watcher : uint8_t {
    /// role = acquire (registers, acquires a free reservation at its first
    /// start): the configuration of the seeds recorded before 2026-12-05.
    acquire,
    /// role = watch, the check-only watcher docs/PACEMAKER.md configures:
    /// never registers; fence_nvfence's `on` registers the node itself.
    watch,
    /// The seed's hash picks one of the two, half and half.
    any,
};
/// "acquire", "watch", "any".
const char* watcher_name(Watcher w);
/// Parses a watcher name; nullopt when unknown.
std::optional<Watcher> parse_watcher(const std::string& name);
/// Parses a cluster name; nullopt when unknown.
std::optional<Cluster> parse_cluster(const std::string& name);

/// What to run.
struct SimOptions {
    uint64_t seed = 0;                 ///< The schedule.
    /// Steps with faults; then the world heals. 600: long enough for faults
    /// to overlap (a 20 s path loss, a lease running out between two
    /// commands); the seeds recorded before 2026-12-03 found their defects
    /// with 150.
    uint32_t steps = 600;
    uint32_t fault_mask = kDefaultFaults;  ///< Fault kinds that may be injected (bit = Fault).
    /// Which cluster manager. An etcd schedule of a seed is the same
    /// whatever this says (the choice does not draw from its PRNG).
    Cluster cluster = Cluster::any;
    /// Pacemaker schedules: each node's nvfenced. The default keeps the
    /// recorded seeds' configuration; CI's slice runs any (scripts/test.sh).
    Watcher watcher = Watcher::acquire;
    /// Swarm testing: one schedule in four (decided by a hash of the seed)
    /// concentrates on one to three event fault kinds at several times
    /// their usual rate, so that rare kinds meet. Off: the schedules
    /// recorded before 2026-12-04 replay as they were.
    bool swarm = true;
    /// The stability window (Inv::leader_unstable): an etcd schedule runs
    /// two lease TTLs past the moment its healed cluster settles and its
    /// holder must not change. Off by default, so that the schedules
    /// recorded without it replay as they were; CI's slice turns it on
    /// (scripts/test.sh).
    bool stability = false;
    /// Admitted writes that wait (one in eight up to 1.5 s, as a slow
    /// backend holds them) and writers that aim at blocks another host's
    /// writes in flight go to, so a stale write meets the next term's
    /// (write_after_preempt, acked_write_lost). Off: the schedules recorded
    /// before 2026-12-06 replay as they were (`--no-slow-writes`).
    bool slow_writes = true;
    /// Known-defect mode: the invariants the code under test is known to
    /// break (known_defect() != 0, issue 24) are counted, not violations.
    bool known_defects = false;
    /// Further invariants (bit = Inv) that are counted but do not stop the
    /// schedule (e.g. to look for one defect behind another).
    uint32_t tolerate = 0;
    bool keep_trace = false;           ///< Return the trace text even without a violation.
    /// Also trace every agent event (state changes, elector notes, device
    /// findings) in the agent's words: slower, for reading one seed.
    bool events = false;
    /// Report a self_test violation at this step (0: never): tests the
    /// reporting path, not the product.
    uint64_t fail_at_step = 0;
};

/// The outcome of one schedule.
struct ScheduleResult {
    uint64_t seed = 0;                        ///< As given.
    uint64_t steps = 0;                       ///< Steps run (events, nested ones included).
    int64_t sim_ms = 0;                       ///< Simulated time at the end.
    uint64_t trace_hash = 0;                  ///< FNV-1a over the trace: equal for equal runs.
    uint64_t checks = 0;                      ///< Invariant checks performed.
    Cluster cluster = Cluster::etcd;          ///< The cluster manager it ran (never any).
    Watcher watcher = Watcher::acquire;       ///< Pacemaker: how nvfenced ran (never any).
    std::array<uint64_t, kFaultCount> faults{};  ///< Faults injected by kind.
    std::optional<Violation> violation;       ///< The first broken invariant.
    uint64_t violation_step = 0;              ///< Its step.
    /// Tolerated invariants that broke (1 per schedule at most), and how.
    std::array<uint64_t, kInvCount> tolerated{};
    std::array<std::string, kInvCount> tolerated_what{};  ///< The first break of each, in words.
    std::string trace;                        ///< The trace (on a violation or keep_trace).
};

/// Runs one schedule.
ScheduleResult run_schedule(const SimOptions& opts);

}  // namespace nvfence::sim
