// SPDX-License-Identifier: MIT
// nvfenced's elector keys: defaults, validation, messages naming the key.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "elector/elector_config.hpp"
#include "nvfence/error.hpp"

using namespace nvfence;

namespace {

using Map = std::map<std::string, std::string>;

std::string why_of(const Map& kv, const std::string& volume = "vol-1") {
    std::string why;
    auto r = parse_elector_settings(kv, volume, why);
    EXPECT_FALSE(r) << "accepted";
    if (!r) {
        EXPECT_EQ(r.error(), make_error_code(Errc::invalid_argument));
    }
    return why;
}

}  // namespace

TEST(ElectorConfig, NoneIsTheDefaultAndRefusesEtcdKeys) {
    std::string why;
    auto r = parse_elector_settings({{"device", "/dev/nvme0n1"}}, "vol-1", why);
    ASSERT_TRUE(r) << why;
    EXPECT_EQ(r->kind, ElectorKind::none);
    EXPECT_EQ(why_of({{"etcd_endpoints", "http://127.0.0.1:2379"}}),
              "etcd_endpoints = \"http://127.0.0.1:2379\": needs elector = etcd (elector is none)");
    EXPECT_NE(why_of({{"elector", "zookeeper"}}).find("must be none or etcd"), std::string::npos);
}

TEST(ElectorConfig, EtcdDefaults) {
    std::string why;
    auto r = parse_elector_settings({{"elector", "etcd"}, {"etcd_endpoints", "http://10.0.0.1:2379, http://10.0.0.2:2379"}},
                                    "vol-0abc", why);
    ASSERT_TRUE(r) << why;
    EXPECT_EQ(r->kind, ElectorKind::etcd);
    ASSERT_EQ(r->endpoints.size(), 2u);
    EXPECT_EQ(r->endpoints[1], "http://10.0.0.2:2379");
    EXPECT_EQ(r->election_name, "nvfence/vol-0abc");
    EXPECT_EQ(r->lease_ttl_s, 5u);
    EXPECT_EQ(r->lease_margin_ms, 1000u);
    EXPECT_EQ(r->etcd_timeout_ms, 1000u);
    EXPECT_EQ(r->lease_loss, LeaseLossAction::fence);
    auto g = lease_guard_options(*r);
    EXPECT_EQ(g.ttl_ms, 5000);
    EXPECT_EQ(g.renew_interval_ms, 1666);
    auto e = etcd_options(*r, "node=2", "/var/lib/nvfence", "vol-0abc");
    EXPECT_EQ(e.ttl_s, 5);
    EXPECT_EQ(e.election, "nvfence/vol-0abc");
}

TEST(ElectorConfig, ShortTtlScalesDefaults) {
    std::string why;
    auto r = parse_elector_settings(
        {{"elector", "etcd"}, {"etcd_endpoints", "http://[::1]:2379"}, {"lease_ttl_s", "2"}, {"lease_loss", "hold"}},
        "v", why);
    ASSERT_TRUE(r) << why;
    EXPECT_EQ(r->lease_margin_ms, 500u);
    EXPECT_EQ(r->etcd_timeout_ms, 666u);
    EXPECT_EQ(r->lease_loss, LeaseLossAction::hold);
}

TEST(ElectorConfig, BadValuesNameTheKey) {
    const Map base = {{"elector", "etcd"}, {"etcd_endpoints", "http://127.0.0.1:2379"}};
    auto with = [&](std::string k, std::string v) {
        Map m = base;
        m[k] = v;
        return why_of(m);
    };
    EXPECT_EQ(with("lease_ttl_s", "1"),
              "lease_ttl_s = \"1\": must be a whole number from 2 to 3600 (etcd's minimum TTL is 2 s)");
    EXPECT_NE(with("lease_ttl_s", "5s").find("lease_ttl_s"), std::string::npos);
    EXPECT_NE(with("lease_margin_ms", "2501").find("from 100 to 2500"), std::string::npos);
    EXPECT_NE(with("etcd_timeout_ms", "99").find("etcd_timeout_ms"), std::string::npos);
    EXPECT_EQ(with("role", "acquire"),
              "role = \"acquire\": must be standby with elector = etcd (the election decides who acquires)");
    EXPECT_NE(with("role", "watch").find("role = \"watch\": a check-only watcher never registers"), std::string::npos);
    EXPECT_NE(with("lease_loss", "reboot").find("fence or hold"), std::string::npos);
    EXPECT_NE(with("election_name", "a b").find("election_name"), std::string::npos);
    EXPECT_NE(with("election_name", "nvfence/").find("must not end"), std::string::npos);
    EXPECT_NE(with("etcd_endpoints", "").find("required"), std::string::npos);
    EXPECT_NE(with("etcd_endpoints", "127.0.0.1:2379").find("http://HOST:PORT"), std::string::npos);
    EXPECT_NE(with("etcd_endpoints", "http://h:0").find("etcd_endpoints"), std::string::npos);
    EXPECT_NE(with("etcd_endpoints", "http://h:2379/v3").find("etcd_endpoints"), std::string::npos);
    EXPECT_NE(with("etcd_endpoints", "http://u@h:2379").find("etcd_endpoints"), std::string::npos);
    EXPECT_NE(with("etcd_endpoints", "http://a:1,https://b:2").find("mixes"), std::string::npos);
    EXPECT_NE(with("etcd_ca_file", "/etc/ca.pem").find("need https"), std::string::npos);
    EXPECT_NE(with("etcd_endpoints", std::string(5000, 'x')).find("longer than 4096"), std::string::npos);
    std::string many;
    for (int i = 0; i < 17; ++i) many += "http://h:" + std::to_string(2000 + i) + ",";
    EXPECT_NE(with("etcd_endpoints", many).find("at most 16"), std::string::npos);
}

