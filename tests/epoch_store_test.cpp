// SPDX-License-Identifier: MIT
// EpochStore: the persisted highest epoch, in a temporary directory.

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>

#include <fstream>
#include <sstream>
#include <string>

#include "fake_passthru.hpp"
#include "nvfence/epoch_store.hpp"
#include "nvfence/error.hpp"
#include "nvfence/key.hpp"
#include "nvfence/state_file.hpp"

namespace nvfence {
namespace {

using test::TempDir;

std::string slurp(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

bool exists(const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0;
}

TEST(EpochStore, PathIsVolumeDotEpochInTheDirectory) {
    TempDir d;
    EXPECT_EQ(EpochStore(d.path(), "vol-0123abc").path(), d.path() + "/vol-0123abc.epoch");
    EXPECT_EQ(EpochStore(d.path(), "nvme1n1").path(), d.path() + "/nvme1n1.epoch");
}

TEST(EpochStore, VolumeNameIsSanitised) {
    TempDir d;
    EXPECT_EQ(EpochStore(d.path(), "../../etc/passwd").path(), d.path() + "/v.._.._etc_passwd.epoch");
    EXPECT_EQ(EpochStore(d.path(), ".hidden").path(), d.path() + "/v.hidden.epoch");
    EXPECT_EQ(EpochStore(d.path(), "").path(), d.path() + "/v.epoch");
    EXPECT_EQ(EpochStore(d.path(), "a b/c\nd").path(), d.path() + "/a_b_c_d.epoch");
}

TEST(EpochStore, LoadIsZeroWhenAbsent) {
    TempDir d;
    EpochStore s(d.path(), "vol");
    auto v = s.load();
    ASSERT_TRUE(v) << v.error().message();
    EXPECT_EQ(*v, 0u);
    EXPECT_FALSE(exists(s.path())) << "load does not create the file";
}

TEST(EpochStore, RaiseToStoresAndNeverLowers) {
    TempDir d;
    EpochStore s(d.path(), "vol");
    ASSERT_TRUE(s.raise_to(5));
    EXPECT_EQ(*s.load(), 5u);
    EXPECT_EQ(slurp(s.path()), "5\n");
    ASSERT_TRUE(s.raise_to(3));
    EXPECT_EQ(*s.load(), 5u);
    ASSERT_TRUE(s.raise_to(5));
    EXPECT_EQ(*s.load(), 5u);
    ASSERT_TRUE(s.raise_to(6));
    EXPECT_EQ(*s.load(), 6u);
    ASSERT_TRUE(s.raise_to(0xffffffffu));
    EXPECT_EQ(*s.load(), 0xffffffffu);
    EXPECT_EQ(slurp(s.path()), "4294967295\n");
    EXPECT_FALSE(exists(s.path() + ".tmp")) << "the temporary file is renamed away";
}

TEST(EpochStore, RaiseToZeroOnEmptyStoreWritesNothing) {
    TempDir d;
    EpochStore s(d.path(), "vol");
    ASSERT_TRUE(s.raise_to(0));
    EXPECT_FALSE(exists(s.path()));
}

TEST(EpochStore, SurvivesANewObject) {
    TempDir d;
    ASSERT_TRUE(EpochStore(d.path(), "vol").raise_to(77));
    EXPECT_EQ(*EpochStore(d.path(), "vol").load(), 77u);
    EXPECT_EQ(*EpochStore(d.path(), "other").load(), 0u) << "one file per volume";
}

TEST(EpochStore, FileIsPrivate) {
    TempDir d;
    EpochStore s(d.path(), "vol");
    ASSERT_TRUE(s.raise_to(1));
    struct stat st;
    ASSERT_EQ(::stat(s.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(EpochStore, CreatesItsDirectory) {
    TempDir d;
    const std::string dir = d.path() + "/state";
    EpochStore s(dir, "vol");
    EXPECT_EQ(*s.load(), 0u);
    ASSERT_TRUE(s.raise_to(9));
    EXPECT_EQ(*s.load(), 9u);
    struct stat st;
    ASSERT_EQ(::stat(dir.c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
}

TEST(EpochStore, UnusableDirectoryIsAStateErrorWithItsErrno) {
    TempDir d;
    d.write("file", "x");
    // The "directory" is a regular file: neither load nor raise can work.
    EpochStore s(d.path() + "/file", "vol");
    // Not "absent": an unreadable store must never read as epoch 0.
    EXPECT_EQ(s.load().error(), state_error(ENOTDIR));
    EXPECT_EQ(s.raise_to(1).error(), state_error(ENOTDIR));
    EpochStore under_file(d.path() + "/file/sub", "vol");
    EXPECT_TRUE(is_state_error(under_file.raise_to(1).error()));
}

TEST(EpochStore, MissingParentsAreCreated) {
    // A fresh host may have no /var/lib/nvfence, nor even /var/lib.
    TempDir d;
    EpochStore deep(d.path() + "/missing/parent", "vol");
    ASSERT_TRUE(deep.raise_to(7));
    EXPECT_EQ(*deep.load(), 7u);
}

TEST(EpochStore, GarbageIsStateIoAndIsNotOverwritten) {
    const char* bad[] = {"", "abc", "-1", "+1", "1x", "0x10", "4294967296", "99999999999999999999",
                         " 5", "5 6", "1.5", "\n"};
    for (const char* text : bad) {
        TempDir d;
        d.write("vol.epoch", text);
        EpochStore s(d.path(), "vol");
        auto v = s.load();
        EXPECT_FALSE(v) << "'" << text << "'";
        if (!v) {
            EXPECT_EQ(v.error(), Errc::state_io);
        }
        // raise_to must not paper over a corrupt store with a small value.
        EXPECT_TRUE(is_state_error(s.raise_to(1).error())) << "'" << text << "'";
        EXPECT_EQ(slurp(s.path()), text);
    }
}

TEST(EpochStore, TrailingNewlineAndSpacesAccepted) {
    const std::pair<const char*, uint32_t> ok[] = {{"12", 12}, {"12\n", 12}, {"12 \n", 12},
                                                   {"0\n", 0}, {"0012\n", 12}};
    for (const auto& [text, want] : ok) {
        TempDir d;
        d.write("vol.epoch", text);
        auto v = EpochStore(d.path(), "vol").load();
        ASSERT_TRUE(v) << "'" << text << "'";
        EXPECT_EQ(*v, want);
    }
}

TEST(EpochStore, DirectoryInPlaceOfTheFileIsStateIo) {
    TempDir d;
    ASSERT_EQ(::mkdir((d.path() + "/vol.epoch").c_str(), 0700), 0);
    EpochStore s(d.path(), "vol");
    EXPECT_EQ(s.load().error(), state_error(EISDIR));
    EXPECT_EQ(s.raise_to(3).error(), state_error(EISDIR));
}

// Issue 13, defect 9: a symlink is never followed, an unsafe directory refused.
TEST(EpochStore, SymlinksAreNotFollowedAndUnsafeDirectoriesRefused) {
    TempDir d;
    d.write("target", "5\n");
    ASSERT_EQ(::symlink((d.path() + "/target").c_str(), (d.path() + "/vol.epoch").c_str()), 0);
    EpochStore s(d.path(), "vol");
    EXPECT_EQ(s.load().error(), state_error(ELOOP));
    TempDir open_dir;
    ASSERT_EQ(::chmod(open_dir.path().c_str(), 0777), 0);
    EpochStore o(open_dir.path(), "vol");
    EXPECT_EQ(o.raise_to(3).error(), Errc::unsafe_state_dir);
    ASSERT_EQ(::chmod(open_dir.path().c_str(), 0700), 0);
    EXPECT_TRUE(o.raise_to(3));
}

// Issue 13, defect 2: the CLI and the agent raise the same file at once.
TEST(EpochStore, TwoProcessesRaisingAtOnceNeverLowerNorTearIt) {
    TempDir d;
    constexpr uint32_t kRaises = 300;
    pid_t kids[2];
    for (int k = 0; k < 2; ++k) {
        kids[k] = ::fork();
        ASSERT_GE(kids[k], 0);
        if (kids[k] == 0) {
            EpochStore s(d.path(), "vol");
            int bad = 0;
            for (uint32_t i = 1; i <= kRaises; ++i) {
                const uint32_t e = 2 * i + static_cast<uint32_t>(k);
                if (auto r = s.raise_to(e); !r) {
                    if (++bad < 3) std::fprintf(stderr, "raise_to(%u): %s\n", e, r.error().message().c_str());
                }
                auto v = s.load();
                if (!v || *v < e) {  // lowered by the other writer, or torn
                    if (++bad < 3)
                        std::fprintf(stderr, "load after raise_to(%u): %s\n", e,
                                     v ? std::to_string(*v).c_str() : v.error().message().c_str());
                }
            }
            ::_exit(bad == 0 ? 0 : 1);
        }
    }
    for (pid_t p : kids) {
        int status = 0;
        ASSERT_EQ(::waitpid(p, &status, 0), p);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a raise failed or the value went down";
    }
    EXPECT_EQ(*EpochStore(d.path(), "vol").load(), 2 * kRaises + 1);
    // No temporary file is left behind.
    size_t files = 0;
    for (const auto& e : std::filesystem::directory_iterator(d.path())) {
        (void)e;
        ++files;
    }
    EXPECT_EQ(files, 2u) << "vol.epoch and its lock file only";
}

TEST(EpochStore, ObserveEpochsIgnoresImplausibleEpochs) {
    ReservationStatus st;
    auto reg = [&](uint8_t tag, uint8_t node, uint32_t epoch) {
        Registrant r;
        r.key = *make_key({tag, node, epoch});
        st.registrants.push_back(r);
    };
    reg(1, 2, 40);
    reg(1, 3, kMaxEpoch);
    reg(2, 4, 900);  // another cluster tag: not ours to count
    auto o = observe_epochs(st, 1, 0);
    EXPECT_EQ(o.highest, 40u);
    ASSERT_EQ(o.implausible.size(), 1u);
    reg(1, 5, 10 + kMaxEpochJump + 1);
    o = observe_epochs(st, 1, 10);
    EXPECT_EQ(o.highest, 40u);
    EXPECT_EQ(o.implausible.size(), 2u);
    o = observe_epochs(st, 1, 0);
    EXPECT_EQ(o.highest, 10 + kMaxEpochJump + 1) << "no floor: only the ceiling applies";
    // The ceiling itself is the first epoch never used: implausible with no
    // floor too, so one key at it cannot exhaust a fresh host's epochs.
    reg(1, 6, kEpochCeiling);
    reg(1, 7, kEpochCeiling - 1);
    o = observe_epochs(st, 1, 0);
    EXPECT_EQ(o.highest, kEpochCeiling - 1);
    EXPECT_EQ(o.implausible.size(), 2u) << "kMaxEpoch and the ceiling";
}

// Every store names a file directly in the directory it syncs after the
// rename; a path elsewhere would be renamed without being made durable.
TEST(StateFileDeathTest, WritingOutsideTheSyncedDirectoryAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    TempDir d;
    EXPECT_DEATH((void)write_file_atomic(d.path(), d.path() + "/sub/x.epoch", "1\n"), "broken invariant");
    EXPECT_DEATH((void)write_file_atomic(d.path() + "/a", d.path() + "/b.epoch", "1\n"), "broken invariant");
    EXPECT_DEATH((void)write_file_atomic(d.path(), d.path(), "1\n"), "broken invariant");
}

}  // namespace
}  // namespace nvfence
