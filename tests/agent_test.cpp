// SPDX-License-Identifier: MIT
// Unit tests of the host agent core (nvfence::Agent): every state
// transition, the failure schedules (preempted mid-write, report failures,
// generation reset, notification log overflow, slow device, paused agent)
// replayed on a ManualClock against the FakeTarget namespace model, safety
// rule 2 (no automatic re-acquire after preemption) under several
// schedules and across restarts, and the configuration parser.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "agent_sim.hpp"
#include "agent/agent.hpp"
#include "agent/agent_config.hpp"
#include "nvfence/error.hpp"

namespace nvfence::test {
namespace {

constexpr uint8_t kTag = 7;
constexpr int64_t kInterval = 1000;

uint64_t key_of(uint8_t node, uint32_t epoch) { return *make_key({kTag, node, epoch}); }
uint32_t epoch(uint64_t key) { return decode_key(key) ? decode_key(key)->epoch : 0; }

class AgentTest : public ::testing::Test {
protected:
    AgentOptions options(uint8_t node, StartRole role = StartRole::standby,
                         ResvType type = ResvType::write_exclusive) {
        AgentOptions o;
        o.tag = kTag;
        o.node = node;
        o.type = type;
        o.role = role;
        o.interval_ms = static_cast<uint32_t>(kInterval);
        o.device_timeout_ms = 5000;
        o.volume = "vol-test";
        o.device = "/dev/sim";
        return o;
    }
    std::unique_ptr<SimHost> host(uint8_t n, StartRole role = StartRole::standby,
                                  ResvType type = ResvType::write_exclusive) {
        return std::make_unique<SimHost>(t, clock, n, options(n, role, type), tmp.path());
    }
    // A holder (host 1, role acquire) and a standby (host 2), both started.
    // A fresh target of @p type with a holding (role acquire) and b started
    // with @p b_role: hosts 1 and 2 under Registrants Only, 3 and 4 under
    // Write Exclusive (their state directories are their own).
    void pair_of(ResvType type, StartRole b_role) {
        const uint8_t n = type == ResvType::write_exclusive ? 3 : 1;
        t = FakeTarget{};
        a = host(n, StartRole::acquire, type);
        b = host(static_cast<uint8_t>(n + 1), b_role, type);
        a->start_ok();
        b->start_ok();
        ASSERT_EQ(a->agent->state(), AgentState::holder);
    }
    void holder_and_standby() {
        a = host(1, StartRole::acquire);
        a->start_ok();
        b = host(2);
        b->start_ok();
        ASSERT_EQ(a->agent->state(), AgentState::holder);
        ASSERT_EQ(b->agent->state(), AgentState::standby);
    }
    std::optional<PersistedState> persisted(const SimHost& h) {
        auto s = h.statefile.load();
        EXPECT_TRUE(s.ok());
        return s.ok() ? *s : std::nullopt;
    }

    TempDir tmp;
    FakeTarget t;
    ManualClock clock;
    std::unique_ptr<SimHost> a, b;
};

// ---- the check-only watcher (role = watch, issue 27) -----------------------

// What fence_nvfence 'on' does on the node itself (no nvfenced to go
// through: the watcher is bypassed): register the node's key from this
// host, and take the reservation when nobody holds it.
uint64_t unfence(SimHost& h, uint8_t node) {
    Reservations resv(h.port, h.target.nsid);
    EpochStore store(h.dir + "/pcmk", "vol-test");
    Fence f(resv, h.id, FenceOptions{kTag, node, ResvType::write_exclusive, true, Cptpl::no_change}, &store);
    auto j = f.join(std::nullopt, false);
    EXPECT_TRUE(j.ok()) << (j.ok() ? "" : j.error().message());
    if (j.ok() && j->after.type == ResvType::none) {
        EXPECT_TRUE(f.acquire().ok());
    }
    return j.ok() ? j->key : 0;
}

class WatcherTest : public AgentTest {
protected:
    // Host 1 as a check-only watcher, and peer 2 (node 2) registered and
    // holding: the cluster's other node, which fences node 1 with 'off'.
    void SetUp() override {
        a = host(1, StartRole::watch);
        peer = std::make_unique<Peer>(t, 2, kTag, 2);
        ASSERT_TRUE(peer->fence.join(std::nullopt, false).ok());
        ASSERT_TRUE(peer->fence.acquire().ok());
    }
    void check_after(int64_t ms) {
        clock.advance(Clock::Ms(ms));
        a->agent->check();
    }
    // Commands this host sent besides what the test's own unfence() sent.
    size_t changes_by_agent() const {
        return a->sent(opcode::kResvRegister) + a->sent(opcode::kResvAcquire) + a->sent(opcode::kResvRelease) -
               unfence_commands;
    }
    size_t unfence_commands = 0;
    std::unique_ptr<Peer> peer;
};

TEST_F(WatcherTest, WaitsWatchesFencesOnceAndWatchesAgainWhenUnfenced) {
    a->start_ok();
    EXPECT_EQ(a->agent->state(), AgentState::waiting) << a->hooks->dump();
    EXPECT_EQ(a->device_key(), 0u) << "the watcher registered at start";
    EXPECT_FALSE(persisted(*a)) << "nothing seen, nothing persisted";
    check_after(kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::waiting);
    EXPECT_EQ(a->hooks->fence_actions, 0) << "a node not yet unfenced is not fenced";

    const size_t before = a->grabs();
    const uint64_t k = unfence(*a, 1);
    unfence_commands = a->grabs() - before;
    check_after(kInterval);
    ASSERT_EQ(a->agent->state(), AgentState::watching) << a->hooks->dump();
    EXPECT_EQ(a->agent->key(), k);
    ASSERT_TRUE(persisted(*a));
    EXPECT_EQ(persisted(*a)->role, PersistedRole::standby) << "the key seen is remembered";
    EXPECT_EQ(persisted(*a)->key, k);

    // fence_nvfence 'off' on node 2: preempt-and-abort of node 1's keys.
    ASSERT_TRUE(peer->fence.evict_node(1).ok());
    check_after(kInterval);
    ASSERT_EQ(a->agent->state(), AgentState::fenced) << a->hooks->dump();
    EXPECT_EQ(a->hooks->writers_stopped, 1);
    EXPECT_EQ(a->hooks->fence_actions, 1);
    EXPECT_NE(a->hooks->reasons.at(0).find("this node's key " + format_key(k) + " is gone"), std::string::npos)
        << a->hooks->reasons.at(0);
    EXPECT_EQ(persisted(*a)->role, PersistedRole::fenced);
    EXPECT_EQ(persisted(*a)->action, FenceActionState::done);
    for (int i = 0; i < 5; ++i) check_after(kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::fenced);
    EXPECT_EQ(a->hooks->fence_actions, 1) << "the fence action runs once";
    EXPECT_EQ(a->device_key(), 0u) << "the watcher registered again by itself";

    // Pacemaker unfences the node ('on' on node 1): WATCHING again.
    const size_t before2 = a->grabs();
    const uint64_t k2 = unfence(*a, 1);
    unfence_commands += a->grabs() - before2;
    EXPECT_GT(epoch(k2), epoch(k));
    check_after(kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::watching) << a->hooks->dump();
    EXPECT_EQ(a->agent->key(), k2);
    EXPECT_EQ(persisted(*a)->role, PersistedRole::standby);
    EXPECT_EQ(a->hooks->fence_actions, 1);

    // A clean stop leaves the key on the device and the file as it was.
    ASSERT_TRUE(a->agent->stop().ok());
    EXPECT_EQ(a->agent->state(), AgentState::stopping);
    EXPECT_EQ(a->device_key(), k2) << "a clean stop changed the device";
    EXPECT_EQ(persisted(*a)->role, PersistedRole::standby);
    EXPECT_EQ(persisted(*a)->key, k2);
    EXPECT_EQ(changes_by_agent(), 0u) << "the watcher sent a Register, Acquire or Release";
    const std::vector<std::pair<AgentState, AgentState>> want = {{AgentState::starting, AgentState::waiting},
                                                                 {AgentState::waiting, AgentState::watching},
                                                                 {AgentState::watching, AgentState::fenced},
                                                                 {AgentState::fenced, AgentState::watching},
                                                                 {AgentState::watching, AgentState::stopping}};
    EXPECT_EQ(a->hooks->transitions(), want) << a->hooks->dump();
}

// fence_scsi_check's key file: a restart remembers the key was seen, and
// that the node is FENCED (the action is not run again).
TEST_F(WatcherTest, ARestartRemembersTheKeySeenAndTheFence) {
    const uint64_t k = unfence(*a, 1);
    a->start_ok();
    ASSERT_EQ(a->agent->state(), AgentState::watching) << a->hooks->dump();
    EXPECT_EQ(a->agent->key(), k);
    a->boot();  // killed while WATCHING; node 1 is fenced while it is down
    ASSERT_TRUE(peer->fence.evict_node(1).ok());
    a->start_ok();
    ASSERT_EQ(a->agent->state(), AgentState::fenced) << a->hooks->dump();
    EXPECT_EQ(a->hooks->fence_actions, 1) << "gone while the watcher was down: fenced at start";
    a->boot();  // e.g. the reboot the action was
    a->start_ok();
    EXPECT_EQ(a->agent->state(), AgentState::fenced) << a->hooks->dump();
    EXPECT_EQ(a->hooks->fence_actions, 0) << "a done action is not run again";
    EXPECT_EQ(a->device_key(), 0u);
    // Unfenced while the watcher was down: it starts WATCHING.
    a->boot();
    const uint64_t k2 = unfence(*a, 1);
    a->start_ok();
    EXPECT_EQ(a->agent->state(), AgentState::watching) << a->hooks->dump();
    EXPECT_EQ(a->agent->key(), k2);
    EXPECT_EQ(a->hooks->fence_actions, 0);
}

// A key of the node found at the first start is watched at once; a newer
// key of the node (unfenced again between two checks) replaces it.
// An old record of an unfencing (of an earlier boot, or of a fence_nvfence
// that did not say its boot) does not fence a watcher that starts without a
// state file (a reinstall, a state file removed): a node the cluster
// manager has not unfenced in this boot is not fenced. This boot's record
// still counts.
TEST_F(WatcherTest, AnOldUnfencedRecordDoesNotFenceAWatcherWithoutAStateFile) {
    a->opts.boot_id = "boot-2";
    a->boot();
    ASSERT_TRUE(a->statefile.save_unfenced(key_of(1, 5), "boot-1").ok());
    a->start_ok();
    EXPECT_EQ(a->agent->state(), AgentState::waiting) << a->hooks->dump();
    for (int i = 0; i < 3; ++i) check_after(kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::waiting) << a->hooks->dump();
    EXPECT_EQ(a->hooks->fence_actions, 0);
    std::ofstream(a->statefile.unfenced_path()) << "key=" << format_key_hex(key_of(1, 6)) << "\n";
    a->boot();
    a->start_ok();
    check_after(kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::waiting) << a->hooks->dump();
    EXPECT_EQ(a->hooks->fence_actions, 0);
    // Unfenced in this boot, and fenced again before a check saw the key.
    ASSERT_TRUE(a->statefile.save_unfenced(key_of(1, 7), "boot-2").ok());
    check_after(kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::fenced) << a->hooks->dump();
    EXPECT_EQ(a->hooks->fence_actions, 1);
}

TEST_F(WatcherTest, WatchesAKeyFoundAtStartAndFollowsANewerOne) {
    const uint64_t k = unfence(*a, 1);
    a->start_ok();
    ASSERT_EQ(a->agent->state(), AgentState::watching);
    ASSERT_TRUE(peer->fence.evict_node(1).ok());
    const uint64_t k2 = unfence(*a, 1);
    ASSERT_NE(k, k2);
    check_after(kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::watching) << a->hooks->dump();
    EXPECT_EQ(a->agent->key(), k2);
    EXPECT_EQ(a->hooks->fence_actions, 0);
    EXPECT_EQ(persisted(*a)->key, k2);
}

// A watcher holds nothing: a device it cannot read changes nothing (no
// fence for a lost view, no fence on the failed Reports); once readable
// again it still fences when the key is gone.
TEST_F(WatcherTest, UnreadableDeviceChangesNothingThenAGoneKeyStillFences) {
    unfence(*a, 1);
    a->start_ok();
    ASSERT_EQ(a->agent->state(), AgentState::watching);
    bool down = true;
    t.fail = [&](const HostId& h, const Command& c) -> std::optional<std::error_code> {
        if (down && h == a->id && c.opcode == opcode::kResvReport) return nvme_err(NvmeStatus::internal_error);
        return std::nullopt;
    };
    run_schedule(*a->agent, clock, 20 * kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::watching) << a->hooks->dump();
    EXPECT_EQ(a->hooks->fence_actions, 0);
    EXPECT_GT(a->agent->check_failures(), 0u);
    ASSERT_TRUE(peer->fence.evict_node(1).ok());
    down = false;
    run_schedule(*a->agent, clock, 2 * kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::fenced) << a->hooks->dump();
    EXPECT_EQ(a->hooks->fence_actions, 1);
}

TEST_F(WatcherTest, RefusesEveryRequestThatWouldChangeTheDevice) {
    unfence(*a, 1);
    a->start_ok();
    const size_t sent = a->target.log.size();
    for (ControlOp op : {ControlOp::takeover, ControlOp::handoff, ControlOp::rejoin}) {
        const ControlReply r = a->request(op);
        EXPECT_EQ(r.exit_code, static_cast<uint8_t>(ExitCode::failure)) << control_op_name(op);
        EXPECT_NE(r.message.find("check-only watcher (role = watch)"), std::string::npos) << r.message;
        EXPECT_TRUE(r.check_only);
    }
    EXPECT_EQ(a->target.log.size(), sent) << "a refused request sent a command";
    const ControlReply st = a->request(ControlOp::status);
    EXPECT_EQ(st.exit_code, 0);
    EXPECT_TRUE(st.check_only);
    EXPECT_EQ(st.state, AgentState::watching);
    EXPECT_FALSE(a->agent->candidate());
    // A normal agent's status is not check-only.
    b = host(3);
    b->start_ok();
    EXPECT_FALSE(b->request(ControlOp::status).check_only);
}

// ---- start ----------------------------------------------------------------

TEST_F(AgentTest, StartRegistersWithFreshEpochAndStandsBy) {
    t.add(make_host(9), key_of(9, 41));
    t.hold(make_host(9), ResvType::write_exclusive);
    a = host(1);
    a->start_ok();
    EXPECT_EQ(a->agent->state(), AgentState::standby);
    EXPECT_EQ(a->device_key(), a->agent->key());
    EXPECT_EQ(epoch(a->agent->key()), 42u) << "above every epoch on the device";
    EXPECT_EQ(*a->epochs.load(), 42u) << "epoch persisted";
    auto p = persisted(*a);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->role, PersistedRole::standby);
    EXPECT_EQ(p->key, a->agent->key());
    EXPECT_EQ(p->node, 1);
    EXPECT_EQ(a->sent(opcode::kResvAcquire), 0u);
    ASSERT_EQ(a->hooks->transitions().size(), 1u);
    EXPECT_EQ(a->hooks->transitions()[0], std::make_pair(AgentState::starting, AgentState::standby));
    EXPECT_NE(a->hooks->lines.back().find("STARTING -> STANDBY: registered with fresh key nf:7:1:42"),
              std::string::npos)
        << a->hooks->dump();
    EXPECT_NE(a->hooks->lines.back().find("holder nf:7:9:41"), std::string::npos) << "the observed report";
}

TEST_F(AgentTest, StartEpochIsAboveThePersistedOne) {
    a = host(1);
    ASSERT_TRUE(a->epochs.raise_to(500).ok());
    a->start_ok();
    EXPECT_EQ(epoch(a->agent->key()), 501u);
}

TEST_F(AgentTest, StartRoleAcquireTakesAFreeReservation) {
    a = host(1, StartRole::acquire);
    a->start_ok();
    EXPECT_EQ(a->agent->state(), AgentState::holder);
    EXPECT_TRUE(t.is_holder(a->id));
    EXPECT_EQ(t.type, ResvType::write_exclusive);
    EXPECT_TRUE(a->write().ok());
    auto p = persisted(*a);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->role, PersistedRole::holder);
    b = host(2);
    b->start_ok();
    EXPECT_TRUE(is_nvme(b->write().error(), NvmeStatus::reservation_conflict));
}