TEST(ElectorConfig, TlsFiles) {
    std::string why;
    Map m = {{"elector", "etcd"},
             {"etcd_endpoints", "https://etcd-1:2379 https://etcd-2:2379"},
             {"etcd_ca_file", "/etc/nvfence/ca.pem"},
             {"etcd_cert_file", "/etc/nvfence/client.pem"},
             {"etcd_key_file", "/etc/nvfence/client-key.pem"}};
    auto r = parse_elector_settings(m, "v", why);
    ASSERT_TRUE(r) << why;
    EXPECT_EQ(r->key_file, "/etc/nvfence/client-key.pem");
    m.erase("etcd_key_file");
    EXPECT_NE(why_of(m).find("go together"), std::string::npos);
    m["etcd_key_file"] = "relative.pem";
    EXPECT_NE(why_of(m).find("absolute path"), std::string::npos);
}

TEST(ElectorConfig, KeysListed) {
    const auto& k = elector_setting_keys();
    EXPECT_EQ(k.size(), 12u);
    EXPECT_NE(std::find(k.begin(), k.end(), "lease_loss"), k.end());
}

TEST(ElectorConfig, AUserAndItsPasswordFileGoTogether) {
    std::string why;
    Map m = {{"elector", "etcd"},
             {"etcd_endpoints", "https://127.0.0.1:2379"},
             {"etcd_user", "nvfence"},
             {"etcd_password_file", "/etc/nvfence/etcd.pw"}};
    auto r = parse_elector_settings(m, "v", why);
    ASSERT_TRUE(r) << why;
    EXPECT_EQ(r->user, "nvfence");
    EXPECT_EQ(r->password_file, "/etc/nvfence/etcd.pw");
    auto e = etcd_options(*r, "node=1", "/var/lib/nvfence", "v");
    EXPECT_EQ(e.user, "nvfence");
    EXPECT_EQ(e.password_file, "/etc/nvfence/etcd.pw");
    Map no_file = m;
    no_file.erase("etcd_password_file");
    EXPECT_EQ(why_of(no_file), "etcd_user = \"nvfence\": needs etcd_password_file (the user's password)");
    Map no_user = m;
    no_user.erase("etcd_user");
    EXPECT_EQ(why_of(no_user), "etcd_password_file = \"/etc/nvfence/etcd.pw\": needs etcd_user");
    Map spaced = m;
    spaced["etcd_user"] = "a b";
    EXPECT_NE(why_of(spaced).find("without spaces"), std::string::npos);
    Map relative = m;
    relative["etcd_password_file"] = "etcd.pw";
    EXPECT_NE(why_of(relative).find("absolute path"), std::string::npos);
    EXPECT_NE(why_of({{"etcd_user", "nvfence"}}).find("needs elector = etcd"), std::string::npos);
}

// A user's password (and then the token etcd gives for it, sent with every
// request) never goes over plain http: refused, naming what to change.
TEST(ElectorConfig, AUserOverPlainHttpIsRefused) {
    const Map m = {{"elector", "etcd"},
                   {"etcd_endpoints", "http://10.0.0.5:2379"},
                   {"etcd_user", "nvfence"},
                   {"etcd_password_file", "/etc/nvfence/etcd.pw"}};
    EXPECT_EQ(why_of(m), "etcd_user = \"nvfence\": the password and etcd's token would cross the network in clear "
                         "over http:// endpoints: use https:// endpoints (etcd's --cert-file and --key-file)");
    Map tls = m;
    tls["etcd_endpoints"] = "https://10.0.0.5:2379";
    std::string why;
    EXPECT_TRUE(parse_elector_settings(tls, "v", why)) << why;
    // Without a user, plain http stays accepted (a lab, a loopback etcd).
    Map plain = m;
    plain.erase("etcd_user");
    plain.erase("etcd_password_file");
    EXPECT_TRUE(parse_elector_settings(plain, "v", why)) << why;
}

