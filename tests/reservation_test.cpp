// SPDX-License-Identifier: MIT
// Reservations (reservation.hpp) against the in-memory target model and a
// scripted passthru: what goes on the wire, and how Report reads are sized,
// retried and bounded.

#include <gtest/gtest.h>

#include "fake_passthru.hpp"
#include "nvfence/error.hpp"
#include "nvfence/key.hpp"
#include "nvfence/reservation.hpp"

namespace nvfence {
namespace {

using test::FakeTarget;
using test::HostPort;
using test::make_host;
using test::ScriptedPassthru;

constexpr uint32_t kNsid = 1;

class ReservationsTest : public ::testing::Test {
protected:
    FakeTarget target;
    HostId a = make_host(1), b = make_host(2);
    HostPort pa{target, a, 1}, pb{target, b, 2};
    Reservations ra{pa, kNsid}, rb{pb, kNsid};

    std::vector<Command> reports() const {
        std::vector<Command> out;
        for (const auto& s : target.log)
            if (s.cmd.opcode == opcode::kResvReport) out.push_back(s.cmd);
        return out;
    }
};

TEST_F(ReservationsTest, RegisterAcquireReleaseUnregisterRoundTrip) {
    ASSERT_TRUE(ra.reg({.nsid = 99, .action = RegisterAction::register_key, .cptpl = Cptpl::no_change,
                        .iekey = false, .crkey = 0, .nrkey = 0xaa}));
    // args.nsid is overwritten with the namespace's id.
    EXPECT_EQ(target.log.back().cmd.nsid, kNsid);
    ASSERT_TRUE(ra.acquire({.nsid = 0, .action = AcquireAction::acquire,
                            .type = ResvType::exclusive_access, .iekey = false, .crkey = 0xaa, .prkey = 0}));
    auto st = ra.report();
    ASSERT_TRUE(st) << st.error().message();
    EXPECT_EQ(st->type, ResvType::exclusive_access);
    ASSERT_EQ(st->registrants.size(), 1u);
    EXPECT_EQ(st->registrants[0].key, 0xaau);
    EXPECT_EQ(st->registrants[0].host_id, a);
    EXPECT_TRUE(st->registrants[0].holder);
    EXPECT_EQ(st->generation, 1u);

    ASSERT_TRUE(ra.release({.nsid = 0, .action = ReleaseAction::release,
                            .type = ResvType::exclusive_access, .iekey = false, .crkey = 0xaa}));
    EXPECT_EQ(target.type, ResvType::none);
    ASSERT_TRUE(ra.reg({.nsid = 0, .action = RegisterAction::unregister_key, .cptpl = Cptpl::no_change,
                        .iekey = false, .crkey = 0xaa, .nrkey = 0}));
    EXPECT_TRUE(target.regs.empty());
    EXPECT_EQ(target.generation, 2u);
}

TEST_F(ReservationsTest, DeviceStatusComesBackAsNvmeError) {
    ASSERT_TRUE(ra.reg({.nsid = 0, .action = RegisterAction::register_key, .cptpl = Cptpl::no_change,
                        .iekey = false, .crkey = 0, .nrkey = 1}));
    ASSERT_TRUE(rb.reg({.nsid = 0, .action = RegisterAction::register_key, .cptpl = Cptpl::no_change,
                        .iekey = false, .crkey = 0, .nrkey = 2}));
    ASSERT_TRUE(ra.acquire({.nsid = 0, .action = AcquireAction::acquire, .type = ResvType::write_exclusive,
                            .iekey = false, .crkey = 1, .prkey = 0}));
    auto s = rb.acquire({.nsid = 0, .action = AcquireAction::acquire, .type = ResvType::write_exclusive,
                         .iekey = false, .crkey = 2, .prkey = 0});
    ASSERT_FALSE(s);
    EXPECT_TRUE(is_nvme(s.error(), NvmeStatus::reservation_conflict));
    EXPECT_TRUE(is_fenced(s.error()));
    // Wrong current key.
    s = ra.release({.nsid = 0, .action = ReleaseAction::release, .type = ResvType::write_exclusive,
                    .iekey = false, .crkey = 7});
    EXPECT_TRUE(is_nvme(s.error(), NvmeStatus::reservation_conflict));
    // Preempt with preempt-and-abort: b takes over, a is gone and aborted.
    ASSERT_TRUE(rb.acquire({.nsid = 0, .action = AcquireAction::preempt_and_abort,
                            .type = ResvType::write_exclusive, .iekey = false, .crkey = 2, .prkey = 1}));
    EXPECT_EQ(target.holder, b);
    EXPECT_EQ(target.find(a), nullptr);
    ASSERT_EQ(target.aborted.size(), 1u);
    EXPECT_EQ(target.aborted[0], a);
}

TEST_F(ReservationsTest, CptplReachesTheDevice) {
    ASSERT_TRUE(ra.reg({.nsid = 0, .action = RegisterAction::register_key, .cptpl = Cptpl::set,
                        .iekey = false, .crkey = 0, .nrkey = 1}));
    auto st = ra.report();
    ASSERT_TRUE(st);
    EXPECT_TRUE(st->ptpl);
    ASSERT_TRUE(ra.reg({.nsid = 0, .action = RegisterAction::replace_key, .cptpl = Cptpl::clear,
                        .iekey = false, .crkey = 1, .nrkey = 2}));
    EXPECT_FALSE(ra.report()->ptpl);
}

TEST_F(ReservationsTest, ReportAsksForTheExtendedStructureIn4KiBFirst) {
    target.add(a, 0x11);
    auto st = ra.report();
    ASSERT_TRUE(st);
    EXPECT_TRUE(st->extended);
    EXPECT_EQ(st->registrants[0].host_id, a) << "all 128 bits of the host id";
    auto rs = reports();
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].cdw[1], 1u) << "EDS";
    EXPECT_EQ(rs[0].data_len, kReportInitialBytes);
    EXPECT_EQ(rs[0].cdw[0], kReportInitialBytes / 4 - 1);
    EXPECT_EQ(rs[0].nsid, kNsid);
    EXPECT_FALSE(ra.extended_refused());
}