TEST_F(AgentTest, StartRoleAcquireSharedModeLetsRegistrantsWrite) {
    a = host(1, StartRole::acquire, ResvType::write_exclusive_reg_only);
    a->start_ok();
    b = host(2, StartRole::standby, ResvType::write_exclusive_reg_only);
    b->start_ok();
    EXPECT_EQ(a->agent->state(), AgentState::holder);
    EXPECT_EQ(t.type, ResvType::write_exclusive_reg_only);
    EXPECT_TRUE(b->write().ok());
    HostPort stranger(t, make_host(30));
    std::vector<uint8_t> buf(512);
    EXPECT_FALSE(stranger.submit(encode_rw(true, t.nsid, 0, 1, 512), buf).ok());
}

TEST_F(AgentTest, StartRoleAcquireStandsByWhenSomeoneHolds) {
    t.add(make_host(9), key_of(9, 3));
    t.hold(make_host(9), ResvType::write_exclusive);
    a = host(1, StartRole::acquire);
    a->start_ok();
    EXPECT_EQ(a->agent->state(), AgentState::standby);
    EXPECT_EQ(a->sent(opcode::kResvAcquire), 0u);
    EXPECT_TRUE(a->hooks->saw(AgentEventKind::info, "nf:7:9:3 holds the reservation; standing by"));
}

TEST_F(AgentTest, StartRoleAcquireLosesTheRaceAndStandsBy) {
    Peer rival(t, 9, kTag, 9);
    bool raced = false;
    // Between the agent's last Report and its Acquire, the rival acquires.
    int reports_after_register = -1;
    t.after = [&](const HostId& h, const Command& c) {
        if (raced || h != make_host(1)) return;
        if (c.opcode == opcode::kResvRegister) reports_after_register = 0;
        if (c.opcode != opcode::kResvReport || reports_after_register < 0) return;
        if (++reports_after_register < 2) return;
        raced = true;
        ASSERT_TRUE(rival.fence.join(std::nullopt, false).ok());
        ASSERT_TRUE(rival.fence.acquire().ok());
    };
    a = host(1, StartRole::acquire);
    a->start_ok();
    EXPECT_TRUE(raced);
    EXPECT_EQ(a->agent->state(), AgentState::standby);
    EXPECT_TRUE(t.is_holder(rival.id));
    EXPECT_TRUE(a->hooks->saw(AgentEventKind::info, "nf:7:9:2 acquired first; standing by")) << a->hooks->dump();
    EXPECT_EQ(a->sent(opcode::kResvAcquire), 1u) << "tried once, lost, stood by";
}

TEST_F(AgentTest, StartRefusesWhenThisHostIdHoldsAForeignKey) {
    t.add(make_host(1), 0x1234);
    a = host(1);
    auto s = a->agent->start();
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error(), Errc::host_id_conflict);
    EXPECT_EQ(a->agent->state(), AgentState::starting);
    EXPECT_NE(a->agent->last_error().find("0x0000000000001234"), std::string::npos) << a->agent->last_error();
    EXPECT_EQ(a->grabs(), 0u);
}

TEST_F(AgentTest, StartRefusesWhenThisHostIdHoldsAnotherNodesKey) {
    t.add(make_host(1), key_of(5, 2));
    a = host(1);
    auto s = a->agent->start();
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error(), Errc::host_id_conflict);
    EXPECT_EQ(a->grabs(), 0u);
}

TEST_F(AgentTest, StartRefusesAStateFileOfAnotherNode) {
    a = host(1);
    PersistedState p;
    p.node = 3;
    p.tag = kTag;
    p.role = PersistedRole::standby;
    p.key = key_of(3, 1);
    ASSERT_TRUE(a->statefile.save(p).ok());
    auto s = a->agent->start();
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error(), Errc::refused);
    EXPECT_NE(a->agent->last_error().find("belongs to node 3"), std::string::npos);
    EXPECT_EQ(t.log.size(), 0u) << "nothing sent before the state file is trusted";
}

TEST_F(AgentTest, StartRefusesACorruptStateFile) {
    a = host(1);
    std::filesystem::create_directories(a->dir);
    std::ofstream(a->statefile.path()) << "version=1\nrole=holder\n";
    auto s = a->agent->start();
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error(), Errc::state_io);
    EXPECT_EQ(a->grabs(), 0u);
}

TEST_F(AgentTest, StartFailsWhenTheReportFails) {
    t.fail = [](const HostId&, const Command& c) -> std::optional<std::error_code> {
        if (c.opcode == opcode::kResvReport) return nvme_err(NvmeStatus::internal_error);
        return std::nullopt;
    };
    a = host(1, StartRole::acquire);
    auto s = a->agent->start();
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(a->grabs(), 0u);
    EXPECT_NE(a->agent->last_error().find("Internal Error"), std::string::npos);
}

TEST_F(AgentTest, StartDiscardsStaleNotificationsAndEnablesThem) {
    t.notify_mask[make_host(1)] = 0xe;
    t.notices[make_host(1)].push_back({NotificationType::registration_preempted, 1});
    a = host(1);
    a->start_ok();
    EXPECT_EQ(t.notify_mask[make_host(1)], 0u) << "all notifications enabled";
    EXPECT_TRUE(t.notices[make_host(1)].empty());
    EXPECT_TRUE(a->hooks->saw(AgentEventKind::info, "discarded 1 reservation notification"));
    run_schedule(*a->agent, clock, 3 * kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::standby) << "a stale notification is not a preemption";
}

// ---- watching ---------------------------------------------------------------

TEST_F(AgentTest, ChecksRunEveryIntervalWithKeepalivesAndBoundedCommands) {
    a = host(1);
    a->start_ok();
    const size_t reports = a->sent(opcode::kResvReport);
    run_schedule(*a->agent, clock, 10 * kInterval);
    EXPECT_EQ(a->sent(opcode::kResvReport) - reports, 10u);
    EXPECT_EQ(a->agent->checks(), 10u);
    EXPECT_EQ(a->hooks->keepalives, 10);
    for (uint32_t to : a->slow.timeouts) EXPECT_EQ(to, 5000u) << "every device wait is bounded";
    EXPECT_EQ(a->hooks->transitions().size(), 1u);
}

TEST_F(AgentTest, HolderPreemptedMidWriteIsFencedWithinOneInterval) {
    holder_and_standby();
    const int64_t t0 = clock.elapsed_ms();
    Result<uint32_t> mid_write = uint32_t{0};
    Schedule s = {
        {1500, [&] { EXPECT_EQ(b->request(ControlOp::takeover).exit_code, 0); }},
        {1600, [&] { mid_write = a->write(); }},
        {1999, [&] { EXPECT_EQ(a->agent->state(), AgentState::holder) << "not yet checked"; }},
    };
    run_schedule(*a->agent, clock, 2 * kInterval + 1, s);
    EXPECT_TRUE(is_nvme(mid_write.error(), NvmeStatus::reservation_conflict)) << "the device refused it";
    ASSERT_EQ(a->agent->state(), AgentState::fenced) << a->hooks->dump();
    const int64_t detected = a->hooks->entered_ms(AgentState::fenced) - t0;
    EXPECT_LE(detected - 1500, kInterval) << "detected within one interval";
    EXPECT_EQ(a->hooks->writers_stopped, 1);
    EXPECT_EQ(a->hooks->fence_actions, 1);
    EXPECT_NE(a->hooks->reasons[0].find("preempted"), std::string::npos) << a->hooks->reasons[0];
    EXPECT_NE(a->agent->fence_reason().find("Registration Preempted notification"), std::string::npos);
    EXPECT_TRUE(a->hooks->saw(AgentEventKind::notification, "registration preempted"));
    auto p = persisted(*a);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->role, PersistedRole::fenced);
    EXPECT_GT(p->fenced_unix_ms, 0);
    EXPECT_EQ(b->agent->state(), AgentState::holder);
    EXPECT_TRUE(b->write().ok());
    EXPECT_NE(a->hooks->lines.back().find("HOLDER -> FENCED"), std::string::npos) << a->hooks->dump();
}

TEST_F(AgentTest, StandbyUnregisteredByAnotherHostIsFenced) {
    holder_and_standby();
    Peer op(t, 9, kTag, 9);
    // The holder removes the standby's registration (preempt of a non-holder key).
    AcquireArgs pre;
    pre.action = AcquireAction::preempt;
    pre.crkey = a->agent->key();
    pre.prkey = b->agent->key();
    ASSERT_TRUE(Reservations(a->port, t.nsid).acquire(pre).ok());
    run_together({a->agent.get(), b->agent.get()}, clock, 2 * kInterval);
    EXPECT_EQ(b->agent->state(), AgentState::fenced);
    EXPECT_EQ(a->agent->state(), AgentState::holder);
    EXPECT_EQ(b->hooks->fence_actions, 1);
}

TEST_F(AgentTest, StandbySeesTheHolderChangeAndStaysStandby) {
    holder_and_standby();
    auto c = host(3);
    c->start_ok();
    ASSERT_EQ(c->request(ControlOp::takeover).exit_code, 0);
    run_together({b->agent.get()}, clock, 2 * kInterval);
    EXPECT_EQ(b->agent->state(), AgentState::standby);
    EXPECT_TRUE(b->hooks->saw(AgentEventKind::holder_changed,
                              "holder changed: " + format_key(a->agent->key()) + " -> " +
                                  format_key(c->agent->key())))
        << b->hooks->dump();
}

TEST_F(AgentTest, GenerationResetByTargetRestartFencesTheHolder) {
    holder_and_standby();
    Schedule s = {{500, [&] {
                       t.regs.clear();
                       t.type = ResvType::none;
                       t.holder.reset();
                       t.generation = 0;
                   }}};
    run_schedule(*a->agent, clock, 2 * kInterval, s);
    ASSERT_EQ(a->agent->state(), AgentState::fenced);
    EXPECT_NE(a->agent->fence_reason().find("target restart"), std::string::npos) << a->agent->fence_reason();
    EXPECT_EQ(a->hooks->count(AgentEventKind::generation_reset), 1u);
    EXPECT_EQ(a->hooks->fence_actions, 1);
}

TEST_F(AgentTest, GenerationBackwardsWithRegistrationsRestoredKeepsHolding) {
    holder_and_standby();
    run_schedule(*a->agent, clock, kInterval);
    Schedule s = {{500, [&] { t.generation = 1; }}};  // PTPL restored the keys
    run_schedule(*a->agent, clock, 3 * kInterval, s);
    EXPECT_EQ(a->agent->state(), AgentState::holder);
    EXPECT_EQ(a->hooks->count(AgentEventKind::generation_reset), 1u);
    EXPECT_EQ(a->hooks->fence_actions, 0);
}

TEST_F(AgentTest, GenerationWrapIsNotAReset) {
    holder_and_standby();
    t.generation = 0xfffffff0u;
    run_schedule(*a->agent, clock, kInterval);
    t.generation = 3;
    run_schedule(*a->agent, clock, kInterval);
    EXPECT_EQ(a->hooks->count(AgentEventKind::generation_reset), 0u);
    EXPECT_EQ(a->agent->state(), AgentState::holder);
}

TEST_F(AgentTest, ReportFailuresKeepTheStateAndPreemptionIsCaughtOnRecovery) {
    holder_and_standby();
    bool failing = false;
    t.fail = [&](const HostId& h, const Command& c) -> std::optional<std::error_code> {
        if (failing && h == a->id && c.opcode == opcode::kResvReport) return nvme_err(NvmeStatus::internal_error);
        return std::nullopt;
    };
    Schedule s = {
        {500, [&] { failing = true; }},
        {2500, [&] { EXPECT_EQ(b->request(ControlOp::takeover).exit_code, 0); }},
        {4999, [&] {
             EXPECT_EQ(a->agent->state(), AgentState::holder) << "unknown is not fenced: state kept";
             EXPECT_EQ(a->agent->check_failures(), 4u);
             EXPECT_NE(a->agent->status().last_error.find("Internal Error"), std::string::npos);
             failing = false;
         }},
    };
    run_schedule(*a->agent, clock, 5 * kInterval + 1, s);
    EXPECT_EQ(a->agent->state(), AgentState::fenced) << a->hooks->dump();
    EXPECT_EQ(a->hooks->count(AgentEventKind::check_failed), 1u) << "one line, not one per interval";
    EXPECT_EQ(a->hooks->count(AgentEventKind::check_recovered), 1u);
    EXPECT_GE(a->hooks->keepalives, 5) << "the loop stayed alive (and the actions fed it too)";
    EXPECT_EQ(a->agent->check_failures(), 0u);
}

