// SPDX-License-Identifier: MIT
// nvfence-sim's world: see sim_world.hpp.
//
// Scheduling. Every host runs three "threads" of its agent process: the
// agent's loop (checks, bridge drains: the only code that touches the
// Agent), the elector driver (ElectorDriver::step) and an application that
// writes through a FencedWriter (RingWriter over tests/fake_ring.hpp's
// ring). Besides them the device executes queued commands and the fault
// injector acts. Each has a next wake time; one step runs the earliest
// (ties broken by the PRNG). A call that waits (a device command, an
// elector call) blocks its thread: the agent's loop and the driver run on
// fibers of their own (sim_fiber.hpp), so a wait suspends the thread and the
// scheduler resumes it when the world's time reaches the wait's end, while
// every other thread goes on. Waits end in the order of their ends, as real
// bounded calls do. A host whose process dies inside a call unwinds its
// fibers with SimCrash; its objects are destroyed once no fiber of it is
// left.
#include "sim_world.hpp"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstdio>
#include <deque>
#include <memory>
#include <vector>

#include "../fake_passthru.hpp"
#include "../fake_ring.hpp"
#include "writer/ring_writer.hpp"
#include "agent/agent.hpp"
#include "elector/agent_elector.hpp"
#include "fence_agent.hpp"
#include "options.hpp"
#include "nvfence/epoch_store.hpp"
#include "nvfence/error.hpp"
#include "nvfence/key.hpp"
#include "sim_fiber.hpp"
#include "sim_host.hpp"
#include "sim_rng.hpp"

namespace nvfence::sim {

const char* fault_name(Fault f) {
    switch (f) {
    case Fault::freeze: return "freeze";
    case Fault::crash: return "crash";
    case Fault::crash_in_command: return "crash_in_command";
    case Fault::crash_in_write: return "crash_in_write";
    case Fault::etcd_partition: return "etcd_partition";
    case Fault::etcd_down: return "etcd_down";
    case Fault::device_partition: return "device_partition";
    case Fault::device_delay: return "device_delay";
    case Fault::lost_done: return "lost_done";
    case Fault::lost_not_done: return "lost_not_done";
    case Fault::late_answer: return "late_answer";
    case Fault::target_restart: return "target_restart";
    case Fault::cluster_partition: return "cluster_partition";
    case Fault::link_degraded: return "link_degraded";
    case Fault::target_crash_loop: return "target_crash_loop";
    case Fault::fence_delay: return "fence_delay";
    case Fault::fence_race: return "fence_race";
    case Fault::paused_win: return "paused_win";
    case Fault::paused_token: return "paused_token";
    case Fault::late_timeout: return "late_timeout";
    }
    return "?";
}

const char* cluster_name(Cluster c) {
    switch (c) {
    case Cluster::any: return "any";
    case Cluster::etcd: return "etcd";
    case Cluster::pacemaker: return "pacemaker";
    }
    return "?";
}

const char* watcher_name(Watcher w) {
    switch (w) {
    case Watcher::acquire: return "acquire";
    case Watcher::watch: return "watch";
    case Watcher::any: return "any";
    }
    return "?";
}

std::optional<Watcher> parse_watcher(const std::string& name) {
    for (Watcher w : {Watcher::acquire, Watcher::watch, Watcher::any})
        if (name == watcher_name(w)) return w;
    return std::nullopt;
}

std::optional<Cluster> parse_cluster(const std::string& name) {
    for (Cluster c : {Cluster::any, Cluster::etcd, Cluster::pacemaker})
        if (name == cluster_name(c)) return c;
    return std::nullopt;
}

std::optional<Fault> parse_fault(const std::string& name) {
    for (size_t i = 0; i < kFaultCount; ++i)
        if (name == fault_name(static_cast<Fault>(i))) return static_cast<Fault>(i);
    return std::nullopt;
}

namespace {

using std::chrono::milliseconds;
using Ms = milliseconds;

constexpr uint8_t kTag = 7;
constexpr uint32_t kBlocks = 16;  // the media the writers write (InvariantChecker's size)
constexpr uint32_t kBlockBytes = 512;

// A host's state directory: a name on its simulated disk, never a real path.
std::string host_dir(int h) { return "/sim/host" + std::to_string(h); }
constexpr int kThreads = 3;
enum Thr : int { kAgent = 0, kDriver = 1, kApp = 2 };
constexpr int kFiberThreads = 2;  // kAgent and kDriver wait; the application never does

uint32_t epoch_of(uint64_t key) {
    auto f = decode_key(key);
    return f ? f->epoch : 0;
}

// ---------------------------------------------------------------- trace

enum class Rec : uint8_t { fault, command, holder, token, resign, state, crash, restart, heal, violation, note, cluster };

// What a Rec::cluster line says (Pacemaker schedules).
enum class Cs : uint8_t { start, down, join, lost, fence, fenced, fence_failed, runs, stops, unfence_failed };
std::string cluster_words(Cs what, uint64_t b, int32_t c);

struct TraceRec {
    int64_t t;
    uint64_t step;
    Rec kind;
    int8_t host;
    uint32_t a;
    uint64_t b;
    int32_t c;
};

// ---------------------------------------------------------------- etcd model

struct EtcdLease {
    int64_t id;
    int host;
    int64_t expires;
    bool alive;
};
struct EtcdCandidate {
    int host;
    int64_t lease;
    int64_t rev;
    uint32_t token;  // 0: none issued for this leadership yet
};

// The coordination service's state (one per schedule).
struct EtcdModel {
    int64_t ttl_ms = 2000;
    int64_t next_lease = 0x100;
    int64_t revision = 1;
    uint32_t counter = 0;
    std::vector<EtcdLease> leases;
    std::vector<EtcdCandidate> queue;  // by creation revision

    EtcdLease* lease(int64_t id) {
        for (auto& l : leases)
            if (l.id == id) return &l;
        return nullptr;
    }
    void expire(int64_t now) {
        for (auto& l : leases)
            if (l.alive && l.expires <= now) l.alive = false;
        std::erase_if(queue, [&](const EtcdCandidate& c) {
            const EtcdLease* l = lease(c.lease);
            return !l || !l->alive;
        });
        std::erase_if(leases, [](const EtcdLease& l) { return !l.alive; });
    }
    const EtcdCandidate* leader() const { return queue.empty() ? nullptr : &queue.front(); }
    // The leader at @p now and its lease, leases that ran out not counted
    // (expire() runs only when a call reaches etcd).
    std::pair<const EtcdCandidate*, const EtcdLease*> leader_at(int64_t now) const {
        for (const auto& c : queue)
            for (const auto& l : leases)
                if (l.id == c.lease && l.alive && l.expires > now) return {&c, &l};
        return {nullptr, nullptr};
    }
};

class World;

// ---------------------------------------------------------------- per-process pieces

class SimElector final : public Elector {
public:
    SimElector(World& w, int host) : w_(w), host_(host) {}
    Result<LeaderInfo> campaign(Ms timeout) override;
    Result<Term> term(uint32_t at_least, Ms timeout) override;
    Result<LeaseStatus> keepalive(Ms timeout) override;
    Result<LeaderInfo> leader(Ms timeout) override;
    Result<LeaderInfo> observe(const std::optional<LeaderInfo>& known, Ms timeout) override;
    Status resign(Ms timeout) override;

private:
    LeaderInfo info(const EtcdCandidate& c) const;
    void reset();

    World& w_;
    int host_;
    int64_t lease_ = 0;
    std::optional<int64_t> rev_;
    std::vector<uint32_t> tokens_;  // issued for this candidacy
};

class SimPort final : public Passthru {
public:
    SimPort(World& w, int host) : w_(w), host_(host) {}
    Result<uint32_t> submit(const Command& cmd, std::span<uint8_t> data) override;

private:
    World& w_;
    int host_;
};

class SimHooks final : public AgentHooks {
public:
    SimHooks(World& w, int host) : w_(w), host_(host) {}
    void event(const AgentEvent& e) override;
    Status stop_writers(const std::string& reason) override;
    Status fence_action(const std::string&) override;
    int actions = 0;

private:
    World& w_;
    int host_;
};

using SimWriter = detail::RingWriter<test::FakeRing>;

// The application: writes while its agent holds, through the real writer.
struct App {
    std::unique_ptr<SimWriter> writer;
    uint64_t key = 0;      // the grant the writer writes under
    uint64_t order = 0;    // etcd: the grant's epoch; Pacemaker: the resource start it belongs to
    uint64_t id = 0;       // which writer (completions of an older one are dropped)
    bool stopped = false;  // stop_writers ran: no new writer until the agent leaves HOLDER
    size_t sent_seen = 0;  // ring.sent entries handed to the device
    std::deque<uint64_t> queued;  // sequence numbers queued, not yet taken by the ring
};

// One agent process (nvfenced): recreated on every restart.
struct Proc {
    Proc(World& w, int host, HostClock& clock, const HostId& id, const AgentOptions& ao, const EpochStore& epochs,
         const AgentStateFile& state, const LeaseGuardOptions& g, Ms call)
        : port(w, host), hooks(w, host), agent(port, 1, id, ao, clock, hooks, &epochs, &state),
          bridge(ao.tag, id, &epochs), elector(w, host), driver(elector, bridge, clock, g, call) {
        bridge.set_wait_cap(Ms(0));
        bridge.bind(agent);  // as nvfenced (ElectorLink::attach)
    }
    SimPort port;
    SimHooks hooks;
    Agent agent;
    ElectorBridge bridge;
    SimElector elector;
    ElectorDriver driver;
    App app;
    bool started = false;
};

struct Host {
    explicit Host(const int64_t& global) : clock(global) {}
    int idx = 0;
    HostId id{};
    uint16_t cntlid = 0;
    HostClock clock;
    SimDisk disk;
    std::unique_ptr<EpochStore> epochs;
    std::unique_ptr<AgentStateFile> statefile;
    std::unique_ptr<Proc> proc;
    uint32_t gen = 0;
    bool dying = false;
    int frames = 0;
    std::array<int64_t, kThreads> next{};
    std::array<bool, kThreads> blocked{};  // suspended in World::block
    std::array<int64_t, kThreads> wake{};  // a blocked thread's wait ends
    std::array<int64_t, kThreads> call_end{};  // the bound of the call it waits in
    std::array<bool, kThreads> in_device{};  // ... and that call is a device command
    // The agent's loop and the elector driver wait on fibers of their own.
    struct FiberArg {
        World* world;
        int host;
        int thr;
    };
    std::array<std::unique_ptr<Fiber>, kFiberThreads> fibers;
    std::array<FiberArg, kFiberThreads> fiber_args{};
    int64_t frozen_until = 0;
    int64_t etcd_cut_until = 0;
    int64_t dev_cut_until = 0;
    int64_t link_slow_until = 0;  // link_degraded: its device commands are slow
    int64_t dev_busy_until = 0;   // late_timeout: its agent gave a command up that the kernel ends then
    uint32_t dev_busy_gen = 0;    // ... the agent process that gave it up
    bool serving_takeover = false;  // its nvfenced serves fence_nvfence's takeover (fence_race)
    int takeover_reports = 0;       // ... and read this many Reports for it
    bool won = false;             // paused_win: its driver got a token in this step (a win is posted)
    int64_t lease_deadline_local = INT64_MIN;
    int64_t last_view_local = 0;  // the agent's last successful Report (its clock)
    int64_t last_view_world = 0;  // the same, world time
    bool bridge_dirty = false;
    AgentState last_state = AgentState::starting;
    uint64_t seq = 0;
    // Pacemaker schedules: the node's cluster stack (corosync + pacemaker),
    // stepped on the driver's fiber (there is no elector).
    struct Stack {
        bool up = false;         // corosync and pacemaker run
        bool joined = false;     // unfenced itself since it started: a member
        bool seen_all = false;   // two_node's wait_for_all: saw every node once
        bool runs = false;       // the resource (the writer) runs here
        // Where the cluster believes it runs (Pacemaker's CIB): set by a
        // start, cleared by a stop the cluster saw or by a fence of this
        // node. A stop of its own (lost quorum, corosync killed) stays
        // unseen until the node is fenced or starts its stack again.
        bool cib_runs = false;
        int64_t start_at = 0;    // when it starts (again)
        int64_t cut_until = 0;   // its cluster network is cut
        uint32_t view = 0;       // the members as it sees them (bit = host)
        uint32_t to_fence = 0;   // nodes lost uncleanly: fenced before recovery
        uint64_t placement = 0;  // which start of the resource runs here
        uint32_t attempt = 0;    // fence attempts of the current victim
        int64_t retry_at = 0;    // a failed fence is retried from then
        bool delayed = false;    // fence_delay: this attempt waited its random delay
        int fencing = -1;        // as controller: the victim of the fence under way
        uint64_t fencing_starts = 0;  // ... and its stack's starts when it began
        int waiting_on = -1;     // ... run by this member
        int64_t waiting_since = 0;
        std::optional<int> result;  // ... which exited so
        int job = -1;            // a fence this node runs for a controller: the victim
        int job_for = -1;        // ... and the controller
        std::array<int64_t, 4> heard{};  // each node last reachable
    } cs;
    // fence_nvfence's requests to this host's nvfenced (its control socket):
    // the agent's loop serves them between its own calls.
    uint64_t stack_starts = 0;  // the cluster stack's starts (Stack is reset at each)
    std::optional<ControlRequest> ctl_req;
    std::optional<ControlReply> ctl_reply;
    bool live() const { return proc && !dying && proc->started; }
};

// A command or write the device still has to execute.
struct DevOp {
    int64_t at;
    int host;
    uint32_t gen;        // the writing process (its ring gets the completion)
    uint64_t writer;     // App::id of the writer
    bool write;
    bool aborted;        // by a preempt-and-abort of its host
    bool cut;            // its host could not reach the device
    int phase;           // write: 0 admission, 1 the data lands
    bool unfenced;       // admitted while nobody held the reservation
    uint64_t key;        // write: the writer's grant
    uint64_t order;      // write: the epoch of its grant (etcd) or the resource's start (Pacemaker)
    uint32_t lba;
    uint64_t seq;
    size_t ring_index;
    Command cmd;         // late command
    int64_t sent;        // late command: when its host sent it
    std::array<uint8_t, 16> data;
    size_t data_len;
};

// ---------------------------------------------------------------- the world

class World {
public:
    explicit World(const SimOptions& o);
    ~World();
    World(const World&) = delete;
    World& operator=(const World&) = delete;
    ScheduleResult run();

