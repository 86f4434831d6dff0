// SPDX-License-Identifier: MIT
// A namespace that nvfence shares with other key owners (docs/COEXISTENCE.md):
// fence_scsi-style keys (cluster-name hash and node id, as fence_scsi makes
// them for SCSI disks), LVM-style keys (lvmlockd's persistent reservations),
// unknown keys, and nvfence keys of another cluster tag. nvfence never
// removes any of them on its own: joining, acquiring, evicting a node and
// leaving leave them registered; only an operator names one (nvfence preempt
// --victim KEY --foreign).

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "fake_passthru.hpp"
#include "foreign.hpp"
#include "nvfence/epoch_store.hpp"
#include "nvfence/error.hpp"
#include "nvfence/fence.hpp"
#include "nvfence/key.hpp"

namespace nvfence {
namespace {

using test::FakeTarget;
using test::HostPort;
using test::make_host;
using test::TempDir;

constexpr uint8_t kTag = 7;
// fence_scsi: 4 hex digits of a hash of the cluster name, then the node id.
constexpr uint64_t kScsiKey = 0x7a3d0001;
// lvmlockd's persistent reservation key of host 1 (a value of its own scheme).
constexpr uint64_t kLvmKey = 0x1000000000000001;
// Anything else.
constexpr uint64_t kUnknownKey = 0xdeadbeefcafe0001;

uint64_t key(uint8_t tag, uint8_t node, uint32_t epoch) { return *make_key({tag, node, epoch}); }

struct Node {
    Node(FakeTarget& t, uint8_t n, const std::string& dir, FenceOptions o)
        : id(make_host(n)), port(t, id, n), resv(port, 1), store(dir, "vol"), fence(resv, id, o, &store) {}
    HostId id;
    HostPort port;
    Reservations resv;
    EpochStore store;
    Fence fence;
};

class CoexistenceTest : public ::testing::Test {
protected:
    TempDir tmp;
    FakeTarget target;
    const HostId scsi_host = make_host(31);
    const HostId lvm_host = make_host(32);
    const HostId unknown_host = make_host(33);
    const HostId other_tag_host = make_host(34);
    const uint64_t other_tag_key = key(8, 2, 5);  // another cluster, same node id 2