TEST_F(AgentTest, NotificationLogOverflowIsReportedAndTheReportDecides) {
    holder_and_standby();
    t.notices[a->id].push_back({NotificationType::reservation_released, t.nsid});
    run_schedule(*a->agent, clock, kInterval);
    Schedule s = {{500, [&] {
                       // Pages were lost (the count jumps) and more are pending than
                       // one check reads.
                       t.notice_count[a->id] += 20;
                       for (int i = 0; i < 40; ++i)
                           t.notices[a->id].push_back({NotificationType::reservation_released, t.nsid});
                   }}};
    run_schedule(*a->agent, clock, kInterval + 1, s);
    EXPECT_TRUE(a->hooks->saw(AgentEventKind::notification_overflow, "notification(s) lost")) << a->hooks->dump();
    EXPECT_EQ(a->agent->state(), AgentState::holder) << "the report shows this host still holding";
    run_schedule(*a->agent, clock, 2 * kInterval + 1);
    EXPECT_TRUE(a->hooks->saw(AgentEventKind::notification_overflow, "more pages pending"));
    // Preempted while the log overflows: still caught by the report.
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    for (int i = 0; i < 40; ++i) t.notices[a->id].push_back({NotificationType::reservation_released, t.nsid});
    run_schedule(*a->agent, clock, kInterval + 1);
    EXPECT_EQ(a->agent->state(), AgentState::fenced);
}

TEST_F(AgentTest, DeviceWithoutNotificationLogIsWatchedByReportAlone) {
    t.fail = [](const HostId&, const Command& c) -> std::optional<std::error_code> {
        if (c.queue == Queue::admin && c.opcode == opcode::kGetLogPage) return nvme_err(NvmeStatus::invalid_log_page);
        return std::nullopt;
    };
    holder_and_standby();
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    run_schedule(*a->agent, clock, 3 * kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::fenced);
    EXPECT_NE(a->agent->fence_reason().find("preempted or unregistered"), std::string::npos);
    EXPECT_EQ(a->hooks->count(AgentEventKind::info), 1u) << "said once: " << a->hooks->dump();
}

TEST_F(AgentTest, SlowDeviceIsReportedAndPreemptionStillCaughtAtTheNextCheck) {
    holder_and_standby();
    a->slow.delay = Clock::Ms(1500);  // each command; a check is two commands
    Schedule s = {{3500, [&] { EXPECT_EQ(b->request(ControlOp::takeover).exit_code, 0); }}};
    run_schedule(*a->agent, clock, 3500, s);
    EXPECT_EQ(a->hooks->count(AgentEventKind::slow_check), 1u) << a->hooks->dump();
    EXPECT_TRUE(a->hooks->saw(AgentEventKind::slow_check, "slowest command 1500 ms"));
    const int64_t preempted = clock.elapsed_ms();
    run_schedule(*a->agent, clock, 8000);
    ASSERT_EQ(a->agent->state(), AgentState::fenced) << a->hooks->dump();
    // A check in progress may have read the report before the preemption;
    // the next one (started at once, the device being the bottleneck) sees it.
    EXPECT_LE(a->hooks->entered_ms(AgentState::fenced) - preempted, 2 * 3000 + kInterval);
    a->slow.delay = Clock::Ms(0);
    run_schedule(*a->agent, clock, 2 * kInterval);
    EXPECT_TRUE(a->hooks->saw(AgentEventKind::slow_check, "responsive again"));
}

TEST_F(AgentTest, PausedAgentNoticesTheStallAndIsFencedAtOnce) {
    holder_and_standby();
    run_schedule(*a->agent, clock, 2 * kInterval);
    // SIGSTOP / VM freeze: ten intervals without a check, preempted meanwhile.
    clock.advance(Clock::Ms(10 * kInterval));
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    Result<uint32_t> w = a->write();
    EXPECT_TRUE(is_nvme(w.error(), NvmeStatus::reservation_conflict)) << "woken writer refused by the device";
    const int64_t woke = clock.elapsed_ms();
    run_schedule(*a->agent, clock, 1);
    EXPECT_EQ(a->agent->state(), AgentState::fenced);
    EXPECT_EQ(a->hooks->entered_ms(AgentState::fenced), woke) << "checked immediately on wake";
    EXPECT_TRUE(a->hooks->saw(AgentEventKind::loop_stalled, "ms late")) << a->hooks->dump();
}

TEST_F(AgentTest, AnotherHostRegisteringWithThisHostIdFencesIt) {
    holder_and_standby();
    HostPort clone(t, a->id, 99);  // same host id, another machine
    RegisterArgs r;
    r.nsid = t.nsid;
    r.action = RegisterAction::replace_key;
    r.crkey = a->agent->key();
    r.nrkey = 0xdead;
    ASSERT_TRUE(clone.submit(encode_register(r), {}).ok());
    run_schedule(*a->agent, clock, kInterval);
    ASSERT_EQ(a->agent->state(), AgentState::fenced);
    EXPECT_NE(a->agent->fence_reason().find("another host shares this host id"), std::string::npos);
}

TEST_F(AgentTest, ExtraEntriesWithThisHostIdAreWarnedAbout) {
    holder_and_standby();
    t.mangle_report = [&](std::span<uint8_t> out) {
        // Duplicate this host's entry under another controller id.
        const uint16_t n = static_cast<uint16_t>(out[5] | (out[6] << 8));
        for (uint16_t i = 0; i < n; ++i) {
            uint8_t* e = &out[kReportExtHeaderBytes + i * kRegistrantExtBytes];
            if (std::memcmp(e + 16, a->id.data(), 16) != 0) continue;
            uint8_t* d = &out[kReportExtHeaderBytes + n * kRegistrantExtBytes];
            std::memcpy(d, e, kRegistrantExtBytes);
            d[0] = 0x55;
            d[2] = 0;
            put_le16(&out[5], static_cast<uint16_t>(n + 1));
            return;
        }
    };
    run_schedule(*a->agent, clock, 3 * kInterval);
    EXPECT_EQ(a->hooks->count(AgentEventKind::host_id_shared), 1u) << a->hooks->dump();
    EXPECT_EQ(a->agent->state(), AgentState::holder);
}

TEST_F(AgentTest, ExclusiveHolderThatLosesTheReservationIsFenced) {
    holder_and_standby();
    t.type = ResvType::none;
    t.holder.reset();
    run_schedule(*a->agent, clock, kInterval);
    ASSERT_EQ(a->agent->state(), AgentState::fenced);
    EXPECT_NE(a->agent->fence_reason().find("reservation lost while still registered"), std::string::npos);
    run_schedule(*a->agent, clock, 10 * kInterval);
    EXPECT_EQ(a->sent(opcode::kResvAcquire), 1u) << "only the one at start";
}

TEST_F(AgentTest, SharedHolderThatLosesTheReservationStandsBy) {
    a = host(1, StartRole::acquire, ResvType::write_exclusive_reg_only);
    a->start_ok();
    t.type = ResvType::none;
    t.holder.reset();
    run_schedule(*a->agent, clock, kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::standby);
    EXPECT_EQ(a->hooks->fence_actions, 0);
    run_schedule(*a->agent, clock, 10 * kInterval);
    EXPECT_EQ(a->sent(opcode::kResvAcquire), 1u) << "no re-acquire";
}

TEST_F(AgentTest, StandbyThatTheDeviceShowsHoldingBecomesHolder) {
    a = host(1);
    a->start_ok();
    t.hold(a->id, ResvType::write_exclusive);
    run_schedule(*a->agent, clock, kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::holder);
    EXPECT_TRUE(a->hooks->saw(AgentEventKind::state_changed, "acquired outside the agent"));
}

// ---- safety rule 2: no automatic re-acquire after preemption, ever ------------

enum class Sched { release_after, unregister_after, target_restart, clear, report_failures,
                   notification_overflow, slow_device };

class NoReacquire : public AgentTest, public ::testing::WithParamInterface<Sched> {};

TEST_P(NoReacquire, FencedAgentNeverRegistersOrAcquiresByItself) {
    holder_and_standby();
    const size_t grabs_at_start = a->grabs();
    ASSERT_EQ(grabs_at_start, 2u);  // register + acquire at start (role acquire)
    bool failing = false;
    t.fail = [&](const HostId& h, const Command& c) -> std::optional<std::error_code> {
        if (failing && h == a->id && c.opcode == opcode::kResvReport) return nvme_err(NvmeStatus::internal_error);
        return std::nullopt;
    };
    Peer op(t, 9, kTag, 9);
    Schedule s;
    auto takeover = [&] { EXPECT_EQ(b->request(ControlOp::takeover).exit_code, 0); };
    auto free_all = [&] { ASSERT_TRUE(b->agent->stop().ok()); };  // release + unregister: nobody left
    switch (GetParam()) {
    case Sched::release_after:
        s = {{1500, takeover}, {3500, [&] { EXPECT_EQ(b->request(ControlOp::handoff).exit_code, 0); }}};
        break;
    case Sched::unregister_after: s = {{1500, takeover}, {3500, free_all}}; break;
    case Sched::target_restart:
        s = {{1500, [&] {
                  t.regs.clear();
                  t.type = ResvType::none;
                  t.holder.reset();
                  t.generation = 0;
              }}};
        break;
    case Sched::clear:
        s = {{1500, [&] {
                  ASSERT_TRUE(op.fence.join(std::nullopt, false).ok());
                  ASSERT_TRUE(op.fence.clear().ok());
              }}};
        break;
    case Sched::report_failures:
        s = {{1200, [&] { failing = true; }}, {1500, takeover}, {4500, free_all}, {6200, [&] { failing = false; }}};
        break;
    case Sched::notification_overflow:
        s = {{1500, takeover},
             {1600, [&] {
                  t.notice_count[a->id] += 50;
                  for (int i = 0; i < 100; ++i)
                      t.notices[a->id].push_back({NotificationType::reservation_released, t.nsid});
              }},
             {3500, free_all}};
        break;
    case Sched::slow_device:
        s = {{1100, [&] { a->slow.delay = Clock::Ms(1800); }}, {1500, takeover}, {9000, free_all}};
        break;
    }
    run_schedule(*a->agent, clock, 40 * kInterval, s);
    ASSERT_EQ(a->agent->state(), AgentState::fenced) << a->hooks->dump();
    EXPECT_EQ(t.type, ResvType::none) << "the reservation is free for the taking";
    EXPECT_FALSE(t.is_holder(a->id));
    EXPECT_EQ(a->grabs(), grabs_at_start) << "no register or acquire after being fenced";
    EXPECT_EQ(a->hooks->fence_actions, 1);
    EXPECT_EQ(a->hooks->writers_stopped, 1);

    // Restart (crash, kill -9, reboot by the fence action): still fenced,
    // even with role acquire and a free reservation.
    a->slow.delay = Clock::Ms(0);
    a->boot();
    a->start_ok();
    EXPECT_EQ(a->agent->state(), AgentState::fenced);
    EXPECT_EQ(a->hooks->fence_actions, 0) << "the fence action is not repeated on restart (reboot loop)";
    EXPECT_EQ(a->hooks->writers_stopped, 1) << "writers stopped again after the restart";
    run_schedule(*a->agent, clock, 20 * kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::fenced);
    EXPECT_EQ(a->grabs(), grabs_at_start);
    auto p = persisted(*a);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->role, PersistedRole::fenced);
}

INSTANTIATE_TEST_SUITE_P(Schedules, NoReacquire,
                         ::testing::Values(Sched::release_after, Sched::unregister_after, Sched::target_restart,
                                           Sched::clear, Sched::report_failures, Sched::notification_overflow,
                                           Sched::slow_device),
                         [](const ::testing::TestParamInfo<Sched>& i) {
                             switch (i.param) {
                             case Sched::release_after: return std::string("HolderReleasesAfter");
                             case Sched::unregister_after: return std::string("EveryoneLeavesAfter");
                             case Sched::target_restart: return std::string("TargetRestart");
                             case Sched::clear: return std::string("ReservationCleared");
                             case Sched::report_failures: return std::string("ReportFailures");
                             case Sched::notification_overflow: return std::string("NotificationOverflow");
                             case Sched::slow_device: return std::string("SlowDevice");
                             }
                             return std::string("unknown");
                         });

// ---- restarts -------------------------------------------------------------------

TEST_F(AgentTest, CrashedHolderResumesAsHolderWithoutSendingAnything) {
    holder_and_standby();
    const uint64_t k = a->agent->key();
    const size_t grabs = a->grabs();
    a->boot();  // kill -9: no stop()
    a->start_ok();
    EXPECT_EQ(a->agent->state(), AgentState::holder);
    EXPECT_EQ(a->agent->key(), k);
    EXPECT_EQ(a->grabs(), grabs);
    EXPECT_TRUE(a->hooks->saw(AgentEventKind::state_changed, "resumed after a restart"));
}

TEST_F(AgentTest, CrashedStandbyResumesAsStandby) {
    holder_and_standby();
    const uint64_t k = b->agent->key();
    b->boot();
    b->start_ok();
    EXPECT_EQ(b->agent->state(), AgentState::standby);
    EXPECT_EQ(b->agent->key(), k);
    EXPECT_EQ(b->grabs(), 1u);
}

TEST_F(AgentTest, PreemptedWhileDownIsFencedOnRestart) {
    holder_and_standby();
    const size_t grabs = a->grabs();
    a->agent.reset();  // down
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    a->boot();
    a->start_ok();
    ASSERT_EQ(a->agent->state(), AgentState::fenced) << a->hooks->dump();
    EXPECT_NE(a->agent->fence_reason().find("while the agent was down"), std::string::npos);
    EXPECT_EQ(a->hooks->fence_actions, 1);
    EXPECT_EQ(a->grabs(), grabs) << "never acquires because it remembers holding";
}

