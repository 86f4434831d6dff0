// SPDX-License-Identifier: MIT
// `nvfence status --all` (tools/nvfence/status_all.hpp): finding the
// volumes of a host, the exit code, the table and the JSON as pure
// functions; then the CLI end to end against control servers of this test
// (no device, no nvfenced).

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "fake_passthru.hpp"
#include "nvfence/fd.hpp"
#include "nvfence/error.hpp"
#include "nvfence/key.hpp"
#include "status_all.hpp"
#include "agent/control_server.hpp"

namespace nvfence::test {
namespace {

using cli::VolumeStatus;

ControlReply reply(AgentState s, uint64_t key, uint64_t holder, bool self, uint64_t age_ms) {
    ControlReply r;
    r.state = s;
    r.key = key;
    r.holder = holder;
    r.holder_self = self;
    r.last_check_age_ms = age_ms;
    r.volume = "v";
    return r;
}

VolumeStatus answered(const std::string& name, ControlReply r) {
    VolumeStatus v;
    v.volume = name;
    v.socket = "/run/nvfence/" + name + ".sock";
    v.configured = true;
    v.reply = std::move(r);
    return v;
}

VolumeStatus silent(const std::string& name, std::error_code ec) {
    VolumeStatus v;
    v.volume = name;
    v.socket = "/run/nvfence/" + name + ".sock";
    v.configured = true;
    v.error = ec;
    v.failure = cli::transport_failure(v.socket, ec, 5000);
    return v;
}

uint64_t k(uint8_t node, uint32_t epoch) { return *make_key({0, node, epoch}); }

TEST(StatusAllTest, TableHasOneAlignedLinePerVolume) {
    const std::vector<VolumeStatus> vs = {
        answered("db1", reply(AgentState::holder, k(1, 41), k(1, 41), true, 400)),
        answered("vol-0123456789abcdef0", reply(AgentState::fenced, 0, k(2, 42), false, 12000)),
        answered("w", reply(AgentState::waiting, 0, 0, false, kControlNever)),
        silent("db2", errno_error(ENOENT)),
    };
    const std::string want =
        "VOLUME                 STATE    KEY        HOLDER                 LAST CHECK\n"
        "db1                    HOLDER   nf:0:1:41  nf:0:1:41 (this host)  400 ms ago\n"
        "vol-0123456789abcdef0  FENCED   none       nf:0:2:42              12s ago\n"
        "w                      WAITING  none       none                   never\n"
        "db2                    -        -          -                      not answering: no nvfenced listening at "
        "/run/nvfence/db2.sock\n";
    EXPECT_EQ(cli::format_status_table(vs), want);
}

TEST(StatusAllTest, ExitCodeSaysWhetherEveryAgentAnswered) {
    const auto ok = answered("a", reply(AgentState::standby, k(1, 1), 0, false, 10));
    // FENCED is an answer: status reports it, it is not a failure of status.
    const auto fenced = answered("f", reply(AgentState::fenced, 0, 0, false, 10));
    EXPECT_EQ(cli::status_all_exit_code({ok, fenced}), 0);
    EXPECT_EQ(cli::status_all_exit_code({ok, silent("b", errno_error(ENOENT))}), 1);
    EXPECT_EQ(cli::status_all_exit_code({ok, silent("b", make_error_code(Errc::timeout))}), 1);
    EXPECT_EQ(cli::status_all_exit_code({ok, silent("b", errno_error(EACCES))}), 5) << "permission only";
    EXPECT_EQ(cli::status_all_exit_code({silent("b", errno_error(EACCES)), silent("c", errno_error(ECONNREFUSED))}),
              1);
    EXPECT_EQ(cli::status_all_exit_code({}), 1) << "no volume at all";
    EXPECT_EQ(cli::status_all_error({ok, silent("b", errno_error(ENOENT)), silent("c", errno_error(ENOENT))}, "/e",
                                    "/r"),
              "2 of 3 agents not answering: b, c");
    EXPECT_EQ(cli::status_all_error({ok}, "/e", "/r"), "");
    EXPECT_EQ(cli::status_all_error({}, "/e", "/r"),
              "no nvfenced volume here: no /e/<volume>.conf and no agent socket in /r");
}

TEST(StatusAllTest, JsonListsEveryVolumeWithTheStatusMembersOrTheFailure) {
    const std::vector<VolumeStatus> vs = {answered("db1", reply(AgentState::holder, k(1, 41), k(1, 41), true, 400)),
                                          silent("db2", errno_error(ENOENT))};
    const auto j = nlohmann::json::parse(cli::status_all_json(vs, 1, "1 of 2 agents not answering: db2"));
    EXPECT_EQ(j["schema_version"], cli::kJsonSchemaVersion);
    EXPECT_EQ(j["command"], "status");
    EXPECT_EQ(j["exit_code"], 1);
    EXPECT_EQ(j["error"], "1 of 2 agents not answering: db2");
    EXPECT_EQ(j["cause"], errno_error(ENOENT).message());
    ASSERT_EQ(j["volumes"].size(), 2u);
    const auto& a = j["volumes"][0];
    EXPECT_EQ(a["name"], "db1");
    EXPECT_EQ(a["volume"], "v") << "the agent's volume";
    EXPECT_EQ(a["answering"], true);
    EXPECT_EQ(a["state"], "HOLDER");
    EXPECT_EQ(a["key_text"], "nf:0:1:41");
    EXPECT_EQ(a["epoch"], 41);
    EXPECT_EQ(a["holder_self"], true);
    EXPECT_EQ(a["last_check_age_ms"], 400);
    const auto& b = j["volumes"][1];
    EXPECT_EQ(b["answering"], false);
    EXPECT_EQ(b["volume"], "db2");
    EXPECT_EQ(b["error"], "no nvfenced listening at /run/nvfence/db2.sock");
    EXPECT_FALSE(b.contains("state"));
    const auto ok = nlohmann::json::parse(cli::status_all_json({vs[0]}, 0, ""));
    EXPECT_FALSE(ok.contains("error")) << "no failure members when all answered";
}

TEST(StatusAllTest, FindsConfiguredVolumesAndAgentSocketsOnce) {
    TempDir conf, run;
    std::ofstream(conf.path() + "/db1.conf") << "node_id = 1\n";
    std::ofstream(conf.path() + "/db2.conf") << "node_id = 2\ncontrol_socket = \"" << run.path()
                                             << "/custom.sock\"  # its own\n";
    std::ofstream(conf.path() + "/etcd-password") << "x\n";  // not a configuration
    std::ofstream(conf.path() + "/-bad.conf") << "x\n";      // not an instance name
    std::ofstream(run.path() + "/notasocket.sock") << "x\n";
    auto bind_at = [](const std::string& p) {
        const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::strncpy(a.sun_path, p.c_str(), sizeof a.sun_path - 1);
        EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << p;
        return Fd(fd);
    };
    Fd s1 = bind_at(run.path() + "/custom.sock"), s2 = bind_at(run.path() + "/manual.sock"),
       s3 = bind_at(run.path() + "/db1.sock");
    const auto vs = cli::find_volumes(conf.path(), run.path());
    ASSERT_EQ(vs.size(), 3u);
    EXPECT_EQ(vs[0].volume, "db1");
    EXPECT_EQ(vs[0].socket, run.path() + "/db1.sock");
    EXPECT_TRUE(vs[0].configured);
    EXPECT_EQ(vs[1].volume, "db2");
    EXPECT_EQ(vs[1].socket, run.path() + "/custom.sock") << "the configuration's control_socket";
    EXPECT_EQ(vs[2].volume, "manual");
    EXPECT_FALSE(vs[2].configured) << "an agent started by hand, found by its socket";
    EXPECT_TRUE(cli::find_volumes(conf.path() + "/none", run.path() + "/none").empty());
}

// Control servers answering status in a thread until stopped.
class Agents {
public:
    void add(const std::string& path, AgentState s, uint64_t key) {
        ControlListenOptions o;
        o.path = path;
        auto l = control_listen(o);
        ASSERT_TRUE(l.ok()) << path;
        listeners_.push_back(std::move(*l));
        replies_.push_back(reply(s, key, key, true, 250));
    }
    void start() {
        th_ = std::thread([this] {
            std::vector<std::unique_ptr<ControlServer>> servers;
            for (auto& l : listeners_) servers.push_back(std::make_unique<ControlServer>(l.get(), 1000, 16));
            while (!stop_) {
                std::vector<pollfd> fds;
                for (auto& s : servers) s->poll_fds(fds);
                ::poll(fds.data(), fds.size(), 20);
                for (size_t i = 0; i < servers.size(); ++i)
                    servers[i]->serve([&, i](const ControlRequest&, const ControlPeer&) { return replies_[i]; });
            }
        });
    }
    ~Agents() {
        stop_ = true;
        if (th_.joinable()) th_.join();
    }

private:
    std::vector<Fd> listeners_;
    std::vector<ControlReply> replies_;
    std::atomic<bool> stop_{false};
    std::thread th_;
};

struct Run {
    int rc = -1;
    std::string out;
};

Run cli_run(const std::string& args) {
    Run r;
    FILE* p = ::popen((std::string(NVFENCE_CLI_BIN) + " " + args + " 2>/dev/null").c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int st = ::pclose(p);
    r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

TEST(StatusAllTest, TheCliListsEveryAgentAndFailsWhenOneIsNotAnswering) {
    TempDir conf, run;
    std::ofstream(conf.path() + "/db1.conf") << "node_id = 1\n";
    std::ofstream(conf.path() + "/db2.conf") << "node_id = 2\n";
    Agents agents;
    agents.add(run.path() + "/db1.sock", AgentState::holder, k(1, 41));
    agents.add(run.path() + "/db2.sock", AgentState::standby, k(2, 40));
    agents.start();
    const std::string dirs = " --config-dir " + conf.path() + " --run-dir " + run.path();
    auto r = cli_run("status --all" + dirs);
    EXPECT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("\ndb1     HOLDER   nf:0:1:41  nf:0:1:41 (this host)  250 ms ago\n"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("\ndb2     STANDBY  nf:0:2:40"), std::string::npos) << r.out;
    // A configured volume whose agent does not run: listed, exit 1.
    std::ofstream(conf.path() + "/db3.conf") << "node_id = 3\n";
    r = cli_run("status --all --json" + dirs);
    EXPECT_EQ(r.rc, 1) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["exit_code"], 1);
    ASSERT_EQ(j["volumes"].size(), 3u);
    EXPECT_EQ(j["volumes"][0]["state"], "HOLDER");
    EXPECT_EQ(j["volumes"][2]["name"], "db3");
    EXPECT_EQ(j["volumes"][2]["answering"], false);
    // --all names no single agent.
    EXPECT_EQ(cli_run("status db1 --all").rc, 2);
    EXPECT_EQ(cli_run("status --config-dir /x").rc, 2) << "--config-dir needs --all";
}

}  // namespace
}  // namespace nvfence::test
