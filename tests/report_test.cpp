// SPDX-License-Identifier: MIT
// Parsers of device data from hand-built byte fixtures. Offsets are the
// NVMe Base Specification's:
//  Reservation Status data structure: GEN 03:00, RTYPE 04, REGCTL 06:05,
//  PTPLS 09; header 24 bytes (extended: 64).
//  Registered Controller (24 bytes): CNTLID 01:00, RCSTS 02, HOSTID 15:08,
//  RKEY 23:16. Extended (64 bytes): CNTLID 01:00, RCSTS 02, RKEY 15:08,
//  HOSTID 31:16 (128 bits).
//  Reservation Notification log (80h): count 07:00, type 08, available 09,
//  NSID 15:12.
//  Identify Controller: VID 01:00, SN 23:04, MN 63:24, FR 71:64, CMIC 76,
//  CNTLID 79:78, CTRATT 99:96, ONCS 521:520, SUBNQN 1023:768.
//  Identify Namespace: NSZE 07:00, NCAP 15:08, NLBAF 25, FLBAS 26, NMIC 30,
//  RESCAP 31, LBAF0.. at 128 (MS 15:0, LBADS 23:16).

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "fake_passthru.hpp"
#include "nvfence/error.hpp"
#include "nvfence/report.hpp"

namespace nvfence {
namespace {

using test::put_le16;
using test::put_le32;
using test::put_le64;

struct Entry {
    uint16_t cntlid = 0;
    uint8_t rcsts = 0;
    uint64_t key = 0;
    HostId host{};
};

HostId host_bytes(uint8_t first) {
    HostId h{};
    for (size_t i = 0; i < 16; ++i) h[i] = static_cast<uint8_t>(first + i);
    return h;
}

// Builds a Reservation Status data structure with @p regctl claimed and
// @p entries written, in @p size bytes (0: exactly what the entries need).
std::vector<uint8_t> report_bytes(bool ext, uint32_t gen, uint8_t rtype, uint16_t regctl,
                                  uint8_t ptpls, const std::vector<Entry>& entries,
                                  size_t size = 0) {
    const size_t header = ext ? 64 : 24;
    const size_t entry = ext ? 64 : 24;
    if (size == 0) size = header + entries.size() * entry;
    std::vector<uint8_t> b(std::max(size, header + entries.size() * entry), 0);
    put_le32(&b[0], gen);
    b[4] = rtype;
    put_le16(&b[5], regctl);
    b[9] = ptpls;
    for (size_t i = 0; i < entries.size(); ++i) {
        uint8_t* e = &b[header + i * entry];
        put_le16(e, entries[i].cntlid);
        e[2] = entries[i].rcsts;
        if (ext) {
            put_le64(e + 8, entries[i].key);
            std::memcpy(e + 16, entries[i].host.data(), 16);
        } else {
            std::memcpy(e + 8, entries[i].host.data(), 8);
            put_le64(e + 16, entries[i].key);
        }
    }
    b.resize(size);
    return b;
}

// ----------------------------------------------------------- parse_report

TEST(ParseReport, EmptyPlain) {
    auto b = report_bytes(false, 0x01020304, 0, 0, 0, {});
    ASSERT_EQ(b.size(), 24u);
    auto st = parse_report(b, false);
    ASSERT_TRUE(st) << st.error().message();
    EXPECT_EQ(st->generation, 0x01020304u);
    EXPECT_EQ(st->type, ResvType::none);
    EXPECT_EQ(st->raw_type, 0);
    EXPECT_EQ(st->num_registrants, 0);
    EXPECT_FALSE(st->ptpl);
    EXPECT_FALSE(st->extended);
    EXPECT_TRUE(st->registrants.empty());
    EXPECT_FALSE(st->truncated());
    EXPECT_EQ(st->holder(), nullptr);
}

TEST(ParseReport, EmptyExtendedIn4KiB) {
    auto b = report_bytes(true, 7, 0, 0, 1, {}, 4096);
    auto st = parse_report(b, true);
    ASSERT_TRUE(st);
    EXPECT_TRUE(st->extended);
    EXPECT_TRUE(st->ptpl);
    EXPECT_EQ(st->generation, 7u);
    EXPECT_TRUE(st->registrants.empty());
    EXPECT_FALSE(st->truncated());
}

TEST(ParseReport, OnePlainRegistrant) {
    Entry e{.cntlid = 0xbeef, .rcsts = 1, .key = 0xf5c4070200000029ull, .host = host_bytes(0xa0)};
    auto b = report_bytes(false, 9, 1, 1, 0, {e});
    auto st = parse_report(b, false);
    ASSERT_TRUE(st);
    EXPECT_EQ(st->type, ResvType::write_exclusive);
    ASSERT_EQ(st->registrants.size(), 1u);
    const auto& r = st->registrants[0];
    EXPECT_EQ(r.cntlid, 0xbeef);
    EXPECT_TRUE(r.holder);
    EXPECT_EQ(r.key, 0xf5c4070200000029ull);
    // A 64-bit host id fills bytes 0..7; bytes 8..15 stay zero.
    HostId want{};
    for (size_t i = 0; i < 8; ++i) want[i] = static_cast<uint8_t>(0xa0 + i);
    EXPECT_EQ(r.host_id, want);
    EXPECT_EQ(st->holder(), &st->registrants[0]);
}

TEST(ParseReport, ByteOrderOfEveryField) {
    // Fields written byte by byte, independent of the builder's helpers.
    std::vector<uint8_t> b(48, 0);
    b[0] = 0x78; b[1] = 0x56; b[2] = 0x34; b[3] = 0x12;  // GEN 0x12345678
    b[4] = 0x03;                                         // RTYPE WERO
    b[5] = 0x01; b[6] = 0x00;                            // REGCTL 1
    b[9] = 0x01;                                         // PTPLS
    b[24] = 0x34; b[25] = 0x12;                          // CNTLID 0x1234
    b[26] = 0x01;                                        // RCSTS holder
    for (int i = 0; i < 8; ++i) b[32 + static_cast<size_t>(i)] = static_cast<uint8_t>(0x11 * (i + 1));  // HOSTID
    for (int i = 0; i < 8; ++i) b[40 + static_cast<size_t>(i)] = static_cast<uint8_t>(i + 1);  // RKEY
    auto st = parse_report(b, false);
    ASSERT_TRUE(st);
    EXPECT_EQ(st->generation, 0x12345678u);
    EXPECT_EQ(st->type, ResvType::write_exclusive_reg_only);
    EXPECT_TRUE(st->ptpl);
    ASSERT_EQ(st->registrants.size(), 1u);
    EXPECT_EQ(st->registrants[0].cntlid, 0x1234);
    EXPECT_EQ(st->registrants[0].key, 0x0807060504030201ull);
    EXPECT_EQ(st->registrants[0].host_id[0], 0x11);
    EXPECT_EQ(st->registrants[0].host_id[7], 0x88);
    EXPECT_EQ(st->registrants[0].host_id[8], 0x00);

    std::vector<uint8_t> x(128, 0);
    x[4] = 0x06;
    x[5] = 0x01;
    x[64] = 0xff; x[65] = 0xff;                           // dynamic controller
    x[66] = 0x01;
    for (int i = 0; i < 8; ++i) x[72 + static_cast<size_t>(i)] = static_cast<uint8_t>(0xf0 + i);  // RKEY
    for (int i = 0; i < 16; ++i) x[80 + static_cast<size_t>(i)] = static_cast<uint8_t>(i + 1);   // HOSTID
    auto xt = parse_report(x, true);
    ASSERT_TRUE(xt);
    EXPECT_EQ(xt->type, ResvType::exclusive_access_all_regs);
    ASSERT_EQ(xt->registrants.size(), 1u);
    EXPECT_EQ(xt->registrants[0].cntlid, 0xffff);
    EXPECT_EQ(xt->registrants[0].key, 0xf7f6f5f4f3f2f1f0ull);
    for (size_t i = 0; i < 16; ++i) EXPECT_EQ(xt->registrants[0].host_id[i], i + 1) << i;
}

TEST(ParseReport, ManyExtendedRegistrantsWith128BitHostIds) {
    std::vector<Entry> es;
    for (uint16_t i = 0; i < 10; ++i)
        es.push_back({.cntlid = i, .rcsts = static_cast<uint8_t>(i == 6 ? 1 : 0),
                      .key = 0x1000u + i, .host = host_bytes(static_cast<uint8_t>(i * 16))});
    auto b = report_bytes(true, 100, 2, 10, 0, es, 4096);
    auto st = parse_report(b, true);
    ASSERT_TRUE(st);
    EXPECT_EQ(st->type, ResvType::exclusive_access);
    ASSERT_EQ(st->registrants.size(), 10u);
    EXPECT_FALSE(st->truncated());
    for (uint16_t i = 0; i < 10; ++i) {
        EXPECT_EQ(st->registrants[i].cntlid, i);
        EXPECT_EQ(st->registrants[i].key, 0x1000u + i);
        EXPECT_EQ(st->registrants[i].host_id, host_bytes(static_cast<uint8_t>(i * 16)));
        EXPECT_EQ(st->registrants[i].holder, i == 6);
    }
    ASSERT_NE(st->holder(), nullptr);
    EXPECT_EQ(st->holder()->key, 0x1006u);
    const auto* f = st->find_host(host_bytes(0x30));
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->key, 0x1003u);
    EXPECT_EQ(st->find_host(host_bytes(0x31)), nullptr);
}

TEST(ParseReport, ManyPlainRegistrants) {
    std::vector<Entry> es;
    for (uint16_t i = 0; i < 5; ++i)
        es.push_back({.cntlid = static_cast<uint16_t>(i + 1), .rcsts = 0, .key = ~uint64_t{i},
                      .host = host_bytes(static_cast<uint8_t>(i))});
    auto b = report_bytes(false, 1, 0, 5, 0, es);
    auto st = parse_report(b, false);
    ASSERT_TRUE(st);
    ASSERT_EQ(st->registrants.size(), 5u);
    for (uint16_t i = 0; i < 5; ++i) EXPECT_EQ(st->registrants[i].key, ~uint64_t{i});
    EXPECT_EQ(st->holder(), nullptr);
}

TEST(ParseReport, HolderIsRcstsBit0Only) {
    Entry e{.cntlid = 1, .rcsts = 0xfe, .key = 5, .host = host_bytes(1)};
    auto st = parse_report(report_bytes(true, 0, 1, 1, 0, {e}), true);
    ASSERT_TRUE(st);
    EXPECT_FALSE(st->registrants[0].holder);
    e.rcsts = 0xff;
    st = parse_report(report_bytes(true, 0, 1, 1, 0, {e}), true);
    ASSERT_TRUE(st);
    EXPECT_TRUE(st->registrants[0].holder);
}

TEST(ParseReport, PtplsIsBit0AndReservedBytesAreIgnored) {
    auto b = report_bytes(false, 0, 0, 0, 0xfe, {});
    b[7] = b[8] = 0xff;
    for (size_t i = 10; i < 24; ++i) b[i] = 0xff;
    auto st = parse_report(b, false);
    ASSERT_TRUE(st);
    EXPECT_FALSE(st->ptpl);
}

TEST(ParseReport, AllRegistrantsTypeMarksEveryoneHolder) {
    std::vector<Entry> es = {{1, 1, 11, host_bytes(1)}, {2, 1, 22, host_bytes(2)}};
    auto st = parse_report(report_bytes(true, 0, 5, 2, 0, es), true);
    ASSERT_TRUE(st);
    EXPECT_EQ(st->type, ResvType::write_exclusive_all_regs);
    EXPECT_TRUE(st->registrants[0].holder);
    EXPECT_TRUE(st->registrants[1].holder);
    EXPECT_EQ(st->holder()->key, 11u) << "holder() is the first one";
}

TEST(ParseReport, TruncatedBufferKeepsWholeEntriesOnly) {
    std::vector<Entry> es;
    for (uint16_t i = 0; i < 3; ++i) es.push_back({i, 0, uint64_t{i} + 1, host_bytes(static_cast<uint8_t>(i))});
    // Extended: header + 2 entries + half of the third.
    auto full = report_bytes(true, 3, 0, 3, 0, es);
    std::vector<uint8_t> cut(full.begin(), full.begin() + 64 + 2 * 64 + 32);
    auto st = parse_report(cut, true);
    ASSERT_TRUE(st);
    EXPECT_EQ(st->num_registrants, 3);
    ASSERT_EQ(st->registrants.size(), 2u);
    EXPECT_TRUE(st->truncated());
    EXPECT_EQ(st->registrants[1].key, 2u);
    // One byte short of a whole entry.
    std::vector<uint8_t> cut2(full.begin(), full.begin() + 64 + 64 - 1);
    st = parse_report(cut2, true);
    ASSERT_TRUE(st);
    EXPECT_TRUE(st->registrants.empty());
    EXPECT_TRUE(st->truncated());
    // Plain: header only.
    auto plain = report_bytes(false, 3, 0, 3, 0, es);
    std::vector<uint8_t> hdr(plain.begin(), plain.begin() + 24);
    st = parse_report(hdr, false);
    ASSERT_TRUE(st);
    EXPECT_TRUE(st->registrants.empty());
    EXPECT_TRUE(st->truncated());
}

TEST(ParseReport, LyingRegctlIsBoundedByTheBuffer) {
    std::vector<Entry> es = {{1, 0, 1, host_bytes(1)}, {2, 0, 2, host_bytes(2)}};
    auto b = report_bytes(true, 0, 0, 65535, 0, es);
    auto st = parse_report(b, true);
    ASSERT_TRUE(st);
    EXPECT_EQ(st->num_registrants, 65535);
    EXPECT_EQ(st->registrants.size(), 2u);
    EXPECT_TRUE(st->truncated());
    // The same in a big, zero-filled buffer: every whole entry is returned.
    auto big = report_bytes(false, 0, 0, 65535, 0, es, 24 + 100 * 24 + 10);
    st = parse_report(big, false);
    ASSERT_TRUE(st);
    EXPECT_EQ(st->registrants.size(), 100u);
    EXPECT_TRUE(st->truncated());
}

TEST(ParseReport, RegctlSmallerThanTheBufferReturnsOnlyRegctlEntries) {
    std::vector<Entry> es = {{1, 0, 1, host_bytes(1)}, {2, 0, 2, host_bytes(2)}, {3, 1, 3, host_bytes(3)}};
    auto st = parse_report(report_bytes(false, 0, 1, 2, 0, es, 4096), false);
    ASSERT_TRUE(st);
    EXPECT_EQ(st->registrants.size(), 2u);
    EXPECT_FALSE(st->truncated());
    EXPECT_EQ(st->holder(), nullptr) << "the third entry is not a registrant";
}

TEST(ParseReport, RtypeAbove6IsRejected) {
    for (unsigned t = 0; t < 256; ++t) {
        auto b = report_bytes(true, 0, static_cast<uint8_t>(t), 0, 0, {});
        auto st = parse_report(b, true);
        if (t <= 6) {
            ASSERT_TRUE(st) << t;
            EXPECT_EQ(st->raw_type, t);
            EXPECT_EQ(static_cast<unsigned>(st->type), t);
        } else {
            ASSERT_FALSE(st) << t;
            EXPECT_EQ(st.error(), Errc::malformed_data);
        }
    }
}

TEST(ParseReport, HeaderTooShortIsRejected) {
    std::vector<uint8_t> b(64, 0);
    EXPECT_EQ(parse_report(std::span<const uint8_t>(b.data(), 23), false).error(), Errc::malformed_data);
    EXPECT_TRUE(parse_report(std::span<const uint8_t>(b.data(), 24), false));
    EXPECT_EQ(parse_report(std::span<const uint8_t>(b.data(), 63), true).error(), Errc::malformed_data);
    EXPECT_EQ(parse_report(std::span<const uint8_t>(b.data(), 24), true).error(), Errc::malformed_data);
    EXPECT_TRUE(parse_report(std::span<const uint8_t>(b.data(), 64), true));
    EXPECT_EQ(parse_report({}, false).error(), Errc::malformed_data);
    EXPECT_EQ(parse_report({}, true).error(), Errc::malformed_data);
}

TEST(ParseReport, PlainAndExtendedReadTheSameBytesDifferently) {
    // A plain report of one registrant read as extended is too short.
    auto b = report_bytes(false, 0, 0, 1, 0, {{1, 0, 42, host_bytes(1)}});
    EXPECT_FALSE(parse_report(b, true));
}

TEST(ReportSizeFor, HeaderPlusEntries) {
    EXPECT_EQ(report_size_for(0, false), 24u);
    EXPECT_EQ(report_size_for(1, false), 48u);
    EXPECT_EQ(report_size_for(10, false), 264u);
    EXPECT_EQ(report_size_for(0, true), 64u);
    EXPECT_EQ(report_size_for(1, true), 128u);
    EXPECT_EQ(report_size_for(63, true), 4096u);
    EXPECT_EQ(report_size_for(65535, true), 64u + 65535u * 64u);
    EXPECT_EQ(report_size_for(65535, false), 24u + 65535u * 24u);
    // What report_size_for promises, parse_report delivers.
    for (uint16_t n : {uint16_t{0}, uint16_t{1}, uint16_t{2}, uint16_t{63}, uint16_t{64}, uint16_t{200}}) {
        for (bool ext : {false, true}) {
            std::vector<uint8_t> b(report_size_for(n, ext), 0);
            put_le16(&b[5], n);
            auto st = parse_report(b, ext);
            ASSERT_TRUE(st);
            EXPECT_EQ(st->registrants.size(), n);
            EXPECT_FALSE(st->truncated());
        }
    }
}

TEST(HostIdText, FormatAndZero) {
    HostId h{};
    EXPECT_TRUE(host_id_is_zero(h));
    EXPECT_EQ(format_host_id(h), std::string(32, '0'));
    h[15] = 1;
    EXPECT_FALSE(host_id_is_zero(h));
    h = host_bytes(0xf0);
    EXPECT_EQ(format_host_id(h), "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff");
}

// ------------------------------------------------- notification log page

std::vector<uint8_t> notification_bytes(uint64_t count, uint8_t type, uint8_t avail, uint32_t nsid) {
    std::vector<uint8_t> b(64, 0);
    put_le64(&b[0], count);
    b[8] = type;
    b[9] = avail;
    put_le32(&b[12], nsid);
    return b;
}

TEST(ParseNotificationLog, EveryTypeAndField) {
    for (uint8_t t = 0; t <= 3; ++t) {
        auto n = parse_notification_log(notification_bytes(0x0102030405060708ull, t, 3, 0xa1b2c3d4));
        ASSERT_TRUE(n) << int{t};
        EXPECT_EQ(n->log_page_count, 0x0102030405060708ull);
        EXPECT_EQ(static_cast<uint8_t>(n->type), t);
        EXPECT_EQ(n->available, 3);
        EXPECT_EQ(n->nsid, 0xa1b2c3d4u);
    }
}

TEST(ParseNotificationLog, ReservedTypeRejected) {
    for (unsigned t = 4; t < 256; ++t)
        EXPECT_EQ(parse_notification_log(notification_bytes(1, static_cast<uint8_t>(t), 0, 1)).error(),
                  Errc::malformed_data) << t;
}

TEST(ParseNotificationLog, ShortBufferRejectedAndReservedBytesIgnored) {
    auto b = notification_bytes(1, 1, 0, 1);
    EXPECT_EQ(parse_notification_log(std::span<const uint8_t>(b.data(), 63)).error(), Errc::malformed_data);
    EXPECT_EQ(parse_notification_log({}).error(), Errc::malformed_data);
    b[10] = b[11] = 0xff;
    for (size_t i = 16; i < 64; ++i) b[i] = 0xff;
    auto n = parse_notification_log(b);
    ASSERT_TRUE(n);
    EXPECT_EQ(n->nsid, 1u);
    EXPECT_EQ(n->type, NotificationType::registration_preempted);
}

TEST(NotificationTypeName, Words) {
    EXPECT_STREQ(notification_type_name(NotificationType::empty), "empty");
    EXPECT_STREQ(notification_type_name(NotificationType::registration_preempted), "registration preempted");
    EXPECT_STREQ(notification_type_name(NotificationType::reservation_released), "reservation released");
    EXPECT_STREQ(notification_type_name(NotificationType::reservation_preempted), "reservation preempted");
    EXPECT_STREQ(notification_type_name(static_cast<NotificationType>(9)), "unknown");
}

// ----------------------------------------------------- identify controller

void put_str(std::vector<uint8_t>& b, size_t off, size_t len, const std::string& s) {
    for (size_t i = 0; i < len; ++i) b[off + i] = i < s.size() ? static_cast<uint8_t>(s[i]) : ' ';
}

std::vector<uint8_t> ebs_controller() {
    std::vector<uint8_t> b(4096, 0);
    put_le16(&b[0], 0x1d0f);
    put_str(b, 4, 20, "vol0123456789abcdef0");
    put_str(b, 24, 40, "Amazon Elastic Block Store");
    put_str(b, 64, 8, "2.0");
    b[76] = 0x02;
    put_le16(&b[78], 0x0102);
    put_le32(&b[96], 0x1);
    put_le16(&b[520], 0x0020);
    put_str(b, 768, 256, "nqn.2014-08.org.nvmexpress:uuid:1234");
    return b;
}

TEST(ParseIdentifyController, EveryField) {
    auto c = parse_identify_controller(ebs_controller());
    ASSERT_TRUE(c);
    EXPECT_EQ(c->vid, 0x1d0f);
    EXPECT_EQ(c->serial, "vol0123456789abcdef0");
    EXPECT_EQ(c->model, "Amazon Elastic Block Store");
    EXPECT_EQ(c->firmware, "2.0");
    EXPECT_EQ(c->cntlid, 0x0102);
    EXPECT_TRUE(c->multi_controller);
    EXPECT_TRUE(c->hostid_128);
    EXPECT_TRUE(c->reservations);
    EXPECT_EQ(c->subnqn, "nqn.2014-08.org.nvmexpress:uuid:1234");
    EXPECT_TRUE(is_ebs_model(c->model));
    EXPECT_EQ(ebs_volume_id(c->serial), "vol-0123456789abcdef0");
}

TEST(ParseIdentifyController, OncsBit5IsReservations) {
    auto b = ebs_controller();
    put_le16(&b[520], 0xffdf);  // every ONCS bit but 5
    auto c = parse_identify_controller(b);
    ASSERT_TRUE(c);
    EXPECT_FALSE(c->reservations);
    put_le16(&b[520], 0x2000);  // bit 5 of the wrong byte (bit 13)
    EXPECT_FALSE(parse_identify_controller(b)->reservations);
    b[519] = 0x20;              // bit 5 of the byte before ONCS
    put_le16(&b[520], 0);
    EXPECT_FALSE(parse_identify_controller(b)->reservations);
}

TEST(ParseIdentifyController, CmicAndCtrattBits) {
    auto b = ebs_controller();
    b[76] = 0xfd;  // every bit but 1
    put_le32(&b[96], 0xfffffffe);
    auto c = parse_identify_controller(b);
    ASSERT_TRUE(c);
    EXPECT_FALSE(c->multi_controller);
    EXPECT_FALSE(c->hostid_128);
}

TEST(ParseIdentifyController, StringsTrimmedAndSanitised) {
    auto b = ebs_controller();
    put_str(b, 4, 20, "  \x1b[31mEVIL\x07\x7f\xff ");
    put_str(b, 24, 40, "Model");
    b[24 + 2] = 0;  // NUL ends the string
    std::memset(&b[64], 0, 8);
    auto c = parse_identify_controller(b);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->serial, "?[31mEVIL???");
    for (char ch : c->serial) EXPECT_TRUE(ch >= 0x20 && ch < 0x7f);
    EXPECT_EQ(c->model, "Mo");
    EXPECT_EQ(c->firmware, "");
    put_str(b, 64, 8, "        ");
    EXPECT_EQ(parse_identify_controller(b)->firmware, "");
}