TEST_F(AgentTest, HolderThatLostTheReservationWhileDownIsFencedNotReacquired) {
    holder_and_standby();
    a->agent.reset();
    t.type = ResvType::none;  // released by someone else; still registered
    t.holder.reset();
    a->boot();
    a->start_ok();
    EXPECT_EQ(a->agent->state(), AgentState::fenced);
    EXPECT_NE(a->agent->fence_reason().find("lost while the agent was down"), std::string::npos);
    EXPECT_EQ(a->sent(opcode::kResvAcquire), 1u);
}

TEST_F(AgentTest, SharedHolderThatLostTheReservationWhileDownStandsByWithoutReacquiring) {
    a = host(1, StartRole::acquire, ResvType::write_exclusive_reg_only);
    a->start_ok();
    a->agent.reset();
    t.type = ResvType::none;
    t.holder.reset();
    a->boot();
    a->start_ok();
    EXPECT_EQ(a->agent->state(), AgentState::standby);
    EXPECT_EQ(a->sent(opcode::kResvAcquire), 1u) << "the start role does not win back a lost reservation";
}

// Issue 13, defect 5: the start role applies to the first start of a fresh
// state only; a restarted standby never takes the reservation by itself.
TEST_F(AgentTest, RestartedStandbyWithRoleAcquireDoesNotTakeAFreeReservation) {
    a = host(1, StartRole::acquire);
    t.add(make_host(9), key_of(9, 10));
    t.hold(make_host(9), ResvType::write_exclusive);
    a->start_ok();
    ASSERT_EQ(a->agent->state(), AgentState::standby);
    // The holder leaves cleanly while this agent is down.
    t.regs.erase(std::remove_if(t.regs.begin(), t.regs.end(), [](const FakeTarget::Reg& r) { return r.host == make_host(9); }),
                 t.regs.end());
    t.type = ResvType::none;
    t.holder.reset();
    a->boot();
    a->start_ok();
    EXPECT_EQ(a->agent->state(), AgentState::standby);
    EXPECT_EQ(a->sent(opcode::kResvAcquire), 0u);
}

TEST_F(AgentTest, RoleAcquireNeverReacquiresAfterPreemptionRejoinHandoffOrCrash) {
    a = host(1, StartRole::acquire);
    b = host(2, StartRole::standby);
    a->start_ok();
    ASSERT_EQ(a->agent->state(), AgentState::holder) << "first start of a fresh state: acquired";
    b->start_ok();
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    a->agent->check();
    ASSERT_EQ(a->agent->state(), AgentState::fenced);
    ASSERT_EQ(a->request(ControlOp::rejoin).exit_code, 0);
    EXPECT_EQ(a->agent->state(), AgentState::standby);
    ASSERT_EQ(b->request(ControlOp::handoff).exit_code, 0);  // the holder hands off
    const size_t acquires = a->sent(opcode::kResvAcquire);
    a->agent.reset();  // kill -9
    a->boot();
    a->start_ok();
    EXPECT_EQ(a->agent->state(), AgentState::standby) << a->hooks->dump();
    EXPECT_EQ(a->sent(opcode::kResvAcquire), acquires) << "nobody holds, yet the agent does not take it";
    a->agent->check();
    EXPECT_EQ(a->agent->state(), AgentState::standby);
}

// nvfence-sim, Pacemaker schedules: after a target restart without PTPL
// every node's watcher went FENCED, fence_nvfence `on` rejoined each through
// its nvfenced, and nobody took the reservation again, so unregistered hosts
// could write although unfencing promises a Registrants Only reservation
// (docs/PACEMAKER.md, "How it fences"). Under Registrants Only holding
// gives nothing the other registrants lack: a rejoin with role = acquire
// takes a reservation nobody holds. Under Write Exclusive holding is
// writing: a rejoin never acquires (the test above).
TEST_F(AgentTest, ARejoinUnderRegistrantsOnlyTakesTheReservationNobodyHolds) {
    for (ResvType type : {ResvType::write_exclusive_reg_only, ResvType::write_exclusive}) {
        pair_of(type, StartRole::acquire);
        if (HasFatalFailure()) return;
        ASSERT_EQ(b->agent->state(), AgentState::standby);
        // The target restarts without PTPL: every key and the reservation are gone.
        t.regs.clear();
        t.type = ResvType::none;
        t.holder.reset();
        a->agent->check();
        b->agent->check();
        ASSERT_EQ(a->agent->state(), AgentState::fenced);
        ASSERT_EQ(b->agent->state(), AgentState::fenced);
        ASSERT_EQ(b->request(ControlOp::rejoin).exit_code, 0);
        ASSERT_EQ(a->request(ControlOp::rejoin).exit_code, 0);
        if (type == ResvType::write_exclusive_reg_only) {
            EXPECT_EQ(t.type, ResvType::write_exclusive_reg_only) << b->hooks->dump();
            ASSERT_TRUE(t.holder.has_value());
            EXPECT_EQ(*t.holder, b->id) << "the first to rejoin takes it";
            EXPECT_EQ(b->agent->state(), AgentState::holder);
            EXPECT_EQ(a->agent->state(), AgentState::standby);
        } else {
            EXPECT_EQ(t.type, ResvType::none) << "Write Exclusive: a rejoin does not take the reservation";
            EXPECT_EQ(b->agent->state(), AgentState::standby);
            EXPECT_EQ(a->agent->state(), AgentState::standby);
        }
    }
}

// nvfence-sim, Pacemaker schedule 301: the first start's Acquire timed out
// and the other node's first start crashed before its own, so nobody held
// the reservation for the whole schedule (a restart is not a fresh start,
// and fence_nvfence `on` found both agents STANDBY). Under Registrants Only
// a rejoin asked of a standby with role = acquire takes the reservation
// nobody holds; a check never does (safety rule 2); under Write Exclusive
// a rejoin does not either.
TEST_F(AgentTest, UnderRegistrantsOnlyARejoinOfAStandbyTakesTheReservationNobodyHolds) {
    for (ResvType type : {ResvType::write_exclusive_reg_only, ResvType::write_exclusive}) {
        const uint8_t n = type == ResvType::write_exclusive ? 3 : 1;
        t = FakeTarget{};
        int refusals = 1;
        t.fail = [&](const HostId&, const Command& c) -> std::optional<std::error_code> {
            if (c.opcode == opcode::kResvAcquire && refusals > 0) {
                --refusals;
                return std::error_code(ETIMEDOUT, std::system_category());
            }
            return std::nullopt;
        };
        a = host(n, StartRole::acquire, type);
        a->start_ok();
        ASSERT_EQ(a->agent->state(), AgentState::standby) << "the first start's Acquire failed";
        a->agent->check();
        EXPECT_EQ(a->agent->state(), AgentState::standby) << "a check never acquires";
        ASSERT_EQ(t.type, ResvType::none);
        const ControlReply r = a->request(ControlOp::rejoin);
        EXPECT_EQ(r.exit_code, 0);
        if (type == ResvType::write_exclusive_reg_only) {
            EXPECT_EQ(a->agent->state(), AgentState::holder) << a->hooks->dump();
            EXPECT_EQ(t.type, ResvType::write_exclusive_reg_only);
            EXPECT_TRUE(r.changed);
            EXPECT_NE(r.message.find("took the reservation nobody held"), std::string::npos) << r.message;
        } else {
            EXPECT_EQ(a->agent->state(), AgentState::standby);
            EXPECT_EQ(t.type, ResvType::none);
            EXPECT_FALSE(r.changed);
        }
        t.fail = nullptr;
    }
}

// nvfence-sim, Pacemaker schedule 279: a two-node cluster's writer node
// froze, the other node fenced it (its key preempted-and-aborted) and took
// the resource. The frozen node resumed before its agent's next check; its
// stale Pacemaker, alone and quorate (two_node), had fence_nvfence fence the
// healthy node through the local nvfenced, whose takeover registered this
// fenced host again with a fresh key and preempted the healthy one: the
// stale writer's writes landed again. An agent asked to take over first
// looks at the device: its key gone, it is FENCED and refuses.
TEST_F(AgentTest, AFencedHostThatHasNotCheckedYetRefusesATakeover) {
    for (ResvType type : {ResvType::write_exclusive_reg_only, ResvType::write_exclusive}) {
        pair_of(type, StartRole::standby);
        if (HasFatalFailure()) return;
        ASSERT_EQ(b->request(ControlOp::takeover, a->agent->key()).exit_code, 0) << "b fences a";
        const uint64_t b_key = b->agent->key();
        ASSERT_EQ(a->agent->state(), AgentState::holder) << "a has not checked since (frozen)";
        const ControlReply r = a->request(ControlOp::takeover, b_key);
        EXPECT_NE(r.exit_code, 0) << r.message;
        EXPECT_EQ(a->agent->state(), AgentState::fenced) << a->hooks->dump();
        ASSERT_TRUE(t.holder.has_value());
        EXPECT_EQ(*t.holder, b->id) << "the host that fenced a still holds";
        EXPECT_EQ(t.find(a->id), nullptr) << "a is not registered again";
    }
}

// nvfence-sim seed 39191188853768: the check before a takeover passed, then
// the other node of a two-node cluster fenced this one, then the takeover's
// own Report showed this host unregistered and Fence::takeover registered it
// again with a fresh key and preempted the node that had fenced it: the
// stale writer's writes landed again. A takeover for a registered agent is a
// takeover of exactly its key: that key gone, nothing is sent and the agent
// is FENCED.
TEST_F(AgentTest, AHostFencedBetweenItsCheckAndItsTakeoverIsNotRegisteredAgain) {
    for (ResvType type : {ResvType::write_exclusive_reg_only, ResvType::write_exclusive}) {
        pair_of(type, StartRole::standby);
        if (HasFatalFailure()) return;
        const uint64_t a_key = a->agent->key();
        bool raced = false;
        int reports = 0;
        // a's check reads the Report (a still registered); before the next
        // Report (the takeover's own), b fences a.
        t.fail = [&](const HostId& h, const Command& c) -> std::optional<std::error_code> {
            if (raced || h != a->id || c.opcode != opcode::kResvReport || ++reports < 2) return std::nullopt;
            raced = true;
            EXPECT_EQ(b->request(ControlOp::takeover, a_key).exit_code, 0);
            return std::nullopt;
        };
        const size_t acquires_before = a->sent(opcode::kResvAcquire);
        const size_t registers_before = a->sent(opcode::kResvRegister);
        // No victim: take over from whoever holds (nvfence takeover).
        const ControlReply r = a->request(ControlOp::takeover);
        t.fail = nullptr;
        ASSERT_TRUE(raced);
        EXPECT_NE(r.exit_code, 0) << r.message;
        ASSERT_TRUE(t.holder.has_value());
        EXPECT_EQ(*t.holder, b->id) << "the host that fenced a still holds";
        EXPECT_EQ(t.find(a->id), nullptr) << "a is not registered again";
        EXPECT_EQ(a->sent(opcode::kResvRegister), registers_before) << "no Register sent";
        EXPECT_EQ(a->sent(opcode::kResvAcquire), acquires_before) << "no Acquire sent";
        a->agent->check();
        EXPECT_EQ(a->agent->state(), AgentState::fenced) << a->hooks->dump();
    }
}

// Issue 13, defect 4: one refused extended Report does not blind the agent
// (the fake, like nvmet, refuses the plain one).
TEST_F(AgentTest, OneRefusedExtendedReportDoesNotBlindTheAgent) {
    holder_and_standby();
    int refusals = 1;
    t.fail = [&](const HostId& h, const Command& c) -> std::optional<std::error_code> {
        if (h == a->id && c.opcode == opcode::kResvReport && (c.cdw[1] & 1u) && refusals > 0) {
            --refusals;
            return nvme_err(NvmeStatus::invalid_field);
        }
        return std::nullopt;
    };
    a->agent->check();
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    a->agent->check();
    EXPECT_EQ(a->agent->state(), AgentState::fenced) << a->hooks->dump();
}

// Issue 13, defect 4: a holder whose checks keep failing stops claiming
// HOLDER after a bounded time and fences itself.
TEST_F(AgentTest, AHolderThatLostItsViewFencesItselfAfterABoundedTime) {
    holder_and_standby();
    t.fail = [&](const HostId& h, const Command& c) -> std::optional<std::error_code> {
        if (h == a->id && c.opcode == opcode::kResvReport) return nvme_err(NvmeStatus::internal_error);
        return std::nullopt;
    };
    const int64_t bound = 3 * kInterval + 5000;
    run_schedule(*a->agent, clock, bound - kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::holder) << "within the bound the state is kept";
    run_schedule(*a->agent, clock, 2 * kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::fenced) << a->hooks->dump();
    EXPECT_EQ(a->hooks->fence_actions, 1);
    EXPECT_NE(a->agent->fence_reason().find("lost the view"), std::string::npos);
}

TEST_F(AgentTest, WithoutFenceOnViewLossAHolderOnlyStopsClaimingHolder) {
    auto o = options(1, StartRole::acquire);
    o.fence_on_view_loss = false;
    o.view_timeout_ms = 2500;
    a = std::make_unique<SimHost>(t, clock, 1, o, tmp.path());
    a->start_ok();
    ASSERT_EQ(a->agent->state(), AgentState::holder);
    t.fail = [&](const HostId& h, const Command& c) -> std::optional<std::error_code> {
        if (h == a->id && c.opcode == opcode::kResvReport) return errno_error(EIO);
        return std::nullopt;
    };
    run_schedule(*a->agent, clock, 4 * kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::standby) << a->hooks->dump();
    EXPECT_EQ(a->hooks->fence_actions, 0);
    t.fail = nullptr;
    a->agent->check();
    EXPECT_EQ(a->agent->state(), AgentState::holder) << "the view is back: the device says it holds";
}

// Issue 13, defect 6: handoff and clean stop stop the writers before the release.
TEST_F(AgentTest, HandoffAndStopStopTheWritersBeforeTheRelease) {
    holder_and_standby();
    std::vector<bool> holding_when_stopped;
    a->hooks->during = [&](const std::string& what) {
        if (what == "writers") holding_when_stopped.push_back(t.is_holder(a->id));
    };
    a->hooks->writer_result = make_error_code(Errc::timeout);
    auto r = a->request(ControlOp::handoff);
    EXPECT_NE(r.exit_code, 0) << "writers that would not stop: no release";
    EXPECT_TRUE(t.is_holder(a->id));
    EXPECT_EQ(a->agent->state(), AgentState::holder);
    a->hooks->writer_result = Ok{};
    r = a->request(ControlOp::handoff);
    EXPECT_EQ(r.exit_code, 0) << r.message;
    EXPECT_FALSE(t.is_holder(a->id));
    ASSERT_EQ(holding_when_stopped.size(), 2u);
    EXPECT_TRUE(holding_when_stopped[0] && holding_when_stopped[1]);
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    holding_when_stopped.clear();
    b->hooks->during = [&](const std::string& what) {
        if (what == "writers") holding_when_stopped.push_back(t.is_holder(b->id));
    };
    ASSERT_TRUE(b->agent->stop());
    ASSERT_EQ(holding_when_stopped.size(), 1u);
    EXPECT_TRUE(holding_when_stopped[0]);
}

