// SPDX-License-Identifier: MIT
// The uevent parser and the NVME_AEN match, on datagrams shaped as the
// kernel sends them (lib/kobject_uevent.c: "ACTION@DEVPATH\0KEY=VALUE\0...";
// drivers/nvme/host/core.c nvme_aen_uevent: "NVME_AEN=%#08x"). The first
// one is the datagram recorded in the lab (docs/PERFORMANCE.md).

#include <gtest/gtest.h>

#include <poll.h>

#include <string>
#include <vector>

#include "fake_passthru.hpp"
#include "agent/agent_config.hpp"
#include "nvfence/error.hpp"
#include "nvfence/reservation.hpp"
#include "agent/uevent.hpp"

namespace nvfence {
namespace {

std::vector<uint8_t> dgram(const std::vector<std::string>& parts) {
    std::vector<uint8_t> b;
    for (const auto& p : parts) {
        b.insert(b.end(), p.begin(), p.end());
        b.push_back(0);
    }
    return b;
}

const std::vector<std::string> kLabAen = {
    "change@/devices/virtual/nvme-fabrics/ctl/nvme0", "ACTION=change",
    "DEVPATH=/devices/virtual/nvme-fabrics/ctl/nvme0", "SUBSYSTEM=nvme", "NVME_AEN=0x800006",
    "MAJOR=245", "MINOR=0", "DEVNAME=nvme0", "NVME_TRTYPE=tcp", "NVME_TRADDR=169.254.1.1",
    "NVME_TRSVCID=4420", "NVME_HOST_TRADDR=none", "NVME_HOST_IFACE=none", "SEQNUM=672"};

TEST(Uevent, ParsesTheLabsReservationEvent) {
    auto e = parse_uevent(dgram(kLabAen));
    ASSERT_TRUE(e.ok()) << e.error().message();
    EXPECT_EQ(e->action, "change");
    EXPECT_EQ(e->devpath, "/devices/virtual/nvme-fabrics/ctl/nvme0");
    EXPECT_EQ(e->subsystem, "nvme");
    EXPECT_EQ(e->devname, "nvme0");
    ASSERT_TRUE(e->nvme_aen.has_value());
    EXPECT_EQ(*e->nvme_aen, 0x800006u);
    EXPECT_EQ(e->seqnum, 672u);
    EXPECT_TRUE(is_aen_for(*e, "nvme0"));
    EXPECT_FALSE(is_aen_for(*e, "nvme1"));
    EXPECT_FALSE(is_aen_for(*e, "nvme00"));
    EXPECT_FALSE(is_aen_for(*e, ""));
}

TEST(Uevent, DecodesTheAenDword) {
    // Type 6 (I/O command set specific), info 0 (Reservation Log Page
    // Available), log page 80h.
    const AenInfo a = decode_aen(0x800006u);
    EXPECT_EQ(a.type, 6);
    EXPECT_EQ(a.info, 0);
    EXPECT_EQ(a.log_page, 0x80);
    const AenInfo n = decode_aen(0x040002u);  // notice: namespace attribute changed, log 04h
    EXPECT_EQ(n.type, 2);
    EXPECT_EQ(n.info, 0);
    EXPECT_EQ(n.log_page, 0x04);
    const AenInfo all = decode_aen(0xffffffffu);
    EXPECT_EQ(all.type, 7);
    EXPECT_EQ(all.info, 0xff);
    EXPECT_EQ(all.log_page, 0xff);
}

TEST(Uevent, OtherEventsDoNotMatch) {
    auto add = parse_uevent(dgram({"add@/devices/virtual/block/loop0", "ACTION=add",
                                   "DEVPATH=/devices/virtual/block/loop0", "SUBSYSTEM=block", "DEVNAME=loop0"}));
    ASSERT_TRUE(add.ok());
    EXPECT_FALSE(add->nvme_aen);
    EXPECT_FALSE(is_aen_for(*add, "loop0"));
    // A namespace's change event is not the controller's AEN.
    auto ns = parse_uevent(dgram({"change@/devices/virtual/nvme-fabrics/ctl/nvme0/nvme0n1", "ACTION=change",
                                  "DEVPATH=/devices/virtual/nvme-fabrics/ctl/nvme0/nvme0n1", "SUBSYSTEM=block",
                                  "DEVNAME=nvme0n1"}));
    ASSERT_TRUE(ns.ok());
    EXPECT_FALSE(is_aen_for(*ns, "nvme0"));
    // NVME_AEN on another subsystem does not count.
    auto odd = parse_uevent(dgram({"change@/x/nvme0", "SUBSYSTEM=misc", "NVME_AEN=0x800006", "DEVNAME=nvme0"}));
    ASSERT_TRUE(odd.ok());
    EXPECT_FALSE(is_aen_for(*odd, "nvme0"));
}

TEST(Uevent, WithoutDevnameTheDevpathNamesTheController) {
    auto e = parse_uevent(dgram({"change@/devices/pci0000:00/0000:00:04.0/nvme/nvme3", "SUBSYSTEM=nvme",
                                 "NVME_AEN=0x800006"}));
    ASSERT_TRUE(e.ok());
    EXPECT_TRUE(is_aen_for(*e, "nvme3"));
    EXPECT_FALSE(is_aen_for(*e, "nvme"));
}

TEST(Uevent, AenValueForms) {
    auto value = [](const std::string& v) {
        auto e = parse_uevent(dgram({"change@/c/nvme0", "SUBSYSTEM=nvme", "NVME_AEN=" + v}));
        EXPECT_TRUE(e.ok()) << v;
        return e.ok() ? e->nvme_aen : std::optional<uint32_t>{};
    };
    EXPECT_EQ(value("0x800006"), 0x800006u);
    EXPECT_EQ(value("0X00800006"), 0x800006u);
    EXPECT_EQ(value("8388614"), 0x800006u);
    EXPECT_EQ(value("0xffffffff"), 0xffffffffu);
    EXPECT_FALSE(value("0x100000000"));
    EXPECT_FALSE(value("4294967296"));
    EXPECT_FALSE(value(""));
    EXPECT_FALSE(value("0x"));
    EXPECT_FALSE(value("0xg"));
    EXPECT_FALSE(value("-1"));
    EXPECT_FALSE(value("12 "));
}

TEST(Uevent, LastNulMayBeMissing) {
    auto b = dgram({"change@/c/nvme0", "SUBSYSTEM=nvme", "NVME_AEN=0x800006"});
    b.pop_back();
    auto e = parse_uevent(b);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->nvme_aen, 0x800006u);
}

TEST(Uevent, RefusesWhatIsNotAKernelUevent) {
    auto bad = [](const std::vector<uint8_t>& b) {
        auto e = parse_uevent(b);
        return !e.ok() && e.error() == Errc::malformed_data;
    };
    EXPECT_TRUE(bad({}));
    EXPECT_TRUE(bad(dgram({"libudev", "ACTION=change"})));             // udev's re-broadcast
    EXPECT_TRUE(bad(dgram({"change/devices/x", "ACTION=change"})));     // no '@'
    EXPECT_TRUE(bad(dgram({"@/devices/x"})));                          // empty action
    EXPECT_TRUE(bad(dgram({"change@"})));                              // empty devpath
    EXPECT_TRUE(bad(dgram({"change@/c/nvme0", "SUBSYSTEM"})));          // no '='
    EXPECT_TRUE(bad(dgram({"change@/c/nvme0", "=nvme"})));              // empty key
    EXPECT_TRUE(bad(dgram({"change@/c/nvme0", "ACTION=add"})));         // contradicts the header
    EXPECT_TRUE(bad(dgram({"change@/c/nvme0", "DEVPATH=/c/nvme1"})));   // contradicts the header
    std::vector<uint8_t> big = dgram({"change@/c/nvme0", "X=" + std::string(kMaxUeventBytes, 'a')});
    EXPECT_TRUE(bad(big));
    // Empty fields (double NULs) and unknown keys are skipped.
    auto ok = parse_uevent(dgram({"change@/c/nvme0", "", "FOO=bar=baz", "SUBSYSTEM=nvme"}));
    ASSERT_TRUE(ok.ok());
    EXPECT_EQ(ok->subsystem, "nvme");
}

// After each event the agent reads log page 80h with Retain Asynchronous
// Event clear: that read consumes the page and re-arms the event (a
// controller need not send another "log page available" event for a page
// that was not read).
TEST(Uevent, TheAgentsLogReadReArmsTheEvent) {
    test::ScriptedPassthru pt;
    pt.replies.push_back({{1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0}, uint32_t{0}});
    Reservations r(pt, 1);
    auto n = r.notification_log();
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(n->type, NotificationType::registration_preempted);
    ASSERT_EQ(pt.sent.size(), 1u);
    const Command& c = pt.sent[0];
    EXPECT_EQ(c.queue, Queue::admin);
    EXPECT_EQ(c.opcode, 0x02);
    // LID 80h in bits 7:0, LSP 0, RAE (bit 15) clear, NUMDL 15 (64 bytes).
    EXPECT_EQ(c.cdw[0], 0x000f0080u);
    EXPECT_EQ(c.cdw[1], 0u);
    EXPECT_EQ(c.data_len, 64u);
}

TEST(Uevent, AenWakeupIsAConfigKeyOnByDefault) {
    std::string why;
    auto d = parse_agent_settings({{"device", "/dev/nvme1n1"}}, why);
    ASSERT_TRUE(d.ok()) << why;
    EXPECT_TRUE(d->aen_wakeup);
    auto off = parse_agent_settings({{"device", "/dev/nvme1n1"}, {"aen_wakeup", "false"}}, why);
    ASSERT_TRUE(off.ok()) << why;
    EXPECT_FALSE(off->aen_wakeup);
    auto bad = parse_agent_settings({{"device", "/dev/nvme1n1"}, {"aen_wakeup", "sometimes"}}, why);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.error(), Errc::invalid_argument);
    EXPECT_NE(why.find("aen_wakeup"), std::string::npos) << why;
}

TEST(UeventListener, OpensAndDrainsWithinItsBound) {
    auto l = UeventListener::open();
    ASSERT_TRUE(l.ok()) << l.error().message();
    EXPECT_GE(l->fd(), 0);
    pollfd p{l->fd(), POLLIN, 0};
    EXPECT_GE(::poll(&p, 1, 0), 0);
    // Nothing asked for matches a controller name no kernel uses.
    auto d = l->drain("nvme-none", 4);
    ASSERT_TRUE(d.ok()) << d.error().message();
    EXPECT_LE(d->datagrams, 4u);
    EXPECT_EQ(d->matched, 0u);
    auto z = l->drain("nvme-none", 0);
    ASSERT_TRUE(z.ok());
    EXPECT_EQ(z->datagrams, 0u);
}

}  // namespace
}  // namespace nvfence