TEST(ParseIdentifyController, FieldsDoNotBleedIntoEachOther) {
    std::vector<uint8_t> b(4096, 'x');
    auto c = parse_identify_controller(b);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->serial, std::string(20, 'x'));
    EXPECT_EQ(c->model, std::string(40, 'x'));
    EXPECT_EQ(c->firmware, std::string(8, 'x'));
    EXPECT_EQ(c->subnqn, std::string(256, 'x'));
}

TEST(ParseIdentifyController, ShortBufferRejected) {
    std::vector<uint8_t> b(4095, 0);
    EXPECT_EQ(parse_identify_controller(b).error(), Errc::malformed_data);
    EXPECT_EQ(parse_identify_controller({}).error(), Errc::malformed_data);
}

// ------------------------------------------------------ identify namespace

std::vector<uint8_t> namespace_bytes(uint8_t nlbaf, uint8_t flbas, uint8_t rescap) {
    std::vector<uint8_t> b(4096, 0);
    put_le64(&b[0], 0x0000000100000000ull);
    put_le64(&b[8], 0x00000000ffffffffull);
    b[25] = nlbaf;
    b[26] = flbas;
    b[30] = 0x01;
    b[31] = rescap;
    // Each LBA format i: LBADS 9 + (i % 8), MS = i.
    for (unsigned i = 0; i < 64; ++i)
        put_le32(&b[128 + 4 * i], ((9u + i % 8) << 16) | i);
    return b;
}