    void SetUp() override {
        target.add(scsi_host, kScsiKey);
        target.add(lvm_host, kLvmKey);
        target.add(unknown_host, kUnknownKey);
        target.add(other_tag_host, other_tag_key);
    }
    std::unique_ptr<Node> node(uint8_t n) {
        FenceOptions o;
        o.node = n;
        o.tag = kTag;
        return std::make_unique<Node>(target, n, tmp.path() + "/n" + std::to_string(n), o);
    }
    uint64_t key_of_host(const HostId& h) const {
        const auto* r = target.find(h);
        return r ? r->key : 0;
    }
    // The keys no nvfence command of tag kTag may remove.
    void expect_others_registered() const {
        for (uint64_t k : {kScsiKey, kLvmKey, kUnknownKey, other_tag_key})
            EXPECT_NE(target.find_key(k), nullptr) << std::hex << "key 0x" << k << " was removed";
    }
    void expect_others_registered_but(uint64_t gone) const {
        for (uint64_t k : {kScsiKey, kLvmKey, kUnknownKey, other_tag_key})
            if (k != gone) {
                EXPECT_NE(target.find_key(k), nullptr) << std::hex << "key 0x" << k << " was removed";
            }
    }
    // No reservation command named one of the other owners' keys.
    void expect_never_named() const {
        for (const auto& s : target.log) {
            if (s.cmd.queue != Queue::io || s.cmd.payload.size() < 16) continue;
            if (s.cmd.opcode != opcode::kResvAcquire) continue;
            const uint64_t prkey = test::get_le64(s.cmd.payload.data() + 8);
            for (uint64_t k : {kScsiKey, kLvmKey, kUnknownKey, other_tag_key})
                EXPECT_NE(prkey, k) << std::hex << "an Acquire named 0x" << k;
        }
    }
};

TEST_F(CoexistenceTest, OtherOwnersKeysAreForeignOrAnotherTag) {
    EXPECT_FALSE(decode_key(kScsiKey));
    EXPECT_FALSE(decode_key(kLvmKey));
    EXPECT_FALSE(decode_key(kUnknownKey));
    ASSERT_TRUE(decode_key(other_tag_key));
    EXPECT_EQ(decode_key(other_tag_key)->tag, 8);
}

TEST_F(CoexistenceTest, JoinAcquireReleaseAndLeaveNeverTouchThem) {
    auto a = node(1);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    EXPECT_TRUE(target.is_holder(a->id));
    ASSERT_TRUE(a->fence.release());
    ASSERT_TRUE(a->fence.leave());
    expect_others_registered();
    expect_never_named();
}

TEST_F(CoexistenceTest, AFreshEpochIsAboveOnlyThisTagsEpochs) {
    // Foreign keys are never decoded: their bits are not an epoch. The other
    // tag's epoch 5 does not raise this tag's epochs either.
    auto a = node(1);
    auto o = a->fence.join(std::nullopt, false);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_EQ(decode_key(o->key)->epoch, 1u);
}

TEST_F(CoexistenceTest, EvictingANodeRemovesOnlyThatNodesKeysOfThisTag) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    auto o = b->fence.evict_node(1);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_EQ(target.find(a->id), nullptr);
    // Node 2 of tag 8 is another cluster's node 2: evicting node 1 of tag 7
    // from node 2 leaves it, and node 2's own eviction would too.
    expect_others_registered();
    expect_never_named();
}

TEST_F(CoexistenceTest, EvictingANodeWithNoKeyOfThisTagSendsNothing) {
    auto a = node(1);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    const size_t sent = target.log.size();
    // Node 2 has a key only under tag 8 (another cluster): for tag 7 it has
    // none, so the eviction is a failed compare and this host keeps holding.
    auto o = a->fence.evict_node(2, EvictAbsent::compare);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_FALSE(o->changed);
    EXPECT_TRUE(o->removed.empty());
    for (size_t i = sent; i < target.log.size(); ++i)
        EXPECT_NE(target.log[i].cmd.opcode, opcode::kResvAcquire) << "only Reports";
    expect_others_registered();
    expect_never_named();
}

// The library's takeover preempts the holder it reads, whoever owns its
// key: the CLI refuses that for a foreign holder unless --foreign
// (foreign_preempt_refusal, below); fence_nvfence and evict_node never do it.
TEST_F(CoexistenceTest, TheLibrarysTakeoverPreemptsAForeignHolder) {
    target.hold(scsi_host, ResvType::write_exclusive_reg_only);
    auto a = node(1);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    auto o = a->fence.takeover(std::nullopt);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_TRUE(target.is_holder(a->id));
    EXPECT_EQ(target.find_key(kScsiKey), nullptr);
    EXPECT_EQ(o->removed, std::vector<uint64_t>{kScsiKey});
}

// A foreign key named as the victim while an nvfence host holds: the
// device removes that registrant (a preempt of a non-holder's key), the
// holder keeps the reservation, and the takeover says another host holds.
TEST_F(CoexistenceTest, AForeignNonHolderNamedAsVictimIsRemovedAndTheHolderKeeps) {
    auto a = node(1), b = node(2);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    auto o = b->fence.takeover(kLvmKey);
    ASSERT_FALSE(o);
    EXPECT_EQ(o.error(), make_error_code(Errc::held_by_other)) << o.error().message();
    EXPECT_TRUE(target.is_holder(a->id));
    EXPECT_EQ(target.find_key(kLvmKey), nullptr);
    EXPECT_NE(target.find_key(kScsiKey), nullptr);
    EXPECT_NE(target.find_key(kUnknownKey), nullptr);
}

// Migrating from fence_scsi (docs/COEXISTENCE.md): one host id holds one
// registration, so a node registered by fence_scsi cannot also register an
// nvfence key: joining is refused, naming the foreign key; joining with
// replace re-keys that same registration (no moment without a key), and a
// holder stays the holder with the new key.
TEST_F(CoexistenceTest, ANodeRegisteredByFenceScsiReKeysItsOwnRegistrationWithReplace) {
    target.hold(scsi_host, ResvType::write_exclusive_reg_only);
    auto s = node(31);  // the host fence_scsi registered (host id 31) as node 31
    ASSERT_EQ(s->id, scsi_host);
    auto refused = s->fence.join(std::nullopt, false);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error(), make_error_code(Errc::host_id_conflict)) << refused.error().message();
    EXPECT_EQ(key_of_host(scsi_host), kScsiKey) << "nothing changed";
    auto o = s->fence.join(std::nullopt, true);
    ASSERT_TRUE(o) << o.error().message();
    ASSERT_TRUE(decode_key(key_of_host(scsi_host)));
    EXPECT_EQ(decode_key(key_of_host(scsi_host))->node, 31);
    EXPECT_EQ(target.find_key(kScsiKey), nullptr);
    EXPECT_TRUE(target.is_holder(scsi_host)) << "the holder keeps the reservation under its new key";
    EXPECT_EQ(target.type, ResvType::write_exclusive_reg_only);
    expect_others_registered_but(kScsiKey);
}

// The migration's last step (docs/COEXISTENCE.md): the nvfence holder
// names each leftover foreign key; the device removes it and the holder
// keeps the reservation (re-keyed to a fresh epoch); nothing else changes.
TEST_F(CoexistenceTest, TheHolderRemovesALeftoverForeignKeyAndKeepsTheReservation) {
    auto a = node(1);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    ASSERT_TRUE(a->fence.acquire());
    const uint64_t ka = key_of_host(a->id);
    auto o = a->fence.takeover(kScsiKey);
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_EQ(o->removed, std::vector<uint64_t>{kScsiKey});
    EXPECT_TRUE(target.is_holder(a->id));
    // A takeover always ends with a fresh epoch (safety rule 4): the holder
    // is re-keyed, same node, higher epoch.
    ASSERT_TRUE(decode_key(key_of_host(a->id)));
    EXPECT_EQ(decode_key(key_of_host(a->id))->node, 1);
    EXPECT_GT(decode_key(key_of_host(a->id))->epoch, decode_key(ka)->epoch);
    expect_others_registered_but(kScsiKey);
}