TEST_F(ReservationsTest, FallsBackToPlainOnInvalidField) {
    target.extended_supported = false;
    target.plain_supported = true;
    target.add(a, 0x11);
    target.add(b, 0x22);
    auto st = ra.report();
    ASSERT_TRUE(st) << st.error().message();
    EXPECT_FALSE(st->extended);
    ASSERT_EQ(st->registrants.size(), 2u);
    // The plain structure carries 64-bit host ids: the first 8 bytes.
    HostId a64{};
    std::copy(a.begin(), a.begin() + 8, a64.begin());
    EXPECT_EQ(st->registrants[0].host_id, a64);
    EXPECT_EQ(st->registrants[1].key, 0x22u);
    EXPECT_TRUE(ra.extended_refused());
    auto rs = reports();
    ASSERT_EQ(rs.size(), 2u);
    EXPECT_EQ(rs[0].cdw[1], 1u);
    EXPECT_EQ(rs[1].cdw[1], 0u);
    // Decided per call: the next report asks for the extended one again.
    target.log.clear();
    ASSERT_TRUE(ra.report());
    rs = reports();
    ASSERT_EQ(rs.size(), 2u);
    EXPECT_EQ(rs[0].cdw[1], 1u);
}

// Issue 13, defect 4: one Invalid Field on the extended Report must not blind
// a reader on nvmet, which refuses the plain Report under 128-bit host ids.
TEST_F(ReservationsTest, OneRefusedExtendedReportIsNotLatched) {
    ASSERT_FALSE(target.plain_supported) << "the fake defaults to nvmet";
    target.add(a, 0x11);
    int refusals = 1;
    target.fail = [&](const HostId&, const Command& c) -> std::optional<std::error_code> {
        if (c.opcode == opcode::kResvReport && (c.cdw[1] & 1u) && refusals > 0) {
            --refusals;
            return test::nvme_err(NvmeStatus::invalid_field);
        }
        return std::nullopt;
    };
    auto st = ra.report();
    ASSERT_FALSE(st) << "this call's plain fallback is refused, as nvmet does";
    EXPECT_TRUE(is_nvme(st.error(), NvmeStatus::host_id_inconsistent_format));
    st = ra.report();
    ASSERT_TRUE(st) << st.error().message();
    EXPECT_TRUE(st->extended);
    EXPECT_FALSE(ra.extended_refused());
}