TEST(ParseIdentifyNamespace, EveryField) {
    auto n = parse_identify_namespace(namespace_bytes(3, 0x03, 0xff));
    ASSERT_TRUE(n);
    EXPECT_EQ(n->size_blocks, 0x0000000100000000ull);
    EXPECT_EQ(n->capacity_blocks, 0x00000000ffffffffull);
    EXPECT_EQ(n->lba_bytes, 4096u);  // LBAF3: LBADS 12
    EXPECT_EQ(n->metadata_bytes, 3);
    EXPECT_TRUE(n->shared);
    EXPECT_EQ(n->rescap_raw, 0xff);
}

TEST(ParseIdentifyNamespace, FlbasIndexIncludingUpperBits) {
    // FLBAS bits 3:0 are the low index bits, bits 6:5 the high two; bit 4
    // (metadata at end of LBA) and bit 7 are not part of the index.
    struct Case {
        uint8_t flbas;
        unsigned idx;
    };
    const Case cases[] = {{0x00, 0}, {0x01, 1}, {0x11, 1}, {0x91, 1}, {0x0f, 15},
                          {0x20, 16}, {0x40, 32}, {0x61, 49}, {0x6f, 63}, {0xff, 63}};
    for (const auto& k : cases) {
        SCOPED_TRACE(testing::Message() << "flbas " << int{k.flbas});
        auto n = parse_identify_namespace(namespace_bytes(63, k.flbas, 0));
        ASSERT_TRUE(n);
        EXPECT_EQ(n->metadata_bytes, k.idx);
        EXPECT_EQ(n->lba_bytes, 1u << (9 + k.idx % 8));
    }
}