// Issue 13, defect 7: the action's progress is persisted; a pending action
// runs again after a restart, a done one does not.
TEST_F(AgentTest, APendingFenceActionRunsAgainAfterARestart) {
    holder_and_standby();
    std::optional<PersistedState> during_action;
    a->hooks->during = [&](const std::string& what) {
        if (what == "action") during_action = persisted(*a);
    };
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    a->agent->check();
    ASSERT_EQ(a->agent->state(), AgentState::fenced);
    ASSERT_TRUE(during_action);
    EXPECT_EQ(during_action->action, FenceActionState::pending);
    EXPECT_EQ(persisted(*a)->action, FenceActionState::done);
    a->boot();
    a->start_ok();
    EXPECT_EQ(a->hooks->fence_actions, 0) << "a done action is not repeated";
    // Killed while the action ran (watchdog): the file says pending.
    PersistedState p = *persisted(*a);
    p.action = FenceActionState::pending;
    ASSERT_TRUE(a->statefile.save(p));
    a->boot();
    a->start_ok();
    EXPECT_EQ(a->agent->state(), AgentState::fenced);
    EXPECT_EQ(a->hooks->fence_actions, 1) << "the pending action ran again";
    EXPECT_GE(a->hooks->writers_stopped, 1);
    EXPECT_GE(a->hooks->keepalives, 2) << "the watchdog is fed around the action";
    EXPECT_EQ(persisted(*a)->action, FenceActionState::done);
}

// fence_action = reboot: the reboot never returns, so the state file still
// says pending when the host is back. That boot must not reboot again (it
// would at every boot, for ever): the host comes back FENCED, and a rejoin
// brings it back. A reboot that did not happen (the agent killed in the
// same boot) runs again.
TEST_F(AgentTest, APendingRebootIsNotRunAgainInTheNextBoot) {
    AgentOptions o = options(1, StartRole::acquire);
    o.fence_action_reboots = true;
    o.boot_id = "boot-1";
    a = std::make_unique<SimHost>(t, clock, 1, o, tmp.path());
    a->start_ok();
    b = host(2);
    b->start_ok();
    std::optional<PersistedState> at_reboot;
    a->hooks->during = [&](const std::string& what) {
        if (what == "action") at_reboot = persisted(*a);
    };
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    a->agent->check();
    ASSERT_EQ(a->agent->state(), AgentState::fenced);
    ASSERT_TRUE(at_reboot);
    EXPECT_EQ(at_reboot->action, FenceActionState::pending);
    EXPECT_EQ(at_reboot->boot_id, "boot-1");
    // Killed in the same boot before the reboot happened: it runs again.
    ASSERT_TRUE(a->statefile.save(*at_reboot));
    a->boot();
    a->start_ok();
    EXPECT_EQ(a->hooks->fence_actions, 1) << "a reboot that did not happen runs again";
    // The reboot happened: what the next boot finds is the file of that moment.
    ASSERT_TRUE(a->statefile.save(*at_reboot));
    a->opts.boot_id = "boot-2";
    for (int boot = 0; boot < 3; ++boot) {
        a->boot();
        a->start_ok();
        EXPECT_EQ(a->agent->state(), AgentState::fenced) << a->hooks->dump();
        EXPECT_EQ(a->hooks->fence_actions, 0) << "rebooted again (start " << boot << ")\n" << a->hooks->dump();
        EXPECT_GE(a->hooks->writers_stopped, 1) << "writers started at boot are stopped";
        EXPECT_EQ(persisted(*a)->action, FenceActionState::done);
    }
    // A file of an older agent says no boot: not rebooted again either.
    PersistedState old = *at_reboot;
    old.boot_id.clear();
    ASSERT_TRUE(a->statefile.save(old));
    a->boot();
    a->start_ok();
    EXPECT_EQ(a->hooks->fence_actions, 0) << a->hooks->dump();
    auto r = a->request(ControlOp::rejoin);
    EXPECT_EQ(r.exit_code, 0) << r.message;
    EXPECT_EQ(a->agent->state(), AgentState::standby) << a->hooks->dump();
}

// Issue 18 (the window): keys gone without a preemption (target state loss):
// the writers stop before anything else.
TEST_F(AgentTest, OnTargetStateLossTheWritersStopBeforeAnythingElse) {
    holder_and_standby();
    size_t state_events_at_stop = 99;
    a->hooks->during = [&](const std::string& what) {
        if (what == "writers" && state_events_at_stop == 99)
            state_events_at_stop = a->hooks->transitions().size();
    };
    const size_t before = a->hooks->transitions().size();
    t.regs.clear();
    t.type = ResvType::none;
    t.holder.reset();
    t.generation = 0;
    a->agent->check();
    EXPECT_EQ(a->agent->state(), AgentState::fenced);
    EXPECT_EQ(state_events_at_stop, before) << "writers stopped before the state change";
}

TEST_F(AgentTest, CrashInsideATakeoverAdoptsTheKeyItRegistered) {
    holder_and_standby();
    // B's agent crashes after its takeover reached the device but before
    // its state file said so: replay the takeover with B's own epoch store.
    b->agent.reset();
    Reservations resv(b->port, t.nsid);
    Fence f(resv, b->id, FenceOptions{kTag, 2, ResvType::write_exclusive, true, Cptpl::no_change}, &b->epochs);
    auto out = f.takeover(std::nullopt);
    ASSERT_TRUE(out.ok());
    b->boot();
    b->start_ok();
    EXPECT_EQ(b->agent->state(), AgentState::holder) << b->hooks->dump();
    EXPECT_EQ(b->agent->key(), out->key);
}

TEST_F(AgentTest, KeyOfThisNodeAboveThePersistedEpochIsNotOurs) {
    holder_and_standby();
    b->agent.reset();
    RegisterArgs r;
    r.nsid = t.nsid;
    r.action = RegisterAction::replace_key;
    r.crkey = b->device_key();
    r.nrkey = key_of(2, 999);  // never persisted by this host
    ASSERT_TRUE(b->port.submit(encode_register(r), {}).ok());
    b->boot();
    b->start_ok();
    EXPECT_EQ(b->agent->state(), AgentState::fenced);
}

TEST_F(AgentTest, WipedStateDirectoryResumesFromTheDevice) {
    holder_and_standby();
    std::filesystem::remove(a->statefile.path());
    a->boot();
    a->start_ok();
    EXPECT_EQ(a->agent->state(), AgentState::holder) << "the device says this host holds";
    EXPECT_EQ(a->grabs(), 2u);
}

TEST_F(AgentTest, FencedSurvivesRestartWithItsAgeAndReason) {
    holder_and_standby();
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    run_schedule(*a->agent, clock, kInterval);
    ASSERT_EQ(a->agent->state(), AgentState::fenced);
    const std::string reason = a->agent->fence_reason();
    clock.advance(Clock::Ms(5000));
    a->boot();
    a->start_ok();
    auto st = a->agent->status();
    EXPECT_EQ(st.state, AgentState::fenced);
    EXPECT_EQ(st.fence_reason, reason);
    EXPECT_GE(st.fenced_for_ms, 5000u);
    EXPECT_LT(st.fenced_for_ms, 7000u);
}

// ---- requests ---------------------------------------------------------------------

TEST_F(AgentTest, TakeoverPreemptsAndAbortsWithAFreshEpoch) {
    holder_and_standby();
    const uint64_t old_holder = a->agent->key();
    auto r = b->request(ControlOp::takeover);
    EXPECT_EQ(r.exit_code, 0) << r.message;
    EXPECT_TRUE(r.changed);
    EXPECT_EQ(r.state, AgentState::holder);
    EXPECT_EQ(r.previous_holder, old_holder);
    EXPECT_EQ(r.holder, b->agent->key());
    EXPECT_TRUE(r.holder_self);
    EXPECT_EQ(r.id, 77u);
    EXPECT_GT(epoch(b->agent->key()), epoch(old_holder));
    EXPECT_EQ(std::count(t.aborted.begin(), t.aborted.end(), a->id), 1) << "preempt-and-abort";
    EXPECT_NE(r.message.find("preempted-and-aborted " + format_key(old_holder)), std::string::npos) << r.message;
    EXPECT_EQ(persisted(*b)->role, PersistedRole::holder);
    run_schedule(*a->agent, clock, kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::fenced);
}

TEST_F(AgentTest, TakeoverWhenAlreadyHolderChangesNothing) {
    holder_and_standby();
    const auto gen = t.generation;
    auto r = a->request(ControlOp::takeover);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_FALSE(r.changed);
    EXPECT_EQ(t.generation, gen);
}

TEST_F(AgentTest, TakeoverLostRaceReportsTheWinnerAndStandsByWithItsNewKey) {
    holder_and_standby();
    auto c = host(3);
    c->start_ok();
    bool raced = false;
    t.after = [&](const HostId& h, const Command& cmd) {
        if (raced || h != b->id || cmd.opcode != opcode::kResvRegister) return;
        raced = true;
        EXPECT_EQ(c->request(ControlOp::takeover).exit_code, 0);
    };
    auto r = b->request(ControlOp::takeover);
    EXPECT_TRUE(raced);
    EXPECT_EQ(r.exit_code, static_cast<uint8_t>(ExitCode::lost_race)) << r.message;
    EXPECT_NE(r.message.find(format_key(c->agent->key()) + " holds now"), std::string::npos) << r.message;
    EXPECT_EQ(b->agent->state(), AgentState::standby);
    EXPECT_EQ(b->agent->key(), b->device_key()) << "adopted the fresh key it registered";
    run_schedule(*b->agent, clock, 3 * kInterval);
    EXPECT_EQ(b->agent->state(), AgentState::standby) << b->hooks->dump();
}

TEST_F(AgentTest, TakeoverOfAnUnknownVictimFailsWithoutFencing) {
    holder_and_standby();
    auto r = b->request(ControlOp::takeover, key_of(50, 1));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(b->agent->state(), AgentState::fenced) << b->hooks->dump();
    EXPECT_EQ(b->agent->key(), b->device_key());
    EXPECT_TRUE(t.is_holder(a->id));
}

TEST_F(AgentTest, TakeoverFromFencedIsRefusedUntilRejoin) {
    holder_and_standby();
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    run_schedule(*a->agent, clock, kInterval);
    ASSERT_EQ(a->agent->state(), AgentState::fenced);
    const size_t grabs = a->grabs();
    auto refused = a->request(ControlOp::takeover);
    EXPECT_EQ(refused.exit_code, static_cast<uint8_t>(ExitCode::conflict));
    EXPECT_NE(refused.message.find("run 'nvfence rejoin' first"), std::string::npos) << refused.message;
    EXPECT_EQ(a->agent->state(), AgentState::fenced);
    EXPECT_EQ(a->grabs(), grabs) << "nothing sent";
    ASSERT_EQ(a->request(ControlOp::rejoin).exit_code, 0);
    auto r = a->request(ControlOp::takeover);
    EXPECT_EQ(r.exit_code, 0) << r.message;
    EXPECT_EQ(a->agent->state(), AgentState::holder);
    EXPECT_TRUE(a->agent->fence_reason().empty());
    EXPECT_EQ(r.fenced_for_ms, kControlNever);
    EXPECT_TRUE(a->write().ok());
}

TEST_F(AgentTest, HandoffReleasesSoTheStandbyAcquiresWithoutPreempting) {
    holder_and_standby();
    auto r = a->request(ControlOp::handoff);
    EXPECT_EQ(r.exit_code, 0) << r.message;
    EXPECT_TRUE(r.changed);
    EXPECT_EQ(a->agent->state(), AgentState::standby);
    EXPECT_EQ(a->device_key(), a->agent->key()) << "still registered";
    EXPECT_EQ(persisted(*a)->role, PersistedRole::standby);
    Reservations resv(b->port, t.nsid);
    AcquireArgs acq;
    acq.crkey = b->agent->key();
    EXPECT_TRUE(resv.acquire(acq).ok()) << "plain acquire, no preempt";
    run_together({a->agent.get(), b->agent.get()}, clock, 2 * kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::standby);
    EXPECT_EQ(b->agent->state(), AgentState::holder);
}

TEST_F(AgentTest, HandoffWhenNotHolderIsAConflict) {
    holder_and_standby();
    auto r = b->request(ControlOp::handoff);
    EXPECT_EQ(r.exit_code, static_cast<uint8_t>(ExitCode::conflict));
    EXPECT_NE(r.message.find(format_key(a->agent->key()) + " does"), std::string::npos) << r.message;
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    run_schedule(*a->agent, clock, kInterval);
    EXPECT_EQ(a->request(ControlOp::handoff).exit_code, static_cast<uint8_t>(ExitCode::conflict));
    auto free = host(4);
    t.regs.clear();
    t.type = ResvType::none;
    t.holder.reset();
    free->start_ok();
    auto idle = free->request(ControlOp::handoff);
    EXPECT_EQ(idle.exit_code, 0) << "nothing held, nothing to release";
    EXPECT_FALSE(idle.changed);
}

TEST_F(AgentTest, RejoinFromFencedRegistersAStandbyWithANewEpochAndNeverAcquires) {
    holder_and_standby();
    const uint64_t old = a->agent->key();
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    ASSERT_TRUE(b->agent->stop().ok());  // reservation free afterwards
    run_schedule(*a->agent, clock, kInterval);
    ASSERT_EQ(a->agent->state(), AgentState::fenced);
    auto r = a->request(ControlOp::rejoin);
    EXPECT_EQ(r.exit_code, 0) << r.message;
    EXPECT_TRUE(r.changed);
    EXPECT_EQ(a->agent->state(), AgentState::standby);
    EXPECT_GT(epoch(a->agent->key()), epoch(old));
    EXPECT_GT(epoch(a->agent->key()), epoch(b->agent->key()));
    EXPECT_EQ(a->device_key(), a->agent->key());
    EXPECT_EQ(persisted(*a)->role, PersistedRole::standby);
    run_schedule(*a->agent, clock, 10 * kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::standby) << "role acquire applies at start only";
    EXPECT_EQ(a->sent(opcode::kResvAcquire), 1u);
    EXPECT_EQ(a->hooks->transitions().back(), std::make_pair(AgentState::fenced, AgentState::standby));
}

