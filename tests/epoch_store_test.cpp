// SPDX-License-Identifier: MIT
// EpochStore: the persisted highest epoch, in a temporary directory.

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>

#include "fake_passthru.hpp"
#include "nvfence/epoch_store.hpp"
#include "nvfence/error.hpp"

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

TEST(EpochStore, UnusableDirectoryIsStateIo) {
    TempDir d;
    d.write("file", "x");
    // The "directory" is a regular file: neither load nor raise can work.
    EpochStore s(d.path() + "/file", "vol");
    // Not "absent": an unreadable store must never read as epoch 0.
    EXPECT_EQ(s.load().error(), Errc::state_io);
    EXPECT_EQ(s.raise_to(1).error(), Errc::state_io);
    EpochStore under_file(d.path() + "/file/sub", "vol");
    EXPECT_EQ(under_file.raise_to(1).error(), Errc::state_io);
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
        EXPECT_EQ(s.raise_to(1).error(), Errc::state_io) << "'" << text << "'";
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
    EXPECT_EQ(s.load().error(), Errc::state_io);
    EXPECT_EQ(s.raise_to(3).error(), Errc::state_io);
}

}  // namespace
}  // namespace nvfence
