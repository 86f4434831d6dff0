// SPDX-License-Identifier: MIT
// The one mapping from a volume name to a file-name component: the agent's
// state file, the etcd token file, nvfenced's lock file and default name.
// Existing state files are found by these names, so every row is fixed.
#include <gtest/gtest.h>

#include <string>

#include "internal/file_name.hpp"

namespace {

struct Row {
    std::string volume, stem, name;
};

TEST(VolumeFileName, EveryKindOfNameMapsAsBefore) {
    const Row rows[] = {
        {"vol-0123456789abcdef0", "vol-0123456789abcdef0", "vol-0123456789abcdef0"},
        {"", "v", "v"},
        {".", "v.", "v."},
        {"..", "v..", "v.."},
        {".hidden", "v.hidden", "v.hidden"},
        {"a/../b", "a_.._b", "a_.._b"},
        {"/dev/nvme0n1", "_dev_nvme0n1", "_dev_nvme0n1"},
        {"-rf", "-rf", "v-rf"},
        {"_x", "_x", "_x"},
        {"a b\tc\n", "a_b_c_", "a_b_c_"},
        {"caf\xc3\xa9", "caf__", "caf__"},
        {std::string("a\0b", 3), "a_b", "a_b"},
        {"A.Z_0-9", "A.Z_0-9", "A.Z_0-9"},
    };
    for (const Row& r : rows) {
        EXPECT_EQ(nvfence::volume_file_stem(r.volume), r.stem) << r.volume;
        EXPECT_EQ(nvfence::volume_name(r.volume), r.name) << r.volume;
    }
}

TEST(VolumeFileName, TheNameIsCutAtItsBoundTheStemIsNot) {
    const std::string longest(200, 'x');
    EXPECT_EQ(nvfence::volume_file_stem(longest), longest);
    EXPECT_EQ(nvfence::volume_name(longest), std::string(64, 'x'));
    EXPECT_EQ(nvfence::volume_name("-" + longest), "v-" + std::string(62, 'x'));
    EXPECT_EQ(nvfence::volume_name(longest, 8), std::string(8, 'x'));
}

TEST(VolumeFileName, NeverEmptyHiddenOrAPathWhateverTheBytes) {
    for (int c = 0; c < 256; ++c) {
        for (const std::string& v : {std::string(1, static_cast<char>(c)), std::string(2, static_cast<char>(c))}) {
            const std::string stem = nvfence::volume_file_stem(v);
            const std::string name = nvfence::volume_name(v);
            for (const std::string& s : {stem, name}) {
                ASSERT_FALSE(s.empty()) << c;
                EXPECT_NE(s[0], '.') << c;
                EXPECT_EQ(s.find('/'), std::string::npos) << c;
                EXPECT_EQ(s.find('\0'), std::string::npos) << c;
            }
            EXPECT_NE(name[0], '-') << c;
        }
    }
}

TEST(VolumeFileNameDeathTest, ABoundTooSmallForThePrefixIsABrokenInvariant) {
    EXPECT_DEATH((void)nvfence::volume_name("x", 1), "broken invariant");
}

}  // namespace