TEST_F(AgentTest, EpochsSeenOnTheDeviceStayBelowTheNextKeyAfterATargetStateLoss) {
    holder_and_standby();
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    const uint32_t granted = epoch(b->agent->key());
    ASSERT_GT(granted, epoch(a->agent->key()));
    run_schedule(*a->agent, clock, kInterval);  // A sees B's grant, and is fenced
    ASSERT_EQ(a->agent->state(), AgentState::fenced);
    // The target loses every key: A's next key must still be above B's grant,
    // although the device no longer shows it.
    t.regs.clear();
    t.type = ResvType::none;
    t.holder.reset();
    t.generation = 0;
    auto r = a->request(ControlOp::rejoin);
    ASSERT_EQ(r.exit_code, 0) << r.message;
    EXPECT_GT(epoch(a->agent->key()), granted);
}

// Issue 24 defect 5: under an elector (rejoin = auto) a holder fenced by the
// next leader's takeover becomes a candidate again by itself, but only after
// its writers were stopped and its fence action completed, and it never
// acquires.
TEST_F(AgentTest, RejoinAutoComesBackAsAStandbyOnlyAfterWritersAndActionAndNeverAcquires) {
    AgentOptions o = options(1, StartRole::acquire);
    o.rejoin_auto = true;
    a = std::make_unique<SimHost>(t, clock, 1, o, tmp.path());
    a->start_ok();
    b = host(2);
    b->start_ok();
    const uint64_t old = a->agent->key();
    std::vector<std::string> order;
    a->hooks->during = [&](const std::string& what) {
        order.push_back(what + (a->device_key() ? " registered" : " unregistered"));
    };
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    a->agent->check();
    ASSERT_EQ(a->agent->state(), AgentState::standby) << a->hooks->dump();
    EXPECT_EQ(a->hooks->transitions(), (std::vector<std::pair<AgentState, AgentState>>{
                                           {AgentState::starting, AgentState::standby},
                                           {AgentState::standby, AgentState::holder},
                                           {AgentState::holder, AgentState::fenced},
                                           {AgentState::fenced, AgentState::standby}}));
    EXPECT_EQ(order, (std::vector<std::string>{"writers unregistered", "action unregistered"}))
        << "writers stopped and the action done before the new registration";
    EXPECT_TRUE(a->hooks->saw(AgentEventKind::state_changed, "automatic rejoin")) << a->hooks->dump();
    EXPECT_NE(a->agent->key(), old);
    EXPECT_EQ(a->device_key(), a->agent->key());
    EXPECT_TRUE(t.is_holder(b->id)) << "the new leader keeps the reservation";
    run_schedule(*a->agent, clock, 10 * kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::standby);
    EXPECT_EQ(a->sent(opcode::kResvAcquire), 1u) << "only the start role's acquire";
}

TEST_F(AgentTest, RejoinAutoWaitsForAPendingFenceActionAfterARestart) {
    holder_and_standby();  // rejoin manual in this run
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    a->agent->check();
    ASSERT_EQ(a->agent->state(), AgentState::fenced);
    // Killed while the action ran (watchdog): the file says pending. The
    // next start has rejoin = auto.
    PersistedState p = *persisted(*a);
    p.action = FenceActionState::pending;
    ASSERT_TRUE(a->statefile.save(p));
    a->opts.rejoin_auto = true;
    a->boot();
    a->start_ok();
    EXPECT_EQ(a->agent->state(), AgentState::fenced) << "the start itself never rejoins";
    EXPECT_EQ(a->hooks->fence_actions, 1) << "the pending action ran again first";
    a->agent->check();
    EXPECT_EQ(a->agent->state(), AgentState::standby) << a->hooks->dump();
    EXPECT_EQ(a->hooks->fence_actions, 1);
}

TEST_F(AgentTest, RejoinManualOrASharedHostIdStaysFenced) {
    holder_and_standby();  // rejoin_auto off: manual
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    run_schedule(*a->agent, clock, 5 * kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::fenced);

    // auto, but this host id is registered with another key: the operator decides.
    AgentOptions o = options(3);
    o.rejoin_auto = true;
    auto c = std::make_unique<SimHost>(t, clock, 3, o, tmp.path());
    c->start_ok();
    t.regs.erase(std::remove_if(t.regs.begin(), t.regs.end(), [&](const auto& r) { return r.host == c->id; }),
                 t.regs.end());
    t.add(c->id, key_of(9, 77));  // the same host id, another node's key
    run_schedule(*c->agent, clock, 5 * kInterval);
    EXPECT_EQ(c->agent->state(), AgentState::fenced) << c->hooks->dump();
    EXPECT_EQ(t.find(c->id)->key, key_of(9, 77)) << "nothing re-registered over it";
}

// rejoin = auto after a writer stop that failed: under Registrants Only the
// writer that never stopped would write again beside the new holder once
// the host registers again. The host stays FENCED (no automatic rejoin, no
// candidacy) until its writers stop: a rejoin stops them first.
TEST_F(AgentTest, AHostWhoseWritersDidNotStopDoesNotRejoinByItself) {
    AgentOptions o = options(1, StartRole::acquire, ResvType::write_exclusive_reg_only);
    o.rejoin_auto = true;
    a = std::make_unique<SimHost>(t, clock, 1, o, tmp.path());
    a->start_ok();
    b = host(2, StartRole::standby, ResvType::write_exclusive_reg_only);
    b->start_ok();
    a->hooks->writer_result = make_error_code(Errc::timeout);
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    a->agent->check();
    ASSERT_EQ(a->agent->state(), AgentState::fenced) << a->hooks->dump();
    EXPECT_EQ(a->hooks->fence_actions, 1);
    run_schedule(*a->agent, clock, 5 * kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::fenced) << "rejoined with writers running:\n" << a->hooks->dump();
    EXPECT_EQ(a->device_key(), 0u) << "registered again: its unstopped writer could write";
    EXPECT_FALSE(a->agent->candidate());
    EXPECT_STREQ(fence_action_state_name(persisted(*a)->action), "writers_running");
    // A restart whose writer stop fails again stays out too.
    a->boot();
    a->hooks->writer_result = make_error_code(Errc::timeout);
    a->start_ok();
    a->agent->check();
    EXPECT_EQ(a->agent->state(), AgentState::fenced) << a->hooks->dump();
    EXPECT_EQ(a->hooks->fence_actions, 0) << "a done action is not repeated";
    // The operator's rejoin stops them first: refused while they do not stop.
    auto r = a->request(ControlOp::rejoin);
    EXPECT_NE(r.exit_code, 0) << r.message;
    EXPECT_NE(r.message.find("writers did not stop"), std::string::npos) << r.message;
    EXPECT_EQ(a->device_key(), 0u);
    a->hooks->writer_result = Ok{};
    r = a->request(ControlOp::rejoin);
    EXPECT_EQ(r.exit_code, 0) << r.message;
    EXPECT_EQ(a->agent->state(), AgentState::standby) << a->hooks->dump();
}

// A rejoin of a host that still holds the reservation (fenced by a lost view
// that no takeover followed) gives STANDBY: it releases, never keeps a hold.
TEST_F(AgentTest, ARejoinOfAFencedHostThatStillHoldsGivesAStandby) {
    holder_and_standby();
    ASSERT_TRUE(a->agent->lose_lease("test: fenced while holding").ok());
    ASSERT_EQ(a->agent->state(), AgentState::fenced);
    ASSERT_TRUE(t.is_holder(a->id));
    auto r = a->request(ControlOp::rejoin);
    EXPECT_EQ(r.exit_code, 0) << r.message;
    EXPECT_EQ(a->agent->state(), AgentState::standby) << a->hooks->dump();
    EXPECT_FALSE(t.is_holder(a->id)) << "the rejoin kept the hold";
    EXPECT_EQ(r.message.find("took the reservation"), std::string::npos) << r.message;
    run_schedule(*a->agent, clock, 3 * kInterval);
    EXPECT_EQ(a->agent->state(), AgentState::standby) << a->hooks->dump();
    EXPECT_EQ(a->hooks->fence_actions, 1);
}

TEST_F(AgentTest, RejoinWhenNotFencedChangesNothing) {
    holder_and_standby();
    const auto gen = t.generation;
    auto r = b->request(ControlOp::rejoin);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_FALSE(r.changed);
    EXPECT_NE(r.message.find("not fenced"), std::string::npos);
    EXPECT_EQ(t.generation, gen);
}

TEST_F(AgentTest, StatusSaysStateKeyHolderGenerationLastCheckAndTimeFenced) {
    holder_and_standby();
    run_schedule(*b->agent, clock, 2 * kInterval + 300);
    auto s = b->request(ControlOp::status);
    EXPECT_EQ(s.exit_code, 0);
    EXPECT_EQ(s.state, AgentState::standby);
    EXPECT_EQ(s.key, b->agent->key());
    EXPECT_EQ(s.node, 2);
    EXPECT_EQ(s.tag, kTag);
    EXPECT_EQ(s.holder, a->agent->key());
    EXPECT_FALSE(s.holder_self);
    EXPECT_EQ(s.generation, t.generation);
    EXPECT_EQ(s.registrants, 2);
    EXPECT_EQ(s.mode, ResvType::write_exclusive);
    EXPECT_EQ(s.resv_type, ResvType::write_exclusive);
    EXPECT_EQ(s.last_check_age_ms, 300u);
    EXPECT_EQ(s.checks, 2u);
    EXPECT_EQ(s.fenced_for_ms, kControlNever);
    EXPECT_EQ(s.volume, "vol-test");
    EXPECT_EQ(s.device, "/dev/sim");
    EXPECT_EQ(s.message, "STANDBY with " + format_key(b->agent->key()));
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    run_schedule(*a->agent, clock, kInterval);
    clock.advance(Clock::Ms(4321));
    auto f = a->request(ControlOp::status);
    EXPECT_EQ(f.state, AgentState::fenced);
    EXPECT_GE(f.fenced_for_ms, 4321u);
    EXPECT_FALSE(f.fence_reason.empty());
}

TEST_F(AgentTest, MutatingRequestsAreRefusedWhileStarting) {
    a = host(1);
    EXPECT_EQ(a->request(ControlOp::status).exit_code, 0);
    EXPECT_EQ(a->request(ControlOp::status).state, AgentState::starting);
    for (auto op : {ControlOp::takeover, ControlOp::handoff, ControlOp::rejoin})
        EXPECT_EQ(a->request(op).exit_code, static_cast<uint8_t>(ExitCode::failure));
    EXPECT_EQ(t.log.size(), 0u);
}

// ---- stop ---------------------------------------------------------------------------

TEST_F(AgentTest, CleanStopReleasesAndUnregisters) {
    holder_and_standby();
    ASSERT_TRUE(a->agent->stop().ok());
    EXPECT_EQ(a->agent->state(), AgentState::stopping);
    EXPECT_EQ(a->device_key(), 0u);
    EXPECT_EQ(t.type, ResvType::none);
    EXPECT_EQ(persisted(*a)->role, PersistedRole::none);
    EXPECT_EQ(persisted(*a)->node, 1) << "the node id stays persisted";
    Reservations resv(b->port, t.nsid);
    AcquireArgs acq;
    acq.crkey = b->agent->key();
    EXPECT_TRUE(resv.acquire(acq).ok()) << "the standby acquires without preempting";
    // The next start registers afresh.
    a->boot();
    a->start_ok();
    EXPECT_EQ(a->agent->state(), AgentState::standby);
}

TEST_F(AgentTest, CleanStopCanKeepTheRegistration) {
    a = host(1, StartRole::acquire);
    a->opts.keep_registration = true;
    a->boot();
    a->start_ok();
    const uint64_t k = a->agent->key();
    ASSERT_TRUE(a->agent->stop().ok());
    EXPECT_EQ(a->device_key(), k);
    EXPECT_FALSE(t.is_holder(a->id));
    EXPECT_EQ(persisted(*a)->role, PersistedRole::standby);
    a->opts.role = StartRole::standby;
    a->boot();
    const size_t grabs = a->grabs();
    a->start_ok();
    EXPECT_EQ(a->agent->state(), AgentState::standby);
    EXPECT_EQ(a->agent->key(), k);
    EXPECT_EQ(a->grabs(), grabs);
}

TEST_F(AgentTest, PtplSetsCptplOnTheRegister) {
    auto cptpl_of_registers = [&](HostId id) {
        std::vector<uint32_t> bits;
        for (const auto& s : t.log)
            if (s.host == id && s.cmd.opcode == opcode::kResvRegister) bits.push_back(s.cmd.cdw[0] >> 30);
        return bits;
    };
    a = host(1, StartRole::acquire);
    a->opts.ptpl = true;
    a->boot();
    a->start_ok();
    EXPECT_EQ(cptpl_of_registers(a->id), std::vector<uint32_t>{3u}) << "CPTPL 11b: persist through power loss";
    b = host(2, StartRole::standby);
    b->boot();
    b->start_ok();
    EXPECT_EQ(cptpl_of_registers(b->id), std::vector<uint32_t>{0u}) << "ptpl = false leaves PTPL as it is";
}

TEST_F(AgentTest, StopWhileFencedLeavesTheDeviceAlone) {
    holder_and_standby();
    ASSERT_EQ(b->request(ControlOp::takeover).exit_code, 0);
    run_schedule(*a->agent, clock, kInterval);
    const size_t n = t.log.size();
    ASSERT_TRUE(a->agent->stop().ok());
    for (size_t i = n; i < t.log.size(); ++i) EXPECT_NE(t.log[i].host, a->id);
    EXPECT_EQ(persisted(*a)->role, PersistedRole::fenced);
}