TEST_F(ReservationsTest, OtherErrorsDoNotFallBack) {
    target.fail = [](const HostId&, const Command& c) -> std::optional<std::error_code> {
        if (c.opcode == opcode::kResvReport) return test::nvme_err(NvmeStatus::host_id_inconsistent_format);
        return std::nullopt;
    };
    auto st = ra.report();
    ASSERT_FALSE(st);
    EXPECT_TRUE(is_nvme(st.error(), NvmeStatus::host_id_inconsistent_format));
    EXPECT_EQ(reports().size(), 1u);
    EXPECT_FALSE(ra.extended_refused());

    target.fail = [](const HostId&, const Command& c) -> std::optional<std::error_code> {
        if (c.opcode == opcode::kResvReport) return errno_error(EIO);
        return std::nullopt;
    };
    st = ra.report();
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error(), errno_error(EIO));
}

TEST_F(ReservationsTest, PlainAlsoRefusedIsAnError) {
    target.extended_supported = false;
    target.plain_supported = true;
    target.fail = [](const HostId&, const Command& c) -> std::optional<std::error_code> {
        if (c.opcode == opcode::kResvReport && c.cdw[1] == 0) return test::nvme_err(NvmeStatus::invalid_field);
        return std::nullopt;
    };
    auto st = ra.report();
    ASSERT_FALSE(st);
    EXPECT_TRUE(is_nvme(st.error(), NvmeStatus::invalid_field));
    EXPECT_EQ(reports().size(), 2u) << "one extended, one plain, no loop";
}

TEST_F(ReservationsTest, RereadsWithABufferSizedForEveryRegistrant) {
    // 70 registrants do not fit 4 KiB extended (63 do).
    for (uint8_t i = 0; i < 70; ++i) target.add(make_host(static_cast<uint8_t>(i + 10)), 0x100u + i);
    auto st = ra.report();
    ASSERT_TRUE(st);
    EXPECT_EQ(st->registrants.size(), 70u);
    EXPECT_FALSE(st->truncated());
    EXPECT_EQ(st->registrants[69].key, 0x100u + 69);
    auto rs = reports();
    ASSERT_EQ(rs.size(), 2u);
    EXPECT_EQ(rs[0].data_len, 4096u);
    EXPECT_EQ(rs[1].data_len, report_size_for(70, true));
    EXPECT_EQ(rs[1].cdw[0], report_size_for(70, true) / 4 - 1);
    EXPECT_EQ(rs[1].cdw[1], 1u);
}

TEST_F(ReservationsTest, SixtyThreeRegistrantsFitOneRead) {
    for (uint8_t i = 0; i < 63; ++i) target.add(make_host(static_cast<uint8_t>(i + 10)), 0x100u + i);
    auto st = ra.report();
    ASSERT_TRUE(st);
    EXPECT_EQ(st->registrants.size(), 63u);
    EXPECT_EQ(reports().size(), 1u);
}

TEST_F(ReservationsTest, PlainRereadIsSizedForThePlainForm) {
    target.extended_supported = false;
    target.plain_supported = true;
    for (uint8_t i = 0; i < 200; ++i) target.add(make_host(static_cast<uint8_t>(i + 10)), 0x100u + i);
    auto st = ra.report();
    ASSERT_TRUE(st);
    EXPECT_EQ(st->registrants.size(), 200u);
    auto rs = reports();
    ASSERT_EQ(rs.size(), 3u);
    EXPECT_EQ(rs[1].data_len, 4096u);
    EXPECT_EQ(rs[2].data_len, report_size_for(200, false));
    EXPECT_EQ(rs[2].cdw[1], 0u);
}