TEST(ParseIdentifyNamespace, AllZeroIsANamespaceThatIsNotActive) {
    std::vector<uint8_t> zero(4096, 0);
    auto n = parse_identify_namespace(zero);
    ASSERT_FALSE(n.ok());
    EXPECT_EQ(n.error(), Errc::device_gone);
    zero[4095] = 1;  // anything else is judged by its fields
    EXPECT_EQ(parse_identify_namespace(zero).error(), Errc::malformed_data);
}

TEST(ParseIdentifyNamespace, IndexPastNlbafRejected) {
    EXPECT_EQ(parse_identify_namespace(namespace_bytes(0, 0x01, 0)).error(), Errc::malformed_data);
    EXPECT_TRUE(parse_identify_namespace(namespace_bytes(1, 0x01, 0)));
    EXPECT_EQ(parse_identify_namespace(namespace_bytes(48, 0x61, 0)).error(), Errc::malformed_data);
    EXPECT_TRUE(parse_identify_namespace(namespace_bytes(49, 0x61, 0)));
    // NLBAF above 63 (reserved values) does not open the index past 63.
    EXPECT_TRUE(parse_identify_namespace(namespace_bytes(255, 0x6f, 0)));
}

TEST(ParseIdentifyNamespace, LbadsOutOfRangeRejected) {
    for (unsigned lbads = 0; lbads < 256; ++lbads) {
        auto b = namespace_bytes(0, 0, 0);
        put_le32(&b[128], lbads << 16);
        auto n = parse_identify_namespace(b);
        if (lbads >= 9 && lbads <= 16) {
            ASSERT_TRUE(n) << lbads;
            EXPECT_EQ(n->lba_bytes, 1u << lbads);
        } else {
            EXPECT_EQ(n.error(), Errc::malformed_data) << lbads;
        }
    }
}

