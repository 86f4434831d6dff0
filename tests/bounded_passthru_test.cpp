// SPDX-License-Identifier: MIT
// Unit tests of BoundedPassthru, the agent's device passthru that never
// keeps its caller waiting past a command's timeout: Linux ends a timed
// out command up to a second or more late (the block layer rounds the
// timer up to the next second, NVMe/TCP recovers the queue first), and
// the agent's lease step-down runs on the thread that waits. The inner
// passthru here is a fake that blocks on a gate (real threads): the
// caller gets Errc::timeout at the timeout while the fake still blocks,
// nothing is written into the caller's buffer after that, commands fail
// at once until the abandoned one returned, and destruction neither
// hangs nor frees what the worker still uses (the ASan build checks it).

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/bounded_passthru.hpp"
#include "agent/following_device.hpp"
#include "internal/clock.hpp"
#include "nvfence/error.hpp"

namespace nvfence::test {
namespace {

using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A device whose commands block until open() (or 10 s, so that no test can
// hang), then fill a device-to-host buffer with 0xab and return 7.
class GatedPassthru final : public Passthru {
public:
    Result<uint32_t> submit(const Command& cmd, std::span<uint8_t> data) override {
        std::unique_lock lk(m_);
        ++calls_;
        inside_ = true;
        cv_.notify_all();
        cv_.wait_for(lk, std::chrono::seconds(10), [&] { return open_; });
        if (!cmd.host_to_device) std::fill(data.begin(), data.end(), uint8_t{0xab});
        inside_ = false;
        ++returned_;
        cv_.notify_all();
        return uint32_t{7};
    }
    void open() {
        std::lock_guard lk(m_);
        open_ = true;
        cv_.notify_all();
    }
    // Waits (bounded) until @p n commands returned.
    bool wait_returned(int n) {
        std::unique_lock lk(m_);
        return cv_.wait_for(lk, std::chrono::seconds(10), [&] { return returned_ >= n; });
    }
    bool inside() {
        std::lock_guard lk(m_);
        return inside_;
    }
    int calls() {
        std::lock_guard lk(m_);
        return calls_;
    }

private:
    std::mutex m_;
    std::condition_variable cv_;
    bool open_ = false;
    bool inside_ = false;
    int calls_ = 0;
    int returned_ = 0;
};

Command read_cmd(uint32_t timeout_ms) {
    Command c;
    c.queue = Queue::admin;
    c.opcode = 0x0e;
    c.data_len = 64;
    c.timeout_ms = timeout_ms;
    return c;
}

int64_t ms_since(Steady::time_point t0) {
    return std::chrono::duration_cast<milliseconds>(Steady::now() - t0).count();
}

// Abandons one command of @p dev on @p gated (timeout 100 ms), checking
// that the caller got Errc::timeout at its timeout while the fake blocks.
void abandon_one(BoundedPassthru& dev, GatedPassthru& gated, std::vector<uint8_t>& buf) {
    const auto t0 = Steady::now();
    auto r = dev.submit(read_cmd(100), buf);
    const int64_t took = ms_since(t0);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error(), make_error_code(Errc::timeout));
    EXPECT_GE(took, 100);
    EXPECT_LT(took, 1000) << "the caller waits for the timeout, not for the device";
    EXPECT_TRUE(gated.inside()) << "the command is still in the (fake) kernel";
    EXPECT_TRUE(dev.busy());
}

// A decorator over a gated fake, its notes collected.
class BoundedPassthruTest : public ::testing::Test {
protected:
    std::shared_ptr<GatedPassthru> gated = std::make_shared<GatedPassthru>();
    std::vector<std::string> notes;
    BoundedPassthru dev{gated, 30000, [this](const std::string& l) { notes.push_back(l); }};
    std::vector<uint8_t> buf = std::vector<uint8_t>(64, 0);
};

TEST_F(BoundedPassthruTest, ACommandThatReturnsInTimeIsPassedThroughWithItsData) {
    gated->open();
    auto r = dev.submit(read_cmd(5000), buf);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, 7u);
    EXPECT_EQ(buf, std::vector<uint8_t>(64, 0xab)) << "data copied back";
    EXPECT_EQ(dev.abandoned(), 0u);
    EXPECT_FALSE(dev.busy());
}

TEST_F(BoundedPassthruTest, ReturnsTimeoutAtTheTimeoutWhileTheDeviceStillHasTheCommand) {
    abandon_one(dev, *gated, buf);
    EXPECT_EQ(dev.abandoned(), 1u);
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_NE(notes[0].find("did not return within its 100 ms"), std::string::npos) << notes[0];
    gated->open();
    ASSERT_TRUE(gated->wait_returned(1));
    EXPECT_EQ(buf, std::vector<uint8_t>(64, 0)) << "the late command wrote into the worker's copy, not here";
}

TEST_F(BoundedPassthruTest, ACommandWhileOneIsAbandonedFailsAtOnceUntilItReturned) {
    abandon_one(dev, *gated, buf);
    for (int i = 0; i < 3; ++i) {
        const auto t0 = Steady::now();
        auto r = dev.submit(read_cmd(5000), buf);
        EXPECT_LT(ms_since(t0), 50) << "refused at once, not sent";
        ASSERT_FALSE(r.ok());
        EXPECT_EQ(r.error(), make_error_code(Errc::timeout));
    }
    EXPECT_EQ(gated->calls(), 1) << "nothing sent while the earlier command is in the kernel";
    ASSERT_EQ(notes.size(), 2u) << "one note for the refusals";
    EXPECT_NE(notes[1].find("an earlier command has not returned from the device"), std::string::npos);
    gated->open();
    ASSERT_TRUE(gated->wait_returned(1));
    const auto t0 = Steady::now();
    while (dev.busy() && ms_since(t0) < 5000) std::this_thread::sleep_for(milliseconds(1));
    auto r = dev.submit(read_cmd(5000), buf);
    ASSERT_TRUE(r.ok()) << "the device is usable again once the abandoned command returned";
    EXPECT_EQ(buf, std::vector<uint8_t>(64, 0xab));
    EXPECT_EQ(gated->calls(), 2);
}

TEST_F(BoundedPassthruTest, DestructionWhileTheWorkerIsInsideACommandNeitherHangsNorFreesItsMemory) {
    {
        auto own = std::make_unique<BoundedPassthru>(gated);
        abandon_one(*own, *gated, buf);
        const auto t0 = Steady::now();
        own.reset();
        EXPECT_LT(ms_since(t0), 500) << "destruction does not wait for the device";
    }
    // The detached worker returns now and writes into its own copy: under
    // AddressSanitizer a buffer freed with the decorator would be caught.
    gated->open();
    ASSERT_TRUE(gated->wait_returned(1));
}

TEST_F(BoundedPassthruTest, DestructionOfAnIdleWorkerJoinsIt) {
    auto idle = std::make_shared<GatedPassthru>();
    idle->open();
    const auto t0 = Steady::now();
    {
        BoundedPassthru own(idle);
        ASSERT_TRUE(own.submit(read_cmd(5000), buf).ok());
    }
    EXPECT_LT(ms_since(t0), 1000);
    EXPECT_EQ(idle.use_count(), 1) << "the joined worker let go of the device";
}

// nvfenced's device (FollowingDevice) runs its commands so: a namespace
// whose command the kernel has not ended by its timeout does not hold the
// agent's thread.
class StuckNamespace final : public FollowedNamespace {
public:
    explicit StuckNamespace(std::shared_ptr<GatedPassthru> p) : p_(std::move(p)) { info_.volume = "vol-a"; }
    Passthru& passthru() override { return *p_; }
    const NamespaceInfo& info() const override { return info_; }
    bool gone() const override { return false; }

private:
    std::shared_ptr<GatedPassthru> p_;
    NamespaceInfo info_;
};

class NoNamespaces final : public NamespaceOpener {
public:
    std::vector<std::string> list() override { return {}; }
    Result<std::unique_ptr<FollowedNamespace>> open(const std::string&) override {
        return make_error_code(Errc::not_found);
    }
};

TEST_F(BoundedPassthruTest, TheAgentsDeviceGivesUpACommandAtItsTimeout) {
    NoNamespaces opener;
    ManualClock clock;
    std::vector<std::string> lines;
    {
        FollowingDevice following(std::make_unique<StuckNamespace>(gated), opener, clock, 1000,
                                  [&](bool, const std::string& l) { lines.push_back(l); });
        const auto t0 = Steady::now();
        auto r = following.submit(read_cmd(100), buf);
        EXPECT_LT(ms_since(t0), 1000) << "the agent's thread waited for the device past the timeout";
        ASSERT_FALSE(r.ok());
        EXPECT_EQ(r.error(), make_error_code(Errc::timeout));
        EXPECT_TRUE(gated->inside());
        ASSERT_FALSE(lines.empty());
        EXPECT_NE(lines.back().find("given up"), std::string::npos) << lines.back();
    }
    gated->open();
    ASSERT_TRUE(gated->wait_returned(1));
}

}  // namespace
}  // namespace nvfence::test