    // for the per-process pieces
    Result<uint32_t> device_command(int h, const Command& cmd, std::span<uint8_t> data);
    Result<uint32_t> timed_out_end(int h, int thr, int64_t sent, int64_t bound);
    template <class T, class F>
    Result<T> etcd_call(int h, Ms timeout, F&& effect);
    int64_t now() const { return now_; }
    EtcdModel& etcd() { return etcd_; }
    Host& host(int h) { return *hosts_[static_cast<size_t>(h)]; }
    void block(int h, int thr, int64_t until);
    /// A call of @p h's thread @p thr that ends by @p end_ms at the latest.
    void call_started(int h, int thr, int64_t end_ms) { host(h).call_end[static_cast<size_t>(thr)] = end_ms; }
    void token_issued(uint32_t token, int h) {
        checker_.token_issued(token, h);
        trace(Rec::token, h, token, 0);
    }
    void resigned(const std::vector<uint32_t>& tokens, int h) {
        for (uint32_t t : tokens) checker_.term_resigned(t, h, now_);
        trace(Rec::resign, h, tokens.empty() ? 0 : tokens.back(), tokens.size());
    }
    void writers_stopped(int h);
    void agent_event(int h, const AgentEvent& e) {
        if (!opts_.events) return;
        texts_.push_back(format_event(e));
        trace(Rec::note, h, static_cast<uint32_t>(texts_.size() - 1), 0);
    }
    bool draw(Fault f);
    /// Pacemaker: host @p h's watcher ran its fence action (kills corosync).
    void watcher_fired(int h);
    uint64_t app_key(const Host& H) const;
    bool pacemaker() const { return pcmk_; }
    /// paused_token: host @p h's token call pauses it (World::pause_in_token).
    void pause_in_token(int h);
    Rng& rng() { return rng_; }
    int64_t ttl() const { return guard_.ttl_ms; }

private:
    // Most per-opportunity rate (per mille) of each fault kind; each
    // schedule draws its own rate below it (0: that kind stays off).
    static constexpr std::array<uint32_t, kFaultCount> kMaxRate{10, 10, 6, 150, 10, 10, 10, 60, 20, 20,
                                                                60, 2,  10, 10, 3,  0,  1000, 300, 300, 1000};

    void setup();
    void setup_pacemaker();
    void later_kinds();
    void swarm();
    // Pacemaker schedules (the cluster stack of each node).
    void cluster_step(Host& H);
    void stack_start(Host& H);
    void unfence(Host& H);
    void stack_down(Host& H, Cs why, int64_t back_after_ms);
    void membership(Host& H);
    bool reachable(const Host& A, const Host& B) const;
    bool quorate(const Host& H) const;
    uint32_t agreed(const Host& H) const;
    int dc_of(const Host& H) const;
    void fence_next(Host& H);
    int fence_off(Host& F, int victim);
    void run_job(Host& F);
    void fence_finished(Host& H, int victim, int rc);
    void place(Host& H);
    void set_runs(Host& H, bool runs, bool seen);
    bool writes_in_flight(int h) const;
    int fence_agent_run(Host& H, const char* action, int target);
    Result<ControlReply> control(Host& H, const ControlRequest& req);
    size_t node_keys(int h) const;
    void serve_control(Host& H);
    int calling_thread(const Host& H) const;
    std::optional<Violation> cluster_live() const;
    int crash_at_write(int h);
    void boot(Host& H);
    void drop_writer(App& a);
    void kill(Host& H, Rec why, uint32_t detail);
    void finalize_kill(Host& H);
    int64_t thread_time(const Host& H, int thr) const;
    int64_t device_time() const;
    bool run_one(int64_t limit);
    void run_thread(Host& H, int thr);
    static void thread_main(void* arg);
    void unwind_fibers();
    void agent_step(Host& H);
    void driver_step(Host& H);
    void app_step(Host& H);
    void app_submit(Host& H, App& a);
    void app_reap(Host& H, App& a);
    void device_step();
    void execute_write(DevOp& op);
    /// Runs @p cmd of host @p h on the target now; @p sent_ms: when the host sent it.
    Result<uint32_t> execute(int h, const Command& cmd, std::span<uint8_t> data, int64_t sent_ms);
    void abort_writes_of(int victim);
    uint64_t holder_key() const;
    void fault_step();
    void inject(Fault f, Host& H);
    void restart_target();
    void crash_loop_step();
    void freeze_host(Host& H, int64_t until, bool stops);
    Host* racing_peer(const Host& H);
    void takeover_command(Host& H, uint8_t op, int64_t limit);
    void start_race(Host& P, int64_t limit);
    void hold_victim(Host& H, int64_t limit);
    template <class Done>
    void hold_completion(Host& H, int64_t limit, Done done);
    void pause_winner(Host& H);
    void pause(Host& H, Fault kind);
    void paused_restart_step();
    void heal();
    void check(const std::optional<Violation>& v);
    void fail(const Violation& v);
    HostView view(Host& H);
    void after_step();
    void check_liveness();
    void check_stable();
    int host_of(const HostId& id) const;
    int device_holder() const;
    void trace(Rec k, int h, uint32_t a, uint64_t b, int32_t c = 0);
    void hash(uint64_t v);
    std::string format_rec(const TraceRec& r) const;
    std::string format_trace() const;