TEST(ParseIdentifyNamespace, LbafRelativePerformanceBitsIgnored) {
    auto b = namespace_bytes(0, 0, 0);
    put_le32(&b[128], 0x03090008);  // RP 3, LBADS 9, MS 8
    auto n = parse_identify_namespace(b);
    ASSERT_TRUE(n);
    EXPECT_EQ(n->lba_bytes, 512u);
    EXPECT_EQ(n->metadata_bytes, 8);
}

TEST(ParseIdentifyNamespace, RescapBits) {
    struct Bit {
        uint8_t mask;
        ResvType t;
    };
    const Bit bits[] = {{0x02, ResvType::write_exclusive}, {0x04, ResvType::exclusive_access},
                        {0x08, ResvType::write_exclusive_reg_only},
                        {0x10, ResvType::exclusive_access_reg_only},
                        {0x20, ResvType::write_exclusive_all_regs},
                        {0x40, ResvType::exclusive_access_all_regs}};
    for (const auto& bit : bits) {
        auto n = parse_identify_namespace(namespace_bytes(0, 0, bit.mask));
        ASSERT_TRUE(n);
        EXPECT_EQ(n->rescap_raw, bit.mask);
        EXPECT_TRUE(n->rescap.any());
        EXPECT_FALSE(n->rescap.ptpl);
        EXPECT_FALSE(n->rescap.iekey);
        for (unsigned t = 0; t <= 6; ++t)
            EXPECT_EQ(n->rescap.supports(static_cast<ResvType>(t)), static_cast<ResvType>(t) == bit.t)
                << "mask " << int{bit.mask} << " type " << t;
    }
    auto n = parse_identify_namespace(namespace_bytes(0, 0, 0x81));
    ASSERT_TRUE(n);
    EXPECT_TRUE(n->rescap.ptpl);
    EXPECT_TRUE(n->rescap.iekey);
    EXPECT_FALSE(n->rescap.any()) << "PTPL and IEKEY alone are no reservation type";
    n = parse_identify_namespace(namespace_bytes(0, 0, 0x7e));
    ASSERT_TRUE(n);
    EXPECT_FALSE(n->rescap.supports(ResvType::none));
    EXPECT_FALSE(n->rescap.supports(static_cast<ResvType>(7)));
}

