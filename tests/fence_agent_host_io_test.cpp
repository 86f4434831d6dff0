// SPDX-License-Identifier: MIT
// fence_nvfence's own use of the machine (tools/fence_nvfence/host_io.hpp):
// corosync-cmapctl's bound holds whatever the child does, and the debug
// file is opened close-on-exec, without following a link, mode 0600.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "fake_passthru.hpp"
#include "host_io.hpp"
#include "nvfence/error.hpp"

namespace nvfence::fence_agent {
namespace {

using Clock = std::chrono::steady_clock;

long ms_since(Clock::time_point t0) {
    return static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

TEST(FenceAgentHostIo, RunBoundedReturnsTheOutput) {
    auto r = run_bounded("/bin/sh", {"-c", "echo totem.cluster_name '(str)' = nvlab"}, 5000);
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_EQ(*r, "totem.cluster_name (str) = nvlab\n");
    EXPECT_EQ(run_bounded("/bin/sh", {"-c", "exit 3"}, 5000).error(), errno_error(EIO));
    EXPECT_EQ(run_bounded("/nonexistent/corosync-cmapctl", {}, 5000).error(), errno_error(ENOENT));
}

// A child that closes its stdout but does not exit (a hung corosync-cmapctl
// after its output): the bound holds, the child is killed.
TEST(FenceAgentHostIo, TheBoundHoldsForAChildThatClosesItsOutputButDoesNotExit) {
    const auto t0 = Clock::now();
    auto r = run_bounded("/bin/sh", {"-c", "exec >&-; sleep 3"}, 300);
    EXPECT_LT(ms_since(t0), 2000) << "waited for the child past the bound";
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error(), make_error_code(Errc::timeout));
    const auto t1 = Clock::now();
    auto s = run_bounded("/bin/sh", {"-c", "sleep 3"}, 300);  // output open, silent
    EXPECT_LT(ms_since(t1), 2000);
    EXPECT_EQ(s.error(), make_error_code(Errc::timeout));
}

TEST(FenceAgentHostIo, TheDebugFileIsPrivateCloseOnExecAndNeverALink) {
    test::TempDir dir;
    const std::string path = dir.path() + "/fence_nvfence.log";
    const mode_t old = ::umask(0);
    auto f = open_debug_file(path);
    ::umask(old);
    ASSERT_TRUE(f) << f.error().message();
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_NE(::fcntl(f->get(), F_GETFD) & FD_CLOEXEC, 0) << "inherited by the programs fence_nvfence runs";
    EXPECT_EQ(::write(f->get(), "x\n", 2), 2);
    const std::string link = dir.path() + "/link.log";
    std::filesystem::create_symlink(dir.path() + "/target", link);
    auto l = open_debug_file(link);
    ASSERT_FALSE(l);
    EXPECT_EQ(l.error(), errno_error(ELOOP));
    EXPECT_FALSE(std::filesystem::exists(dir.path() + "/target")) << "followed the link";
}

}  // namespace
}  // namespace nvfence::fence_agent
