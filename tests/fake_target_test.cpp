// SPDX-License-Identifier: MIT
// The device model's own behaviour where it was changed to match nvmet
// (docs/RELIABILITY.md "Device model vs nvmet"): each documented nvmet
// deviation from the specification behind its NvmetDeviations flag, the
// full status with DNR, and the namespace without reservation support.
// The lab test vm-test/tests/device/test_model_nvmet.py checks the same against nvmet.

#include <gtest/gtest.h>

#include "fake_passthru.hpp"

using namespace nvfence;
using namespace nvfence::test;

namespace {

const HostId kA = make_host(1), kB = make_host(2), kC = make_host(3);

struct Model {
    FakeTarget t;
    explicit Model(bool nvmet) { t.deviations = nvmet ? NvmetDeviations::all() : NvmetDeviations{}; }
    uint16_t reg(const HostId& h, unsigned act, uint64_t crkey, uint64_t nrkey, bool iekey = false,
                 unsigned cptpl = 0) {
        Command c = encode_register({.nsid = 1, .crkey = crkey, .nrkey = nrkey});
        c.cdw[0] = act | (iekey ? 8u : 0u) | (cptpl << 30);
        return run(h, c);
    }
    uint16_t acq(const HostId& h, unsigned act, uint8_t rtype, uint64_t crkey, uint64_t prkey = 0) {
        Command c = encode_acquire({.nsid = 1, .crkey = crkey, .prkey = prkey});
        c.cdw[0] = act | uint32_t{rtype} << 8;
        return run(h, c);
    }
    uint16_t rel(const HostId& h, unsigned act, uint8_t rtype, uint64_t crkey) {
        Command c = encode_release({.nsid = 1, .crkey = crkey});
        c.cdw[0] = act | uint32_t{rtype} << 8;
        return run(h, c);
    }
    uint16_t write(const HostId& h) { return run(h, encode_rw(true, 1, 0, 1, 512)); }
    uint16_t run(const HostId& h, const Command& c) {
        std::vector<uint8_t> buf(c.host_to_device ? 0 : c.data_len);
        if (c.opcode == opcode::kWrite) buf.assign(c.data_len, 0);
        auto r = t.submit(h, 0, c, buf);
        EXPECT_EQ(r.ok(), t.last_status == 0);
        return t.last_status;
    }
};

constexpr uint16_t kOk = 0, kConflict = 0x4083, kInvalidField = 0x4002, kInvalidOpcode = 0x4001;
constexpr uint16_t kMore = 0x2000;  // nvmet: the error is in the Error Information log
constexpr uint8_t kWE = 1, kEA = 2, kWEAR = 5;

TEST(FakeTargetStatus, ErrorsCarryDnrAndSuccessClearsIt) {
    Model m(false);
    EXPECT_EQ(m.acq(kA, 0, kWE, 1), kConflict);  // not registered
    EXPECT_EQ(m.reg(kA, 0, 0, 1), kOk);
    EXPECT_EQ(m.acq(kA, 0, kWE, 1), kOk);
    // A refused write and a refused Report size are logged: More is set.
    EXPECT_EQ(m.write(kB), kConflict | kMore);
    EXPECT_EQ(m.run(kA, encode_report({.nsid = 1, .extended = true, .len_bytes = 60})), kInvalidField | kMore);
    EXPECT_EQ(m.run(kA, encode_report({.nsid = 1, .extended = false, .len_bytes = 4096})), 0x6018);
    m.t.dnr = false;
    m.t.error_log_more = false;
    EXPECT_EQ(m.acq(kA, 0, kWE, 2), 0x0083);
    EXPECT_EQ(m.write(kB), 0x0083);
}

TEST(FakeTargetNvmet, ReplaceWithIekeyRegistersAnUnregisteredHost) {
    Model m(false);
    EXPECT_EQ(m.reg(kA, 2, 7, 0, true), kInvalidField);  // new key 0
    EXPECT_EQ(m.reg(kA, 2, 7, 5, false), kConflict);    // no IEKEY
    EXPECT_EQ(m.t.generation, 0u);
    EXPECT_EQ(m.reg(kA, 2, 7, 5, true), kOk);
    ASSERT_NE(m.t.find(kA), nullptr);
    EXPECT_EQ(m.t.find(kA)->key, 5u);
    EXPECT_EQ(m.t.generation, 1u);
}

TEST(FakeTargetNvmet, ZeroKeyIsAKeyLikeAnyOther) {
    for (bool nvmet : {false, true}) {
        Model m(nvmet);
        EXPECT_EQ(m.reg(kA, 0, 0, 0), kOk);            // register key 0
        EXPECT_EQ(m.reg(kB, 0, 0, 2), kOk);
        EXPECT_EQ(m.acq(kA, 0, kWE, 0), kOk);          // holder key 0
        EXPECT_EQ(m.acq(kB, 1, kWE, 2, 0), kOk);       // PRKEY 0 = the holder's key: takeover
        EXPECT_EQ(m.t.holder, kB);
        EXPECT_EQ(m.t.find(kA), nullptr);
        EXPECT_EQ(m.reg(kB, 2, 2, 0), kOk);            // replace with key 0
        EXPECT_EQ(m.t.find(kB)->key, 0u);
    }
}

TEST(FakeTargetNvmet, N1UndefinedActionIsInvalidOpcode) {
    for (bool nvmet : {false, true}) {
        Model m(nvmet);
        const uint16_t want = (nvmet ? kInvalidOpcode : kInvalidField) | kMore;
        EXPECT_EQ(m.reg(kA, 3, 0, 1), want);
        EXPECT_EQ(m.reg(kA, 0, 0, 1), kOk);
        EXPECT_EQ(m.acq(kA, 3, kWE, 1), want);
        EXPECT_EQ(m.acq(kA, 3, kWE, 9), kConflict);   // the key is checked first
        EXPECT_EQ(m.rel(kA, 2, kWE, 1), want);
        EXPECT_EQ(m.t.generation, 1u);
    }
}

TEST(FakeTargetNvmet, N2CptplIgnored) {
    for (bool nvmet : {false, true}) {
        Model m(nvmet);
        EXPECT_EQ(m.reg(kA, 0, 0, 1, false, 1), nvmet ? kOk : kInvalidField);
        EXPECT_EQ(m.reg(kA, 0, 0, 1, false, 3), kOk);
        EXPECT_EQ(m.t.ptpl, !nvmet);
    }
}

TEST(FakeTargetNvmet, N3AllRegistrantsHaveOneHolderForAcquireAndRelease) {
    for (bool nvmet : {false, true}) {
        Model m(nvmet);
        ASSERT_EQ(m.reg(kA, 0, 0, 1), kOk);
        ASSERT_EQ(m.reg(kB, 0, 0, 2), kOk);
        ASSERT_EQ(m.reg(kC, 0, 0, 3), kOk);
        ASSERT_EQ(m.acq(kA, 0, kWEAR, 1), kOk);
        EXPECT_TRUE(m.t.is_holder(kB));                      // access and RCSTS: every registrant
        EXPECT_EQ(m.write(kB), kOk);
        EXPECT_EQ(m.acq(kB, 0, kWEAR, 2), nvmet ? kConflict : kOk);
        EXPECT_EQ(m.rel(kB, 0, kWEAR, 2), kOk);
        EXPECT_EQ(m.t.type, nvmet ? ResvType::write_exclusive_all_regs : ResvType::none);
        if (!nvmet) continue;
        // The holder record passes to the first remaining registrant.
        EXPECT_EQ(m.reg(kA, 1, 1, 0), kOk);
        EXPECT_EQ(m.t.holder, kB);
        EXPECT_EQ(m.rel(kC, 0, kWEAR, 3), kOk);
        EXPECT_EQ(m.t.type, ResvType::write_exclusive_all_regs);
        EXPECT_EQ(m.rel(kB, 0, kWEAR, 2), kOk);
        EXPECT_EQ(m.t.type, ResvType::none);
    }
}

TEST(FakeTargetNvmet, N4ReleaseWithWrongTypeIsConflict) {
    for (bool nvmet : {false, true}) {
        Model m(nvmet);
        ASSERT_EQ(m.reg(kA, 0, 0, 1), kOk);
        ASSERT_EQ(m.acq(kA, 0, kWE, 1), kOk);
        EXPECT_EQ(m.rel(kA, 0, kEA, 1), nvmet ? kConflict : kInvalidField);
        EXPECT_EQ(m.t.type, ResvType::write_exclusive);
    }
}

TEST(FakeTargetNvmet, HolderPreemptFollowsTheSpecification) {
    // nvmet 7.3.4 (measured): a holder preempting with PRKEY 0 gets Invalid
    // Field; with another registrant's key it unregisters that registrant
    // and keeps its reservation and type; with a key nobody has it gets
    // Reservation Conflict; with its own key it changes the type.
    for (bool nvmet : {false, true}) {
        Model m(nvmet);
        ASSERT_EQ(m.reg(kA, 0, 0, 1), kOk);
        ASSERT_EQ(m.reg(kB, 0, 0, 2), kOk);
        ASSERT_EQ(m.acq(kA, 0, kWE, 1), kOk);
        const uint32_t gen = m.t.generation;
        EXPECT_EQ(m.acq(kA, 1, kEA, 1, 0), kInvalidField);
        EXPECT_EQ(m.acq(kA, 1, kEA, 1, 9), kConflict);
        EXPECT_EQ(m.acq(kA, 2, kEA, 1, 2), kOk);
        EXPECT_EQ(m.t.find(kB), nullptr);
        EXPECT_EQ(m.t.type, ResvType::write_exclusive);
        EXPECT_EQ(m.acq(kA, 1, kEA, 1, 1), kOk);
        EXPECT_EQ(m.t.type, ResvType::exclusive_access);
        EXPECT_EQ(m.t.holder, kA);
        EXPECT_EQ(m.t.generation, gen + 2);
    }
}

TEST(FakeTargetNvmet, N5HolderPreemptingItsOwnKeyKeepsOthersWithThatKey) {
    for (bool nvmet : {false, true}) {
        Model m(nvmet);
        ASSERT_EQ(m.reg(kA, 0, 0, 1), kOk);
        ASSERT_EQ(m.reg(kB, 0, 0, 1), kOk);   // shares A's key
        ASSERT_EQ(m.reg(kC, 0, 0, 3), kOk);
        ASSERT_EQ(m.acq(kA, 0, kWE, 1), kOk);
        EXPECT_EQ(m.acq(kA, 2, kWEAR, 1, 1), kOk);
        EXPECT_EQ(m.t.find(kB) != nullptr, nvmet);
        EXPECT_NE(m.t.find(kC), nullptr);
        EXPECT_EQ(m.t.type, ResvType::write_exclusive_all_regs);
        EXPECT_EQ(m.t.generation, 4u);
    }
}

TEST(FakeTargetNoReservations, EveryReservationCommandIsInvalidOpcode) {
    Model m(false);
    m.t.reservations_supported = false;
    EXPECT_EQ(m.reg(kA, 0, 0, 1), kInvalidOpcode);
    EXPECT_EQ(m.acq(kA, 0, kWE, 1), kInvalidOpcode);
    EXPECT_EQ(m.rel(kA, 1, kWE, 1), kInvalidOpcode);
    EXPECT_EQ(m.run(kA, encode_report({.nsid = 1, .extended = true, .len_bytes = 4096})), kInvalidOpcode);
    EXPECT_EQ(m.run(kA, encode_get_notification_mask(1)), kInvalidField);
    EXPECT_EQ(m.run(kA, encode_get_host_id()), kInvalidField);
    EXPECT_EQ(m.run(kA, encode_get_log_page(kLogReservationNotification, 0xffffffffu, 64, false)), kInvalidField);
    // I/O is not subject to any reservation, even one set up directly.
    m.t.add(kB, 2);
    m.t.hold(kB, ResvType::exclusive_access);
    EXPECT_EQ(m.write(kA), kOk);
    EXPECT_EQ(m.run(kA, encode_rw(false, 1, 0, 1, 512)), kOk);
}

}  // namespace