TEST(ParseIdentifyNamespace, NmicBit0IsShared) {
    auto b = namespace_bytes(0, 0, 0);
    b[30] = 0xfe;
    EXPECT_FALSE(parse_identify_namespace(b)->shared);
    b[30] = 0x01;
    EXPECT_TRUE(parse_identify_namespace(b)->shared);
}

TEST(ParseIdentifyNamespace, ShortBufferRejected) {
    auto b = namespace_bytes(0, 0, 0);
    EXPECT_EQ(parse_identify_namespace(std::span<const uint8_t>(b.data(), 4095)).error(),
              Errc::malformed_data);
    EXPECT_EQ(parse_identify_namespace({}).error(), Errc::malformed_data);
}

// ------------------------------------------------------------------- EBS

TEST(EbsVolumeId, FromSerial) {
    EXPECT_EQ(ebs_volume_id("vol0123456789abcdef0"), "vol-0123456789abcdef0");
    EXPECT_EQ(ebs_volume_id("vol-0123456789abcdef0"), "vol-0123456789abcdef0");
    EXPECT_EQ(ebs_volume_id("vol0"), "vol-0");
    EXPECT_EQ(ebs_volume_id("vol" + std::string(32, 'a')), "vol-" + std::string(32, 'a'));
    EXPECT_EQ(ebs_volume_id("vol" + std::string(33, 'a')), std::nullopt);
    EXPECT_EQ(ebs_volume_id(""), std::nullopt);
    EXPECT_EQ(ebs_volume_id("vol"), std::nullopt);
    EXPECT_EQ(ebs_volume_id("vol-"), std::nullopt);
    EXPECT_EQ(ebs_volume_id("vol--0123"), std::nullopt);
    EXPECT_EQ(ebs_volume_id("vol0123ABCD"), std::nullopt) << "EBS ids are lower-case hex";
    EXPECT_EQ(ebs_volume_id("vol0123g"), std::nullopt);
    EXPECT_EQ(ebs_volume_id("VOL0123"), std::nullopt);
    EXPECT_EQ(ebs_volume_id("S3ESNX0K123456"), std::nullopt);
    EXPECT_EQ(ebs_volume_id("vol 0123"), std::nullopt);
}

