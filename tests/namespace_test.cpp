// SPDX-License-Identifier: MIT
// The pure parts of namespace.hpp: host id text, reading the host id
// through a Passthru, and refusing paths that are no NVMe namespace.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>

#include <random>

#include "fake_passthru.hpp"
#include "nvfence/error.hpp"
#include "nvfence/namespace.hpp"

namespace nvfence {
namespace {

using test::ScriptedPassthru;
using test::TempDir;

TEST(ParseHostId, PlainHexAndUuidForms) {
    auto h = parse_host_id("000102030405060708090a0b0c0d0e0f");
    ASSERT_TRUE(h);
    for (size_t i = 0; i < 16; ++i) EXPECT_EQ((*h)[i], i);
    auto u = parse_host_id("00010203-0405-0607-0809-0A0B0C0D0E0F");
    ASSERT_TRUE(u);
    EXPECT_EQ(*u, *h);
    auto f = parse_host_id("ffffffffffffffffffffffffffffffff");
    ASSERT_TRUE(f);
    for (uint8_t b : *f) EXPECT_EQ(b, 0xff);
}

TEST(ParseHostId, Rejections) {
    const char* bad[] = {"",
                         "0",
                         "000102030405060708090a0b0c0d0e0",    // 31 digits
                         "000102030405060708090a0b0c0d0e0f0",  // 33 digits
                         "000102030405060708090a0b0c0d0e0g",
                         " 000102030405060708090a0b0c0d0e0f",
                         "000102030405060708090a0b0c0d0e0f\n",
                         "0x0102030405060708090a0b0c0d0e0f",
                         "00010203:0405:0607:0809:0a0b0c0d0e0f"};
    for (const char* s : bad) {
        auto h = parse_host_id(s);
        EXPECT_FALSE(h) << "'" << s << "'";
        if (!h) {
            EXPECT_EQ(h.error(), Errc::invalid_argument);
        }
    }
}

TEST(ParseHostId, RoundTripsFormat) {
    std::mt19937 rng(99);
    for (int i = 0; i < 500; ++i) {
        HostId id;
        for (auto& b : id) b = static_cast<uint8_t>(rng());
        auto p = parse_host_id(format_host_id(id));
        ASSERT_TRUE(p);
        EXPECT_EQ(*p, id);
    }
}

// A controller name with no sysfs directory: no fallback host id.
NamespacePaths no_sysfs() {
    NamespacePaths p;
    p.controller = "nvme-test-none";
    return p;
}

TEST(ReadHostId, FromGetFeatures) {
    ScriptedPassthru pt;
    std::vector<uint8_t> id(16);
    for (size_t i = 0; i < 16; ++i) id[i] = static_cast<uint8_t>(0xa0 + i);
    pt.replies.push_back({id, uint32_t{1}});
    auto h = read_host_id(pt, no_sysfs());
    ASSERT_TRUE(h) << h.error().message();
    for (size_t i = 0; i < 16; ++i) EXPECT_EQ((*h)[i], 0xa0 + i);
    ASSERT_EQ(pt.sent.size(), 1u);
    EXPECT_EQ(pt.sent[0], encode_get_host_id());
}

TEST(ReadHostId, ZeroOrFailedAndNoSysfsIsUnknown) {
    ScriptedPassthru pt;
    pt.replies.push_back({std::vector<uint8_t>(16, 0), uint32_t{0}});
    auto h = read_host_id(pt, no_sysfs());
    ASSERT_FALSE(h);
    EXPECT_EQ(h.error(), Errc::host_id_unknown);
    pt.replies.push_back({{}, make_nvme_error(0x4002)});
    h = read_host_id(pt, no_sysfs());
    ASSERT_FALSE(h);
    EXPECT_EQ(h.error(), Errc::host_id_unknown);
}

TEST(ResolveNamespace, RefusesWhatIsNoNamespace) {
    TempDir d;
    d.write("file", "x");
    EXPECT_EQ(resolve_namespace(d.path() + "/missing").error(), Errc::not_found);
    EXPECT_EQ(resolve_namespace(d.path() + "/file/x").error(), Errc::not_found);
    EXPECT_EQ(resolve_namespace(d.path() + "/file").error(), Errc::not_nvme);
    EXPECT_EQ(resolve_namespace(d.path()).error(), Errc::not_nvme);
    EXPECT_EQ(resolve_namespace("/dev/null").error(), Errc::not_nvme);
    EXPECT_EQ(exit_code_for(resolve_namespace("/dev/null").error()), ExitCode::unsupported);
}

// Found by vm_bad_input: a namespace removed while a command starts leaves
// its /dev node for a moment after the kernel dropped the device; the CLI
// said "not an NVMe namespace" (exit 4, unsupported) instead of "the device
// disappeared". A device node with no device behind it is that state.
TEST(ResolveNamespace, ANodeWhoseDeviceIsGoneIsDeviceGone) {
    TempDir d;
    const std::string node = d.path() + "/nvme9n9";
    // Major 259 (blkext, where NVMe namespaces live), a minor no system has.
    if (::mknod(node.c_str(), S_IFBLK | 0600, makedev(259, 1048000)) != 0)
        GTEST_SKIP() << "mknod needs root (CAP_MKNOD): " << std::strerror(errno);
    const auto r = resolve_namespace(node);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error(), Errc::device_gone) << r.error().message();
    EXPECT_NE(exit_code_for(r.error()), ExitCode::unsupported);
}

TEST(NamespaceInfo, ReservationsNeedOncsAndRescap) {
    NamespaceInfo info;
    EXPECT_FALSE(info.reservations());
    info.ctrl.reservations = true;
    EXPECT_FALSE(info.reservations()) << "ONCS alone";
    info.ns.rescap.ptpl = true;
    info.ns.rescap.iekey = true;
    EXPECT_FALSE(info.reservations()) << "no reservation type";
    info.ns.rescap.wear = true;
    EXPECT_TRUE(info.reservations());
    info.ctrl.reservations = false;
    EXPECT_FALSE(info.reservations());
}

TEST(NamespaceInfo, LooksShared) {
    NamespaceInfo info;
    info.paths.transport = "pcie";
    EXPECT_FALSE(info.looks_shared());
    info.ctrl.multi_controller = true;
    EXPECT_TRUE(info.looks_shared());
    info.ctrl.multi_controller = false;
    info.ns.shared = true;
    EXPECT_TRUE(info.looks_shared());
    info.ns.shared = false;
    info.ctrl.model = "Amazon Elastic Block Store";
    EXPECT_TRUE(info.looks_shared());
    info.ctrl.model = "QEMU NVMe Ctrl";
    info.paths.transport = "tcp";
    EXPECT_TRUE(info.looks_shared());
    info.paths.transport = "";
    EXPECT_FALSE(info.looks_shared());
}

}  // namespace
}  // namespace nvfence