namespace {
class PasswordFile : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/nvfence-pw-XXXXXX";
        ASSERT_NE(::mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }
    std::string write(const std::string& text, mode_t mode = 0600) {
        const std::string path = dir_ + "/pw";
        ::unlink(path.c_str());
        FILE* f = std::fopen(path.c_str(), "w");
        EXPECT_NE(f, nullptr);
        if (f) {
            std::fwrite(text.data(), 1, text.size(), f);
            std::fclose(f);
        }
        EXPECT_EQ(::chmod(path.c_str(), mode), 0);
        return path;
    }
    // read_etcd_password's refusal of @p text (mode @p mode): why.
    std::string refused(const std::string& text, mode_t mode = 0600) {
        std::string why;
        auto r = read_etcd_password(write(text, mode), why);
        EXPECT_FALSE(r) << "accepted: " << text.size() << " bytes";
        if (!r) {
            EXPECT_EQ(r.error(), make_error_code(ElectorErrc::auth_failed));
        }
        EXPECT_EQ(why.rfind("etcd_password_file = " + dir_ + "/pw: ", 0), 0u) << why;
        return why;
    }
    std::string dir_;
};
}  // namespace

TEST_F(PasswordFile, OneLineTheFinalNewlineIsNotPartOfIt) {
    std::string why;
    for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
             {"s3cret\n", "s3cret"}, {"s3cret", "s3cret"}, {"s3cret\r\n", "s3cret"},
             {"p\xc3\xa4ss w\xe2\x82\xacrd\n", "p\xc3\xa4ss w\xe2\x82\xacrd"},
             {std::string(kMaxPasswordFileBytes - 1, 'x') + "\n", std::string(kMaxPasswordFileBytes - 1, 'x')}}) {
        auto r = read_etcd_password(write(text, 0640), why);
        ASSERT_TRUE(r) << why;
        EXPECT_EQ(*r, want);
    }
}

TEST_F(PasswordFile, BadFilesAreRefusedSayingWhy) {
    EXPECT_NE(refused("pw\n", 0644).find("accessible by others"), std::string::npos);
    EXPECT_NE(refused("pw\n", 0602).find("accessible by others"), std::string::npos);
    EXPECT_NE(refused("").find("empty"), std::string::npos);
    EXPECT_NE(refused("\n").find("empty"), std::string::npos);
    EXPECT_NE(refused(std::string(kMaxPasswordFileBytes + 1, 'x')).find("longer than 1024"), std::string::npos);
    EXPECT_NE(refused("two\nlines\n").find("one line"), std::string::npos);
    EXPECT_NE(refused("tab\there").find("one line"), std::string::npos);
    EXPECT_NE(refused("bad\xff\xfeutf8").find("UTF-8"), std::string::npos);
    EXPECT_NE(refused("overlong\xc0\xaf").find("UTF-8"), std::string::npos);
    EXPECT_NE(refused("cut\xe2\x82").find("UTF-8"), std::string::npos);
    std::string why;
    EXPECT_FALSE(read_etcd_password(dir_ + "/absent", why));
    EXPECT_NE(why.find("No such file"), std::string::npos) << why;
    EXPECT_FALSE(read_etcd_password(dir_, why));
    EXPECT_NE(why.find("not a regular file"), std::string::npos) << why;
}

TEST_F(PasswordFile, CheckElectorFilesReadsItAsTheElectorWill) {
    ElectorSettings s;
    s.kind = ElectorKind::etcd;
    s.user = "nvfence";
    s.password_file = write("pw\n");
    std::string why;
    EXPECT_TRUE(check_elector_files(s, why)) << why;
    s.password_file = write("pw\n", 0604);
    auto r = check_elector_files(s, why);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error(), make_error_code(Errc::invalid_argument));
    EXPECT_NE(why.find("accessible by others"), std::string::npos) << why;
    s.password_file.clear();
    s.ca_file = dir_ + "/no-ca.pem";
    ASSERT_FALSE(check_elector_files(s, why));
    EXPECT_EQ(why, "etcd_ca_file = " + dir_ + "/no-ca.pem: No such file or directory");
}

