// SPDX-License-Identifier: MIT
// Unit tests of FollowingDevice: when a command fails without an answer
// from the device and the opened namespace is gone, the agent's device
// switches to the same volume (volume name, nsid, host id) under whatever
// name it came back as; nothing else triggers a search, searches are rate
// limited, and a missing volume is reported once. The namespaces are
// fakes over FakeTarget (nvmet's behaviour) behind the NamespaceOpener seam.

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fake_passthru.hpp"
#include "agent/following_device.hpp"
#include "nvfence/reservation.hpp"

namespace nvfence::test {
namespace {

// A namespace on a FakeTarget; `dead` makes it the deleted instance (every
// command fails with ENODEV and gone() is true).
class FakeNamespace final : public FollowedNamespace {
public:
    FakeNamespace(FakeTarget& t, NamespaceInfo info, bool& dead)
        : port_(t, info.host_id.value_or(make_host(1))), info_(std::move(info)), dead_(dead) {}
    Passthru& passthru() override { return dead_ ? static_cast<Passthru&>(gone_) : port_; }
    const NamespaceInfo& info() const override { return info_; }
    bool gone() const override { return dead_; }

private:
    class Gone final : public Passthru {
    public:
        Result<uint32_t> submit(const Command&, std::span<uint8_t>) override { return errno_error(ENODEV); }
    };
    HostPort port_;
    Gone gone_;
    NamespaceInfo info_;
    bool& dead_;
};

NamespaceInfo info(const std::string& name, const std::string& volume, uint32_t nsid, uint8_t host) {
    NamespaceInfo i;
    i.paths.name = name;
    i.paths.block = "/dev/" + name;
    i.nsid = nsid;
    i.volume = volume;
    i.host_id = make_host(host);
    return i;
}

class FakeOpener final : public NamespaceOpener {
public:
    FakeOpener(FakeTarget& t) : t_(t) {}
    std::map<std::string, NamespaceInfo> present;  // name -> what opening it finds
    std::vector<std::string> extra;                // listed, not openable
    std::vector<std::string> opened;
    int lists = 0;
    bool never_dead = false;
    std::vector<std::string> list() override {
        ++lists;
        std::vector<std::string> n = extra;
        for (const auto& [k, v] : present) n.push_back(k);
        return n;
    }
    Result<std::unique_ptr<FollowedNamespace>> open(const std::string& name) override {
        opened.push_back(name);
        auto it = present.find(name);
        if (it == present.end()) return make_error_code(Errc::not_found);
        return std::unique_ptr<FollowedNamespace>(std::make_unique<FakeNamespace>(t_, it->second, never_dead));
    }

private:
    FakeTarget& t_;
};

class FollowingDeviceTest : public ::testing::Test {
protected:
    FollowingDeviceTest() : opener(t) {
        dev = std::make_unique<FollowingDevice>(
            std::make_unique<FakeNamespace>(t, info("nvme0n1", "vol-a", 1, 1), dead), opener, clock, 1000,
            [this](bool warning, const std::string& l) { lines.emplace_back(warning, l); });
    }
    Result<ReservationStatus> report() {
        Reservations r(*dev, t.nsid);
        return r.report();
    }

    FakeTarget t;
    ManualClock clock;
    FakeOpener opener;
    bool dead = false;
    std::unique_ptr<FollowingDevice> dev;
    std::vector<std::pair<bool, std::string>> lines;
};

TEST_F(FollowingDeviceTest, SwitchesToTheSameVolumeUnderItsNewName) {
    ASSERT_TRUE(report().ok());
    dead = true;
    opener.present["nvme1n1"] = info("nvme1n1", "vol-b", 1, 1);   // another volume
    opener.present["nvme1n2"] = info("nvme1n2", "vol-a", 2, 1);   // another nsid
    opener.present["nvme2n1"] = info("nvme2n1", "vol-a", 1, 9);   // another host id
    opener.present["nvme3n1"] = info("nvme3n1", "vol-a", 1, 1);   // this one
    opener.extra = {"nvme3n1p1", "nvme3c0n1", "sda", "loop0"};    // not namespace nodes
    auto r = report();
    ASSERT_FALSE(r.ok()) << "the failed command is not retried";
    EXPECT_EQ(r.error(), std::errc::no_such_device);
    EXPECT_EQ(dev->switches(), 1u);
    EXPECT_EQ(dev->info().paths.block, "/dev/nvme3n1");
    EXPECT_EQ(opener.opened, (std::vector<std::string>{"nvme1n1", "nvme1n2", "nvme2n1", "nvme3n1"}))
        << "only nvmeXnY nodes are opened, in order, until the volume is found";
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0], std::make_pair(false, std::string("namespace /dev/nvme0n1 disappeared; volume vol-a is "
                                                          "back as /dev/nvme3n1: using it from now on")));
    EXPECT_TRUE(report().ok()) << "the next command goes to the new namespace";
    EXPECT_FALSE(dev->instance_gone());
}

TEST_F(FollowingDeviceTest, AnAnswerFromTheDeviceIsNoReasonToSearch) {
    t.fail = [](const HostId&, const Command&) -> std::optional<std::error_code> {
        return nvme_err(NvmeStatus::reservation_conflict);
    };
    dead = false;
    EXPECT_FALSE(report().ok());
    EXPECT_EQ(opener.lists, 0);
    // A path-related status (SCT 3) is no answer from the namespace: look.
    t.fail = [](const HostId&, const Command&) -> std::optional<std::error_code> {
        return make_nvme_error(0x370);
    };
    EXPECT_FALSE(report().ok());
    EXPECT_EQ(opener.lists, 0) << "the namespace is not gone: nothing to search";
    t.fail = nullptr;
    EXPECT_TRUE(report().ok());
    EXPECT_EQ(dev->switches(), 0u);
}

TEST_F(FollowingDeviceTest, SearchesAreRateLimitedAndAMissingVolumeIsReportedOnce) {
    dead = true;
    EXPECT_FALSE(report().ok());
    EXPECT_EQ(opener.lists, 1);
    EXPECT_FALSE(report().ok());
    EXPECT_EQ(opener.lists, 1) << "at most one search per interval";
    clock.advance(std::chrono::milliseconds(999));
    EXPECT_FALSE(report().ok());
    EXPECT_EQ(opener.lists, 1);
    clock.advance(std::chrono::milliseconds(1));
    EXPECT_FALSE(report().ok());
    EXPECT_EQ(opener.lists, 2);
    ASSERT_EQ(lines.size(), 1u) << "reported once";
    EXPECT_TRUE(lines[0].first);
    EXPECT_EQ(lines[0].second, "namespace /dev/nvme0n1 disappeared and volume vol-a (nsid 1) is not present; "
                               "looking for it again at most every 1000 ms");
    opener.present["nvme0n2"] = info("nvme0n2", "vol-a", 1, 1);
    clock.advance(std::chrono::milliseconds(1000));
    EXPECT_FALSE(report().ok());
    EXPECT_EQ(dev->switches(), 1u);
    EXPECT_TRUE(report().ok());
}

}  // namespace
}  // namespace nvfence::test
