// SPDX-License-Identifier: MIT
// The cluster tag derived from corosync's cluster name (agent/cluster_tag.hpp):
// the function pinned by test vectors (it must never change: a changed tag
// would make every node of a running cluster see its keys as another
// cluster's), and reading the name from corosync-cmapctl and corosync.conf.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>

#include "agent/agent_config.hpp"
#include "agent/cluster_tag.hpp"
#include "fake_passthru.hpp"

namespace nvfence {
namespace {

TEST(ClusterTag, TheFunctionIsPinnedByTestVectors) {
    // 1 + FNV-1a-32(name) mod 255 (docs/PACEMAKER.md "Keys of one cluster").
    EXPECT_EQ(cluster_tag_for_name("nvlab"), 243);  // FNV-1a-32 3767569652
    EXPECT_EQ(cluster_tag_for_name("debian"), 148);  // 66847632: Debian's default corosync.conf
    EXPECT_EQ(cluster_tag_for_name("mycluster"), 75);
    EXPECT_EQ(cluster_tag_for_name("hacluster"), 239);
    EXPECT_EQ(cluster_tag_for_name("a"), 71);
    EXPECT_EQ(cluster_tag_for_name(""), 2);  // the offset basis itself
    for (int i = 0; i < 2000; ++i) EXPECT_NE(cluster_tag_for_name("c" + std::to_string(i)), 0) << "0 is never derived";
}

TEST(ClusterTag, CmapctlOutput) {
    EXPECT_EQ(cmap_string_value("totem.cluster_name (str) = nvlab\n", "totem.cluster_name"), "nvlab");
    EXPECT_EQ(cmap_string_value("totem.cluster_name (str) = my cluster \n", "totem.cluster_name"), "my cluster");
    EXPECT_FALSE(cmap_string_value("totem.cluster_name_x (str) = a\n", "totem.cluster_name"));
    EXPECT_FALSE(cmap_string_value("totem.cluster_name (str) = \n", "totem.cluster_name"));
    EXPECT_FALSE(cmap_string_value("Can't get key totem.cluster_name. Error CS_ERR_NOT_EXIST\n", "totem.cluster_name"));
    EXPECT_FALSE(cmap_string_value("", "totem.cluster_name"));
}

TEST(ClusterTag, CorosyncConf) {
    const std::string conf =
        "# cluster_name: commented\n"
        "system { cluster_name: not-this }\n"
        "totem {\n"
        "  version: 2\n"
        "  interface {\n"
        "    cluster_name: nested\n"
        "  }\n"
        "  cluster_name: nvlab   # the lab's\n"
        "  transport: knet\n"
        "}\n"
        "nodelist {\n  node { name: a }\n}\n";
    EXPECT_EQ(corosync_conf_cluster_name(conf), "nvlab");
    EXPECT_FALSE(corosync_conf_cluster_name("totem {\n  version: 2\n}\n"));
    EXPECT_FALSE(corosync_conf_cluster_name("logging {\n cluster_name: x\n}\n"));
    EXPECT_FALSE(corosync_conf_cluster_name(""));

    test::TempDir dir;
    const std::string path = dir.path() + "/corosync.conf";
    std::string why;
    auto none = tag_from_corosync_conf(path, why);
    ASSERT_TRUE(none) << why;
    EXPECT_EQ(*none, 0) << "no corosync on this host: tag 0";
    std::ofstream(path) << conf;
    auto lab = tag_from_corosync_conf(path, why);
    ASSERT_TRUE(lab) << why;
    EXPECT_EQ(*lab, 243);
    std::ofstream(path, std::ios::trunc) << "totem {\n}\n";
    auto r = tag_from_corosync_conf(path, why);
    ASSERT_FALSE(r);
    EXPECT_NE(why.find("set cluster_tag"), std::string::npos) << why;
}

// The watcher needs to know whether cluster_tag was given (else it derives).
TEST(ClusterTag, TheSettingsSayWhetherTheTagWasGiven) {
    std::string why;
    auto d = parse_agent_settings({{"device", "/dev/nvme0n1"}, {"role", "watch"}, {"node_id", "1"}}, why);
    ASSERT_TRUE(d) << why;
    EXPECT_FALSE(d->tag_given);
    auto g = parse_agent_settings({{"device", "/dev/nvme0n1"}, {"cluster_tag", "0"}}, why);
    ASSERT_TRUE(g) << why;
    EXPECT_TRUE(g->tag_given);
    EXPECT_EQ(g->tag, 0);
}

}  // namespace
}  // namespace nvfence