TEST_F(ReservationsTest, RereadsWhileItGrowsAndStopsWhenItFits) {
    for (uint8_t i = 0; i < 63; ++i) target.add(make_host(static_cast<uint8_t>(i + 10)), 0x100u + i);
    // Two more hosts register just before each of the first two reads.
    int reads = 0;
    target.fail = [&](const HostId&, const Command& c) -> std::optional<std::error_code> {
        if (c.opcode != opcode::kResvReport || reads >= 2) return std::nullopt;
        ++reads;
        for (int k = 0; k < 2; ++k)
            target.add(make_host(static_cast<uint8_t>(200 + 2 * reads + k)), 0x900u + target.regs.size());
        return std::nullopt;
    };
    auto st = ra.report();
    ASSERT_TRUE(st) << st.error().message();
    EXPECT_EQ(st->registrants.size(), 67u);
    EXPECT_FALSE(st->truncated());
    auto rs = reports();
    ASSERT_EQ(rs.size(), 3u);
    EXPECT_EQ(rs[1].data_len, report_size_for(65, true));
    EXPECT_EQ(rs[2].data_len, report_size_for(67, true));
}

TEST_F(ReservationsTest, RegctlAlwaysAboveTheBufferIsBoundedToMaxReads) {
    target.add(a, 1);
    // The device always claims one registrant more than the buffer holds.
    auto one_more = [](std::span<uint8_t> d, size_t header, size_t entry) {
        const size_t fit = (d.size() - header) / entry;
        test::put_le16(&d[5], static_cast<uint16_t>(std::min<size_t>(fit + 1, 65535)));
    };
    target.mangle_report = [&](std::span<uint8_t> d) { one_more(d, 64, 64); };
    auto st = ra.report();
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error(), Errc::malformed_data);
    auto rs = reports();
    ASSERT_EQ(rs.size(), static_cast<size_t>(kReportMaxReads));
    for (size_t i = 1; i < rs.size(); ++i)
        EXPECT_EQ(rs[i].data_len, rs[i - 1].data_len + 64) << "sized for what was claimed";

    // The same after falling back to the plain structure: the refused
    // extended read does not count against the bound.
    Reservations rb2{pb, kNsid};
    target.extended_supported = false;
    target.plain_supported = true;
    target.log.clear();
    target.mangle_report = [&](std::span<uint8_t> d) { one_more(d, 24, 24); };
    st = rb2.report();
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error(), Errc::malformed_data);
    EXPECT_EQ(reports().size(), static_cast<size_t>(kReportMaxReads) + 1);
}

TEST_F(ReservationsTest, LyingRegctlIsBoundedByTheBuffer) {
    target.add(a, 1);
    target.hold(a, ResvType::write_exclusive);
    // REGCTL claims 65535: one re-read sized for that (4 MiB), no more.
    target.mangle_report = [](std::span<uint8_t> d) { test::put_le16(&d[5], 65535); };
    auto st = ra.report();
    ASSERT_TRUE(st) << st.error().message();
    auto rs = reports();
    ASSERT_EQ(rs.size(), 2u);
    EXPECT_EQ(rs[1].data_len, report_size_for(65535, true));
    EXPECT_EQ(rs[1].data_len, 4u * 1024 * 1024);
    EXPECT_EQ(st->num_registrants, 65535);
    ASSERT_EQ(st->registrants.size(), 65535u);
    EXPECT_EQ(st->registrants[0].key, 1u);
    EXPECT_EQ(st->holder(), &st->registrants[0]);
    // The padding is no registrant of anyone's.
    EXPECT_EQ(st->registrants[1].key, 0u);
    EXPECT_TRUE(host_id_is_zero(st->registrants[1].host_id));
    EXPECT_EQ(st->find_host(b), nullptr);
}

TEST_F(ReservationsTest, MalformedReportIsAnError) {
    target.mangle_report = [](std::span<uint8_t> d) { d[4] = 9; };
    auto st = ra.report();
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error(), Errc::malformed_data);
}

