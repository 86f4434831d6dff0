// SPDX-License-Identifier: MIT
// Encoders checked bit for bit against the NVMe Base Specification layouts.
// Expected values are written from the specification's field tables
// (bit positions and byte offsets), not from the encoder's code:
//  - Reservation Register (I/O opcode 0Dh): CDW10 bits 2:0 RREGA,
//    bit 3 IEKEY, bits 29:4 reserved, bits 31:30 CPTPL; data 16 bytes,
//    CRKEY bytes 7:0, NRKEY bytes 15:8, little endian.
//  - Reservation Acquire (11h): CDW10 bits 2:0 RACQA, bit 3 IEKEY,
//    bits 7:4 reserved, bits 15:8 RTYPE; data CRKEY 7:0, PRKEY 15:8.
//  - Reservation Release (15h): CDW10 bits 2:0 RRELA, bit 3 IEKEY,
//    bits 15:8 RTYPE; data CRKEY 7:0 (8 bytes).
//  - Reservation Report (0Eh): CDW10 NUMD (0's based dwords), CDW11 bit 0
//    EDS.
//  - Get Log Page (admin 02h): CDW10 bits 7:0 LID, bits 14:8 LSP, bit 15
//    RAE, bits 31:16 NUMDL; CDW11 bits 15:0 NUMDU.
//  - Identify (admin 06h): CDW10 bits 7:0 CNS, bits 31:16 CNTID.
//  - Get/Set Features (admin 0Ah/09h): CDW10 bits 7:0 FID (Get: 10:8 SEL;
//    Set: bit 31 SV); Host Identifier 81h CDW11 bit 0 EXHID; Reservation
//    Notification Mask 82h CDW11 bit 1 REGPRE, bit 2 RESREL, bit 3 RESPRE.
//  - Read/Write (02h/01h): CDW10 SLBA 31:0, CDW11 SLBA 63:32, CDW12 bits
//    15:0 NLB (0's based).

#include <gtest/gtest.h>

#include <array>
#include <cstdint>

#include "nvfence/command.hpp"
#include "nvfence/error.hpp"