    SimOptions opts_;
    Rng rng_;
    int64_t now_ = 0;
    uint64_t steps_ = 0;
    bool unwinding_ = false;  // the schedule ended: suspended fibers unwind
    test::FakeTarget target_;
    EtcdModel etcd_;
    std::vector<std::unique_ptr<Host>> hosts_;
    std::vector<DevOp> ops_;
    std::vector<test::FakeTarget::Reg> regs_before_;
    AgentOptions agent_opts_;
    LeaseGuardOptions guard_;
    Ms call_{1000};
    std::array<uint32_t, kFaultCount> rate_{};
    int64_t next_fault_ = 0;
    // target_crash_loop: the restarts still to come and when the next is.
    int crash_loop_left_ = 0;
    int64_t fence_delay_max_ = 0;  // fence_delay: pcmk_delay_max (0: none)
    int64_t crash_loop_next_ = kNever;
    int64_t restart_at_ = kNever;  // paused_win: the target restarts then (without PTPL)
    int race_victim_ = -1;         // fence_race: the node whose check is held next
    bool race_checked_ = false;    // ... its nvfenced read its check's Report
    int64_t race_until_ = 0;       // ... the race ends by then
    int64_t fault_gap_ms_ = 500;
    int64_t etcd_down_until_ = 0;
    bool healed_ = false;
    int64_t heal_at_ = 0;
    int64_t live_deadline_ = kNever;
    int64_t calm_at_ = kNever;     // when the last call in flight at the heal ends (by its bound)
    int64_t live_at_ = kNever;     // when a healed etcd cluster first looked live
    uint64_t live_holder_ = 0;     // the key holding then
    bool done_ = false;
    uint64_t writer_ids_ = 0;
    AlignedBuffer buf_{kBlockBytes, kBlockBytes};
    InvariantChecker checker_;
    ScheduleResult res_;
    std::vector<TraceRec> trace_;
    std::vector<std::string> texts_;  // Rec::note lines (SimOptions::events)
    uint64_t hash_ = 14695981039346656037ull;
    std::array<std::string, kInvCount> tolerated_text_{};
    uint32_t tolerate_ = 0;
    bool pcmk_ = false;         // a Pacemaker schedule
    uint64_t fault_steps_ = 0;  // steps with faults (the cluster stacks' ticks are steps too)
    int64_t token_ms_ = 1000;   // corosync's token timeout (with consensus)
    uint64_t placements_ = 0;   // the resource's starts
};

// ---------------------------------------------------------------- SimElector

LeaderInfo SimElector::info(const EtcdCandidate& c) const {
    LeaderInfo i;
    i.key = "nvfence/sim/" + std::to_string(c.lease);
    i.value = "host" + std::to_string(c.host);
    i.revision = c.rev;
    i.lease = c.lease;
    return i;
}

void SimElector::reset() {
    lease_ = 0;
    rev_.reset();
    tokens_.clear();
}

Result<LeaderInfo> SimElector::campaign(Ms timeout) {
    Host& H = w_.host(host_);
    const int64_t deadline = w_.now() + timeout.count();
    auto left = [&] { return Ms(std::max<int64_t>(0, deadline - w_.now())); };
    if (lease_ == 0) {
        const int64_t sent = H.clock.local_ms();
        auto g = w_.etcd_call<int64_t>(host_, left(), [&]() -> Result<int64_t> {
            auto& e = w_.etcd();
            const int64_t id = e.next_lease++;
            e.leases.push_back({id, host_, w_.now() + e.ttl_ms, true});
            return id;
        });
        if (!g) return g.error();
        lease_ = *g;
        rev_.reset();
        tokens_.clear();
        H.lease_deadline_local = sent + w_.ttl();
    }
    if (!rev_) {
        auto r = w_.etcd_call<int64_t>(host_, left(), [&]() -> Result<int64_t> {
            auto& e = w_.etcd();
            if (!e.lease(lease_)) return make_error_code(ElectorErrc::lease_expired);
            // One key per lease (<election>/<lease>), as EtcdElector's
            // candidacy transaction: a put whose answer was lost is found
            // again, not queued twice. Two keys on one lease had the host
            // wait behind its own older key for ever (finding 11).
            for (const EtcdCandidate& c : e.queue)
                if (c.lease == lease_) return c.rev;
            const int64_t rev = ++e.revision;
            e.queue.push_back({host_, lease_, rev, 0});
            return rev;
        });
        if (!r) {
            if (r.error() == make_error_code(ElectorErrc::lease_expired)) reset();
            return r.error();
        }
        rev_ = *r;
    }
    // Until our key is the first: poll (a watch with a delivery delay).
    for (;;) {
        if (left().count() < 20) return make_error_code(Errc::timeout);
        auto r = w_.etcd_call<LeaderInfo>(host_, left(), [&]() -> Result<LeaderInfo> {
            auto& e = w_.etcd();
            if (!e.lease(lease_)) return make_error_code(ElectorErrc::lease_expired);
            const EtcdCandidate* c = e.leader();
            if (c && c->rev == *rev_) return info(*c);
            return make_error_code(ElectorErrc::not_leader);
        });
        if (r) return r;
        if (r.error() == make_error_code(ElectorErrc::lease_expired)) {
            reset();
            return r.error();
        }
        if (r.error() != make_error_code(ElectorErrc::not_leader)) return r.error();
        const int64_t until = std::min(deadline, w_.now() + w_.rng().range(20, 120));
        w_.call_started(host_, kDriver, until);
        w_.block(host_, kDriver, until);
    }
}

Result<Term> SimElector::term(uint32_t at_least, Ms timeout) {
    if (!rev_) return make_error_code(ElectorErrc::not_campaigning);
    auto t = w_.etcd_call<Term>(host_, timeout, [&]() -> Result<Term> {
        auto& e = w_.etcd();
        if (e.queue.empty() || e.queue.front().rev != *rev_) return make_error_code(ElectorErrc::not_leader);
        EtcdCandidate& c = e.queue.front();
        if (c.token == 0 || c.token <= at_least) {
            c.token = std::max(e.counter, at_least) + 1;
            e.counter = c.token;
            w_.token_issued(c.token, host_);
        }
        Term term;
        term.leader = info(c);
        term.epoch = c.token;
        term.cluster_id = "sim";
        return term;
    });
    if (t && std::find(tokens_.begin(), tokens_.end(), t->epoch) == tokens_.end()) tokens_.push_back(t->epoch);
    if (t) {
        w_.pause_in_token(host_);  // paused_token: inside the call, the answer still on its way
        w_.host(host_).won = true;  // the driver posts the win next (ElectorDriver::post_win)
    }
    return t;
}

Result<LeaseStatus> SimElector::keepalive(Ms timeout) {
    if (lease_ == 0) return make_error_code(ElectorErrc::not_campaigning);
    Host& H = w_.host(host_);
    const int64_t sent = H.clock.local_ms();
    auto k = w_.etcd_call<LeaseStatus>(host_, timeout, [&]() -> Result<LeaseStatus> {
        auto& e = w_.etcd();
        EtcdLease* l = e.lease(lease_);
        if (!l) return make_error_code(ElectorErrc::lease_expired);
        l->expires = w_.now() + e.ttl_ms;
        return LeaseStatus{e.ttl_ms};
    });
    if (k) H.lease_deadline_local = std::max(H.lease_deadline_local, sent + w_.ttl());
    else if (k.error() == make_error_code(ElectorErrc::lease_expired)) reset();
    return k;
}

Result<LeaderInfo> SimElector::leader(Ms timeout) {
    return w_.etcd_call<LeaderInfo>(host_, timeout, [&]() -> Result<LeaderInfo> {
        const EtcdCandidate* c = w_.etcd().leader();
        if (!c) return make_error_code(ElectorErrc::no_leader);
        return info(*c);
    });
}

Result<LeaderInfo> SimElector::observe(const std::optional<LeaderInfo>& known, Ms timeout) {
    auto l = leader(timeout);
    if (!l && known) return *known;
    return l;
}

Status SimElector::resign(Ms timeout) {
    // The candidacy ends here whatever etcd hears (elector.hpp).
    const int64_t lease = lease_;
    w_.resigned(tokens_, host_);
    reset();
    Host& H = w_.host(host_);
    H.lease_deadline_local = std::min(H.lease_deadline_local, H.clock.local_ms());
    if (lease == 0) return Ok{};
    auto r = w_.etcd_call<int>(host_, timeout, [&]() -> Result<int> {
        auto& e = w_.etcd();
        if (EtcdLease* l = e.lease(lease)) l->expires = w_.now();
        e.expire(w_.now());
        return 0;
    });
    if (!r) return r.error();
    return Ok{};
}

// ---------------------------------------------------------------- ports and hooks

// nvfenced's device: FollowingDevice over BoundedPassthru, whose worker
// thread the single-threaded world models in World::timed_out_end (the
// agent's fiber goes on at the command's bound, the kernel keeps it).
Result<uint32_t> SimPort::submit(const Command& cmd, std::span<uint8_t> data) {
    return w_.device_command(host_, cmd, data);
}

void SimHooks::event(const AgentEvent& e) { w_.agent_event(host_, e); }

Status SimHooks::stop_writers(const std::string&) {
    w_.writers_stopped(host_);
    return Ok{};
}


// ---------------------------------------------------------------- world: setup and lifecycle

struct SimStop {};  // a violation ends the schedule (unwinds every frame)

// How long a healed etcd cluster keeps its holder, in leases: a defect that
// steps a healthy leader down does so within a lease (each renewal is due
// a third of one in).
constexpr int64_t kStableLeases = 2;

uint32_t known_mask() {
    uint32_t m = 0;
    for (size_t i = 0; i < kInvCount; ++i)
        if (known_defect(static_cast<Inv>(i))) m |= 1u << i;
    return m;
}

// One seed in four is a Pacemaker schedule (Cluster::any), decided by a
// hash of the seed so that the etcd schedules' PRNG streams stay as they
// were before Pacemaker schedules existed (recorded seeds replay).
uint64_t mix(uint64_t seed) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

bool pacemaker_seed(uint64_t seed) { return (mix(seed) & 3) == 0; }

World::World(const SimOptions& o) : opts_(o), rng_(o.seed) {
    res_.seed = o.seed;
    pcmk_ = o.cluster == Cluster::pacemaker || (o.cluster == Cluster::any && pacemaker_seed(o.seed));
    res_.cluster = pcmk_ ? Cluster::pacemaker : Cluster::etcd;
    tolerate_ = o.tolerate | (o.known_defects ? known_mask() : 0u);
    trace_.reserve(256);
    setup();
}

World::~World() {
    unwind_fibers();
    for (auto& H : hosts_)
        if (H->proc) drop_writer(H->proc->app);
}

void World::setup() {
    const int n = static_cast<int>(rng_.range(2, 4));
    const int64_t ttl_s = std::array<int64_t, 3>{2, 3, 5}[rng_.below(3)];
    guard_.ttl_ms = ttl_s * 1000;
    guard_.margin_ms = std::min<int64_t>(1000, guard_.ttl_ms / 4);
    guard_.renew_interval_ms = guard_.ttl_ms / 3;
    guard_.on_loss = LeaseLossAction::fence;
    call_ = Ms(std::min<int64_t>(1000, guard_.ttl_ms / 3));
    etcd_.ttl_ms = guard_.ttl_ms;
    agent_opts_.tag = kTag;
    agent_opts_.type = ResvType::write_exclusive;
    agent_opts_.role = StartRole::standby;
    agent_opts_.rejoin_auto = true;  // as nvfenced with elector = etcd (rejoin = auto)
    agent_opts_.holder_needs_lease = true;  // as nvfenced with lease_loss = fence
    agent_opts_.interval_ms = static_cast<uint32_t>(rng_.range(100, 1000));
    agent_opts_.device_timeout_ms = static_cast<uint32_t>(rng_.range(500, 3000));
    agent_opts_.volume = "vol-sim";
    agent_opts_.device = "/dev/sim";
    target_.nsid = 1;
    // The kinds before cluster_partition only: an etcd schedule draws what it drew before that kind existed.
    for (size_t f = 0; f < static_cast<size_t>(Fault::cluster_partition); ++f)
        rate_[f] = static_cast<uint32_t>(rng_.range(0, kMaxRate[f]));
    fault_gap_ms_ = rng_.range(200, 3000);
    next_fault_ = rng_.range(0, 2 * fault_gap_ms_);
    for (int i = 0; i < n; ++i) {
        auto H = std::make_unique<Host>(now_);
        H->idx = i;
        H->id = test::make_host(static_cast<uint8_t>(i + 1));
        H->cntlid = static_cast<uint16_t>(i + 1);
        H->clock.set_drift_ppm(rng_.range(-200, 200));
        H->disk.on_write = [this, i] { return crash_at_write(i); };
        const std::string dir = host_dir(i);
        H->epochs = std::make_unique<EpochStore>(dir, "vol-sim", H->disk);
        H->statefile = std::make_unique<AgentStateFile>(dir, "vol-sim", H->disk);
        H->next = {rng_.range(0, 500), kNever, kNever};
        hosts_.push_back(std::move(H));
    }
    fault_steps_ = opts_.steps;
    if (pcmk_) setup_pacemaker();
    if (opts_.swarm) swarm();
    later_kinds();
}

// The kinds added after the seeds recorded so far (off by default) draw
// their rates from the seed's hash, not the schedule's PRNG: without
// them a schedule draws exactly what it drew before they existed.
void World::later_kinds() {
    Rng r(mix(opts_.seed ^ 0x1d7c3aull));
    for (Fault f : {Fault::link_degraded, Fault::target_crash_loop}) {
        const auto i = static_cast<size_t>(f);
        rate_[i] = static_cast<uint32_t>(r.range(0, kMaxRate[i]));
    }
    // Swarm with omission (Groce et al.: a schedule leaves out a random half
    // of the kinds, so that the others meet undisturbed), only when the
    // later kinds are asked for (CI's slice): one schedule in two leaves
    // each earlier kind out with probability 1/2 and runs the later ones at
    // 2-8 times their most usual rate.
    const uint32_t later = (1u << static_cast<unsigned>(Fault::link_degraded)) |
                           (1u << static_cast<unsigned>(Fault::target_crash_loop)) |
                           (1u << static_cast<unsigned>(Fault::fence_delay));
    if ((opts_.fault_mask & later) && r.below(2) == 0) {
        for (size_t i = 0; i < static_cast<size_t>(Fault::link_degraded); ++i)
            if (r.below(4) != 0) rate_[i] = 0;
        for (Fault f : {Fault::link_degraded, Fault::target_crash_loop}) {
            const auto i = static_cast<size_t>(f);
            rate_[i] = static_cast<uint32_t>(std::min<uint64_t>(1000, uint64_t{kMaxRate[i]} * (2 + r.below(7))));
        }
    }
    const int64_t delay_max = r.range(1000, 5000);
    if (pcmk_ && (opts_.fault_mask & (1u << static_cast<unsigned>(Fault::fence_delay)))) fence_delay_max_ = delay_max;
    // fence_race and paused_win (2026-12-05) from a hash of their own: every
    // schedule without them is the one it was before they existed, with the
    // other later kinds too.
    Rng q(mix(opts_.seed ^ 0x7ace5ull));
    for (Fault f : {Fault::fence_race, Fault::paused_win}) {
        const auto i = static_cast<size_t>(f);
        rate_[i] = static_cast<uint32_t>(q.range(0, kMaxRate[i]));
    }
    // paused_token (later the same day) from its own.
    const auto pt = static_cast<size_t>(Fault::paused_token);
    rate_[pt] = static_cast<uint32_t>(Rng(mix(opts_.seed ^ 0x70ce2ull)).range(0, kMaxRate[pt]));
    // late_timeout (2026-12-06) from its own.
    const auto lt = static_cast<size_t>(Fault::late_timeout);
    rate_[lt] = static_cast<uint32_t>(Rng(mix(opts_.seed ^ 0x1a7e7ull)).range(0, kMaxRate[lt]));
}

// Swarm testing (Groce et al., "Swarm testing", ISSTA 2012): one schedule
// in four raises one to three event fault kinds to 2-8 times their most
// usual rate. Seed 393135's target restart during a win held back by a
// frozen VM was one schedule in 2.6 million with every kind at its usual
// rate. Drawn from the seed's hash, not the schedule's PRNG.
void World::swarm() {
    Rng r(mix(opts_.seed ^ 0x53a7a5ull));
    if (r.below(4) != 0) return;
    const std::array<Fault, 5> common{Fault::freeze, Fault::crash, Fault::device_partition, Fault::target_restart,
                                      pcmk_ ? Fault::cluster_partition : Fault::etcd_partition};
    const uint64_t kinds = 1 + r.below(3);
    for (uint64_t i = 0; i < kinds; ++i) {
        const auto f = static_cast<size_t>(common[r.below(common.size())]);
        rate_[f] = static_cast<uint32_t>(std::min<uint64_t>(1000, uint64_t{kMaxRate[f]} * (2 + r.below(7))));
    }
}

// As docs/PACEMAKER.md configures nvfenced as each node's watcher.
void World::setup_pacemaker() {
    agent_opts_.type = ResvType::write_exclusive_reg_only;  // fence_nvfence's default mode
    // Drawn from the seed's hash, not the schedule's PRNG (as swarm()): the
    // recorded seeds draw what they drew before the watcher existed.
    res_.watcher = opts_.watcher != Watcher::any ? opts_.watcher
                   : Rng(mix(opts_.seed ^ 0x3a7c4eull)).chance(500) ? Watcher::watch
                                                                    : Watcher::acquire;
    agent_opts_.role = res_.watcher == Watcher::watch ? StartRole::watch : StartRole::acquire;
    agent_opts_.rejoin_auto = false;         // only unfencing (fence_nvfence on) rejoins
    agent_opts_.holder_needs_lease = false;  // elector = none
    agent_opts_.fence_on_view_loss = false;  // Pacemaker decides
    for (Fault f : {Fault::etcd_partition, Fault::etcd_down, Fault::late_answer}) rate_[static_cast<size_t>(f)] = 0;
    const auto cp = static_cast<size_t>(Fault::cluster_partition);
    rate_[cp] = static_cast<uint32_t>(rng_.range(1, kMaxRate[cp]));
    const int64_t token = rng_.range(1000, 3000);
    token_ms_ = token + token * 12 / 10;  // token, then consensus (1.2 x token)
    for (auto& H : hosts_) H->cs.start_at = rng_.range(0, 500);
    // Every node's stack ticks ten times a second: as many steps again per
    // node give the faults as much simulated time as in an etcd schedule.
    fault_steps_ = uint64_t{opts_.steps} * (1 + hosts_.size());
}

int World::crash_at_write(int h) {
    if (!draw(Fault::crash_in_write)) return 0;
    Host& H = host(h);
    H.dying = true;
    const int reached = rng_.chance(500) ? 2 : 1;
    trace(Rec::crash, h, static_cast<uint32_t>(Fault::crash_in_write), static_cast<uint64_t>(reached));
    return reached;
}

void World::boot(Host& H) {
    AgentOptions ao = agent_opts_;
    ao.node = static_cast<uint8_t>(H.idx + 1);
    H.proc = std::make_unique<Proc>(*this, H.idx, H.clock, H.id, ao, *H.epochs, *H.statefile, guard_, call_);
    ++H.gen;
    H.next = {now_, kNever, kNever};
    H.bridge_dirty = false;
    H.serving_takeover = false;
    H.won = false;
    H.last_view_local = H.clock.local_ms();
    trace(Rec::restart, H.idx, H.gen, 0);
}

void World::drop_writer(App& a) {
    if (!a.writer) return;
    // The process is gone: the kernel completes what it had (the device may
    // still execute those writes: their DevOps stay queued).
    auto& ring = a.writer->ring();
    for (size_t i = 0; i < ring.sent.size(); ++i)
        if (!ring.is_done(i)) ring.complete(i, -EIO);
    Completion out[8];
    for (int i = 0; i < 64 && a.writer->in_flight() > 0; ++i) {
        auto r = a.writer->reap(out, 0);
        if (!r || *r == 0) break;
    }
    a.writer.reset();
}

void World::kill(Host& H, Rec why, uint32_t detail) {
    if (!H.proc || H.dying) return;
    H.dying = true;
    trace(why, H.idx, detail, 0);
    if (H.frames == 0) finalize_kill(H);
}

void World::finalize_kill(Host& H) {
    assert(H.frames == 0 && H.dying);
    if (H.proc) drop_writer(H.proc->app);
    H.proc.reset();
    H.dying = false;
    H.next = {now_ + rng_.range(200, 3000), kNever, kNever};
    H.blocked = {};
}

bool World::draw(Fault f) {
    const auto i = static_cast<size_t>(f);
    if (healed_ || !(opts_.fault_mask & (1u << i)) || rate_[i] == 0) return false;
    if (!rng_.chance(rate_[i])) return false;
    ++res_.faults[i];
    return true;
}

void World::writers_stopped(int h) {
    Host& H = host(h);
    if (!H.proc) return;
    H.proc->app.stopped = true;
    // `systemctl stop` of a writer unit returns once its processes are gone,
    // and a process leaves only when its I/O has ended: the stop waits for
    // the writes in flight (at most the longest device delay, then a bound).
    const int64_t deadline = now_ + 2000;
    call_started(h, kAgent, deadline + 1);
    for (;;) {
        int64_t next = kNever;
        for (const auto& op : ops_)
            if (op.write && op.host == h) next = std::min(next, op.at);
        if (next == kNever || now_ >= deadline) return;
        block(h, kAgent, std::min(deadline, std::max(next, now_) + 1));
    }
}

// ---------------------------------------------------------------- world: scheduling

int64_t World::thread_time(const Host& H, int thr) const {
    const auto i = static_cast<size_t>(thr);
    // A waiting thread goes on at its wait's end, at once when its process
    // died (it unwinds).
    if (H.blocked[i]) return H.dying ? now_ : std::max(H.wake[i], H.frozen_until);
    if (H.dying) return kNever;
    if (!H.proc && thr != kAgent) return kNever;  // the agent slot restarts a dead process
    return std::max(H.next[static_cast<size_t>(thr)], H.frozen_until);
}

int64_t World::device_time() const {
    int64_t t = kNever;
    for (const auto& op : ops_) t = std::min(t, op.at);
    return t;
}

bool World::run_one(int64_t limit) {
    // Candidates: (host, thread) of each host, then the device (-1) and the
    // fault injector (-2).
    std::array<std::pair<int, int>, 16> ties{};
    size_t n = 0;
    int64_t best = kNever;
    auto offer = [&](int64_t t, int h, int thr) {
        if (t > best) return;
        if (t < best) n = 0;
        best = t;
        if (n < ties.size()) ties[n++] = {h, thr};
    };
    for (const auto& H : hosts_)
        for (int thr = 0; thr < kThreads; ++thr) offer(thread_time(*H, thr), H->idx, thr);
    offer(device_time(), -1, 0);
    if (!healed_) offer(next_fault_, -2, 0);
    if (!healed_ && crash_loop_left_ > 0) offer(crash_loop_next_, -3, 0);
    if (!healed_ && restart_at_ < kNever) offer(restart_at_, -4, 0);
    if (best > limit || best >= kNever) return false;
    const auto [h, thr] = ties[n > 1 ? rng_.below(n) : 0];
    now_ = std::max(now_, best);
    ++steps_;
    hash(static_cast<uint64_t>(now_));
    hash(static_cast<uint64_t>((h + 2) * 4 + thr));
    if (h == -1) device_step();
    else if (h == -2) fault_step();
    else if (h == -3) crash_loop_step();
    else if (h == -4) paused_restart_step();
    else run_thread(host(h), thr);
    after_step();
    return true;
}

void World::run_thread(Host& H, int thr) {
    if (thr == kApp) {
        assert(H.proc && !H.dying);
        app_step(H);  // never waits: on the scheduler's stack
        return;
    }
    const auto i = static_cast<size_t>(thr);
    auto& f = H.fibers[i];
    if (!f) f = std::make_unique<Fiber>();
    if (!f->active()) {
        assert(!H.blocked[i]);
        ++H.frames;
        H.fiber_args[i] = {this, H.idx, thr};
        f->start(&World::thread_main, &H.fiber_args[i]);
    }
    f->resume();  // until its step ends or waits; a violation's SimStop comes through
    if (f->active()) {
        assert(H.blocked[i]);
        return;
    }
    assert(!H.blocked[i] && H.frames > 0);
    --H.frames;
    if (H.dying && H.frames == 0) finalize_kill(H);
}

void World::thread_main(void* arg) {
    const auto& a = *static_cast<const Host::FiberArg*>(arg);
    World& w = *a.world;
    Host& H = w.host(a.host);
    try {
        if (!H.proc) w.boot(H);
        else if (a.thr == kAgent) w.agent_step(H);
        else if (w.pcmk_) w.cluster_step(H);
        else w.driver_step(H);
    } catch (const SimCrash&) {
        // H.dying was set by whoever crashed it (or the schedule ended).
        assert(H.dying || w.unwinding_);
    }
}

void World::block(int h, int thr, int64_t until) {
    Host& H = host(h);
    const auto i = static_cast<size_t>(thr);
    Fiber* f = H.fibers[i].get();
    if (!f || Fiber::current() != f) {
        std::fprintf(stderr, "nvfence-sim: host %d thread %d waits outside its own fiber\n", h, thr);
        std::abort();
    }
    if (unwinding_) throw SimCrash{};
    assert(!H.blocked[i]);
    H.blocked[i] = true;
    H.wake[i] = until;
    f->suspend();
    H.blocked[i] = false;
    if (H.dying || unwinding_) throw SimCrash{};
    assert(now_ >= until && now_ >= H.frozen_until);
}

// The schedule ended (passed or stopped): every fiber still waiting unwinds
// its frames (SimCrash from its wait), so nothing on its stack is left.
void World::unwind_fibers() {
    unwinding_ = true;
    for (auto& H : hosts_)
        for (auto& f : H->fibers)
            if (f && f->active()) {
                try {
                    f->resume();
                } catch (const SimStop&) {
                }
                if (f->active()) {
                    std::fprintf(stderr, "nvfence-sim: host %d: a fiber did not unwind\n", H->idx);
                    std::abort();
                }
            }
}

void World::agent_step(Host& H) {
    Proc& p = *H.proc;
    if (!p.started) {
        if (auto s = p.agent.start(); !s) {
            // nvfenced exits; systemd starts it again.
            kill(H, Rec::crash, 100);
            throw SimCrash{};
        }
        p.started = true;
        p.bridge.publish(p.agent);
        H.next[kDriver] = now_;
        H.next[kApp] = now_ + rng_.range(0, 50);
    } else {
        const AgentState before = p.agent.state();
        // In nvfenced's order: a due check, then the elector's events (its
        // loop drains them after every poll, before it serves a status), so
        // an event posted while a check blocked is served before anyone can
        // ask the agent anything.
        // nvfenced drains on every wake, the lease's watchdog first; events
        // wait only when the driver posted some.
        if (p.agent.until_next_check().count() == 0) p.agent.check();
        if (H.bridge_dirty) {
            H.bridge_dirty = false;
            p.bridge.drain(p.agent, p.hooks, H.clock);
        } else {
            (void)p.bridge.watch_lease(p.agent, H.clock);
        }
        p.bridge.publish(p.agent);
        serve_control(H);
        if (p.agent.state() != before) H.next[kDriver] = std::min(H.next[kDriver], now_ + 1);
    }
    // As nvfenced's poll: the next check, or the lease's watchdog if sooner.
    const int64_t watch = std::min<int64_t>(p.bridge.until_lease_watch(p.agent, H.clock).count(), INT32_MAX);
    const int64_t wait = std::max<int64_t>(1, std::min<int64_t>(p.agent.until_next_check().count(), watch + 1));
    H.next[kAgent] = now_ + (H.bridge_dirty || (H.ctl_req && !H.ctl_reply) ? 1 : wait);
}

void World::driver_step(Host& H) {
    Proc& p = *H.proc;
    const auto w = p.driver.step();
    H.bridge_dirty = true;
    H.next[kDriver] = now_ + std::max<int64_t>(1, w.count()) + rng_.range(0, 2);
    H.next[kAgent] = std::min(H.next[kAgent], now_ + rng_.range(0, 3));
    if (H.won) {
        H.won = false;
        pause_winner(H);
    }
}

// ---------------------------------------------------------------- world: the Pacemaker cluster
//
// Each node's cluster stack, as far as fencing goes: corosync's membership
// (a node unheard for the token timeout is lost; a reachable one is merged
// back, stale state and all: a node frozen past its own fencing missed the
// news and rejoins, docs/RELIABILITY.md "Pacemaker lab: what the lab
// showed"), votequorum (a majority; two nodes: two_node with wait_for_all),
// the designated controller (the lowest member) that fences every node lost
// uncleanly before it recovers the resource, and one resource (the writer)
// that it starts on itself when no member runs it. Fencing is fence_nvfence
// itself (fence_agent::run) over this host's path to the device and its
// nvfenced's control socket, as stonith-ng runs it; unfencing (`on`) runs on
// each node as its stack starts. The watcher (each node's nvfenced) kills
// corosync when its key is gone; the operator starts a stopped stack again.

constexpr int64_t kClusterTickMs = 100;   // how often a stack looks at its membership
constexpr int64_t kControlTimeoutMs = 5000;
constexpr int64_t kFenceTimeoutMs = 60000;  // stonith-timeout's default

Status SimHooks::fence_action(const std::string&) {
    ++actions;
    if (w_.pacemaker()) w_.watcher_fired(host_);
    return Ok{};
}

void World::watcher_fired(int h) {
    Host& H = host(h);
    // fence_command = "systemctl kill --signal=KILL corosync.service ..."
    if (H.cs.up) stack_down(H, Cs::down, rng_.range(2000, 10000));
}

int World::calling_thread(const Host& H) const {
    for (int i = 0; i < kFiberThreads; ++i)
        if (H.fibers[static_cast<size_t>(i)] && Fiber::current() == H.fibers[static_cast<size_t>(i)].get()) return i;
    std::fprintf(stderr, "nvfence-sim: host %d: a device command outside its fibers\n", H.idx);
    std::abort();
}

void World::cluster_step(Host& H) {
    auto& c = H.cs;
    H.next[kDriver] = now_ + kClusterTickMs + rng_.range(0, 20);
    if (!c.up) {
        if (now_ >= c.start_at) stack_start(H);
        return;
    }
    if (!c.joined) {
        unfence(H);
        return;
    }
    if (c.job >= 0) {
        run_job(H);
        return;
    }
    membership(H);
    if (!quorate(H)) {
        if (c.runs) set_runs(H, false, false);  // no-quorum-policy = stop, seen by nobody
        return;
    }
    if (dc_of(H) != H.idx) return;
    if (c.to_fence) {
        fence_next(H);
        return;
    }
    place(H);
}

// corosync and pacemaker start; the node unfences itself (on_target) before it takes part.
void World::stack_start(Host& H) {
    auto& c = H.cs;
    const int64_t cut = c.cut_until;
    c = Host::Stack{};
    c.cut_until = cut;
    c.up = true;
    c.view = 1u << H.idx;
    c.heard.fill(now_);
    ++H.stack_starts;
    trace(Rec::cluster, H.idx, static_cast<uint32_t>(Cs::start), 0);
    unfence(H);
}

// fence_nvfence on, run on the node itself; again at its next tick when its
// nvfenced died under it (the request is lost with the process).
void World::unfence(Host& H) {
    auto& c = H.cs;
    const int rc = fence_agent_run(H, "on", H.idx);
    if (!c.up) return;  // its watcher killed corosync meanwhile
    if (rc != 0) {
        stack_down(H, Cs::unfence_failed, rng_.range(1000, 3000));
        return;
    }
    c.joined = true;
    // A node that started again is no longer unclean.
    for (auto& O : hosts_) O->cs.to_fence &= ~(1u << H.idx);
}

void World::stack_down(Host& H, Cs why, int64_t back_after_ms) {
    auto& c = H.cs;
    if (c.runs) set_runs(H, false, false);
    c.up = false;
    c.joined = false;
    c.start_at = now_ + back_after_ms;
    trace(Rec::cluster, H.idx, static_cast<uint32_t>(why), 0);
}

bool World::reachable(const Host& A, const Host& B) const {
    return B.cs.up && B.frozen_until <= now_ && A.cs.cut_until <= now_ && B.cs.cut_until <= now_;
}

void World::membership(Host& H) {
    auto& c = H.cs;
    for (auto& Op : hosts_) {
        Host& O = *Op;
        const uint32_t b = 1u << O.idx;
        if (O.idx == H.idx) continue;
        if (reachable(H, O)) {
            c.heard[static_cast<size_t>(O.idx)] = now_;
            if (!(c.view & b) && O.cs.joined) {
                c.view |= b;  // merged, with whatever state it brings
                trace(Rec::cluster, H.idx, static_cast<uint32_t>(Cs::join), static_cast<uint64_t>(O.idx));
            }
        } else if ((c.view & b) && now_ - c.heard[static_cast<size_t>(O.idx)] > token_ms_) {
            c.view &= ~b;
            c.to_fence |= b;  // lost, not a clean leave: fenced before its resources recover
            trace(Rec::cluster, H.idx, static_cast<uint32_t>(Cs::lost), static_cast<uint64_t>(O.idx));
        }
    }
    if (c.view == (1u << hosts_.size()) - 1) c.seen_all = true;
}

// The members @p H agrees with: those in its view that have it in theirs.
// Corosync's membership is one agreed ring (virtual synchrony): a node that
// resumes with a stale view is in no partition with a node that already
// formed another one (CI's seed 66351354232800: a controller back from a
// 7.6 s freeze counted a node of the other partition for its quorum).
uint32_t World::agreed(const Host& H) const {
    uint32_t m = 1u << H.idx;
    for (const auto& O : hosts_)
        if ((H.cs.view & (1u << O->idx)) && O->cs.joined && (O->cs.view & (1u << H.idx))) m |= 1u << O->idx;
    return m;
}

bool World::quorate(const Host& H) const {
    if (hosts_.size() == 2) return H.cs.seen_all;  // two_node: 1 (wait_for_all)
    return 2 * static_cast<size_t>(__builtin_popcount(agreed(H))) > hosts_.size();
}

int World::dc_of(const Host& H) const { return __builtin_ctz(agreed(H)); }

// The controller asks a member to fence the first lost node: itself
// first, then the next member on each retry (stonith-ng asks another node
// that can run the device when one fails, and gives up on a fencer after
// its timeout).
void World::fence_next(Host& H) {
    auto& c = H.cs;
    if (c.waiting_on >= 0) {
        if (!c.result && now_ - c.waiting_since < kFenceTimeoutMs) return;
        const int rc = c.result.value_or(1);
        c.waiting_on = -1;
        fence_finished(H, c.fencing, rc);
        return;
    }
    if (now_ < c.retry_at) return;
    // pcmk_delay_max: a random delay before each fencing action (drawn only
    // under fence_delay, off by default).
    if (fence_delay_max_ > 0 && !c.delayed) {
        c.delayed = true;
        c.retry_at = now_ + rng_.range(0, fence_delay_max_);
        ++res_.faults[static_cast<size_t>(Fault::fence_delay)];
        return;
    }
    c.delayed = false;
    assert(c.to_fence != 0 && !(c.to_fence & (1u << H.idx)) && "a controller never fences itself");
    c.fencing = __builtin_ctz(c.to_fence);
    c.fencing_starts = host(c.fencing).stack_starts;
    std::vector<int> members;
    const uint32_t ring = agreed(H);
    for (const auto& O : hosts_)
        if (ring & (1u << O->idx)) members.push_back(O->idx);
    assert(!members.empty());
    const int fencer = members[c.attempt % members.size()];
    trace(Rec::cluster, H.idx, static_cast<uint32_t>(Cs::fence), static_cast<uint64_t>(c.fencing), fencer);
    if (fencer == H.idx) {
        const int victim = c.fencing;
        fence_finished(H, victim, fence_off(H, victim));
        return;
    }
    Host& F = host(fencer);
    F.cs.job = c.fencing;
    F.cs.job_for = H.idx;
    c.waiting_on = fencer;
    c.waiting_since = now_;
    c.result.reset();
}

int World::fence_off(Host& F, int victim) {
    const Host& V = host(victim);
    const uint64_t starts = V.stack_starts;
    const bool unfencing = V.cs.up && !V.cs.joined;
    const int rc = fence_agent_run(F, "off", victim);
    // Judged unless the victim's stack was unfencing itself or started again
    // meanwhile (a new instance of the node, registered on purpose).
    if (!unfencing && V.stack_starts == starts) check(checker_.fence_done(F.idx, victim, rc, node_keys(victim)));
    return rc;
}

void World::run_job(Host& F) {
    const int victim = F.cs.job, dc = F.cs.job_for;
    // A victim that merged back before it was fenced may be asked to fence
    // itself: fence_nvfence refuses the local node, the controller retries
    // on the next member.
    assert(victim >= 0 && dc >= 0);
    F.cs.job = -1;
    const int rc = fence_off(F, victim);
    Host& D = host(dc);
    if (D.cs.waiting_on == F.idx && D.cs.fencing == victim) D.cs.result = rc;
}

void World::fence_finished(Host& H, int victim, int rc) {
    auto& c = H.cs;
    if (!c.up || !c.joined) return;  // its stack went down meanwhile
    const uint32_t vb = 1u << victim;
    if (rc != 0) {
        ++c.attempt;
        c.retry_at = now_ + rng_.range(1000, 3000);
        trace(Rec::cluster, H.idx, static_cast<uint32_t>(Cs::fence_failed), static_cast<uint64_t>(victim));
        return;
    }
    c.attempt = 0;
    // Whatever it believes, it cannot write; unless its stack started again
    // since the fence began: a new instance, unfenced on purpose.
    if (host(victim).stack_starts == c.fencing_starts) host(victim).cs.cib_runs = false;
    // The fence history reaches every member of this partition.
    for (auto& O : hosts_)
        if (c.view & (1u << O->idx)) O->cs.to_fence &= ~vb;
    c.to_fence &= ~vb;
    trace(Rec::cluster, H.idx, static_cast<uint32_t>(Cs::fenced), static_cast<uint64_t>(victim));
}

// One active instance in the partition: the lowest runner stays, others
// stop (multi-active recovery); none: it starts on the controller, once no
// member is still stopping it (a stop ends when the writer's I/O has) and
// no node outside the partition may still run it (the CIB says it ran
// there and nobody saw it stop or fenced it: that node is fenced first, as
// Pacemaker fences an unclean node before it recovers its resources).
void World::place(Host& H) {
    int runner = -1;
    bool unclean = false, stopping = false;
    const uint32_t ring = agreed(H);
    assert(__builtin_ctz(ring) == H.idx && quorate(H) && "only a quorate controller places");
    for (auto& O : hosts_) {
        const uint32_t b = 1u << O->idx;
        if (!(ring & b)) {
            if (O->cs.cib_runs) {
                H.cs.to_fence |= b;
                unclean = true;
            }
            continue;
        }
        if (!O->cs.runs) {
            stopping = stopping || writes_in_flight(O->idx);
            continue;
        }
        if (runner < 0) runner = O->idx;
        else set_runs(*O, false, true);
    }
    if (runner < 0 && !unclean && !stopping) set_runs(H, true, true);
}

bool World::writes_in_flight(int h) const {
    return std::any_of(ops_.begin(), ops_.end(), [h](const DevOp& op) { return op.write && op.host == h; });
}

void World::set_runs(Host& H, bool runs, bool seen) {
    if (H.cs.runs == runs) return;
    H.cs.runs = runs;
    if (runs) H.cs.placement = ++placements_;
    if (runs || seen) H.cs.cib_runs = runs;
    assert(!runs || (H.cs.cib_runs && H.cs.placement == placements_));
    if (!runs && H.proc) H.proc->app.stopped = true;  // the writer drains and ends
    trace(Rec::cluster, H.idx, static_cast<uint32_t>(runs ? Cs::runs : Cs::stops), H.cs.placement);
}

// The namespace as fence_nvfence opens it on host @p h: its own path
// (commands wait on the calling fiber), nvmet's capabilities (no PTPL).
class SimFenceDevice final : public fence_agent::Device {
public:
    SimFenceDevice(World& w, int h, const HostId& id) : port_(w, h), resv_(port_, 1), id_(id) {}
    const std::string& path() const override { return path_; }
    const std::string& volume() const override { return volume_; }
    const HostId& host_id() const override { return id_; }
    bool supports(ResvType t) const override {
        return t == ResvType::write_exclusive || t == ResvType::write_exclusive_reg_only;
    }
    bool ptpl_capable() const override { return false; }
    uint32_t nsid() const override { return 1; }
    Reservations& resv() override { return resv_; }

private:
    SimPort port_;
    Reservations resv_;
    HostId id_;
    std::string path_ = "/dev/sim";
    std::string volume_ = "vol-sim";
};

// fence_nvfence ACTION for node @p target, run on @p H as Pacemaker's fencer
// runs it: the node map of the cluster, this host's path and nvfenced.
int World::fence_agent_run(Host& H, const char* action, int target) {
    std::string map;
    for (const auto& O : hosts_)
        map += (map.empty() ? "" : ";") + std::string("host") + std::to_string(O->idx) + ":" + std::to_string(O->idx + 1);
    const std::vector<std::string> args{"-o", action, "-n", "host" + std::to_string(target), "-d", "/dev/sim",
                                        "--node-ids", map, "--cluster-tag", std::to_string(kTag),
                                        "--state-dir", host_dir(H.idx)};
    const fence_agent::Parsed parsed = fence_agent::parse_argv(args);
    if (!parsed.ok()) {
        std::fprintf(stderr, "nvfence-sim: fence_nvfence refused the simulator's options: %s\n",
                     parsed.errors.front().c_str());
        std::abort();
    }
    fence_agent::Host fh;
    fh.local_name = "host" + std::to_string(H.idx);
    fh.open = [this, &H](const std::string&, std::string&) -> Result<std::unique_ptr<fence_agent::Device>> {
        return std::unique_ptr<fence_agent::Device>(std::make_unique<SimFenceDevice>(*this, H.idx, H.id));
    };
    // nvfenced runs on every node: its socket is there (a crashed agent's
    // socket refuses connections until systemd restarts it).
    fh.find_agent = [](const fence_agent::Device&) -> std::optional<std::string> { return "/run/nvfence/vol-sim.sock"; };
    fh.control = [this, &H](const std::string&, const ControlRequest& req) { return control(H, req); };
    fh.sleep = [](uint32_t) {};
    fh.log = [this, &H](fence_agent::Level, const std::string& line) {
        if (!opts_.events) return;
        texts_.push_back("fence_nvfence: " + line);
        trace(Rec::note, H.idx, static_cast<uint32_t>(texts_.size() - 1), 0);
    };
    fh.resolve = [](const std::string& p) { return p; };
    fh.discover = [] { return std::vector<std::string>{}; };
    fh.dm_slaves = [](const std::string&) { return std::vector<std::string>{}; };
    fh.state_medium = &H.disk;  // its epoch floor on the host's simulated disk, as nvfenced's
    std::string out;
    return fence_agent::run(parsed, fh, out);
}

size_t World::node_keys(int h) const {
    size_t n = 0;
    for (const auto& g : target_.regs) {
        auto f = decode_key(g.key);
        if (f && f->tag == kTag && f->node == h + 1) ++n;
    }
    return n;
}

// fence_nvfence's control request, served by this host's nvfenced between its calls.
Result<ControlReply> World::control(Host& H, const ControlRequest& req) {
    const int64_t deadline = now_ + kControlTimeoutMs;
    if (!H.live()) return std::error_code(ECONNREFUSED, std::system_category());
    H.ctl_req = req;
    H.ctl_reply.reset();
    H.next[kAgent] = std::min(H.next[kAgent], now_ + 1);
    call_started(H.idx, kDriver, deadline);
    while (!H.ctl_reply && now_ < deadline) block(H.idx, kDriver, std::min(deadline, now_ + 5));
    H.ctl_req.reset();
    if (!H.ctl_reply) return make_error_code(Errc::timeout);
    auto r = *H.ctl_reply;
    H.ctl_reply.reset();
    return r;
}

void World::serve_control(Host& H) {
    if (!H.ctl_req || H.ctl_reply) return;
    const ControlRequest req = *H.ctl_req;
    H.serving_takeover = req.op == ControlOp::takeover;
    H.takeover_reports = 0;
    H.ctl_reply = H.proc->agent.handle(req, "fence_nvfence");
    H.serving_takeover = false;
}

std::optional<Violation> World::cluster_live() const {
    const uint32_t all = (1u << hosts_.size()) - 1;
    int runners = 0;
    for (const auto& H : hosts_) {
        if (!H->cs.joined || H->cs.view != all)
            return Violation{Inv::liveness, "host " + std::to_string(H->idx) + "'s cluster stack is not a member of "
                                                "the whole cluster after the world healed"};
        runners += H->cs.runs ? 1 : 0;
    }
    if (hosts_.front()->cs.to_fence)
        return Violation{Inv::liveness, "the controller still has nodes to fence after the world healed"};
    if (runners != 1)
        return Violation{Inv::liveness, "the resource runs on " + std::to_string(runners) +
                                            " nodes after the world healed"};
    return std::nullopt;
}

// ---------------------------------------------------------------- world: the application's writes

// The key the application's writer runs under. nvfenced's key, except
// under the check-only watcher (role = watch), which registers nothing: a
// new writer then takes the key fence_nvfence's `on` registered for this
// host (what the device shows for its host id) and keeps it for as long as
// the resource runs here, as an application writes on whatever the device
// then says (its writes after an eviction are the device's to refuse).
uint64_t World::app_key(const Host& H) const {
    if (!pcmk_ || res_.watcher != Watcher::watch) return H.proc->agent.key();
    if (H.proc->app.writer) return H.proc->app.key;
    for (const auto& g : target_.regs)
        if (g.host == H.id) return g.key;
    return 0;
}

void World::app_step(Host& H) {
    Proc& p = *H.proc;
    App& a = p.app;
    // etcd: the writer runs while its agent holds; Pacemaker: while the
    // resource runs on this node (every registrant may write).
    const bool holder = pcmk_ ? H.cs.runs : p.agent.state() == AgentState::holder;
    const uint64_t key = app_key(H);
    const uint64_t order = pcmk_ ? H.cs.placement : epoch_of(key);
    // A new grant may start the writers again, once the stopped writer has
    // drained: a writer stopped with writes in flight never resumes.
    if (!holder && !a.writer) a.stopped = false;
    if (a.writer) app_reap(H, a);
    // A new grant (a re-key to a new token): the writer of the old one
    // drains first, then a writer of the new grant starts.
    if (a.writer && (key != a.key || order != a.order) && a.writer->in_flight() == 0) a.writer.reset();
    if (!a.writer && holder && !a.stopped && key != 0) {
        detail::WriterTarget t;
        t.fd = Fd(-1);
        t.mode = WriterMode::block;
        t.block_bytes = kBlockBytes;
        t.size_blocks = kBlocks;
        t.nsid = 1;
        t.max_io_bytes = 4096;
        WriterOptions o;
        o.queue_depth = 4;
        o.timeout_ms = 1;
        o.epoch = epoch_of(key);
        a.writer = std::make_unique<SimWriter>(std::move(t), o);
        const bool ok = a.writer->init().ok();
        assert(ok);
        (void)ok;
        a.key = key;
        a.order = order;
        a.id = ++writer_ids_;
        a.sent_seen = 0;
        a.queued.clear();
    }
    // Writes only while its agent holds with the grant the writer has.
    if (a.writer && holder && key == a.key && order == a.order && !a.stopped && !a.writer->fenced() &&
        a.writer->in_flight() < a.writer->queue_depth())
        app_submit(H, a);
    if (a.writer && (a.stopped || a.writer->fenced()) && a.writer->in_flight() == 0) a.writer.reset();
    H.next[kApp] = now_ + rng_.range(5, 60);
}

void World::app_submit(Host& H, App& a) {
    const uint64_t seq = ++H.seq;
    auto lba = static_cast<uint32_t>(rng_.below(kBlocks));
    // Half the time a block another host's write in flight goes to: a
    // stale write that lands late then meets the new holder's on the media.
    if (opts_.slow_writes && rng_.below(2) == 0)
        for (const auto& op : ops_)
            if (op.write && op.host != H.idx) {
                lba = op.lba;
                break;
            }
    if (!a.writer->queue_write(lba, buf_.span(), seq)) return;
    a.queued.push_back(seq);
    (void)a.writer->submit();
    auto& ring = a.writer->ring();
    for (; a.sent_seen < ring.sent.size(); ++a.sent_seen) {
        const test::SentIo& io = ring.sent[a.sent_seen];
        assert(!a.queued.empty());
        const uint64_t s = a.queued.front();
        a.queued.pop_front();
        if (io.opcode == IORING_OP_NOP) continue;  // cancelled by the latch: never reaches the device
        DevOp op{};
        op.write = true;
        op.host = H.idx;
        op.gen = H.gen;
        op.writer = a.id;
        op.key = a.key;
        op.order = a.order;
        op.lba = static_cast<uint32_t>(io.off / kBlockBytes);
        op.seq = s;
        op.ring_index = a.sent_seen;
        op.cut = now_ < H.dev_cut_until;
        op.at = now_ + (draw(Fault::device_delay) ? rng_.range(50, 1500) : rng_.range(1, 20));
        if (now_ < H.link_slow_until) op.at = std::max(op.at, now_ + rng_.range(50, 1500));
        ops_.push_back(op);
    }
}

void World::app_reap(Host& H, App& a) {
    Completion out[8];
    auto r = a.writer->reap(out, 0);
    if (!r) return;
    for (size_t i = 0; i < *r; ++i) {
        const Completion& c = out[i];
        if (c.kind == IoKind::write && c.status == IoStatus::ok) check(checker_.write_acked(H.idx, c.user_data));
        if (c.status == IoStatus::fenced) a.stopped = true;
    }
}

// ---------------------------------------------------------------- world: the device

void World::device_step() {
    size_t k = 0;
    for (size_t i = 1; i < ops_.size(); ++i)
        if (ops_[i].at < ops_[k].at) k = i;
    DevOp op = ops_[k];
    ops_.erase(ops_.begin() + static_cast<std::ptrdiff_t>(k));
    if (!op.write) {
        hash(0xde1a7);
        (void)execute(op.host, op.cmd, std::span<uint8_t>(op.data.data(), op.data_len), op.sent);
        return;
    }
    execute_write(op);
}

void World::execute_write(DevOp& op) {
    int32_t res = 0;
    if (op.aborted || op.cut) {
        res = -EIO;  // aborted by a preempt-and-abort, or never reached the device
    } else if (op.phase == 0) {
        // Admission: the device checks the reservation now; the data lands later.
        Host& H = host(op.host);
        auto r = target_.submit(H.id, H.cntlid, encode_rw(true, 1, op.lba, 1, kBlockBytes), buf_.span());
        if (r) {
            op.phase = 1;
            op.unfenced = target_.type == ResvType::none;
            // Admitted: the data lands later. Mostly at once; one write in
            // eight waits as long as a real target may hold it behind a slow
            // backend (up to 1.5 s, within the 2 s a writer stop waits for
            // its writes in flight), so a stale write meets the next term.
            op.at = now_ + (opts_.slow_writes && rng_.below(8) == 0 ? rng_.range(10, 1500) : rng_.range(0, 10));
            ops_.push_back(op);
            return;
        }
        res = is_nvme(r.error(), NvmeStatus::reservation_conflict) ? -EBADE : -EIO;
    } else {
        check(checker_.write_landed(op.host, op.key, static_cast<uint32_t>(op.order), op.lba, op.seq, op.unfenced));
        res = static_cast<int32_t>(kBlockBytes);
    }
    hash(static_cast<uint64_t>(res) ^ (op.seq << 8));
    Host& H = host(op.host);
    if (H.proc && !H.dying && H.gen == op.gen && H.proc->app.writer && H.proc->app.id == op.writer)
        H.proc->app.writer->ring().complete(op.ring_index, res);
}

void World::abort_writes_of(int victim) {
    for (auto& op : ops_)
        if (op.write && op.host == victim && !op.aborted) {
            op.aborted = true;
            op.at = now_;
        }
}

uint64_t World::holder_key() const {
    if (target_.type == ResvType::none || !target_.holder) return 0;
    const auto* r = target_.find(*target_.holder);
    return r ? r->key : 0;
}

int World::host_of(const HostId& id) const {
    for (const auto& H : hosts_)
        if (H->id == id) return H->idx;
    return -1;
}

int World::device_holder() const {
    if (target_.type == ResvType::none || !target_.holder) return -1;
    return host_of(*target_.holder);
}

Result<uint32_t> World::execute(int h, const Command& cmd, std::span<uint8_t> data, int64_t sent_ms) {
    const uint64_t before = holder_key();
    const size_t aborted_before = target_.aborted.size();
    regs_before_ = target_.regs;
    Host& H = host(h);
    auto r = target_.submit(H.id, H.cntlid, cmd, data);
    const bool state_cmd = cmd.opcode == opcode::kResvRegister || cmd.opcode == opcode::kResvAcquire ||
                           cmd.opcode == opcode::kResvRelease;
    if (state_cmd)
        trace(Rec::command, h, cmd.opcode | ((cmd.cdw[0] & 7u) << 8), 0,
              r ? 0 : static_cast<int32_t>(r.error().value()));
    for (size_t i = aborted_before; i < target_.aborted.size(); ++i) abort_writes_of(host_of(target_.aborted[i]));
    // What the docs promise, whatever command the code chose: a key another
    // host's Acquire command removed (a preempt, with or without the abort)
    // writes nothing more.
    if (r && cmd.opcode == opcode::kResvAcquire)
        for (const auto& g : regs_before_)
            if (g.host != H.id && !std::any_of(target_.regs.begin(), target_.regs.end(), [&](const auto& n) {
                    return n.host == g.host && n.key == g.key;
                }))
                checker_.preempted(g.key);
    if (const uint64_t now_key = holder_key(); now_key != before && now_key != 0) {
        trace(Rec::holder, device_holder(), epoch_of(now_key), now_key);
        // The token rules are the elector's: Pacemaker hands out no tokens.
        // Under Write Exclusive (etcd schedules) a takeover also ends every
        // older term's writes, even one that took a free reservation.
        if (!pcmk_) {
            check(checker_.new_holder(device_holder(), now_key, epoch_of(now_key), before, sent_ms));
            checker_.took_over(device_holder(), epoch_of(now_key));
        }
    }
    return r;
}

// A command of @p h's thread @p thr sent at @p sent timed out at its bound:
// the kernel ends it then, or (late_timeout) later, as Linux does: the
// block layer rounds the timer up to the next whole second and NVMe/TCP
// or RDMA recover the queue before the command completes.
// nvfenced's device (BoundedPassthru) gives its loop's command up at the
// bound: the loop goes on with Errc::timeout, the kernel keeps the command
// until its late end, and the process's commands meanwhile fail at once.
// fence_nvfence (Pacemaker, the stack's fiber) waits in the ioctl.
Result<uint32_t> World::timed_out_end(int h, int thr, int64_t sent, int64_t bound) {
    int64_t late = 0;
    if (draw(Fault::late_timeout)) late = rng_.range(1, 1000) + (rng_.chance(100) ? rng_.range(0, 3000) : 0);
    if (thr == kAgent && late > 0) {
        Host& H = host(h);
        H.dev_busy_until = sent + bound + late;
        H.dev_busy_gen = H.gen;
        if (now_ < sent + bound) block(h, thr, sent + bound);
        return make_error_code(Errc::timeout);
    }
    call_started(h, thr, sent + bound + late);
    // Not waited for again when already over (the wait of its completion ended at the bound).
    if (now_ < sent + bound + late) block(h, thr, sent + bound + late);
    return std::error_code(ETIMEDOUT, std::system_category());
}

Result<uint32_t> World::device_command(int h, const Command& cmd, std::span<uint8_t> data) {
    Host& H = host(h);
    assert(H.proc && !H.dying);
    const int64_t sent = now_;
    const int64_t bound = cmd.timeout_ms ? cmd.timeout_ms : 30000;
    // The agent's loop, or (Pacemaker) fence_nvfence on the cluster stack's fiber.
    const int thr = calling_thread(H);
    // BoundedPassthru: an earlier command given up is still in the kernel.
    if (thr == kAgent && now_ < H.dev_busy_until && H.dev_busy_gen == H.gen) return make_error_code(Errc::timeout);
    call_started(h, thr, sent + bound);
    // Inside a device command its writers run on: holder_past_lease judges
    // it there too (a step-down must not wait for a command to return).
    struct InDevice {
        bool& flag;
        explicit InDevice(bool& f) : flag(f) { flag = true; }
        ~InDevice() { flag = false; }
    } in_device(H.in_device[static_cast<size_t>(thr)]);
    int64_t delay = rng_.range(0, 3);
    // A bound cut short by the lease can be below 50 ms: never draw from an
    // empty range (Rng::range asserts lo <= hi).
    if (draw(Fault::device_delay)) delay = rng_.range(50, std::max<int64_t>(50, 2 * bound));
    // A degraded link: retransmissions make every command slow, some past
    // its bound (drawn only under link_degraded, off by default).
    if (now_ < H.link_slow_until)
        delay = std::max(delay, rng_.range(50, std::max<int64_t>(50, std::min<int64_t>(bound + bound / 4, 4000))));
    if (now_ < H.dev_cut_until) return timed_out_end(h, thr, sent, bound);
    if (delay / 2 >= bound) {
        // Reaches the device after the host gave up on it: runs late.
        if (cmd.opcode != opcode::kResvReport && cmd.queue == Queue::io && data.size() <= 16) {
            DevOp op{};
            op.host = h;
            op.at = sent + delay / 2;
            op.sent = sent;
            op.cmd = cmd;
            op.data_len = data.size();
            std::copy(data.begin(), data.end(), op.data.begin());
            ops_.push_back(op);
        }
        return timed_out_end(h, thr, sent, bound);
    }
    block(h, thr, sent + delay / 2);
    if (draw(Fault::crash_in_command)) {
        const bool ran = rng_.chance(500);
        if (ran) (void)execute(h, cmd, data, sent);
        kill(H, Rec::crash, static_cast<uint32_t>(Fault::crash_in_command) | (ran ? 0x100u : 0u));
        throw SimCrash{};
    }
    const bool lost_not = draw(Fault::lost_not_done);
    Result<uint32_t> r = uint32_t{0};
    if (!lost_not) r = execute(h, cmd, data, sent);
    const bool lost = lost_not || draw(Fault::lost_done);
    if (thr == kAgent && H.serving_takeover && r && !lost) takeover_command(H, cmd.opcode, sent + bound - 1);
    block(h, thr, std::min(sent + bound, now_ + (delay - delay / 2)));
    if (delay > bound) return timed_out_end(h, thr, sent, bound);
    if (lost) return std::error_code(ECONNRESET, std::system_category());
    if (r && thr == kAgent && cmd.opcode == opcode::kResvReport) {
        H.last_view_local = H.clock.local_ms();
        H.last_view_world = now_;
    }
    return r;
}

template <class T, class F>
Result<T> World::etcd_call(int h, Ms timeout, F&& effect) {
    Host& H = host(h);
    const int64_t sent = now_;
    const int64_t bound = std::max<int64_t>(1, timeout.count());
    call_started(h, kDriver, sent + bound);
    if (now_ < etcd_down_until_) {
        block(h, kDriver, std::min(sent + bound, now_ + rng_.range(1, 5)));
        return make_error_code(ElectorErrc::unreachable);
    }
    if (now_ < H.etcd_cut_until) {
        block(h, kDriver, sent + bound);
        return make_error_code(Errc::timeout);
    }
    int64_t d1 = rng_.range(1, 8), d2 = rng_.range(1, 8);
    if (draw(Fault::late_answer)) {
        d1 = rng_.range(0, bound);
        d2 = rng_.range(bound / 2, 2 * bound);
    }
    if (now_ < H.link_slow_until) {  // link_degraded (off by default)
        d1 = std::max(d1, rng_.range(0, bound));
        d2 = std::max(d2, rng_.range(0, 2 * bound));
    }
    if (d1 >= bound) {
        block(h, kDriver, sent + bound);
        return make_error_code(Errc::timeout);
    }
    block(h, kDriver, sent + d1);
    etcd_.expire(now_);
    Result<T> r = effect();
    if (d1 + d2 > bound) {
        block(h, kDriver, sent + bound);
        return make_error_code(Errc::timeout);
    }
    block(h, kDriver, sent + d1 + d2);
    return r;
}

// ---------------------------------------------------------------- world: faults

void World::fault_step() {
    // Event faults with a non-zero rate in this schedule, weighted by it.
    constexpr std::array kinds{Fault::freeze,           Fault::crash,          Fault::etcd_partition,
                               Fault::etcd_down,        Fault::device_partition, Fault::target_restart,
                               Fault::cluster_partition, Fault::link_degraded, Fault::target_crash_loop};
    uint64_t total = 0;
    for (Fault f : kinds)
        if (opts_.fault_mask & (1u << static_cast<size_t>(f))) total += rate_[static_cast<size_t>(f)];
    next_fault_ = now_ + rng_.range(fault_gap_ms_ / 2, fault_gap_ms_ * 3 / 2);
    if (total == 0) return;
    uint64_t pick = rng_.below(total);
    for (Fault f : kinds) {
        if (!(opts_.fault_mask & (1u << static_cast<size_t>(f)))) continue;
        const uint64_t w = rate_[static_cast<size_t>(f)];
        if (pick < w) {
            inject(f, host(static_cast<int>(rng_.below(hosts_.size()))));
            return;
        }
        pick -= w;
    }
}

void World::inject(Fault f, Host& H) {
    ++res_.faults[static_cast<size_t>(f)];
    const int64_t ttl = guard_.ttl_ms;
    int64_t until = now_;
    switch (f) {
    case Fault::freeze: {
        until = now_ + rng_.range(100, 3 * ttl);
        const bool stops = rng_.chance(700);
        freeze_host(H, until, stops);
        break;
    }
    case Fault::crash: kill(H, Rec::crash, static_cast<uint32_t>(f)); return;
    case Fault::etcd_partition: H.etcd_cut_until = until = now_ + rng_.range(200, 3 * ttl); break;
    case Fault::etcd_down: etcd_down_until_ = until = now_ + rng_.range(200, 2 * ttl); break;
    case Fault::device_partition:
        // Mostly a path that comes back within seconds; one in five stays
        // down for up to 20 s (an NVMe-oF controller reconnecting), long
        // enough for a holder to lose its view of the device while its
        // lease lives on.
        until = now_ + (rng_.chance(200) ? rng_.range(3000, 20000) : rng_.range(200, 3000));
        H.dev_cut_until = until;
        break;
    case Fault::target_restart: restart_target(); break;
    case Fault::cluster_partition: H.cs.cut_until = until = now_ + rng_.range(200, 3 * token_ms_); break;
    case Fault::link_degraded:
        // The same link carries the cluster's (or etcd's) traffic and the
        // NVMe/TCP path: corosync loses its peers, etcd's answers are slow
        // (many past their bound), the device's commands are slow.
        until = now_ + rng_.range(200, 3 * (pcmk_ ? token_ms_ : ttl));
        if (pcmk_) H.cs.cut_until = std::max(H.cs.cut_until, until);
        H.link_slow_until = std::max(H.link_slow_until, until);
        break;
    case Fault::target_crash_loop:
        // This restart, then one to three more (one running loop at a time).
        restart_target();
        if (crash_loop_left_ == 0) {
            crash_loop_left_ = static_cast<int>(rng_.range(1, 3));
            crash_loop_next_ = now_ + rng_.range(500, 5000);
        }
        break;
    default: assert(false && "not an event fault"); return;
    }
    trace(Rec::fault, H.idx, static_cast<uint32_t>(f), static_cast<uint64_t>(until - now_));
}

// No PTPL: every registration and the reservation are gone.
void World::restart_target() {
    target_.regs.clear();
    target_.type = ResvType::none;
    target_.holder.reset();
    target_.generation = 0;
    target_.notices.clear();
    // Writes admitted before the restart are sent again after the
    // reconnect, to a device that refuses nobody.
    for (auto& op : ops_)
        if (op.write && op.phase == 1) op.unfenced = true;
    checker_.target_restarted();
}

// The next restart of a target_crash_loop (traced as one of it, not counted
// as another fault).
void World::crash_loop_step() {
    restart_target();
    --crash_loop_left_;
    crash_loop_next_ = crash_loop_left_ > 0 ? now_ + rng_.range(500, 5000) : kNever;
    trace(Rec::fault, -1, static_cast<uint32_t>(Fault::target_crash_loop), 0);
}

// The VM pauses until @p until (its clock stops, or keeps counting and
// jumps at the resume).
void World::freeze_host(Host& H, int64_t until, bool stops) {
    H.frozen_until = std::max(H.frozen_until, until);
    H.clock.freeze(now_, H.frozen_until, stops);
}

// A controller of another partition that has @p H to fence (Pacemaker):
// the other fencer of a race.
Host* World::racing_peer(const Host& H) {
    for (auto& Op : hosts_) {
        Host& P = *Op;
        if (P.idx == H.idx || !P.cs.up || !P.cs.joined || !(P.cs.to_fence & (1u << H.idx))) continue;
        if (quorate(P) && dc_of(P) == P.idx) return &P;
    }
    return nullptr;
}

// fence_race: two fencers race, as in a two-node cluster whose nodes lost
// each other (nvfence-sim seed 39191188853768 found the interleaving once;
// mutation p25e needs it). @p H's nvfenced, serving fence_nvfence's
// takeover, ran @p op, whose completion may come as late as @p limit
// (within the command's bound).
void World::takeover_command(Host& H, uint8_t op, int64_t limit) {
    if (op == opcode::kResvRegister) start_race(H, limit);
    else if (op == opcode::kResvReport && H.takeover_reports++ == 0) hold_victim(H, limit);
}

// @p P's takeover of a node just re-keyed P (its Register ran; the
// preempt-and-abort comes next). When a controller of another partition
// has P to fence, its fence starts now (a pcmk_delay_max delay, if it
// waits one, is drawn as 0) and P's Register completes once that node's
// nvfenced has read the Report of the check before its own takeover (or
// at @p limit): that node's fence_nvfence saw P's new key.
void World::start_race(Host& P, int64_t limit) {
    if (race_victim_ >= 0 && now_ < race_until_) return;  // one race at a time
    Host* H = racing_peer(P);
    if (!H || !draw(Fault::fence_race)) return;
    race_victim_ = H->idx;
    race_checked_ = false;
    race_until_ = limit + kControlTimeoutMs;
    auto& c = H->cs;
    if (c.delayed) {
        c.retry_at = std::min(c.retry_at, now_);
    } else if (fence_delay_max_ > 0 && c.waiting_on < 0 && now_ >= c.retry_at) {
        c.delayed = true;  // its delay is 0
        c.retry_at = now_;
    }
    H->next[kDriver] = std::min(H->next[kDriver], now_ + 1);
    trace(Rec::fault, P.idx, static_cast<uint32_t>(Fault::fence_race), static_cast<uint64_t>(H->idx));
    hold_completion(P, limit, [this] { return race_checked_; });
}

// The node a race started for read the Report of its check: its key is
// still there. The completion comes once P's preempt-and-abort removed
// that key (or at @p limit): the fence lands between its check and its
// takeover, whose victim is P's new key.
void World::hold_victim(Host& H, int64_t limit) {
    if (race_victim_ != H.idx || now_ >= race_until_) return;
    race_checked_ = true;
    hold_completion(H, limit, [this, &H] { return target_.find(H.id) == nullptr; });
    race_victim_ = -1;
}

// The completion of @p H's agent's command comes once @p done() or at
// @p limit (looked at every 5 ms).
template <class Done>
void World::hold_completion(Host& H, int64_t limit, Done done) {
    while (now_ < limit && !done()) block(H.idx, kAgent, std::min(limit, now_ + 5));
}

// paused_win: @p H's driver just posted a win. Its VM pauses with its
// clock stopped for one to three lease TTLs (its lease runs out in etcd, a
// peer wins and takes over meanwhile; its own clock still sees the lease),
// and the target restarts without PTPL 1-20 ms before it resumes: the
// agent's next check finds its key gone and rejoins (rejoin = auto), with
// an epoch one above the highest it saw, which is the token when the
// token was one above it too (seeds 393135 and 150658528188717 found that
// interleaving; mutations d24a + d24b need it).
void World::pause_winner(Host& H) {
    if (draw(Fault::paused_win)) pause(H, Fault::paused_win);
}

// The pause and the target's restart of paused_win and paused_token.
void World::pause(Host& H, Fault kind) {
    const int64_t ttl = guard_.ttl_ms;
    const int64_t until = now_ + rng_.range(ttl + 1000, 3 * ttl);
    freeze_host(H, until, true);
    restart_at_ = std::min(restart_at_, H.frozen_until - rng_.range(1, 20));
    trace(Rec::fault, H.idx, static_cast<uint32_t>(kind), static_cast<uint64_t>(until - now_));
}

// paused_token: @p h's driver is inside its token call, etcd granted the
// token. The VM pauses as for paused_win, and the answer reaches the
// driver 5-300 ms after the resume: meanwhile the agent's check finds its
// key gone (the target restarted) and may rejoin with the token's epoch
// (the simulator's seed 827 with this pause: mutation p25i needs it).
void World::pause_in_token(int h) {
    Host& H = host(h);
    if (!draw(Fault::paused_token)) return;
    pause(H, Fault::paused_token);
    block(h, kDriver, H.frozen_until + rng_.range(5, 300));
}

// The restart of a paused_win (traced as one of it, not counted as another fault).
void World::paused_restart_step() {
    restart_at_ = kNever;
    restart_target();
    trace(Rec::fault, -1, static_cast<uint32_t>(Fault::paused_win), 0);
}

void World::heal() {
    healed_ = true;
    heal_at_ = now_;
    // Liveness is judged from when the last call in flight ends (by its
    // bound: a Preempt and Abort's is 30 s), three leases and six seconds on.
    int64_t calm = now_;
    for (const auto& H : hosts_)
        for (size_t i = 0; i < kThreads; ++i)
            if (H->blocked[i]) calm = std::max(calm, H->call_end[i]);
    calm_at_ = calm;
    live_deadline_ = calm + 3 * guard_.ttl_ms + 6000;
    // Pacemaker: a stack back within a second, unfencing, a membership
    // (token), a fence of a node lost meanwhile and its retry.
    if (pcmk_) live_deadline_ = calm + 1000 + 4 * token_ms_ + 3 * (kFenceTimeoutMs + 3000 + fence_delay_max_);
    for (auto& H : hosts_) {
        H->frozen_until = std::min(H->frozen_until, now_);
        H->clock.thaw(now_);
        H->etcd_cut_until = 0;
        H->dev_cut_until = 0;
        H->link_slow_until = 0;
        H->cs.cut_until = 0;
        // The operator brings a stopped cluster stack back.
        if (!H->cs.up) H->cs.start_at = std::min(H->cs.start_at, now_ + 1000);
    }
    etcd_down_until_ = 0;
    next_fault_ = kNever;
    crash_loop_left_ = 0;
    crash_loop_next_ = kNever;
    restart_at_ = kNever;
    trace(Rec::heal, -1, 0, 0);
}

// ---------------------------------------------------------------- world: invariants

void World::check(const std::optional<Violation>& v) {
    if (v) fail(*v);
}

void World::fail(const Violation& v) {
    const auto i = static_cast<size_t>(v.inv);
    if (tolerate_ & (1u << i)) {
        if (!res_.tolerated[i]) {
            res_.tolerated[i] = 1;
            tolerated_text_[i] = v.what;
            trace(Rec::violation, -1, static_cast<uint32_t>(i), 1);
        }
        return;
    }
    res_.violation = v;
    res_.violation_step = steps_;
    trace(Rec::violation, -1, static_cast<uint32_t>(i), 0);
    throw SimStop{};
}

HostView World::view(Host& H) {
    HostView v;
    v.alive = H.live();
    v.state = v.alive ? H.proc->agent.state() : AgentState::starting;
    v.candidate = v.alive && H.proc->agent.candidate();
    v.local_ms = H.clock.local_ms();
    v.lease_deadline_ms = H.lease_deadline_local;
    // Judged only when its agent had its turn: not inside a call, not
    // frozen, not due (a thawed VM's clock may have jumped: it checks next).
    // Nor with elector events queued: nvfenced's loop serves them (the
    // eventfd ends its poll at once) before it answers anyone.
    v.idle = !H.blocked[kAgent] && H.frozen_until <= now_ && H.next[kAgent] > now_ && !H.bridge_dirty;
    // Waiting in a device command (not frozen, its wait not yet over: a
    // thread whose wait ended goes on at this instant, as a due one).
    v.in_device_call = H.blocked[kAgent] && H.in_device[kAgent] && H.frozen_until <= now_ && H.wake[kAgent] > now_;
    // A check that came due while the loop served a long request (a
    // takeover for fence_nvfence across VM freezes) runs before nvfenced
    // answers anything else: not its turn yet either.
    if (v.alive && H.proc->agent.until_next_check().count() == 0) v.idle = false;
    v.last_view_ms = H.last_view_local;
    // check_view() runs once per check: its bound, then one more interval
    // and a check's worth of device timeouts (log page and Report).
    const int64_t timeout = agent_opts_.device_timeout_ms, interval = agent_opts_.interval_ms;
    v.view_bound_ms = 3 * interval + timeout + interval + 3 * timeout;
    if (v.alive && v.state == AgentState::fenced) {  // only FENCED persists an action state
        bool absent = false;
        auto text = H.disk.read(H.statefile->path(), 4096, absent);
        v.action_pending = text && text->find("action=pending") != std::string::npos;
    }
    return v;
}

void World::after_step() {
    for (auto& Hp : hosts_) {
        Host& H = *Hp;
        const HostView v = view(H);
        if (!v.alive) continue;
        const uint64_t key = H.proc->agent.key();
        if (v.state != H.last_state) {
            H.last_state = v.state;
            trace(Rec::state, H.idx, static_cast<uint32_t>(v.state), key);
        }
        check(checker_.agent_key(H.idx, epoch_of(key)));
        if (!pcmk_) check(checker_.lease(H.idx, v));  // Pacemaker schedules have no lease
        check(checker_.view(H.idx, v));
    }
    if (opts_.fail_at_step != 0 && steps_ == opts_.fail_at_step)
        fail(Violation{Inv::self_test, "the violation --fail-at-step asked for"});
    const uint64_t hk = holder_key();
    // A fencer preempts with its own key, whatever its epoch (no tokens).
    if (!pcmk_) check(checker_.holder_now(hk ? std::optional<uint32_t>(epoch_of(hk)) : std::nullopt));
    if (healed_) check_liveness();
}

void World::check_liveness() {
    std::vector<HostView> views;
    views.reserve(hosts_.size());
    bool all_up = true;
    for (auto& H : hosts_) {
        views.push_back(view(*H));
        all_up = all_up && views.back().alive;
    }
    auto v = res_.watcher == Watcher::watch && pcmk_ ? checker_.watch_live(views, device_holder())
                                                     : checker_.live(views, device_holder());
    if (!v && pcmk_) v = cluster_live();
    const bool live = all_up && !v;
    if (live && (pcmk_ || !opts_.stability)) {
        done_ = true;  // healed and live: the schedule passed
        return;
    }
    // etcd: live, every call in flight at the heal ended, and a holder that
    // leads in etcd with the token of its key, on a lease etcd renewed after
    // that (so by a call of the healed world, whose answer came), and read
    // the device since (a leadership of the faulty world may rightly be
    // lost, a term won but not carried out yet is still to come: the window
    // waits); then the same holder for kStableLeases leases.
    const int hh = device_holder();
    const auto [leader, lease] = etcd_.leader_at(now_);
    const Host* holder = hh >= 0 ? hosts_[static_cast<size_t>(hh)].get() : nullptr;
    if (live && live_at_ == kNever && now_ >= calm_at_ && holder && leader && leader->host == hh &&
        leader->token == epoch_of(holder_key()) && lease->expires - etcd_.ttl_ms > calm_at_ &&
        holder->last_view_world >= calm_at_) {
        live_at_ = now_;
        live_holder_ = holder_key();
    }
    if (live_at_ != kNever) {
        check_stable();
        const int64_t window = kStableLeases * guard_.ttl_ms;
        if (live && now_ >= live_at_ + window) done_ = true;  // and stayed so: passed
        if (done_ || now_ < live_at_ + window + 6000) return;
        done_ = true;
        v = v ? v : Violation{Inv::liveness, "a host's agent is down"};
        v->what += " (" + std::to_string(now_ - live_at_) + " ms after the healed cluster first looked live)";
        fail(*v);
    }
    if (now_ < live_deadline_) return;
    done_ = true;
    if (!v && all_up) v = Violation{Inv::liveness, "the holder's lease was not renewed after the world healed"};
    if (!v) v = Violation{Inv::liveness, "a host's agent did not start again after the world healed"};
    v->what += " (" + std::to_string(now_ - heal_at_) + " ms after healing)";
    fail(*v);
}

// A healed etcd cluster that looked live keeps its holder: the same key for
// three leases (any change without a fault is a needless failover).
void World::check_stable() {
    const uint64_t k = holder_key();
    if (k == live_holder_) return;
    fail(Violation{Inv::leader_unstable,
                   "the reservation moved from " + format_key(live_holder_) + " to " + format_key(k) + " " +
                       std::to_string(now_ - live_at_) + " ms after the healed cluster first looked live"});
}

// ---------------------------------------------------------------- world: trace

void World::hash(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
        hash_ ^= (v >> (8 * i)) & 0xff;
        hash_ *= 1099511628211ull;
    }
}

void World::trace(Rec k, int h, uint32_t a, uint64_t b, int32_t c) {
    hash(static_cast<uint64_t>(k) | (static_cast<uint64_t>(h + 1) << 8) | (uint64_t{a} << 16));
    hash(b);
    hash(static_cast<uint64_t>(static_cast<uint32_t>(c)));
    trace_.push_back({now_, steps_, k, static_cast<int8_t>(h), a, b, c});
}

std::string World::format_rec(const TraceRec& r) const {
    const std::string who = r.host >= 0 ? "host " + std::to_string(r.host) + ": " : "";
    switch (r.kind) {
    case Rec::fault:
        if (static_cast<Fault>(r.a) == Fault::fence_race)
            return who + "fault fence_race: re-keyed, host " + std::to_string(r.b) + "'s fence of it runs now";
        return who + "fault " + fault_name(static_cast<Fault>(r.a)) +
               (r.b ? " for " + std::to_string(r.b) + " ms" : std::string());
    case Rec::command: {
        const char* op = (r.a & 0xff) == opcode::kResvRegister  ? "register"
                         : (r.a & 0xff) == opcode::kResvAcquire ? "acquire"
                                                                 : "release";
        return who + op + " action " + std::to_string(r.a >> 8) +
               (r.c ? " failed (" + std::to_string(r.c) + ")" : std::string(" ok"));
    }
    case Rec::holder: return who + "now holds the reservation with " + format_key(r.b);
    case Rec::token: return who + "elector issued token " + std::to_string(r.a);
    case Rec::resign: return who + "elector resigned (tokens of this candidacy: " + std::to_string(r.b) + ")";
    case Rec::state:
        return who + "agent " + agent_state_name(static_cast<AgentState>(r.a)) + " key " + format_key(r.b);
    case Rec::crash: return who + "process died (" + std::to_string(r.a) + ")";
    case Rec::restart: return who + "agent process started (generation " + std::to_string(r.a) + ")";
    case Rec::heal: return "the world heals: no more faults";
    case Rec::violation:
        return std::string(r.b ? "known defect: " : "VIOLATION: ") + inv_name(static_cast<Inv>(r.a));
    case Rec::note: return who + texts_[r.a];
    case Rec::cluster: return who + cluster_words(static_cast<Cs>(r.a), r.b, r.c);
    }
    return who + "?";
}

std::string cluster_words(Cs what, uint64_t b, int32_t c) {
    const std::string node = "host " + std::to_string(b);
    switch (what) {
    case Cs::start: return "cluster stack starts (unfencing itself)";
    case Cs::down: return "its watcher killed corosync: the stack is down";
    case Cs::join: return "membership: " + node + " joined";
    case Cs::lost: return "membership: " + node + " lost (token)";
    case Cs::fence: return "as controller: fence_nvfence off " + node + " on host " + std::to_string(c);
    case Cs::fenced: return "as controller: " + node + " fenced";
    case Cs::fence_failed: return "as controller: fencing " + node + " failed";
    case Cs::runs: return "the resource starts here (start " + std::to_string(b) + ")";
    case Cs::stops: return "the resource stops here (start " + std::to_string(b) + ")";
    case Cs::unfence_failed: return "unfencing (fence_nvfence on) failed: the stack stops";
    }
    return "?";
}

std::string World::format_trace() const {
    std::string s;
    for (const auto& r : trace_) {
        char head[64];
        std::snprintf(head, sizeof head, "  t=%8lld ms step %5llu  ", static_cast<long long>(r.t),
                      static_cast<unsigned long long>(r.step));
        s += head + format_rec(r) + "\n";
    }
    return s;
}

// ---------------------------------------------------------------- world: one schedule

ScheduleResult World::run() {
    const uint64_t cap = fault_steps_ * 40 + 400000;
    try {
        while (!done_) {
            if (!healed_ && steps_ >= fault_steps_) heal();
            if (!run_one(kNever) || steps_ > cap) {
                done_ = true;
                fail(Violation{Inv::liveness, "the schedule stopped making progress"});
            }
        }
    } catch (const SimStop&) {
    }
    res_.steps = steps_;
    res_.sim_ms = now_;
    hash(steps_);
    hash(static_cast<uint64_t>(now_));
    res_.trace_hash = hash_;
    res_.checks = checker_.checks();
    for (size_t i = 0; i < kInvCount; ++i)
        if (res_.tolerated[i] && res_.tolerated_what[i].empty()) res_.tolerated_what[i] = tolerated_text_[i];
    if (res_.violation || opts_.keep_trace) res_.trace = format_trace();
    unwind_fibers();
    return res_;
}

}  // namespace

ScheduleResult run_schedule(const SimOptions& opts) {
    World w(opts);
    return w.run();
}

}  // namespace nvfence::sim