// ---- nvfence preempt --foreign (tools/nvfence/foreign.hpp)

TEST_F(CoexistenceTest, PreemptRefusesAForeignVictimWithoutForeign) {
    for (uint64_t k : {kScsiKey, kLvmKey, kUnknownKey}) {
        const auto why = cli::foreign_refusal(k, nullptr, false);
        EXPECT_NE(why.find(format_key_hex(k) + " is a foreign key"), std::string::npos) << why;
        EXPECT_NE(why.find("--foreign"), std::string::npos) << why;
        EXPECT_EQ(cli::foreign_refusal(k, nullptr, true), "");
        EXPECT_EQ(cli::foreign_victim(k, nullptr, true), k);
    }
    // nvfence keys, of this tag or another, need no flag.
    EXPECT_EQ(cli::foreign_refusal(other_tag_key, nullptr, false), "");
    EXPECT_EQ(cli::foreign_refusal(key(kTag, 2, 3), nullptr, false), "");
}

TEST_F(CoexistenceTest, PreemptRefusesAForeignHolderWithoutForeignAndNamesItWithForeign) {
    target.hold(lvm_host, ResvType::write_exclusive);
    auto a = node(1);
    auto st = a->fence.verify();
    ASSERT_TRUE(st) << st.error().message();
    const auto why = cli::foreign_refusal(std::nullopt, &*st, false);
    EXPECT_NE(why.find("held by the foreign key " + format_key_hex(kLvmKey)), std::string::npos) << why;
    EXPECT_NE(why.find("--victim " + format_key_hex(kLvmKey) + " --foreign"), std::string::npos) << why;
    // With --foreign the preempt names exactly the key read: a compare.
    EXPECT_EQ(cli::foreign_refusal(std::nullopt, &*st, true), "");
    EXPECT_EQ(cli::foreign_victim(std::nullopt, &*st, true), kLvmKey);
    ASSERT_TRUE(a->fence.join(std::nullopt, false));
    auto o = a->fence.takeover(cli::foreign_victim(std::nullopt, &*st, true));
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_EQ(target.find_key(kLvmKey), nullptr);
    EXPECT_TRUE(target.is_holder(a->id));
    expect_others_registered_but(kLvmKey);
}

TEST_F(CoexistenceTest, AForeignHolderWithKeyZeroIsNotToldToNameItWithVictim) {
    // nvmet registers NRKEY 0 and lets it hold; the CLI refuses "--victim 0"
    // as not a key, so the hint must offer the bare --foreign instead (the
    // lab's key-zero test met a hint that could not be followed).
    const HostId zero_host = make_host(35);
    target.add(zero_host, 0);
    target.hold(zero_host, ResvType::write_exclusive);
    auto a = node(1);
    auto st = a->fence.verify();
    ASSERT_TRUE(st) << st.error().message();
    const auto why = cli::foreign_refusal(std::nullopt, &*st, false);
    EXPECT_NE(why.find("held by the foreign key 0x0000000000000000"), std::string::npos) << why;
    EXPECT_NE(why.find("add --foreign"), std::string::npos) << why;
    EXPECT_EQ(why.find("--victim"), std::string::npos) << why;
    EXPECT_EQ(cli::foreign_victim(std::nullopt, &*st, true), 0u);
}

TEST_F(CoexistenceTest, PreemptOfAnNvfenceHolderOrAFreeNamespaceNeedsNoFlag) {
    auto b = node(2);
    auto st = b->fence.verify();
    ASSERT_TRUE(st);
    EXPECT_EQ(cli::foreign_refusal(std::nullopt, &*st, false), "") << "nobody holds";
    EXPECT_EQ(cli::foreign_victim(std::nullopt, &*st, true), std::nullopt);
    ASSERT_TRUE(b->fence.join(std::nullopt, false));
    ASSERT_TRUE(b->fence.acquire());
    st = b->fence.verify();
    ASSERT_TRUE(st);
    EXPECT_EQ(cli::foreign_refusal(std::nullopt, &*st, false), "") << "an nvfence key holds";
    EXPECT_EQ(cli::foreign_victim(std::nullopt, &*st, true), std::nullopt) << "the library's default stays";
}

TEST_F(CoexistenceTest, ForeignEvictionLogLineNamesKeyDeviceAndUser) {
    EXPECT_EQ(cli::foreign_eviction_line("/dev/nvme1n1", kScsiKey, 0, true),
              "preempt --foreign: removed the foreign key 0x000000007a3d0001 from /dev/nvme1n1 (uid 0)");
    EXPECT_EQ(cli::foreign_eviction_line("/dev/nvme1n1", kScsiKey, 1000, false),
              "preempt --foreign: tried to remove the foreign key 0x000000007a3d0001 from /dev/nvme1n1 (uid 1000)");
}

}  // namespace
}  // namespace nvfence