TEST_F(AgentTest, StopFailsLoudlyWhenTheReleaseFails) {
    holder_and_standby();
    t.fail = [&](const HostId& h, const Command& c) -> std::optional<std::error_code> {
        if (h == a->id && c.opcode == opcode::kResvRelease) return nvme_err(NvmeStatus::internal_error);
        return std::nullopt;
    };
    auto s = a->agent->stop();
    EXPECT_FALSE(s.ok());
    EXPECT_NE(a->agent->last_error().find("releasing the reservation failed"), std::string::npos);
    EXPECT_EQ(persisted(*a)->role, PersistedRole::holder);
}

// ---- invariants -----------------------------------------------------------------------

TEST(AgentDeathTest, InvalidOptionsAreABrokenInvariant) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    FakeTarget t;
    HostPort port(t, make_host(1));
    ManualClock clock;
    RecordingHooks hooks;
    AgentOptions o;
    o.node = 0;
    EXPECT_DEATH(Agent(port, 1, make_host(1), o, clock, hooks, nullptr, nullptr), "broken invariant");
    o.node = 1;
    o.interval_ms = 10;
    EXPECT_DEATH(Agent(port, 1, make_host(1), o, clock, hooks, nullptr, nullptr), "broken invariant");
    o.interval_ms = 1000;
    o.type = ResvType::exclusive_access;
    EXPECT_DEATH(Agent(port, 1, make_host(1), o, clock, hooks, nullptr, nullptr), "broken invariant");
}

// ---- persisted state ------------------------------------------------------------------

TEST(PersistedStateTest, RoundTrips) {
    PersistedState s;
    s.node = 4;
    s.tag = 9;
    s.role = PersistedRole::fenced;
    s.key = *make_key({9, 4, 77});
    s.fenced_unix_ms = 1700000000123;
    s.reason = "preempted: registration nf:9:4:77 was removed";
    auto p = parse_persisted_state(encode_persisted_state(s));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, s);
    PersistedState none;
    none.node = 2;
    auto q = parse_persisted_state(encode_persisted_state(none));
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(*q, none);
    // The boot that entered FENCED, and writers that did not stop.
    s.boot_id = "0f3c5a8e-2b7d-4c1e-9a6f-1d2e3f4a5b6c";
    s.action = FenceActionState::writers_running;
    const std::string text = encode_persisted_state(s);
    EXPECT_NE(text.find("\nboot_id=" + s.boot_id + "\n"), std::string::npos) << text;
    EXPECT_NE(text.find("\naction=writers_running\n"), std::string::npos) << text;
    auto r = parse_persisted_state(text);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, s);
}

// fence_nvfence's record of an unfencing says its boot; a record of an older
// fence_nvfence (its key alone) reads with an unknown boot.
TEST(PersistedStateTest, TheUnfencedRecordKeepsItsBoot) {
    TempDir d;
    AgentStateFile f(d.path(), "vol-test");
    EXPECT_EQ(f.unfenced_record().key, 0u) << "no record";
    ASSERT_TRUE(f.save_unfenced(key_of(1, 5), "b00t-1d").ok());
    EXPECT_EQ(f.unfenced_record().key, key_of(1, 5));
    EXPECT_EQ(f.unfenced_record().boot_id, "b00t-1d");
    ASSERT_TRUE(f.save_unfenced(key_of(1, 6), "").ok());
    EXPECT_EQ(f.unfenced_record().key, key_of(1, 6));
    EXPECT_EQ(f.unfenced_record().boot_id, "");
    for (const std::string& bad : {"key=" + format_key_hex(key_of(1, 7)) + "\nboot_id=a/b\n",
                                  "key=" + format_key_hex(key_of(1, 7)) + "\nboot=x\n", std::string("key=zz\n")}) {
        std::ofstream(f.unfenced_path()) << bad;
        EXPECT_EQ(f.unfenced_record().key, 0u) << bad;
    }
    const std::string id = current_boot_id();
    EXPECT_EQ(id.size(), 36u) << "this machine's boot id: '" << id << "'";
}

TEST(PersistedStateTest, SanitisesTheReason) {
    PersistedState s;
    s.node = 1;
    s.role = PersistedRole::fenced;
    s.reason = std::string("line\nbreak") + std::string(2000, 'x');
    auto p = parse_persisted_state(encode_persisted_state(s));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->reason.substr(0, 10), "line?break");
    EXPECT_EQ(p->reason.size(), 512u);
}

TEST(PersistedStateTest, RejectsAnythingOff) {
    const std::string good = encode_persisted_state([] {
        PersistedState s;
        s.node = 1;
        s.role = PersistedRole::holder;
        s.key = *make_key({0, 1, 5});
        return s;
    }());
    ASSERT_TRUE(parse_persisted_state(good).ok());
    auto replaced = [&](const std::string& from, const std::string& to) {
        std::string s = good;
        s.replace(s.find(from), from.size(), to);
        return s;
    };
    EXPECT_FALSE(parse_persisted_state("").ok());
    EXPECT_FALSE(parse_persisted_state(good.substr(0, good.size() - 1)).ok()) << "torn write";
    EXPECT_FALSE(parse_persisted_state(replaced("version=1", "version=2")).ok());
    EXPECT_FALSE(parse_persisted_state(replaced("role=holder", "role=boss")).ok());
    EXPECT_FALSE(parse_persisted_state(replaced("node=1", "node=256")).ok());
    EXPECT_FALSE(parse_persisted_state(replaced("node=1", "node=0")).ok()) << "holder without node";
    EXPECT_FALSE(parse_persisted_state(replaced("key=0x", "key=0y")).ok());
    EXPECT_FALSE(parse_persisted_state(replaced("key=" + format_key_hex(*make_key({0, 1, 5})), "key=0x0000000000000000")).ok())
        << "holder without key";
    EXPECT_FALSE(parse_persisted_state(good + "node=1\n").ok()) << "duplicate key";
    EXPECT_FALSE(parse_persisted_state(good + "extra=1\n").ok());
    EXPECT_FALSE(parse_persisted_state(replaced("tag=0\n", "")).ok()) << "missing key";
    EXPECT_FALSE(parse_persisted_state(good + "boot_id=abc\n").ok()) << "a boot outside FENCED";
    const std::string fenced = replaced("role=holder", "role=fenced");
    EXPECT_TRUE(parse_persisted_state(fenced + "boot_id=abc-1\n").ok());
    EXPECT_FALSE(parse_persisted_state(fenced + "boot_id=a/b\n").ok());
    EXPECT_FALSE(parse_persisted_state(fenced + "boot_id=\n").ok());
    EXPECT_FALSE(parse_persisted_state(fenced + "boot_id=a\nboot_id=a\n").ok()) << "duplicate boot";
    EXPECT_FALSE(parse_persisted_state(fenced + "action=rebooting\n").ok());
}

