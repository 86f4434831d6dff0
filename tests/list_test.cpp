// SPDX-License-Identifier: MIT
#include "internal/list.hpp"

#include <gtest/gtest.h>

using nvfence::split_list;
using V = std::vector<std::string>;

TEST(SplitList, CommasAndWhitespaceSeparate) {
    EXPECT_EQ(split_list("a,b c\td\ne"), (V{"a", "b", "c", "d", "e"}));
}

TEST(SplitList, EmptyItemsAreDropped) {
    EXPECT_EQ(split_list(" ,a,, ,b, "), (V{"a", "b"}));
    EXPECT_EQ(split_list(""), V{});
    EXPECT_EQ(split_list(" , \t"), V{});
}

TEST(SplitList, OrderAndDuplicatesKept) {
    EXPECT_EQ(split_list("b a b"), (V{"b", "a", "b"}));
}

TEST(SplitList, OnlyTheGivenSeparators) {
    EXPECT_EQ(split_list("n1:1;n2:2 n3:3", ";"), (V{"n1:1", "n2:2 n3:3"}));
    EXPECT_EQ(split_list("x;y", ","), (V{"x;y"}));
}