namespace nvfence {
namespace {

constexpr uint64_t kK1 = 0x0123456789abcdefull;
constexpr uint64_t kK2 = 0xfedcba9876543210ull;

std::array<uint8_t, 16> bytes16(std::initializer_list<uint8_t> b) {
    std::array<uint8_t, 16> a{};
    size_t i = 0;
    for (uint8_t v : b) a[i++] = v;
    return a;
}

// CRKEY 0x0123456789abcdef then NRKEY/PRKEY 0xfedcba9876543210, both LE.
const std::array<uint8_t, 16> kBothKeys = bytes16({0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01,
                                                   0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe});

void expect_only_cdw10(const Command& c) {
    for (size_t i = 1; i < c.cdw.size(); ++i) EXPECT_EQ(c.cdw[i], 0u) << "CDW" << (10 + i);
}

// ---------------------------------------------------------------- opcodes

TEST(Opcodes, MatchTheSpecification) {
    EXPECT_EQ(opcode::kFlush, 0x00);
    EXPECT_EQ(opcode::kWrite, 0x01);
    EXPECT_EQ(opcode::kRead, 0x02);
    EXPECT_EQ(opcode::kResvRegister, 0x0d);
    EXPECT_EQ(opcode::kResvReport, 0x0e);
    EXPECT_EQ(opcode::kResvAcquire, 0x11);
    EXPECT_EQ(opcode::kResvRelease, 0x15);
    EXPECT_EQ(opcode::kGetLogPage, 0x02);
    EXPECT_EQ(opcode::kIdentify, 0x06);
    EXPECT_EQ(opcode::kSetFeatures, 0x09);
    EXPECT_EQ(opcode::kGetFeatures, 0x0a);
    EXPECT_EQ(kLogReservationNotification, 0x80);
    EXPECT_EQ(kFeatHostId, 0x81);
    EXPECT_EQ(kFeatResvNotifMask, 0x82);
    EXPECT_EQ(kFeatResvPersistence, 0x83);
}

TEST(Enums, EncodingsMatchTheSpecification) {
    EXPECT_EQ(static_cast<int>(ResvType::write_exclusive), 1);
    EXPECT_EQ(static_cast<int>(ResvType::exclusive_access), 2);
    EXPECT_EQ(static_cast<int>(ResvType::write_exclusive_reg_only), 3);
    EXPECT_EQ(static_cast<int>(ResvType::exclusive_access_reg_only), 4);
    EXPECT_EQ(static_cast<int>(ResvType::write_exclusive_all_regs), 5);
    EXPECT_EQ(static_cast<int>(ResvType::exclusive_access_all_regs), 6);
    EXPECT_EQ(static_cast<int>(RegisterAction::register_key), 0);
    EXPECT_EQ(static_cast<int>(RegisterAction::unregister_key), 1);
    EXPECT_EQ(static_cast<int>(RegisterAction::replace_key), 2);
    EXPECT_EQ(static_cast<int>(Cptpl::no_change), 0);
    EXPECT_EQ(static_cast<int>(Cptpl::clear), 2);
    EXPECT_EQ(static_cast<int>(Cptpl::set), 3);
    EXPECT_EQ(static_cast<int>(AcquireAction::acquire), 0);
    EXPECT_EQ(static_cast<int>(AcquireAction::preempt), 1);
    EXPECT_EQ(static_cast<int>(AcquireAction::preempt_and_abort), 2);
    EXPECT_EQ(static_cast<int>(ReleaseAction::release), 0);
    EXPECT_EQ(static_cast<int>(ReleaseAction::clear), 1);
    EXPECT_EQ(static_cast<int>(IdentifyCns::namespace_), 0);
    EXPECT_EQ(static_cast<int>(IdentifyCns::controller), 1);
}

// --------------------------------------------------------------- register

TEST(EncodeRegister, LiteralLayouts) {
    // register, no IEKEY, no CPTPL change: CDW10 = 0.
    auto c = encode_register({.nsid = 1, .action = RegisterAction::register_key,
                              .cptpl = Cptpl::no_change, .iekey = false, .crkey = kK1, .nrkey = kK2});
    EXPECT_EQ(c.cdw[0], 0x00000000u);
    EXPECT_EQ(c.payload, kBothKeys);
    // replace (010b) + IEKEY (bit 3) + CPTPL set (11b at 31:30).
    c = encode_register({.nsid = 1, .action = RegisterAction::replace_key, .cptpl = Cptpl::set,
                         .iekey = true, .crkey = 0, .nrkey = 0});
    EXPECT_EQ(c.cdw[0], 0xc000000au);
    // unregister (001b) + CPTPL clear (10b at 31:30).
    c = encode_register({.nsid = 1, .action = RegisterAction::unregister_key, .cptpl = Cptpl::clear,
                         .iekey = false, .crkey = 0, .nrkey = 0});
    EXPECT_EQ(c.cdw[0], 0x80000001u);
}

TEST(EncodeRegister, EveryActionCptplAndIekey) {
    const RegisterAction actions[] = {RegisterAction::register_key, RegisterAction::unregister_key,
                                      RegisterAction::replace_key};
    const uint32_t rrega[] = {0b000, 0b001, 0b010};
    const Cptpl cptpls[] = {Cptpl::no_change, Cptpl::clear, Cptpl::set};
    const uint32_t cptpl_bits[] = {0b00, 0b10, 0b11};
    for (size_t a = 0; a < 3; ++a) {
        for (size_t p = 0; p < 3; ++p) {
            for (bool iekey : {false, true}) {
                SCOPED_TRACE(testing::Message() << "action " << a << " cptpl " << p << " iekey " << iekey);
                auto c = encode_register({.nsid = 0x12345678, .action = actions[a], .cptpl = cptpls[p],
                                          .iekey = iekey, .crkey = kK1, .nrkey = kK2});
                const uint32_t want = rrega[a] | (iekey ? 0x8u : 0u) | (cptpl_bits[p] << 30);
                EXPECT_EQ(c.cdw[0], want);
                EXPECT_EQ(c.cdw[0] & 0x3ffffff0u, 0u) << "reserved bits 29:4";
                expect_only_cdw10(c);
                EXPECT_EQ(c.queue, Queue::io);
                EXPECT_EQ(c.opcode, 0x0d);
                EXPECT_EQ(c.nsid, 0x12345678u);
                EXPECT_TRUE(c.host_to_device);
                EXPECT_EQ(c.data_len, 16u);
                EXPECT_EQ(c.payload, kBothKeys);
                EXPECT_EQ(c.timeout_ms, 0u);
            }
        }
    }
}

TEST(EncodeRegister, KeyEdgeValues) {
    auto c = encode_register({.nsid = 1, .action = RegisterAction::register_key,
                              .cptpl = Cptpl::no_change, .iekey = false, .crkey = 0,
                              .nrkey = ~uint64_t{0}});
    EXPECT_EQ(c.payload, bytes16({0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}));
    c = encode_register({.nsid = 1, .action = RegisterAction::register_key,
                         .cptpl = Cptpl::no_change, .iekey = false, .crkey = 1, .nrkey = 0x8000000000000000ull});
    EXPECT_EQ(c.payload, bytes16({1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80}));
}

// ---------------------------------------------------------------- acquire

TEST(EncodeAcquire, LiteralLayouts) {
    auto c = encode_acquire({.nsid = 1, .action = AcquireAction::acquire,
                             .type = ResvType::write_exclusive, .iekey = false, .crkey = kK1, .prkey = kK2});
    EXPECT_EQ(c.cdw[0], 0x00000100u);
    EXPECT_EQ(c.payload, kBothKeys);
    c = encode_acquire({.nsid = 1, .action = AcquireAction::preempt_and_abort,
                        .type = ResvType::exclusive_access_all_regs, .iekey = true, .crkey = 0, .prkey = 0});
    EXPECT_EQ(c.cdw[0], 0x0000060au);
    c = encode_acquire({.nsid = 1, .action = AcquireAction::preempt,
                        .type = ResvType::write_exclusive_reg_only, .iekey = false, .crkey = 0, .prkey = 0});
    EXPECT_EQ(c.cdw[0], 0x00000301u);
}

TEST(EncodeAcquire, EveryActionTypeAndIekey) {
    const AcquireAction actions[] = {AcquireAction::acquire, AcquireAction::preempt,
                                     AcquireAction::preempt_and_abort};
    for (uint32_t a = 0; a < 3; ++a) {
        for (uint32_t t = 1; t <= 6; ++t) {
            for (bool iekey : {false, true}) {
                SCOPED_TRACE(testing::Message() << "action " << a << " type " << t << " iekey " << iekey);
                auto c = encode_acquire({.nsid = 7, .action = actions[a], .type = static_cast<ResvType>(t),
                                         .iekey = iekey, .crkey = kK1, .prkey = kK2});
                EXPECT_EQ(c.cdw[0], a | (iekey ? 0x8u : 0u) | (t << 8));
                EXPECT_EQ(c.cdw[0] & 0xffff00f0u, 0u) << "reserved bits";
                expect_only_cdw10(c);
                EXPECT_EQ(c.queue, Queue::io);
                EXPECT_EQ(c.opcode, 0x11);
                EXPECT_EQ(c.nsid, 7u);
                EXPECT_TRUE(c.host_to_device);
                EXPECT_EQ(c.data_len, 16u);
                EXPECT_EQ(c.payload, kBothKeys);
            }
        }
    }
}

// ---------------------------------------------------------------- release

TEST(EncodeRelease, LiteralLayouts) {
    auto c = encode_release({.nsid = 1, .action = ReleaseAction::release,
                             .type = ResvType::exclusive_access, .iekey = false, .crkey = kK1});
    EXPECT_EQ(c.cdw[0], 0x00000200u);
    EXPECT_EQ(c.payload, bytes16({0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01}));
    c = encode_release({.nsid = 1, .action = ReleaseAction::clear,
                        .type = ResvType::exclusive_access_reg_only, .iekey = true, .crkey = 0});
    EXPECT_EQ(c.cdw[0], 0x00000409u);
}

TEST(EncodeRelease, EveryActionTypeAndIekey) {
    const ReleaseAction actions[] = {ReleaseAction::release, ReleaseAction::clear};
    for (uint32_t a = 0; a < 2; ++a) {
        for (uint32_t t = 0; t <= 6; ++t) {
            for (bool iekey : {false, true}) {
                SCOPED_TRACE(testing::Message() << "action " << a << " type " << t << " iekey " << iekey);
                auto c = encode_release({.nsid = 0xffffffff, .action = actions[a],
                                         .type = static_cast<ResvType>(t), .iekey = iekey, .crkey = kK2});
                EXPECT_EQ(c.cdw[0], a | (iekey ? 0x8u : 0u) | (t << 8));
                expect_only_cdw10(c);
                EXPECT_EQ(c.queue, Queue::io);
                EXPECT_EQ(c.opcode, 0x15);
                EXPECT_EQ(c.nsid, 0xffffffffu);
                EXPECT_TRUE(c.host_to_device);
                EXPECT_EQ(c.data_len, 8u);
                // CRKEY only; the rest of the payload stays zero.
                EXPECT_EQ(c.payload, bytes16({0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe}));
            }
        }
    }
}

// ----------------------------------------------------------------- report

TEST(EncodeReport, NumdIsZerosBasedDwordsAndEdsIsBit0) {
    struct Case {
        uint32_t len;
        bool ext;
        uint32_t numd;
    };
    const Case cases[] = {{4, false, 0}, {8, true, 1}, {24, false, 5}, {64, true, 15},
                          {4096, true, 1023}, {4096, false, 1023}, {4194304, true, 0x000fffff}};
    for (const auto& k : cases) {
        SCOPED_TRACE(k.len);
        auto c = encode_report({.nsid = 3, .extended = k.ext, .len_bytes = k.len});
        EXPECT_EQ(c.queue, Queue::io);
        EXPECT_EQ(c.opcode, 0x0e);
        EXPECT_EQ(c.nsid, 3u);
        EXPECT_EQ(c.cdw[0], k.numd);
        EXPECT_EQ(c.cdw[1], k.ext ? 1u : 0u);
        for (size_t i = 2; i < 6; ++i) EXPECT_EQ(c.cdw[i], 0u);
        EXPECT_FALSE(c.host_to_device);
        EXPECT_EQ(c.data_len, k.len);
        EXPECT_EQ(c.payload, (std::array<uint8_t, 16>{}));
    }
}

TEST(EncodeReportDeathTest, LengthNotAWholeNumberOfDwordsAborts) {
    EXPECT_DEATH((void)encode_report({.nsid = 1, .extended = true, .len_bytes = 0}), "");
    EXPECT_DEATH((void)encode_report({.nsid = 1, .extended = true, .len_bytes = 6}), "");
}

// --------------------------------------------------------------- identify

TEST(EncodeIdentify, CnsInCdw10AndA4KiBTransfer) {
    auto c = encode_identify(IdentifyCns::controller, 0);
    EXPECT_EQ(c.queue, Queue::admin);
    EXPECT_EQ(c.opcode, 0x06);
    EXPECT_EQ(c.nsid, 0u);
    EXPECT_EQ(c.cdw[0], 0x01u);
    expect_only_cdw10(c);
    EXPECT_EQ(c.data_len, 4096u);
    EXPECT_FALSE(c.host_to_device);

    c = encode_identify(IdentifyCns::namespace_, 42);
    EXPECT_EQ(c.queue, Queue::admin);
    EXPECT_EQ(c.opcode, 0x06);
    EXPECT_EQ(c.nsid, 42u);
    EXPECT_EQ(c.cdw[0], 0x00u);
    expect_only_cdw10(c);
    EXPECT_EQ(c.data_len, 4096u);
    EXPECT_FALSE(c.host_to_device);
}

// ----------------------------------------------------------- get log page

TEST(EncodeGetLogPage, ReservationNotificationPage) {
    auto c = encode_get_log_page(0x80, 1, 64, false);
    EXPECT_EQ(c.queue, Queue::admin);
    EXPECT_EQ(c.opcode, 0x02);
    EXPECT_EQ(c.nsid, 1u);
    // NUMDL = 15 (16 dwords, 0's based) in 31:16, LID 80h in 7:0.
    EXPECT_EQ(c.cdw[0], 0x000f0080u);
    EXPECT_EQ(c.cdw[1], 0u);
    for (size_t i = 2; i < 6; ++i) EXPECT_EQ(c.cdw[i], 0u);
    EXPECT_EQ(c.data_len, 64u);
    EXPECT_FALSE(c.host_to_device);
}

TEST(EncodeGetLogPage, RaeIsBit15) {
    auto c = encode_get_log_page(0x80, 1, 64, true);
    EXPECT_EQ(c.cdw[0], 0x000f8080u);
    EXPECT_EQ(c.cdw[0] & 0x7f00u, 0u) << "LSP stays zero";
}

TEST(EncodeGetLogPage, NumdSplitsIntoNumdlAndNumdu) {
    // 4 bytes: NUMD 0.
    auto c = encode_get_log_page(0x01, 0xffffffff, 4, false);
    EXPECT_EQ(c.cdw[0], 0x00000001u);
    EXPECT_EQ(c.cdw[1], 0u);
    EXPECT_EQ(c.nsid, 0xffffffffu);
    // 256 KiB: NUMD 0xffff fits NUMDL exactly.
    c = encode_get_log_page(0x02, 0, 0x40000, false);
    EXPECT_EQ(c.cdw[0], 0xffff0002u);
    EXPECT_EQ(c.cdw[1], 0u);
    // 256 KiB + 4: NUMD 0x10000 -> NUMDL 0, NUMDU 1.
    c = encode_get_log_page(0x02, 0, 0x40004, false);
    EXPECT_EQ(c.cdw[0], 0x00000002u);
    EXPECT_EQ(c.cdw[1], 0x00000001u);
    // 1 MiB: NUMD 0x3ffff -> NUMDL 0xffff, NUMDU 3.
    c = encode_get_log_page(0xff, 0, 0x100000, true);
    EXPECT_EQ(c.cdw[0], 0xffff80ffu);
    EXPECT_EQ(c.cdw[1], 0x00000003u);
    EXPECT_EQ(c.data_len, 0x100000u);
}

TEST(EncodeGetLogPageDeathTest, LengthNotAWholeNumberOfDwordsAborts) {
    EXPECT_DEATH((void)encode_get_log_page(0x80, 1, 0, false), "");
    EXPECT_DEATH((void)encode_get_log_page(0x80, 1, 63, false), "");
}

// --------------------------------------------------------------- features

TEST(EncodeGetHostId, Feature81WithExhid) {
    auto c = encode_get_host_id();
    EXPECT_EQ(c.queue, Queue::admin);
    EXPECT_EQ(c.opcode, 0x0a);
    EXPECT_EQ(c.nsid, 0u);
    EXPECT_EQ(c.cdw[0], 0x00000081u) << "FID 81h, SEL 000b (current)";
    EXPECT_EQ(c.cdw[1], 0x00000001u) << "EXHID";
    for (size_t i = 2; i < 6; ++i) EXPECT_EQ(c.cdw[i], 0u);
    EXPECT_EQ(c.data_len, 16u);
    EXPECT_FALSE(c.host_to_device);
}

TEST(EncodeNotificationMask, SetFeature82MasksWhatIsNotReported) {
    for (unsigned bits = 0; bits < 8; ++bits) {
        NotificationMask m{.registration_preempted = (bits & 1) != 0,
                           .reservation_released = (bits & 2) != 0,
                           .reservation_preempted = (bits & 4) != 0};
        SCOPED_TRACE(bits);
        auto c = encode_set_notification_mask(9, m);
        EXPECT_EQ(c.queue, Queue::admin);
        EXPECT_EQ(c.opcode, 0x09);
        EXPECT_EQ(c.nsid, 9u);
        EXPECT_EQ(c.cdw[0], 0x00000082u) << "FID 82h, SV clear";
        const uint32_t want = (m.registration_preempted ? 0u : 0x2u) |
                              (m.reservation_released ? 0u : 0x4u) |
                              (m.reservation_preempted ? 0u : 0x8u);
        EXPECT_EQ(c.cdw[1], want);
        for (size_t i = 2; i < 6; ++i) EXPECT_EQ(c.cdw[i], 0u);
        EXPECT_EQ(c.data_len, 0u);
        // The completion dword 0 carries the same bits back.
        EXPECT_EQ(decode_notification_mask(c.cdw[1]), m);
    }
    // Reporting everything masks nothing; reporting nothing masks 1..3.
    EXPECT_EQ(encode_set_notification_mask(1, {true, true, true}).cdw[1], 0x0u);
    EXPECT_EQ(encode_set_notification_mask(1, {false, false, false}).cdw[1], 0xeu);
}

TEST(EncodeNotificationMask, GetFeature82) {
    auto c = encode_get_notification_mask(5);
    EXPECT_EQ(c.queue, Queue::admin);
    EXPECT_EQ(c.opcode, 0x0a);
    EXPECT_EQ(c.nsid, 5u);
    EXPECT_EQ(c.cdw[0], 0x00000082u);
    expect_only_cdw10(c);
    EXPECT_EQ(c.data_len, 0u);
}

TEST(DecodeNotificationMask, IgnoresBit0AndUpperBits) {
    EXPECT_EQ(decode_notification_mask(0), (NotificationMask{true, true, true}));
    EXPECT_EQ(decode_notification_mask(0x2), (NotificationMask{false, true, true}));
    EXPECT_EQ(decode_notification_mask(0x4), (NotificationMask{true, false, true}));
    EXPECT_EQ(decode_notification_mask(0x8), (NotificationMask{true, true, false}));
    EXPECT_EQ(decode_notification_mask(0xfffffff1u), (NotificationMask{true, true, true}));
}

// ------------------------------------------------------------- read/write

TEST(EncodeRw, SlbaAndZerosBasedNlb) {
    auto c = encode_rw(true, 2, 0x123456789abcdef0ull, 8, 4096);
    EXPECT_EQ(c.queue, Queue::io);
    EXPECT_EQ(c.opcode, 0x01);
    EXPECT_EQ(c.nsid, 2u);
    EXPECT_EQ(c.cdw[0], 0x9abcdef0u);
    EXPECT_EQ(c.cdw[1], 0x12345678u);
    EXPECT_EQ(c.cdw[2], 7u);
    EXPECT_EQ(c.cdw[3], 0u);
    EXPECT_EQ(c.cdw[4], 0u);
    EXPECT_EQ(c.cdw[5], 0u);
    EXPECT_EQ(c.data_len, 4096u);
    EXPECT_TRUE(c.host_to_device);

    c = encode_rw(false, 2, 0, 1, 512);
    EXPECT_EQ(c.opcode, 0x02);
    EXPECT_EQ(c.cdw[0], 0u);
    EXPECT_EQ(c.cdw[1], 0u);
    EXPECT_EQ(c.cdw[2], 0u);
    EXPECT_FALSE(c.host_to_device);
    EXPECT_EQ(c.data_len, 512u);

    c = encode_rw(false, 2, ~uint64_t{0}, 0x10000, 0);
    EXPECT_EQ(c.cdw[0], 0xffffffffu);
    EXPECT_EQ(c.cdw[1], 0xffffffffu);
    EXPECT_EQ(c.cdw[2], 0x0000ffffu) << "65536 blocks: NLB ffffh, nothing above bit 15";
}

TEST(EncodeRwDeathTest, NlbOutOfRangeAborts) {
    EXPECT_DEATH((void)encode_rw(true, 1, 0, 0, 0), "");
    EXPECT_DEATH((void)encode_rw(true, 1, 0, 0x10001, 0), "");
}

TEST(EncodeFlush, NoDwordsNoData) {
    auto c = encode_flush(4);
    EXPECT_EQ(c.queue, Queue::io);
    EXPECT_EQ(c.opcode, 0x00);
    EXPECT_EQ(c.nsid, 4u);
    EXPECT_EQ(c.cdw, (std::array<uint32_t, 6>{}));
    EXPECT_EQ(c.data_len, 0u);
    EXPECT_FALSE(c.host_to_device);
}

// ------------------------------------------------------------ type helpers

TEST(ResvTypeHelpers, NamesValidityAndAllRegistrants) {
    EXPECT_STREQ(resv_type_short(ResvType::none), "none");
    EXPECT_STREQ(resv_type_short(ResvType::write_exclusive), "WE");
    EXPECT_STREQ(resv_type_short(ResvType::exclusive_access), "EA");
    EXPECT_STREQ(resv_type_short(ResvType::write_exclusive_reg_only), "WERO");
    EXPECT_STREQ(resv_type_short(ResvType::exclusive_access_reg_only), "EARO");
    EXPECT_STREQ(resv_type_short(ResvType::write_exclusive_all_regs), "WEAR");
    EXPECT_STREQ(resv_type_short(ResvType::exclusive_access_all_regs), "EAAR");
    EXPECT_STREQ(resv_type_short(static_cast<ResvType>(7)), "unknown");
    EXPECT_STREQ(resv_type_name(ResvType::write_exclusive), "Write Exclusive");
    EXPECT_STREQ(resv_type_name(ResvType::exclusive_access), "Exclusive Access");
    EXPECT_STREQ(resv_type_name(ResvType::write_exclusive_reg_only), "Write Exclusive - Registrants Only");
    EXPECT_STREQ(resv_type_name(ResvType::exclusive_access_reg_only), "Exclusive Access - Registrants Only");
    EXPECT_STREQ(resv_type_name(ResvType::write_exclusive_all_regs), "Write Exclusive - All Registrants");
    EXPECT_STREQ(resv_type_name(ResvType::exclusive_access_all_regs), "Exclusive Access - All Registrants");
    EXPECT_STREQ(resv_type_name(static_cast<ResvType>(0xff)), "unknown");
    for (unsigned v = 0; v < 256; ++v)
        EXPECT_EQ(resv_type_valid(static_cast<uint8_t>(v)), v >= 1 && v <= 6) << v;
    for (unsigned v = 0; v <= 6; ++v)
        EXPECT_EQ(resv_type_all_registrants(static_cast<ResvType>(v)), v == 5 || v == 6) << v;
}

TEST(CommandEquality, ComparesEveryField) {
    const Command a = encode_register({.nsid = 1, .action = RegisterAction::register_key,
                                       .cptpl = Cptpl::no_change, .iekey = false, .crkey = 1, .nrkey = 2});
    Command b = a;
    EXPECT_EQ(a, b);
    b.payload[15] = 1;
    EXPECT_NE(a, b);
    b = a;
    b.timeout_ms = 1;
    EXPECT_NE(a, b);
    b = a;
    b.queue = Queue::admin;
    EXPECT_NE(a, b);
}

// The one parser of type names (CLI, nvfenced.conf, fence_nvfence).
TEST(ResvTypeHelpers, ParseEverySpellingOfEveryType) {
    const std::pair<const char*, ResvType> cases[] = {
        {"we", ResvType::write_exclusive},
        {"exclusive", ResvType::write_exclusive},
        {"Write_Exclusive", ResvType::write_exclusive},
        {"EA", ResvType::exclusive_access},
        {"exclusive-access", ResvType::exclusive_access},
        {"WERO", ResvType::write_exclusive_reg_only},
        {"shared", ResvType::write_exclusive_reg_only},
        {"registrants_only", ResvType::write_exclusive_reg_only},
        {"write-exclusive-reg-only", ResvType::write_exclusive_reg_only},
        {"write-exclusive-registrants-only", ResvType::write_exclusive_reg_only},
        {"earo", ResvType::exclusive_access_reg_only},
        {"exclusive_access_reg_only", ResvType::exclusive_access_reg_only},
        {"exclusive-access-registrants-only", ResvType::exclusive_access_reg_only},
        {"wear", ResvType::write_exclusive_all_regs},
        {"write-exclusive-all-regs", ResvType::write_exclusive_all_regs},
        {"WRITE-EXCLUSIVE-ALL-REGISTRANTS", ResvType::write_exclusive_all_regs},
        {"eaar", ResvType::exclusive_access_all_regs},
        {"exclusive-access-all-regs", ResvType::exclusive_access_all_regs},
        {"exclusive-access-all-registrants", ResvType::exclusive_access_all_regs},
    };
    for (const auto& [name, type] : cases) {
        auto t = parse_resv_type(name);
        ASSERT_TRUE(t) << name;
        EXPECT_EQ(*t, type) << name;
    }
    // What report prints is accepted back, for every type.
    for (unsigned v = 1; v <= 6; ++v) {
        const auto type = static_cast<ResvType>(v);
        auto t = parse_resv_type(resv_type_short(type));
        ASSERT_TRUE(t) << v;
        EXPECT_EQ(*t, type);
    }
    // Numbers (SCSI numbers the types differently), "none", near misses,
    // padding and overlong input are refused.
    for (const char* bad : {"", "1", "3", "5", "none", "unknown", "wer", "write exclusive", " we", "we ",
                            "exclusive-access-", "registrants", "all-registrants", "shared\n"}) {
        auto t = parse_resv_type(bad);
        ASSERT_FALSE(t) << '"' << bad << '"';
        EXPECT_EQ(t.error(), Errc::invalid_argument);
    }
    EXPECT_FALSE(parse_resv_type(std::string(1 << 20, 'w')));
}

}  // namespace
}  // namespace nvfence