TEST(PersistedStateTest, FileIsWrittenAtomicallyWithPrivateMode) {
    TempDir d;
    AgentStateFile f(d.path() + "/state", "vol/../x");
    EXPECT_EQ(f.path(), d.path() + "/state/vol_.._x.agent");
    auto none = f.load();
    ASSERT_TRUE(none.ok());
    EXPECT_FALSE(none->has_value());
    PersistedState s;
    s.node = 3;
    ASSERT_TRUE(f.save(s).ok());
    struct stat st;
    ASSERT_EQ(::stat(f.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_FALSE(std::filesystem::exists(f.path() + ".tmp"));
    auto back = f.load();
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->value(), s);
}

// The agent saves only states its next start loads: a registered role without
// a key, or fence progress outside FENCED, would make the restart refuse the
// file (state_io), so saving one is a broken invariant.
TEST(PersistedStateDeathTest, SavingAStateTheNextStartWouldRefuseAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    TempDir d;
    AgentStateFile f(d.path(), "vol-test");
    PersistedState holder_without_key;
    holder_without_key.node = 3;
    holder_without_key.role = PersistedRole::holder;
    EXPECT_DEATH((void)f.save(holder_without_key), "broken invariant");
    PersistedState pending_standby;
    pending_standby.node = 3;
    pending_standby.role = PersistedRole::standby;
    pending_standby.key = key_of(3, 7);
    pending_standby.action = FenceActionState::pending;
    EXPECT_DEATH((void)f.save(pending_standby), "broken invariant");
    EXPECT_DEATH((void)f.save_unfenced(0, ""), "broken invariant");
}

// ---- events -------------------------------------------------------------------------

TEST(AgentEventTest, DescribesTheReportInOneLine) {
    ReservationStatus st;
    st.generation = 12;
    st.type = ResvType::write_exclusive;
    st.num_registrants = 2;
    st.registrants = {{1, false, *make_key({7, 1, 3}), make_host(1)}, {2, true, *make_key({7, 2, 5}), make_host(2)}};
    EXPECT_EQ(describe_report(st, make_host(1)),
              "gen 12, WE, holder nf:7:2:5, registrants [nf:7:1:3 (this host), nf:7:2:5 (holder)]");
    AgentEvent e;
    e.kind = AgentEventKind::state_changed;
    e.from = AgentState::holder;
    e.to = AgentState::fenced;
    e.text = "preempted";
    e.report = st;
    e.self = make_host(2);
    EXPECT_EQ(format_event(e), "HOLDER -> FENCED: preempted; report: gen 12, WE, holder nf:7:2:5 (this host), "
                               "registrants [nf:7:1:3, nf:7:2:5 (this host, holder)]");
    ReservationStatus empty;
    EXPECT_EQ(describe_report(empty, make_host(1)), "gen 0, not reserved, holder none, registrants []");
    e.kind = AgentEventKind::holder_changed;
    e.report.reset();
    EXPECT_EQ(format_event(e), "preempted");
}

TEST(AgentEventTest, TimedPassthruBoundsEveryCommand) {
    FakeTarget t;
    HostPort port(t, make_host(1));
    ManualClock clock;
    SlowPort slow(port, clock);
    slow.delay = Clock::Ms(40);
    TimedPassthru timed(slow, clock, 1234);
    Reservations resv(timed, t.nsid);
    ASSERT_TRUE(resv.report().ok());
    EXPECT_EQ(slow.timeouts.back(), 1234u);
    EXPECT_EQ(timed.slowest(), Clock::Ms(40));
    Command c = encode_report({t.nsid, true, 4096});
    c.timeout_ms = 99;
    std::vector<uint8_t> buf(4096);
    ASSERT_TRUE(timed.submit(c, buf).ok());
    EXPECT_EQ(slow.timeouts.back(), 99u) << "an explicit timeout is kept";
}

// ---- configuration ----------------------------------------------------------------------

TEST(AgentSettingsTest, DefaultsAndFullConfiguration) {
    std::string why;
    auto d = parse_agent_settings({{"device", "/dev/nvme1n1"}}, why);
    ASSERT_TRUE(d.ok()) << why;
    EXPECT_EQ(d->interval_ms, 1000u);
    EXPECT_EQ(d->type, ResvType::write_exclusive);
    EXPECT_EQ(d->role, StartRole::standby);
    EXPECT_FALSE(d->node);
    EXPECT_EQ(d->socket_mode, 0600u);
    EXPECT_EQ(d->state_dir, "/var/lib/nvfence");
    EXPECT_EQ(d->metrics_dir, "") << "no metrics file unless asked for";
    EXPECT_EQ(d->fence_action, FenceActionKind::none);
    EXPECT_FALSE(d->keep_registration);
    auto f = parse_agent_settings({{"device", "vol-0123456789abcdef0"},
                                   {"node_id", "3"},
                                   {"cluster_tag", "7"},
                                   {"mode", "shared"},
                                   {"role", "acquire"},
                                   {"interval_ms", "250"},
                                   {"device_timeout_ms", "2000"},
                                   {"fence_action", "stop-unit"},
                                   {"fence_unit", "postgresql@15-main.service"},
                                   {"fence_timeout_ms", "5000"},
                                   {"writer_units", "a.service, b.service a.service"},
                                   {"control_socket", "/run/x.sock"},
                                   {"socket_group", "nvfence"},
                                   {"state_dir", "/srv/state"},
                                   {"metrics_dir", "/var/lib/prometheus/node-exporter"},
                                   {"keep_registration", "yes"},
                                   {"ptpl", "on"},
                                   {"name", "db1"},
                                   {"log_level", "warn"}},
                                  why);
    ASSERT_TRUE(f.ok()) << why;
    EXPECT_EQ(*f->node, 3);
    EXPECT_EQ(f->tag, 7);
    EXPECT_EQ(f->type, ResvType::write_exclusive_reg_only);
    EXPECT_EQ(f->role, StartRole::acquire);
    EXPECT_EQ(f->interval_ms, 250u);
    EXPECT_EQ(f->fence_action, FenceActionKind::stop_unit);
    EXPECT_EQ(f->writer_units, (std::vector<std::string>{"a.service", "b.service"}));
    EXPECT_EQ(f->socket_mode, 0660u) << "a socket group opens the socket to the group";
    EXPECT_TRUE(f->keep_registration);
    EXPECT_EQ(f->log_level, "warning");
    EXPECT_EQ(f->metrics_dir, "/var/lib/prometheus/node-exporter");
    auto o = agent_options(*f, 3);
    EXPECT_EQ(o.node, 3);
    EXPECT_EQ(o.type, ResvType::write_exclusive_reg_only);
    EXPECT_EQ(o.interval_ms, 250u);
    EXPECT_TRUE(o.keep_registration);
    EXPECT_TRUE(o.ptpl);
    EXPECT_FALSE(agent_options(*d, 1).ptpl);
}

TEST(AgentSettingsTest, EveryInvalidValueNamesItsKey) {
    const SettingsMap base = {{"device", "/dev/nvme1n1"}};
    struct Case {
        std::string key, value, expect;
    };
    const std::vector<Case> cases = {
        {"node_id", "0", "node_id = \"0\": must be a whole number from 1 to 255"},
        {"node_id", "x", "node_id"},
        {"cluster_tag", "256", "cluster_tag = \"256\""},
        {"mode", "ea", "mode = \"ea\": must be exclusive"},
        {"role", "hold", "role = \"hold\""},
        {"interval_ms", "0", "interval_ms = \"0\": must be a whole number from 50 to 60000"},
        {"interval_ms", "-5", "interval_ms"},
        {"interval_ms", "60001", "interval_ms"},
        {"device_timeout_ms", "50", "device_timeout_ms"},
        {"fence_timeout_ms", "1000000", "fence_timeout_ms"},
        {"fence_action", "shoot", "fence_action = \"shoot\""},
        {"fence_command", "echo hi", "fence_command = \"echo hi\": is set but fence_action is not command"},
        {"fence_unit", "x.service", "fence_unit = \"x.service\": is set but fence_action is not stop-unit"},
        {"reboot_method", "kexec", "reboot_method"},
        {"writer_units", "ok.service rm -rf", "writer_units"},
        {"control_socket", "relative.sock", "control_socket = \"relative.sock\": must be an absolute path"},
        {"control_socket", "/" + std::string(120, 'a'), "control_socket"},
        {"socket_group", "bad group", "socket_group"},
        {"socket_mode", "0777", "socket_mode"},
        {"socket_mode", "0660", "socket_mode = \"0660\": 0660 needs socket_group"},
        {"state_dir", "var/lib", "state_dir"},
        {"metrics_dir", "prometheus", "metrics_dir = \"prometheus\": must be an absolute path"},
        {"keep_registration", "maybe", "keep_registration"},
        {"ptpl", "aptpl", "ptpl = \"aptpl\": must be true or false"},
        {"name", "../etc", "name"},
        {"log_level", "loud", "log_level = \"loud\": must be debug, info, warning or error"},
        {"reboot_method", "kexec", "reboot_method = \"kexec\": must be sysrq (immediate, no sync) or force (reboot -f)"},
        {"writer_units", "ok.service rm -rf", "writer_units = \"ok.service rm -rf\": \"rm\" is not a systemd unit name"},
        {"rejoin", "sometimes", "rejoin = \"sometimes\": must be auto or manual"},
        {"view_timeout_ms", "999", "view_timeout_ms = \"999\": must be a whole number from 1000 to 600000"},
        {"fence_on_view_loss", "2", "fence_on_view_loss = \"2\": must be true or false"},
        {"aen_wakeup", "yes please", "aen_wakeup = \"yes please\": must be true or false"},
        {"fence_unit", "", "fence_unit"},
        {"bogus", "1", "unknown key 'bogus'"},
        {"mode", "exclusive\n", "mode"},
    };
    for (const auto& c : cases) {
        SettingsMap kv = base;
        kv[c.key] = c.value;
        std::string why;
        auto r = parse_agent_settings(kv, why);
        EXPECT_FALSE(r.ok()) << c.key << "=" << c.value;
        EXPECT_EQ(r.error(), Errc::invalid_argument);
        EXPECT_NE(why.find(c.expect), std::string::npos) << c.key << ": " << why;
    }
    std::string why;
    EXPECT_FALSE(parse_agent_settings({}, why).ok());
    EXPECT_EQ(why.substr(0, 16), "device: required");
    EXPECT_FALSE(parse_agent_settings({{"device", "/d"}, {"fence_action", "command"}}, why).ok());
    EXPECT_EQ(why, "fence_command: required when fence_action = command");
    EXPECT_FALSE(parse_agent_settings({{"device", "/d"}, {"fence_action", "stop-unit"}}, why).ok());
    EXPECT_EQ(why, "fence_unit: required when fence_action = stop-unit");
    EXPECT_TRUE(parse_agent_settings({{"device", "/d"}, {"fence_action", "reboot"}, {"reboot_method", "force"}}, why).ok());
}

// Issue 27: role = watch, and the keys that contradict a check-only
// watcher (they only mean something for an agent that registers).
// nvfenced.conf(5): mode takes every spelling of the two Write Exclusive
// types that the CLI takes (the one parser), and refuses the other four.
TEST(AgentSettingsTest, ModeTakesEverySpellingOfItsTwoTypes) {
    std::string why;
    for (const auto& [text, type] : std::vector<std::pair<const char*, ResvType>>{
             {"WE", ResvType::write_exclusive},
             {"write_exclusive", ResvType::write_exclusive},
             {"WERO", ResvType::write_exclusive_reg_only},
             {"write-exclusive-registrants-only", ResvType::write_exclusive_reg_only},
             {"Shared", ResvType::write_exclusive_reg_only}}) {
        auto s = parse_agent_settings({{"device", "/dev/nvme1n1"}, {"mode", text}}, why);
        ASSERT_TRUE(s.ok()) << text << ": " << why;
        EXPECT_EQ(s->type, type) << text;
    }
    for (const char* text : {"ea", "EARO", "wear", "exclusive-access-all-regs", "3", ""}) {
        auto s = parse_agent_settings({{"device", "/dev/nvme1n1"}, {"mode", text}}, why);
        EXPECT_FALSE(s.ok()) << text;
        EXPECT_NE(why.find("must be exclusive"), std::string::npos) << text << ": " << why;
    }
}

TEST(AgentSettingsTest, RoleWatchAndTheKeysItRefuses) {
    std::string why;
    auto w = parse_agent_settings({{"device", "/d"}, {"role", "watch"}, {"fence_action", "reboot"}}, why);
    ASSERT_TRUE(w.ok()) << why;
    EXPECT_EQ(w->role, StartRole::watch);
    EXPECT_EQ(agent_options(*w, 1).role, StartRole::watch);
    // The harmless values of those keys are accepted.
    EXPECT_TRUE(parse_agent_settings({{"device", "/d"}, {"role", "watch"}, {"keep_registration", "false"},
                                      {"ptpl", "false"}, {"rejoin", "manual"}},
                                     why)
                    .ok())
        << why;
    const std::pair<const char*, const char*> refused[] = {
        {"keep_registration", "true"}, {"ptpl", "true"}, {"rejoin", "auto"}};
    for (const auto& [k, v] : refused) {
        auto r = parse_agent_settings({{"device", "/d"}, {"role", "watch"}, {k, v}}, why);
        EXPECT_FALSE(r.ok()) << k;
        EXPECT_EQ(r.error(), Errc::invalid_argument);
        EXPECT_EQ(why.rfind(std::string(k) + " = \"" + v + "\": a check-only watcher (role = watch) never registers", 0),
                  0u)
            << why;
    }
    EXPECT_FALSE(parse_agent_settings({{"device", "/d"}, {"role", "check"}}, why).ok());
    EXPECT_NE(why.find("or watch (check-only: never registers)"), std::string::npos) << why;
}

TEST(AgentSettingsTest, UnitAndGroupNames) {
    std::string why;
    auto unit_ok = [&](const std::string& u) {
        return parse_agent_settings({{"device", "/d"}, {"writer_units", u}}, why).ok();
    };
    EXPECT_TRUE(unit_ok("postgresql@15-main.service"));
    EXPECT_TRUE(unit_ok("dev-disk-by\\x2did.mount app.target"));
    EXPECT_FALSE(unit_ok(".service"));
    EXPECT_FALSE(unit_ok("noext"));
    EXPECT_FALSE(unit_ok("x.exe"));
    EXPECT_FALSE(unit_ok("a;b.service"));
    auto group_ok = [&](const std::string& g) {
        return parse_agent_settings({{"device", "/d"}, {"socket_group", g}}, why).ok();
    };
    EXPECT_TRUE(group_ok("nvfence"));
    EXPECT_TRUE(group_ok("_ops-team.1"));
    EXPECT_TRUE(group_ok("1000"));
    EXPECT_TRUE(group_ok("machine$"));
    EXPECT_FALSE(group_ok("1abc"));
    EXPECT_FALSE(group_ok("a$b"));
    EXPECT_FALSE(group_ok(std::string(40, 'g')));
}

TEST(AgentTransitionsTest, TheTableAllowsNoWayOutOfFencedButRejoinAndStop) {
    using S = AgentState;
    const S all[] = {S::starting, S::standby, S::holder, S::fenced, S::stopping};
    for (S to : all) EXPECT_FALSE(agent_transition_allowed(S::stopping, to)) << "STOPPING is final";
    for (S from : all) EXPECT_FALSE(agent_transition_allowed(from, S::starting)) << "nothing returns to STARTING";
    EXPECT_TRUE(agent_transition_allowed(S::fenced, S::standby));  // rejoin
    EXPECT_TRUE(agent_transition_allowed(S::fenced, S::stopping));
    EXPECT_TRUE(agent_transition_allowed(S::holder, S::fenced));
    // Not a way out: a check-only watcher whose node was unfenced and fenced
    // again between two checks runs its fence action again.
    EXPECT_TRUE(agent_transition_allowed(S::fenced, S::fenced));
    EXPECT_FALSE(agent_transition_allowed(S::stopping, S::holder));
}

TEST(AgentSettingsTest, KeysAreDocumentedOnce) {
    const auto& keys = agent_setting_keys();
    EXPECT_EQ(keys.size(), 28u);  // + hardware_watchdog, hardware_watchdog_timeout_s, metrics_dir
    std::set<std::string> unique(keys.begin(), keys.end());
    EXPECT_EQ(unique.size(), keys.size());
}

TEST(AgentSettingsTest, RejoinIsAutoOrManualAndUnsetLeavesItToTheDaemon) {
    std::string why;
    auto parse = [&](const std::string& v) {
        SettingsMap m{{"device", "/dev/nvme0n1"}};
        if (!v.empty()) m["rejoin"] = v;
        return parse_agent_settings(m, why);
    };
    auto unset = parse("");
    ASSERT_TRUE(unset) << unset.error().message();
    EXPECT_FALSE(unset->rejoin_auto.has_value());
    EXPECT_FALSE(agent_options(*unset, 1).rejoin_auto) << "manual unless the daemon says otherwise";
    auto a = parse("auto");
    ASSERT_TRUE(a);
    EXPECT_TRUE(agent_options(*a, 1).rejoin_auto);
    auto m = parse("manual");
    ASSERT_TRUE(m);
    EXPECT_FALSE(agent_options(*m, 1).rejoin_auto);
    EXPECT_FALSE(parse("yes"));
    EXPECT_NE(why.find("rejoin"), std::string::npos) << why;
    EXPECT_FALSE(parse("Auto"));
}

class SysfsTest : public ::testing::Test {
protected:
    void controller(const std::string& ctrl, const std::string& serial, const std::vector<std::string>& ns) {
        const std::string d = root.path() + "/class/nvme/" + ctrl;
        std::filesystem::create_directories(d);
        std::ofstream(d + "/serial") << serial << "        \n";
        for (const auto& n : ns) std::filesystem::create_directories(d + "/" + n);
    }
    TempDir root;
};

TEST_F(SysfsTest, EbsVolumeIdFindsItsNamespace) {
    controller("nvme0", "AWS1234567890", {"nvme0n1"});
    controller("nvme1", "vol0123456789abcdef0", {"nvme1n1"});
    std::string why;
    for (const std::string spec : {"vol-0123456789abcdef0", "vol0123456789abcdef0"}) {
        auto p = resolve_device_spec(spec, root.path(), why);
        ASSERT_TRUE(p.ok()) << why;
        EXPECT_EQ(*p, "/dev/nvme1n1");
    }
}

TEST_F(SysfsTest, MultipathControllersOfOneVolumeAreOneNamespace) {
    controller("nvme1", "vol0abc", {"nvme1c1n1"});
    controller("nvme2", "vol0abc", {"nvme1c2n1"});
    std::string why;
    auto p = resolve_device_spec("vol-0abc", root.path(), why);
    ASSERT_TRUE(p.ok()) << why;
    EXPECT_EQ(*p, "/dev/nvme1n1");
}

TEST_F(SysfsTest, AmbiguousMissingAndUnusableSpecsAreRefused) {
    controller("nvme1", "vol0abc", {"nvme1n1"});
    controller("nvme2", "vol0abc", {"nvme2n1"});
    controller("nvme3", "vol0def", {});
    std::string why;
    auto amb = resolve_device_spec("vol-0abc", root.path(), why);
    ASSERT_FALSE(amb.ok());
    EXPECT_NE(why.find("ambiguous"), std::string::npos) << why;
    EXPECT_NE(why.find("nvme1n1 nvme2n1"), std::string::npos) << why;
    auto none = resolve_device_spec("vol-0fff", root.path(), why);
    ASSERT_FALSE(none.ok());
    EXPECT_EQ(none.error(), Errc::not_found);
    EXPECT_NE(why.find("serial vol0fff"), std::string::npos) << why;
    auto empty = resolve_device_spec("vol-0def", root.path(), why);
    EXPECT_EQ(empty.error(), Errc::not_found);
    EXPECT_FALSE(resolve_device_spec("sda", root.path(), why).ok());
    EXPECT_EQ(*resolve_device_spec("/dev/disk/by-id/nvme-x", root.path(), why), "/dev/disk/by-id/nvme-x");
    EXPECT_EQ(*resolve_device_spec("nvme4n2", root.path(), why), "/dev/nvme4n2");
    EXPECT_FALSE(resolve_device_spec("nvme4c1n2", root.path(), why).ok()) << "a path device is not a namespace";
    EXPECT_FALSE(resolve_device_spec("nvme4n", root.path(), why).ok());
    // Other volume ids: the udev rules' /dev/nvfence/<id> link.
    std::filesystem::create_directories(root.path() + "/dev/nvfence");
    std::ofstream(root.path() + "/dev/nvfence/nguid-00ab") << "";
    EXPECT_EQ(*resolve_device_spec("nguid-00ab", root.path(), why, root.path() + "/dev"),
              root.path() + "/dev/nvfence/nguid-00ab");
    EXPECT_FALSE(resolve_device_spec("nguid-ffff", root.path(), why, root.path() + "/dev").ok());
    EXPECT_NE(why.find("/dev/nvfence/ link"), std::string::npos) << why;
}

TEST(AgentNamesTest, VolumeNameMatchesTheCliAndSocketDefault) {
    NamespaceInfo info;
    info.nsid = 2;
    info.ctrl.serial = "S 123";
    EXPECT_EQ(agent_volume_name(info), "S_123-n2");
    info.ns.eui64[7] = 0xab;
    EXPECT_EQ(agent_volume_name(info), "eui-00000000000000ab");
    info.volume = "vol-0abc";  // what Namespace::open found
    EXPECT_EQ(agent_volume_name(info), "vol-0abc");
    EXPECT_EQ(control_socket_path("vol-0abc"), "/run/nvfence/vol-0abc.sock");
    EXPECT_TRUE(valid_instance_name("vol-0abc"));
    EXPECT_FALSE(valid_instance_name("-x"));
    EXPECT_FALSE(valid_instance_name("a/b"));
    EXPECT_FALSE(valid_instance_name(""));
}

}  // namespace
}  // namespace nvfence::test