// Every per-volume thing (the agent's socket, the epoch store, the udev
// link, fence_nvfence's choice of agent) is keyed by the volume name, so two
// namespaces never share one: the Pacemaker lab's second namespace behind the
// lab's EBS-style serial was handed to the first one's nvfenced.
TEST(VolumeId, OneNamePerNamespace) {
    NamespaceIdentity plain{};
    EXPECT_EQ(volume_id("vol0123456789abcdef0", plain, 1), "vol-0123456789abcdef0");  // EBS: always nsid 1
    EXPECT_EQ(volume_id("vol0123456789abcdef0", plain, 2), "vol-0123456789abcdef0-n2");
    EXPECT_EQ(volume_id("S3ESNX0K 12/34", plain, 1), "S3ESNX0K_12_34-n1");
    EXPECT_EQ(volume_id("S3ESNX0K 12/34", plain, 7), "S3ESNX0K_12_34-n7");
    NamespaceIdentity g{};
    g.nguid[15] = 0xab;
    EXPECT_EQ(volume_id("S3ESNX0K", g, 3), "nguid-000000000000000000000000000000ab");
    NamespaceIdentity e{};
    e.eui64[0] = 0x12;
    EXPECT_EQ(volume_id("S3ESNX0K", e, 3), "eui-1200000000000000");
    for (const char* serial : {"vol0123456789abcdef0", "vol-0", "S3ESNX0K", ""})
        for (uint32_t a = 1; a <= 4; ++a)
            for (uint32_t b = a + 1; b <= 4; ++b)
                EXPECT_NE(volume_id(serial, plain, a), volume_id(serial, plain, b)) << serial << " " << a << " " << b;
}

TEST(EbsModel, ExactMatch) {
    EXPECT_TRUE(is_ebs_model("Amazon Elastic Block Store"));
    EXPECT_FALSE(is_ebs_model("Amazon EC2 NVMe Instance Storage"));
    EXPECT_FALSE(is_ebs_model("amazon elastic block store"));
    EXPECT_FALSE(is_ebs_model(""));
}

}  // namespace
}  // namespace nvfence