TEST_F(ReservationsTest, NotificationLogAndMask) {
    // Reported by default.
    auto m = ra.notification_mask();
    ASSERT_TRUE(m);
    EXPECT_EQ(*m, (NotificationMask{true, true, true}));
    // a holds WERO, b registered; a releases: b is told.
    target.add(a, 1);
    target.add(b, 2);
    target.hold(a, ResvType::write_exclusive_reg_only);
    ASSERT_TRUE(ra.release({.nsid = 0, .action = ReleaseAction::release,
                            .type = ResvType::write_exclusive_reg_only, .iekey = false, .crkey = 1}));
    auto n = rb.notification_log();
    ASSERT_TRUE(n) << n.error().message();
    EXPECT_EQ(n->type, NotificationType::reservation_released);
    EXPECT_EQ(n->nsid, kNsid);
    EXPECT_EQ(n->log_page_count, 1u);
    EXPECT_EQ(n->available, 0);
    // Reading consumed it (RAE clear).
    n = rb.notification_log();
    ASSERT_TRUE(n);
    EXPECT_EQ(n->type, NotificationType::empty);
    const auto& glp = target.log.back().cmd;
    EXPECT_EQ(glp.queue, Queue::admin);
    EXPECT_EQ(glp.cdw[0] & 0xffu, kLogReservationNotification);
    EXPECT_EQ(glp.cdw[0] & (1u << 15), 0u);
    EXPECT_EQ(glp.nsid, 0xffffffffu) << "a controller-wide log page";

    // b masks "registration preempted" and is then preempted: nothing logged.
    ASSERT_TRUE(rb.set_notification_mask({.registration_preempted = false,
                                          .reservation_released = true,
                                          .reservation_preempted = true}));
    m = rb.notification_mask();
    ASSERT_TRUE(m);
    EXPECT_FALSE(m->registration_preempted);
    EXPECT_TRUE(m->reservation_released);
    ASSERT_TRUE(ra.acquire({.nsid = 0, .action = AcquireAction::preempt, .type = ResvType::write_exclusive,
                            .iekey = false, .crkey = 1, .prkey = 2}));
    EXPECT_EQ(target.find(b), nullptr);
    n = rb.notification_log();
    ASSERT_TRUE(n);
    EXPECT_EQ(n->type, NotificationType::empty);
    // Still reported to a host that did not mask it.
    HostId c = make_host(3);
    HostPort pc{target, c, 3};
    Reservations rc{pc, kNsid};
    target.add(c, 3);
    ASSERT_TRUE(ra.acquire({.nsid = 0, .action = AcquireAction::preempt, .type = ResvType::write_exclusive,
                            .iekey = false, .crkey = 1, .prkey = 3}));
    n = rc.notification_log();
    ASSERT_TRUE(n);
    EXPECT_EQ(n->type, NotificationType::registration_preempted);
}

TEST(ReservationsScripted, PreemptAndAbortGetsItsOwnLongerBound) {
    ScriptedPassthru pt;
    Reservations r{pt, 1};
    AcquireArgs a;
    a.action = AcquireAction::preempt_and_abort;
    a.prkey = 2;
    (void)r.acquire(a);
    a.action = AcquireAction::preempt;
    (void)r.acquire(a);
    a.action = AcquireAction::acquire;
    (void)r.acquire(a);
    ASSERT_EQ(pt.sent.size(), 3u);
    EXPECT_EQ(pt.sent[0].timeout_ms, kPreemptAbortTimeoutMs);
    EXPECT_EQ(pt.sent[1].timeout_ms, 0u);  // the caller's bound (agent: device_timeout_ms)
    EXPECT_EQ(pt.sent[2].timeout_ms, 0u);
}

TEST(ReservationsScripted, ErrorsAndDataPassThrough) {
    ScriptedPassthru pt;
    Reservations r{pt, 5};
    pt.replies.push_back({{}, make_nvme_error(0x4083)});
    auto s = r.reg({});
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error(), make_nvme_error(0x83));
    ASSERT_EQ(pt.sent.size(), 1u);
    EXPECT_EQ(pt.sent[0].nsid, 5u);
    EXPECT_EQ(pt.sent[0].opcode, opcode::kResvRegister);

    // Mask read comes from completion dword 0.
    pt.replies.push_back({{}, uint32_t{0x6}});
    auto m = r.notification_mask();
    ASSERT_TRUE(m);
    EXPECT_EQ(*m, (NotificationMask{false, false, true}));

    // A notification page with a reserved type is malformed.
    std::vector<uint8_t> page(64, 0);
    page[8] = 4;
    pt.replies.push_back({page, uint32_t{0}});
    EXPECT_EQ(r.notification_log().error(), Errc::malformed_data);

    // A report that is all zeros is an empty, free reservation.
    pt.replies.push_back({{}, uint32_t{0}});
    auto st = r.report();
    ASSERT_TRUE(st);
    EXPECT_TRUE(st->registrants.empty());
    EXPECT_EQ(st->type, ResvType::none);
}

}  // namespace
}  // namespace nvfence
