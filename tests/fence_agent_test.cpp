// SPDX-License-Identifier: MIT
// fence_nvfence (tools/fence_nvfence): option parsing from argv and stdin,
// and every action with its fence-agents exit code against the in-memory
// device model (tests/fake_passthru.hpp), several hosts sharing it.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "fake_passthru.hpp"
#include "docs_table.hpp"
#include "fence_agent.hpp"
#include "nvfence/error.hpp"
#include "nvfence/fence.hpp"
#include "nvfence/key.hpp"
#include "options.hpp"
#include "target.hpp"

namespace nvfence::fence_agent {
namespace {

using test::FakeTarget;
using test::HostPort;
using test::make_host;
using test::TempDir;

uint64_t key(uint8_t node, uint32_t epoch, uint8_t tag = 0) { return *make_key({tag, node, epoch}); }

Parsed argv(std::vector<std::string> a) { return parse_argv(a); }

// ---- options ---------------------------------------------------------------

TEST(FenceAgentOptions, ArgvTable) {
    struct Row {
        std::vector<std::string> args;
        Action action;
        std::string plug;
        std::vector<std::string> devices;
    };
    const Row rows[] = {
        {{"-o", "on", "-n", "n1", "-d", "/dev/a"}, Action::on, "n1", {"/dev/a"}},
        {{"-ooff", "-nn2", "-d/dev/a,/dev/b"}, Action::off, "n2", {"/dev/a", "/dev/b"}},
        {{"--action=status", "--plug=n3", "--devices=/dev/a /dev/b"}, Action::status, "n3", {"/dev/a", "/dev/b"}},
        {{"--action", "monitor", "--devices", "/dev/a"}, Action::monitor, "", {"/dev/a"}},
        {{"-o", "meta-data"}, Action::metadata, "", {}},
        {{"-o", "ENABLE", "-n", "x"}, Action::on, "x", {}},
        {{"-o", "disable", "-n", "x"}, Action::off, "x", {}},
        {{"-o", "validate-all"}, Action::validate_all, "", {}},
        {{"-o", "list"}, Action::list, "", {}},
        {{"-o", "list-status"}, Action::list_status, "", {}},
        {{"-o", "manpage"}, Action::manpage, "", {}},
        {{"--action", "manpage"}, Action::manpage, "", {}},
        {{"-n", "a", "-n", "b"}, Action::off, "b", {}},  // last wins; default action off
    };
    for (const auto& r : rows) {
        auto p = argv(r.args);
        ASSERT_TRUE(p.ok()) << r.args.front() << ": " << (p.errors.empty() ? "" : p.errors.front());
        EXPECT_EQ(p.opts.action, r.action) << r.args.front();
        EXPECT_EQ(p.opts.plug, r.plug) << r.args.front();
        EXPECT_EQ(p.opts.devices, r.devices) << r.args.front();
    }
}

TEST(FenceAgentOptions, ArgvFlagsAndValues) {
    auto p = argv({"-vvq", "-k", "3", "--node-ids=n1:1;n2:2", "--reservation-type", "exclusive", "--cluster-tag=9",
                   "--delay=5", "-D", "/tmp/x.log", "--state-dir=/s", "--agent-socket=/run/x.sock",
                   "--corosync-cmap-path=/bin/c"});
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p.opts.verbose, 2u);
    EXPECT_TRUE(p.opts.quiet);
    EXPECT_EQ(p.opts.key_node, 3);
    EXPECT_EQ(p.opts.node_ids, "n1:1;n2:2");
    EXPECT_EQ(p.opts.mode, Mode::exclusive);
    EXPECT_EQ(p.opts.tag, 9);
    EXPECT_EQ(p.opts.delay_s, 5u);
    EXPECT_EQ(p.opts.debug_file, "/tmp/x.log");
    EXPECT_EQ(p.opts.state_dir, "/s");
    EXPECT_EQ(p.opts.agent_socket, "/run/x.sock");
    EXPECT_EQ(p.opts.corosync_cmap_path, "/bin/c");
    EXPECT_EQ(argv({"-k", "nf:0:4:77"}).opts.key_node, 4);
}

TEST(FenceAgentOptions, ArgvErrors) {
    const std::vector<std::vector<std::string>> bad = {
        {"--bogus"}, {"-x"}, {"-o"}, {"--action"}, {"-o", "reboot"}, {"-o", "dance"}, {"--verbose=1"},
        {"-k", "0"}, {"-k", "256"}, {"--reservation-type=5"}, {"--reservation-type=ea"}, {"--cluster-tag=256"},
        {"--delay=-1"}, {"--delay=3601"}, {"--node-ids=n1:1;n2:1"}, {"--node-ids=n1"}, {"--node-ids=n1:0"},
        {"--node-ids=n1:1;n1:2"}, {"-D", "x.log"}, {"--debug-file=log/x"}, {"--state-dir=var/lib/nvfence"},
        {"--corosync-cmap-path=corosync-cmapctl"},
    };
    for (const auto& b : bad) EXPECT_FALSE(argv(b).ok()) << b.front() << (b.size() > 1 ? " " + b[1] : "");
    auto p = argv({"-o", "status", "stray"});
    EXPECT_TRUE(p.ok());
    ASSERT_EQ(p.warnings.size(), 1u);
    EXPECT_NE(p.warnings[0].find("stray"), std::string::npos);
    // The SCSI number is explained, not silently mapped.
    auto s = argv({"--reservation-type=5"});
    ASSERT_EQ(s.errors.size(), 1u);
    EXPECT_NE(s.errors[0].find("NVMe type 3"), std::string::npos);
    auto r = argv({"-o", "reboot"});
    EXPECT_NE(r.errors[0].find("not supported"), std::string::npos);
}

TEST(FenceAgentOptions, StdinTable) {
    struct Row {
        std::string text;
        std::string plug, nodename;
        Action action;
        size_t warnings;
    };
    const Row rows[] = {
        {"action=off\nplug=n2\n", "n2", "", Action::off, 0},
        {"action=off\nport=n2\n", "n2", "", Action::off, 0},                   // port = plug
        {"action=off\nport=n2\nplug=n3\n", "n3", "", Action::off, 0},         // last wins
        {"action=off\nplug=n3\nport=n2\n", "n2", "", Action::off, 0},         // either order
        {"action=off\nnodename=n4\n", "", "n4", Action::off, 0},               // fallback
        {"\n# comment\n  \naction=status\n", "", "", Action::status, 0},       // blanks, comments
        {"action=\"on\"\nplug=\"n1\"\n", "n1", "", Action::on, 0},             // quotes stripped
        {"action=on\naction=status\n", "", "", Action::status, 0},             // last wins
        {"action=off\npcmk_host_list=a b\nfoo=1\n", "", "", Action::off, 2},   // unknown: warned
        {"action=off\nverbose=maybe\n", "", "", Action::off, 1},               // bad boolean: warned
        {"  action = off \n", "", "", Action::off, 0},
        {"option=status\nport=n5\n", "n5", "", Action::status, 0},          // option = action (deprecated)
    };
    for (const auto& r : rows) {
        auto p = parse_stdin(r.text);
        EXPECT_TRUE(p.ok()) << r.text;
        EXPECT_EQ(p.opts.plug, r.plug) << r.text;
        EXPECT_EQ(p.opts.nodename, r.nodename) << r.text;
        EXPECT_EQ(p.opts.action, r.action) << r.text;
        EXPECT_EQ(p.warnings.size(), r.warnings) << r.text;
    }
    // plug, nodename and nodeid are kept apart: target.hpp decides.
    auto t = parse_stdin("plug=n1\nnodename=n9\nnodeid=9\n");
    EXPECT_EQ(t.opts.plug, "n1");
    EXPECT_EQ(t.opts.nodename, "n9");
    EXPECT_EQ(t.opts.nodeid, 9u);
    EXPECT_TRUE(t.warnings.empty());
    EXPECT_TRUE(t.opts.has_target());
    EXPECT_TRUE(parse_stdin("nodeid=3\n").opts.has_target());
    EXPECT_FALSE(parse_stdin("action=list\n").opts.has_target());
    // A nodeid that is not a number is ignored with a warning, not fatal.
    auto u = parse_stdin("nodeid=x\nnodename=n9\n");
    EXPECT_TRUE(u.ok());
    EXPECT_FALSE(u.opts.nodeid);
    EXPECT_EQ(u.warnings.size(), 1u);
    EXPECT_EQ(parse_stdin("action=list-status\n").opts.action, Action::list_status);
    EXPECT_EQ(parse_stdin("action=manpage\n").opts.action, Action::manpage);
    EXPECT_EQ(parse_stdin("separator=;\n").opts.separator, ";");
    EXPECT_EQ(argv({"-C", "|"}).opts.separator, "|");
    EXPECT_EQ(parse_stdin("action=list\n").opts.separator, ",");
    EXPECT_FALSE(parse_stdin("separator=\n").ok());
}

TEST(FenceAgentOptions, StdinNamesAndBooleans) {
    auto p = parse_stdin(
        "devices=/dev/a,/dev/b\nnode-ids=n1:1;n2:2\nnode_ids=n1:1;n2:2;n3:3\nreservation-type=exclusive\n"
        "cluster-tag=3\ndelay=2\nverbose=yes\nquiet=TRUE\ncorosync-cmap-path=/x\nstate_dir=/s\n");
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p.opts.devices, (std::vector<std::string>{"/dev/a", "/dev/b"}));
    EXPECT_EQ(p.opts.node_ids, "n1:1;n2:2;n3:3");
    EXPECT_EQ(p.opts.mode, Mode::exclusive);
    EXPECT_EQ(p.opts.tag, 3);
    EXPECT_EQ(p.opts.delay_s, 2u);
    EXPECT_EQ(p.opts.verbose, 1u);
    EXPECT_TRUE(p.opts.quiet);
    EXPECT_EQ(p.opts.corosync_cmap_path, "/x");
    EXPECT_EQ(p.opts.state_dir, "/s");
    for (const char* t : {"1", "yes", "on", "true", "On", "YES"}) EXPECT_TRUE(parse_stdin(std::string("quiet=") + t).opts.quiet) << t;
    for (const char* f : {"0", "no", "off", "false"}) {
        auto q = parse_stdin(std::string("quiet=1\nquiet=") + f);
        EXPECT_FALSE(q.opts.quiet) << f;
        EXPECT_TRUE(q.warnings.empty()) << f;
    }
    // Relative paths depend on the fencer's working directory: refused.
    for (const char* rel : {"debug_file=x.log", "state_dir=state", "corosync_cmap_path=./cmapctl"}) {
        auto r = parse_stdin(std::string(rel) + "\n");
        EXPECT_FALSE(r.ok()) << rel;
        EXPECT_TRUE(!r.errors.empty() && r.errors[0].find("absolute path") != std::string::npos) << rel;
    }
    EXPECT_FALSE(parse_stdin("action=reboot\n").ok());
    EXPECT_FALSE(parse_stdin("reservation_type=1\n").ok());
    EXPECT_FALSE(parse_stdin("node_ids=n1:1;n2:x\n").ok());
}

TEST(FenceAgentOptions, NodeMapAndCorosync) {
    std::string why;
    auto m = parse_node_map("n1:1; n2=2,n3:3 n4.example.com:4", why);
    ASSERT_TRUE(m) << why;
    EXPECT_EQ(m->size(), 4u);
    EXPECT_EQ(m->at("n4.example.com"), 4);
    EXPECT_FALSE(parse_node_map("", why));
    EXPECT_FALSE(parse_node_map("n1:1;n2:1", why));
    EXPECT_NE(why.find("two nodes"), std::string::npos);

    const std::string nodelist =
        "nodelist.local_node_pos (u32) = 0\n"
        "nodelist.node.0.name (str) = n1\n"
        "nodelist.node.0.nodeid (u32) = 1\n"
        "nodelist.node.0.ring0_addr (str) = 169.254.10.1\n"
        "nodelist.node.1.name (str) = n2\n"
        "nodelist.node.1.nodeid (u32) = 2\n"
        "nodelist.node.2.ring0_addr (str) = n3\n"
        "nodelist.node.2.nodeid (u32) = 300\n";
    EXPECT_EQ(*parse_cmap_nodeid(nodelist, "n2", why), 2);
    EXPECT_EQ(*parse_cmap_nodeid(nodelist, "169.254.10.1", why), 1);
    EXPECT_EQ(parse_cmap_nodeid(nodelist, "n9", why).error(), Errc::not_found);
    EXPECT_EQ(parse_cmap_nodeid(nodelist, "n3", why).error(), Errc::invalid_argument);  // 300 > 255
    EXPECT_NE(why.find("node_ids"), std::string::npos);
    EXPECT_EQ(*parse_cmap_nodeid("runtime.votequorum.this_node_id (u32) = 3\n", "", why), 3);
    EXPECT_FALSE(parse_cmap_nodeid("", "", why));
}

// Found by fuzz_fence_options: "name (str) = " with nothing after it made a
// node with an empty name. An empty value names nothing; the node is still
// found by its address.
TEST(FenceOptions, CmapNodelistIgnoresEmptyNamesAndAddresses) {
    const auto nodes = parse_cmap_nodelist(
        "nodelist.node.0.name (str) = \n"
        "nodelist.node.0.ring0_addr (str) = 169.254.10.1\n"
        "nodelist.node.0.nodeid (u32) = 1\n"
        "nodelist.node.1.name (str) = n2\n"
        "nodelist.node.1.ring0_addr (str) =  \n"
        "nodelist.node.1.nodeid (u32) = 2\n");
    EXPECT_EQ(nodes, (std::map<std::string, uint32_t>{{"169.254.10.1", 1}, {"n2", 2}}));
    std::string why;
    EXPECT_EQ(parse_cmap_nodeid("nodelist.node.0.name (str) = \nnodelist.node.0.nodeid (u32) = 1\n", "", why)
                  .error(),
              Errc::not_found);  // no this_node_id: the empty name is not taken for the local node
}

// ---- the target: plug, nodename, nodeid (target.hpp) ----------------------------

NodeMap map_ab(bool corosync = false) { return NodeMap{{{"a", 1}, {"b", 2}}, corosync}; }

Result<Target> resolve(const std::string& plug, const std::string& nodename, std::optional<uint32_t> nodeid,
                       const NodeMap& m, std::string* why_out = nullptr) {
    std::string why;
    auto t = resolve_target(TargetArgs{plug, nodename, nodeid}, m, why);
    if (why_out) *why_out = why;
    return t;
}

TEST(FenceAgentTarget, APlugIsANodeNameOrANodeIdOfTheMap) {
    const NodeMap m = map_ab();
    struct Row {
        std::string plug;
        uint8_t id;
        std::string label;
    };
    for (const Row& r : {Row{"b", 2, "b (node 2)"}, Row{"2", 2, "b (node 2)"}, Row{"b.example.com", 2, "b (node 2)"},
                         Row{"1", 1, "a (node 1)"}}) {
        auto t = resolve(r.plug, "", std::nullopt, m);
        ASSERT_TRUE(t) << r.plug;
        EXPECT_EQ(t->id, r.id) << r.plug;
        EXPECT_EQ(t->label, r.label) << r.plug;
    }
    // Unknown plugs: a name nobody has, an id nobody has, a number out of range.
    for (const char* bad : {"c", "3", "0", "256", "-1", "2x"}) {
        std::string why;
        auto t = resolve(bad, "", std::nullopt, m, &why);
        ASSERT_FALSE(t) << bad;
        EXPECT_EQ(t.error(), Errc::not_found) << bad;
        EXPECT_NE(why.find(std::string("unknown plug '") + bad + "'"), std::string::npos) << why;
        EXPECT_NE(why.find("a:1, b:2"), std::string::npos) << why;  // says what is known
    }
    // A name is found before an id: node "1" is node 2 here.
    const NodeMap odd{{{"1", 2}, {"x", 1}}, false};
    EXPECT_EQ(resolve("1", "", std::nullopt, odd)->id, 2);
    EXPECT_EQ(resolve("x", "", std::nullopt, odd)->id, 1);
}

TEST(FenceAgentTarget, NodenameIsTheTargetWithoutAPlugAndMustAgreeWithOne) {
    const NodeMap m = map_ab();
    EXPECT_EQ(resolve("", "b", std::nullopt, m)->id, 2);
    EXPECT_EQ(resolve("", "b.example.com", std::nullopt, m)->id, 2);
    std::string why;
    EXPECT_EQ(resolve("", "c", std::nullopt, m, &why).error(), Errc::not_found);
    EXPECT_NE(why.find("node 'c' is not in node_ids"), std::string::npos) << why;
    // nodename is a name: "2" is not node b.
    EXPECT_EQ(resolve("", "2", std::nullopt, m).error(), Errc::not_found);
    // Pacemaker with pcmk_host_map="a:1;b:2": plug=2, nodename=b.
    EXPECT_EQ(resolve("2", "b", std::nullopt, m)->id, 2);
    EXPECT_EQ(resolve("1", "a", std::nullopt, m)->id, 1);
    // A map that sends b's fencing to plug 1 (node a) is refused, never a's fencing.
    auto t = resolve("1", "b", std::nullopt, m, &why);
    ASSERT_FALSE(t);
    EXPECT_EQ(t.error(), Errc::invalid_argument);
    EXPECT_NE(why.find("pcmk_host_map and node_ids disagree"), std::string::npos) << why;
    EXPECT_EQ(resolve("a", "b", std::nullopt, m).error(), Errc::invalid_argument);
    // A nodename the map does not know does not stop a known plug.
    EXPECT_EQ(resolve("2", "unknown-host", std::nullopt, m)->id, 2);
    EXPECT_EQ(resolve("", "", std::nullopt, m).error(), Errc::not_found);
}

TEST(FenceAgentTarget, NodeidCountsOnlyForCorosyncIds) {
    const NodeMap coro = map_ab(true);
    EXPECT_EQ(resolve("", "", 2u, coro)->id, 2);
    EXPECT_EQ(resolve("", "", 2u, coro)->label, "b (node 2)");
    EXPECT_EQ(resolve("b", "b", 2u, coro)->id, 2);
    std::string why;
    EXPECT_EQ(resolve("a", "", 2u, coro, &why).error(), Errc::invalid_argument);
    EXPECT_NE(why.find("nodeid 2"), std::string::npos) << why;
    EXPECT_EQ(resolve("", "", 7u, coro).error(), Errc::not_found);
    // With node_ids the ids are nvfence's, not corosync's: nodeid is ignored.
    const NodeMap ids = map_ab(false);
    EXPECT_EQ(resolve("a", "a", 2u, ids)->id, 1);
    EXPECT_EQ(resolve("", "", 2u, ids).error(), Errc::not_found);
    // A corosync id that no key can carry.
    const NodeMap big{{{"a", 1}, {"c", 300}}, true};
    EXPECT_EQ(resolve("c", "", std::nullopt, big, &why).error(), Errc::invalid_argument);
    EXPECT_NE(why.find("1-255"), std::string::npos) << why;
}

// ---- actions against the device model ----------------------------------------

class FakeDevice final : public Device {
public:
    FakeDevice(FakeTarget& t, HostId id, std::string path, std::string volume = "vol-test")
        : path_(std::move(path)), volume_(std::move(volume)), id_(id), port_(t, id), resv_(port_, 1) {}
    const std::string& path() const override { return path_; }
    const std::string& volume() const override { return volume_; }
    const HostId& host_id() const override { return id_; }
    bool supports(ResvType t) const override { return t != ResvType::exclusive_access || ea; }
    bool ptpl_capable() const override { return ptpl; }
    uint32_t nsid() const override { return 1; }
    Reservations& resv() override { return resv_; }
    bool ea = false;
    bool ptpl = false;  // RESCAP bit 0 as nvmet reports it: no PTPL

private:
    std::string path_;
    std::string volume_;
    HostId id_;
    HostPort port_;
    Reservations resv_;
};

// Three nodes n1, n2, n3 (host ids 1, 2, 3) sharing one namespace
// (/dev/nvme1n1, volume vol-test) and a second one (/dev/nvme2n1, volume
// vol-two); each run() is fence_nvfence on one of them.
struct Cluster {
    FakeTarget t;
    FakeTarget t2;
    std::vector<std::string> discovered;  // what Host::discover finds under /dev/nvfence
    TempDir state;
    std::vector<std::pair<Level, std::string>> logs;
    std::vector<uint32_t> slept;
    std::string cmap_nodelist;
    std::string cmap_this;
    std::string cmap_name;                     // `-g totem.cluster_name` ("": corosync not installed)
    std::error_code cmap_name_error;           // set: that call fails so (corosync installed, not running)
    std::vector<ControlRequest> agent_requests;
    std::function<ControlReply(const ControlRequest&)> agent;  // set: an nvfenced runs on the local node
    std::map<std::string, std::string> links;  // symbolic links: path -> canonical path
    std::vector<std::string> opened;           // every path given to Host::open
    std::mutex open_mu;
    bool ptpl_capable = false;                 // the devices' RESCAP PTPL bit (nvmet: clear)
    std::function<bool()> requester_alive;     // set: Host::requester_alive
    std::function<void(std::vector<std::function<void()>>&)> run_all;  // set: Host::run_all

    static HostId host(const std::string& name) { return make_host(static_cast<uint8_t>(name.back() - '0')); }

    int run(const std::string& local, const std::string& stdin_text, std::string* out_text = nullptr) {
        Parsed p = parse_stdin(stdin_text + "\nstate_dir=" + state.path() + "\n");
        Host h;
        h.local_name = local;
        h.resolve = [&](const std::string& path) {
            auto it = links.find(path);
            return it == links.end() ? path : it->second;
        };
        h.dm_slaves = [](const std::string& dm) {
            return dm == "dm-3" ? std::vector<std::string>{"nvme0n1", "nvme1n1"} : std::vector<std::string>{};
        };
        h.open = [&, local](const std::string& path, std::string& why) -> Result<std::unique_ptr<Device>> {
            {
                std::lock_guard lock(open_mu);  // opens go together through run_all
                opened.push_back(path);
            }
            if (path == "/dev/plain") {
                why = "the namespace has no reservation support";
                return make_error_code(Errc::no_reservations);
            }
            if (path != "/dev/nvme1n1" && path != "/dev/nvme2n1") {
                why = "no such device";
                return make_error_code(Errc::not_found);
            }
            auto d = path == "/dev/nvme2n1" ? std::make_unique<FakeDevice>(t2, host(local), path, "vol-two")
                                            : std::make_unique<FakeDevice>(t, host(local), path);
            d->ptpl = ptpl_capable;
            return std::unique_ptr<Device>(std::move(d));
        };
        h.cmapctl = [&](const std::string&, const std::vector<std::string>& args) -> Result<std::string> {
            if (args.size() == 2 && args[1] == "totem.cluster_name") {
                if (cmap_name_error) return cmap_name_error;
                if (cmap_name.empty()) return errno_error(ENOENT);  // posix_spawn: no such program
                return cmap_name;
            }
            const std::string& text = args.front() == "nodelist" ? cmap_nodelist : cmap_this;
            if (text.empty()) return errno_error(ENOENT);
            return text;
        };
        h.find_agent = [&](const Device&) -> std::optional<std::string> {
            if (agent) return std::string("/run/nvfence/vol-test.sock");
            return std::nullopt;
        };
        h.control = [&](const std::string&, const ControlRequest& r) -> Result<ControlReply> {
            agent_requests.push_back(r);
            return agent(r);
        };
        h.discover = [&] { return discovered; };
        h.sleep = [&](uint32_t s) { slept.push_back(s); };
        h.log = [&](Level l, const std::string& s) { logs.emplace_back(l, s); };
        h.requester_alive = requester_alive;
        h.run_all = run_all;
        std::string out;
        const int rc = fence_agent::run(p, h, out);
        if (out_text) *out_text = out;
        return rc;
    }
    bool logged(const std::string& needle) const {
        for (const auto& [l, s] : logs)
            if (s.find(needle) != std::string::npos) return true;
        return false;
    }
    std::string all_logs() const {
        std::string s;
        for (const auto& [l, m] : logs) s += m + "\n";
        return s;
    }
    bool registered(uint8_t node) const {
        for (const auto& r : t.regs)
            if (auto f = decode_key(r.key); f && f->node == node) return true;
        return false;
    }
};

const std::string kMap = "devices=/dev/nvme1n1\nnode_ids=n1:1;n2:2;n3:3\n";

// n1, n2 and n3 unfenced: each registered, n1 took the reservation.
void unfence_all(Cluster& c) {
    for (const char* n : {"n1", "n2", "n3"})
        ASSERT_EQ(c.run(n, kMap + "action=on\nnodename=" + n), kExitOk) << n << "\n" << c.all_logs();
}

// The cluster lab (CI of 2d89981): right after stonith_admin fenced node c,
// the DC asked to unfence c (not yet seen lost); c's Pacemaker stopped (it
// was fenced) and its fencer's `on`, left running, had c's nvfenced rejoin:
// c was registered again two seconds after its fence. An `on` whose fencer
// has exited changes nothing, directly or through nvfenced.
TEST(FenceAgentActions, AnOnWhoseFencerHasExitedChangesNothing) {
    for (bool through_agent : {false, true}) {
        Cluster c;
        if (through_agent)
            c.agent = [](const ControlRequest& r) {  // a FENCED nvfenced of node 3
                ControlReply rep;
                rep.op = r.op;
                rep.state = AgentState::fenced;
                rep.node = 3;
                return rep;
            };
        bool alive = false;
        c.requester_alive = [&] { return alive; };
        EXPECT_EQ(c.run("n3", kMap + "action=on\nport=n3"), kExitError) << c.all_logs();
        EXPECT_FALSE(c.registered(3)) << "the node was registered by an orphaned unfencing";
        EXPECT_TRUE(c.agent_requests.empty()) << "nvfenced was asked";
        EXPECT_TRUE(c.logged("the process that asked for this unfencing has exited")) << c.all_logs();
        if (through_agent) {
            // The fencer exits while nvfenced answers the status (it answers
            // after its fence action): the rejoin is not asked.
            c.agent_requests.clear();
            int asked = 0;
            c.requester_alive = [&] { return ++asked == 1; };
            EXPECT_EQ(c.run("n3", kMap + "action=on\nport=n3"), kExitError) << c.all_logs();
            ASSERT_EQ(c.agent_requests.size(), 1u);
            EXPECT_EQ(c.agent_requests[0].op, ControlOp::status);
            continue;
        }
        alive = true;
        EXPECT_EQ(c.run("n3", kMap + "action=on\nport=n3"), kExitOk) << c.all_logs();
        EXPECT_TRUE(c.registered(3));
    }
}

TEST(FenceAgentActions, OnRegistersEveryNodeAndTheFirstTakesTheReservation) {
    Cluster c;
    std::string out;
    ASSERT_EQ(c.run("n1", kMap + "action=on\nport=n1", &out), kExitOk) << c.all_logs();
    EXPECT_EQ(out, "Success: Powered ON\n");
    ASSERT_EQ(c.t.regs.size(), 1u);
    EXPECT_EQ(c.t.regs[0].key, key(1, 1));
    EXPECT_EQ(c.t.type, ResvType::write_exclusive_reg_only);
    EXPECT_TRUE(c.t.is_holder(make_host(1)));
    ASSERT_EQ(c.run("n2", kMap + "action=on\nnodename=n2"), kExitOk);
    ASSERT_EQ(c.run("n3", kMap + "action=on\nplug=n3"), kExitOk);
    EXPECT_EQ(c.t.regs.size(), 3u);
    EXPECT_TRUE(c.t.is_holder(make_host(1)));  // the others registered only
    // Again: nothing changes (already on), still success.
    const size_t before = c.t.state_commands();
    EXPECT_EQ(c.run("n2", kMap + "action=on\nnodename=n2"), kExitOk);
    EXPECT_EQ(c.t.state_commands(), before);
}

TEST(FenceAgentActions, OnRunsOnlyOnTheTarget) {
    Cluster c;
    EXPECT_EQ(c.run("n1", kMap + "action=on\nplug=n2"), kExitError);
    EXPECT_TRUE(c.logged("on_target"));
    EXPECT_TRUE(c.t.regs.empty());
}

TEST(FenceAgentActions, OnRefusesAHostIdBoundToAnotherNode) {
    Cluster c;
    c.t.add(make_host(1), key(7, 3));  // this host id registered as node 7
    EXPECT_EQ(c.run("n1", kMap + "action=on\nplug=n1"), kExitError);
    EXPECT_TRUE(c.logged("node 7")) << c.all_logs();
    EXPECT_EQ(c.t.regs[0].key, key(7, 3));
}

TEST(FenceAgentActions, OffPreemptsAndAbortsTheVictimAndVerifies) {
    Cluster c;
    unfence_all(c);
    std::string out;
    ASSERT_EQ(c.run("n1", kMap + "action=off\nplug=n2", &out), kExitOk) << c.all_logs();
    EXPECT_EQ(out, "Success: Powered OFF\n");
    EXPECT_FALSE(c.registered(2));
    EXPECT_TRUE(c.registered(1));
    EXPECT_TRUE(c.registered(3));
    ASSERT_EQ(c.t.aborted.size(), 1u);  // preempt-and-abort, not a plain preempt
    EXPECT_EQ(c.t.aborted[0], make_host(2));
    EXPECT_EQ(c.t.type, ResvType::write_exclusive_reg_only);
    // status: 2 (OFF) for n2, 0 (ON) for n3, from any node.
    EXPECT_EQ(c.run("n3", kMap + "action=status\nplug=n2", &out), kExitOff);
    EXPECT_EQ(out, "Status: OFF\n");
    EXPECT_EQ(c.run("n3", kMap + "action=status\nplug=n3", &out), kExitOk);
    EXPECT_EQ(out, "Status: ON\n");
    // The victim's own unfencing ('on', after its reboot) brings it back with a newer epoch.
    ASSERT_EQ(c.run("n2", kMap + "action=on\nnodename=n2"), kExitOk);
    EXPECT_TRUE(c.registered(2));
    const auto* r = c.t.find(make_host(2));
    ASSERT_NE(r, nullptr);
    EXPECT_GT(decode_key(r->key)->epoch, 1u);
}

TEST(FenceAgentActions, OffOfTheHolderMovesTheReservationToTheFencer) {
    Cluster c;
    unfence_all(c);  // n1 holds
    ASSERT_EQ(c.run("n3", kMap + "action=off\nplug=n1"), kExitOk) << c.all_logs();
    EXPECT_FALSE(c.registered(1));
    EXPECT_TRUE(c.t.is_holder(make_host(3)));
    EXPECT_EQ(c.t.type, ResvType::write_exclusive_reg_only);
}

// n1 registered with epoch @p e1; n2, with epoch @p e2, holds a reservation
// of type @p t.
void n2_holds(Cluster& c, uint32_t e1, uint32_t e2, ResvType t) {
    c.t.add(make_host(1), key(1, e1));
    c.t.add(make_host(2), key(2, e2));
    c.t.hold(make_host(2), t);
}

TEST(FenceAgentActions, OffExclusiveHolder) {
    Cluster c;
    n2_holds(c, 1, 1, ResvType::write_exclusive);
    ASSERT_EQ(c.run("n1", kMap + "reservation_type=exclusive\naction=off\nplug=n2"), kExitOk) << c.all_logs();
    EXPECT_FALSE(c.registered(2));
    EXPECT_TRUE(c.t.is_holder(make_host(1)));
    EXPECT_EQ(c.t.type, ResvType::write_exclusive);
}

// The fencer takes the reservation from a holder of a newer epoch: it
// re-keys first (Register replace of exactly its key), so the new holder's
// epoch is above the old one's (rule 4).
TEST(FenceAgentActions, OffOfANewerHolderReKeysTheFencerAboveIt) {
    Cluster c;
    n2_holds(c, 1, 5, ResvType::write_exclusive_reg_only);
    ASSERT_EQ(c.run("n1", kMap + "action=off\nplug=n2"), kExitOk) << c.all_logs();
    EXPECT_FALSE(c.registered(2));
    ASSERT_NE(c.t.find(make_host(1)), nullptr);
    EXPECT_EQ(c.t.find(make_host(1))->key, key(1, 6));
    EXPECT_TRUE(c.t.is_holder(make_host(1)));
    EXPECT_EQ(c.t.count(opcode::kResvRegister), 1u) << "one Register: the replace";
    EXPECT_TRUE(c.logged("re-keyed")) << c.all_logs();
    // A fencer whose epoch is the highest already keeps its key.
    Cluster k;
    unfence_all(k);  // n1 holds with epoch 1, n3 has epoch 3
    const size_t regs = k.t.count(opcode::kResvRegister);
    ASSERT_EQ(k.run("n3", kMap + "action=off\nplug=n1"), kExitOk) << k.all_logs();
    EXPECT_EQ(k.t.count(opcode::kResvRegister), regs);
    EXPECT_TRUE(k.t.is_holder(make_host(3)));
}

TEST(FenceAgentActions, OffRemovesEveryKeyOfTheNodeWhateverItsEpoch) {
    Cluster c;
    unfence_all(c);
    c.t.add(make_host(9), key(2, 41));  // the same node through a second host id, newer epoch
    ASSERT_EQ(c.run("n1", kMap + "action=off\nplug=n2"), kExitOk) << c.all_logs();
    EXPECT_FALSE(c.registered(2));
    EXPECT_EQ(c.t.aborted.size(), 2u);
}

TEST(FenceAgentActions, AlreadyOffIsSuccessWithoutChanges) {
    Cluster c;
    unfence_all(c);
    ASSERT_EQ(c.run("n1", kMap + "action=off\nplug=n2"), kExitOk);
    const size_t before = c.t.state_commands();
    std::string out;
    EXPECT_EQ(c.run("n3", kMap + "action=off\nplug=n2", &out), kExitOk);
    EXPECT_EQ(out, "Success: Already OFF\n");
    EXPECT_EQ(c.t.state_commands(), before);
}

TEST(FenceAgentActions, LostRaceToAnotherFencerIsSuccess) {
    Cluster c;
    unfence_all(c);
    // n3 preempts n2 right before n1's preempt reaches the device: n1's
    // command then fails with Reservation Conflict (no registrant has the key).
    HostPort p3(c.t, make_host(3));
    Reservations r3(p3, 1);
    const uint64_t k2 = c.t.find(make_host(2))->key, k3 = c.t.find(make_host(3))->key;
    bool raced = false;
    c.t.fail = [&](const HostId& h, const Command& cmd) -> std::optional<std::error_code> {
        if (!raced && h == make_host(1) && cmd.opcode == opcode::kResvAcquire) {
            raced = true;
            AcquireArgs a;
            a.action = AcquireAction::preempt_and_abort;
            a.type = ResvType::write_exclusive_reg_only;
            a.crkey = k3;
            a.prkey = k2;
            EXPECT_TRUE(r3.acquire(a).ok());
        }
        return std::nullopt;
    };
    ASSERT_EQ(c.run("n1", kMap + "action=off\nplug=n2"), kExitOk) << c.all_logs();
    EXPECT_TRUE(raced);
    EXPECT_FALSE(c.registered(2));
    EXPECT_TRUE(c.logged("Reservation Conflict")) << c.all_logs();
}

TEST(FenceAgentActions, AVictimThatReRegistersIsPreemptedAgain) {
    Cluster c;
    unfence_all(c);
    HostPort p2(c.t, make_host(2));
    Reservations r2(p2, 1);
    int again = 0;
    c.t.after = [&](const HostId& h, const Command& cmd) {
        if (again == 0 && h == make_host(1) && cmd.opcode == opcode::kResvAcquire) {
            ++again;  // n2 registers again (a new epoch) before n1 verifies
            RegisterArgs a;
            a.nrkey = key(2, 50);
            EXPECT_TRUE(r2.reg(a).ok());
        }
    };
    ASSERT_EQ(c.run("n1", kMap + "action=off\nplug=n2"), kExitOk) << c.all_logs();
    EXPECT_EQ(again, 1);
    EXPECT_FALSE(c.registered(2));
    EXPECT_EQ(c.t.aborted.size(), 2u);
}

TEST(FenceAgentActions, OffFailsWhenTheDeviceKeepsTheVictim) {
    Cluster c;
    unfence_all(c);
    c.t.swallow = [](const HostId&, const Command& cmd) { return cmd.opcode == opcode::kResvAcquire; };
    EXPECT_EQ(c.run("n1", kMap + "action=off\nplug=n2"), kExitError);
    EXPECT_TRUE(c.registered(2));
    EXPECT_TRUE(c.logged("could not be fenced")) << c.all_logs();
    EXPECT_EQ(c.t.count(opcode::kResvAcquire), static_cast<size_t>(kOffRounds) + 1);  // +1: n1's 'on'
}

TEST(FenceAgentActions, OffRefusesTheLocalNode) {
    Cluster c;
    unfence_all(c);
    const size_t before = c.t.log.size();
    EXPECT_EQ(c.run("n1", kMap + "action=off\nplug=n1"), kExitError);
    EXPECT_TRUE(c.logged("refusing to fence the local node"));
    EXPECT_EQ(c.t.log.size(), before);  // nothing sent
    EXPECT_TRUE(c.registered(1));
    // The map does not name this node, but the device shows its key is node 1's.
    EXPECT_EQ(c.run("n1", "devices=/dev/nvme1n1\nnode_ids=n2:2;n3:3;x:1\naction=off\nplug=x"), kExitError);
    EXPECT_TRUE(c.logged("it is the local node")) << c.all_logs();
    EXPECT_TRUE(c.registered(1));
    // Corosync says this node is node 2.
    Cluster k;
    k.cmap_this = "runtime.votequorum.this_node_id (u32) = 2\n";
    k.cmap_nodelist = "nodelist.node.1.name (str) = n2\nnodelist.node.1.nodeid (u32) = 2\n";
    EXPECT_EQ(k.run("n2", "devices=/dev/nvme1n1\naction=off\nplug=n2"), kExitError);
    EXPECT_TRUE(k.logged("refusing to fence the local node"));
}

TEST(FenceAgentActions, OffWithoutReservationTakesOne) {
    Cluster c;
    c.t.add(make_host(1), key(1, 1));
    c.t.add(make_host(2), key(2, 1));  // registered, nobody holds: everyone writes
    ASSERT_EQ(c.run("n1", kMap + "action=off\nplug=n2"), kExitOk) << c.all_logs();
    EXPECT_FALSE(c.registered(2));
    EXPECT_EQ(c.t.type, ResvType::write_exclusive_reg_only);
    EXPECT_TRUE(c.t.is_holder(make_host(1)));
    // Nobody registered and no reservation at all: a fencer that was never
    // unfenced does not register itself (only 'on' does), so it cannot
    // fence: the action fails and nothing is sent.
    Cluster e;
    const size_t before = e.t.state_commands();
    EXPECT_EQ(e.run("n1", kMap + "action=off\nplug=n2"), kExitError);
    EXPECT_TRUE(e.logged("not registered")) << e.all_logs();
    EXPECT_EQ(e.t.state_commands(), before);
}

// Found by the Pacemaker lab: a node frozen past the token was fenced;
// resumed, its stale Pacemaker rejoined the membership, became DC and had
// the healthy nodes fenced, its own fence_nvfence re-registering it to
// preempt them. A fenced node must not be able to fence anyone.
TEST(FenceAgentActions, AFencedNodeCannotFenceOthers) {
    Cluster c;
    unfence_all(c);
    ASSERT_EQ(c.run("n2", kMap + "action=off\nplug=n1"), kExitOk) << c.all_logs();
    ASSERT_FALSE(c.registered(1));
    const size_t before = c.t.state_commands();
    EXPECT_EQ(c.run("n1", kMap + "action=off\nplug=n3"), kExitError);
    EXPECT_TRUE(c.logged("not registered")) << c.all_logs();
    EXPECT_EQ(c.t.state_commands(), before);  // nothing sent
    EXPECT_FALSE(c.registered(1));
    EXPECT_TRUE(c.registered(3));
    EXPECT_TRUE(c.t.is_holder(make_host(2)));
}

TEST(FenceAgentActions, OffOfAnUnknownNodeFails) {
    Cluster c;
    unfence_all(c);
    EXPECT_EQ(c.run("n1", kMap + "action=off\nplug=n9"), kExitError);
    EXPECT_TRUE(c.logged("unknown plug 'n9': neither a node name nor a node id of node_ids")) << c.all_logs();
    EXPECT_EQ(c.run("n1", kMap + "action=off"), kExitError);  // no target
    EXPECT_EQ(c.run("n1", "node_ids=n1:1;n2:2\naction=off\nplug=n2"), kExitError);  // no devices
}

TEST(FenceAgentActions, UnsupportedAndMissingDevices) {
    for (const char* dev : {"/dev/plain", "/dev/missing"}) {
        Cluster c;
        const std::string base = std::string("devices=") + dev + "\nnode_ids=n1:1;n2:2;n3:3\n";
        EXPECT_EQ(c.run("n1", base + "action=off\nplug=n2"), kExitError) << dev;
        EXPECT_EQ(c.run("n1", base + "action=status\nplug=n2"), kExitError) << dev;
        EXPECT_EQ(c.run("n1", base + "action=on\nplug=n1"), kExitError) << dev;
        EXPECT_EQ(c.run("n1", base + "action=monitor"), kExitError) << dev;
        EXPECT_EQ(c.run("n1", base + "action=validate-all"), kExitError) << dev;
        EXPECT_TRUE(c.logged(dev));
    }
    Cluster c;
    EXPECT_EQ(c.run("n1", kMap + "action=monitor"), kExitOk) << c.all_logs();
    // One good and one bad device: off fails (it could not verify the bad one).
    unfence_all(c);
    EXPECT_EQ(c.run("n1", "devices=/dev/nvme1n1,/dev/plain\nnode_ids=n1:1;n2:2;n3:3\naction=off\nplug=n2"),
              kExitError);
    EXPECT_FALSE(c.registered(2));  // the good device was fenced anyway
    EXPECT_TRUE(c.logged("failed to verify 1 of 2"));
}

TEST(FenceAgentActions, MonitorAndValidateCatchABadMap) {
    Cluster c;
    unfence_all(c);
    EXPECT_EQ(c.run("n1", kMap + "action=monitor"), kExitOk) << c.all_logs();
    EXPECT_EQ(c.run("n1", kMap + "action=validate-all"), kExitOk) << c.all_logs();
    // n3's key (node 3) is in no entry.
    EXPECT_EQ(c.run("n1", "devices=/dev/nvme1n1\nnode_ids=n1:1;n2:2\naction=monitor"), kExitError);
    EXPECT_TRUE(c.logged("no node_ids entry has"));
    // This host's key is node 1's, the map makes it node 2.
    EXPECT_EQ(c.run("n1", "devices=/dev/nvme1n1\nnode_ids=n1:2;n2:1;n3:3\naction=monitor"), kExitError);
    EXPECT_TRUE(c.logged("registered as node 1"));
    // This node is not in the map.
    EXPECT_EQ(c.run("n1", "devices=/dev/nvme1n1\nnode_ids=n2:2;n3:3;n4:1\naction=validate-all"), kExitError);
    EXPECT_EQ(c.run("n1", "devices=/dev/nvme1n1\nnode_ids=n2:2;n3:3;n4:1\naction=monitor"), kExitError);
    // The map does not parse.
    EXPECT_EQ(c.run("n1", "devices=/dev/nvme1n1\nnode_ids=n1:1;n2:1\naction=validate-all"), kExitError);
    EXPECT_TRUE(c.logged("given to two nodes"));
}

// Found by the Pacemaker lab: Pacemaker's validation (stonith_admin
// --validate, crm_resource --validate) runs validate-all with a placeholder
// target, "node1", whatever the cluster's nodes are called.
TEST(FenceAgentActions, ValidateAllIgnoresPacemakersPlaceholderTarget) {
    Cluster c;
    unfence_all(c);
    EXPECT_EQ(c.run("n1", kMap + "action=validate-all\nport=node1\nnodename=n1"), kExitOk) << c.all_logs();
    EXPECT_TRUE(c.logged("node1")) << c.all_logs();
    // A bad map or device still fails, whatever the target.
    EXPECT_EQ(c.run("n1", "devices=/dev/nvme1n1\nnode_ids=n1:1;n2:1\naction=validate-all\nport=node1\nnodename=n1"),
              kExitError);
    EXPECT_EQ(c.run("n1", "devices=/dev/missing\nnode_ids=n1:1;n2:2\naction=validate-all\nport=node1\nnodename=n1"),
              kExitError);
}

TEST(FenceAgentActions, ListAndCorosyncNodeIds) {
    Cluster c;
    std::string out;
    EXPECT_EQ(c.run("n1", "node_ids=n2:2;n1:1;n3:3\naction=list", &out), kExitOk);
    EXPECT_EQ(out, "n1,1\nn2,2\nn3,3\n");
    c.cmap_nodelist =
        "nodelist.node.0.name (str) = n1\nnodelist.node.0.nodeid (u32) = 1\n"
        "nodelist.node.1.name (str) = n2\nnodelist.node.1.nodeid (u32) = 2\n";
    c.cmap_this = "runtime.votequorum.this_node_id (u32) = 1\n";
    EXPECT_EQ(c.run("n1", "action=list", &out), kExitOk);
    EXPECT_EQ(out, "n1,1\nn2,2\n");
    ASSERT_EQ(c.run("n1", "devices=/dev/nvme1n1\naction=on\nnodename=n1"), kExitOk) << c.all_logs();
    c.cmap_this = "runtime.votequorum.this_node_id (u32) = 2\n";
    ASSERT_EQ(c.run("n2", "devices=/dev/nvme1n1\naction=on\nnodename=n2"), kExitOk) << c.all_logs();
    c.cmap_this = "runtime.votequorum.this_node_id (u32) = 1\n";
    ASSERT_EQ(c.run("n1", "devices=/dev/nvme1n1\naction=off\nnodename=n2"), kExitOk) << c.all_logs();
    EXPECT_FALSE(c.registered(2));
    // -k names the node id directly.
    ASSERT_EQ(c.run("n1", kMap + "action=status\nkey=2"), kExitOff);
    Cluster none;
    EXPECT_EQ(none.run("n1", "action=list"), kExitError);  // neither map nor corosync
}

// Issue 27: Pacemaker with pcmk_host_map="n1:1;n2:2;n3:3" sends the alias
// as the plug and the node's name as nodename; the agent used to look the
// alias up as a name ("node '2' is not in node_ids").
TEST(FenceAgentActions, PcmkHostMapAliasesAreNodeIds) {
    Cluster c;
    for (const char* n : {"n1", "n2", "n3"}) {
        const std::string id(1, n[1]);
        ASSERT_EQ(c.run(n, kMap + "action=on\nport=" + id + "\nnodename=" + n), kExitOk) << n << c.all_logs();
    }
    std::string out;
    EXPECT_EQ(c.run("n1", kMap + "action=status\nport=2\nnodename=n2", &out), kExitOk) << c.all_logs();
    EXPECT_EQ(out, "Status: ON\n");
    ASSERT_EQ(c.run("n1", kMap + "action=off\nport=2\nnodename=n2\nnodeid=2", &out), kExitOk) << c.all_logs();
    EXPECT_EQ(out, "Success: Powered OFF\n");
    EXPECT_FALSE(c.registered(2));
    EXPECT_TRUE(c.registered(3));
    EXPECT_EQ(c.run("n3", kMap + "action=status\nplug=2", &out), kExitOff);
    EXPECT_EQ(out, "Status: OFF\n");
    // The local node is refused by its alias too.
    EXPECT_EQ(c.run("n1", kMap + "action=off\nplug=1"), kExitError);
    EXPECT_TRUE(c.logged("refusing to fence the local node n1 (node 1)")) << c.all_logs();
}

TEST(FenceAgentActions, UnknownOrDisagreeingPlugsFailWithoutTouchingTheDevice) {
    Cluster c;
    unfence_all(c);
    const size_t before = c.t.log.size();
    for (const char* action : {"off", "status", "on"}) {
        c.logs.clear();
        // exit 1, never status' 2 (OFF): an unknown node is not a fenced one.
        EXPECT_EQ(c.run("n1", kMap + "action=" + action + "\nplug=9\nnodename=n9"), kExitError) << action;
        EXPECT_TRUE(c.logged("unknown plug '9'")) << action << c.all_logs();
        c.logs.clear();
        EXPECT_EQ(c.run("n1", kMap + "action=" + action + "\nplug=3\nnodename=n2"), kExitError) << action;
        EXPECT_TRUE(c.logged("pcmk_host_map and node_ids disagree")) << action << c.all_logs();
    }
    EXPECT_EQ(c.t.log.size(), before);  // not a single command reached the device
    for (uint8_t n : {uint8_t{1}, uint8_t{2}, uint8_t{3}}) EXPECT_TRUE(c.registered(n));
}

TEST(FenceAgentActions, ListAndListStatusInFenceAgentsFormat) {
    Cluster c;
    unfence_all(c);
    ASSERT_EQ(c.run("n1", kMap + "action=off\nplug=n2"), kExitOk);
    std::string out;
    // fence-agents: plug<sep>alias and plug<sep>alias<sep>status.
    EXPECT_EQ(c.run("n1", kMap + "action=list", &out), kExitOk);
    EXPECT_EQ(out, "n1,1\nn2,2\nn3,3\n");
    EXPECT_EQ(c.run("n1", kMap + "action=list-status", &out), kExitOk) << c.all_logs();
    EXPECT_EQ(out, "n1,1,ON\nn2,2,OFF\nn3,3,ON\n");
    EXPECT_EQ(c.run("n1", kMap + "action=list-status\nseparator=;", &out), kExitOk);
    EXPECT_EQ(out, "n1;1;ON\nn2;2;OFF\nn3;3;ON\n");
    EXPECT_EQ(c.run("n1", kMap + "action=list\nseparator= ", &out), kExitError);  // trimmed to nothing
    // list-status reads the devices: none, or one that cannot be read, fails.
    out.clear();
    EXPECT_EQ(c.run("n1", "node_ids=n1:1;n2:2;n3:3\naction=list-status", &out), kExitError);
    EXPECT_EQ(out, "");
    EXPECT_EQ(c.run("n1", "devices=/dev/nvme1n1,/dev/missing\nnode_ids=n1:1;n2:2\naction=list-status", &out),
              kExitError);
    // A corosync id no key can carry is UNKNOWN.
    Cluster k;
    k.cmap_nodelist =
        "nodelist.node.0.name (str) = n1\nnodelist.node.0.nodeid (u32) = 1\n"
        "nodelist.node.1.name (str) = n9\nnodelist.node.1.nodeid (u32) = 300\n";
    k.cmap_this = "runtime.votequorum.this_node_id (u32) = 1\n";
    ASSERT_EQ(k.run("n1", "devices=/dev/nvme1n1\naction=on\nnodename=n1"), kExitOk) << k.all_logs();
    EXPECT_EQ(k.run("n1", "devices=/dev/nvme1n1\naction=list-status", &out), kExitOk) << k.all_logs();
    EXPECT_EQ(out, "n1,1,ON\nn9,300,UNKNOWN\n");
}

TEST(FenceAgentDevices, DeviceMapperPaths) {
    for (const char* p : {"/dev/mapper/mpatha", "/dev/mapper/3600a0b80", "/dev/dm-0", "/dev/dm-12",
                          "/dev/disk/by-id/dm-uuid-mpath-eui.1234", "/dev/disk/by-id/dm-name-mpatha"})
        EXPECT_TRUE(is_device_mapper_path(p)) << p;
    for (const char* p : {"/dev/nvme1n1", "/dev/ng1n1", "/dev/nvfence/vol-1", "/dev/disk/by-id/nvme-eui.1234",
                          "/dev/dm-", "/dev/dm-x", "/dev/dmx-1", "/tmp/dm-1", "dm-1", ""})
        EXPECT_FALSE(is_device_mapper_path(p)) << p;
}

// dm-multipath over NVMe (fence_mpath's setup) is refused before the device
// is opened, saying what to use instead.
TEST(FenceAgentDevices, DeviceMapperIsRefusedWithWhatToUseInstead) {
    Cluster c;
    unfence_all(c);
    const std::string map = "node_ids=n1:1;n2:2;n3:3\n";
    for (const char* action : {"off\nplug=n2", "status\nplug=n2", "on\nplug=n1", "monitor", "validate-all",
                               "list-status"}) {
        c.logs.clear();
        c.opened.clear();
        EXPECT_EQ(c.run("n1", map + "devices=/dev/mapper/mpatha\naction=" + action), kExitError) << action;
        EXPECT_TRUE(c.logged("/dev/mapper/mpatha: a device-mapper device")) << c.all_logs();
        EXPECT_TRUE(c.logged("native NVMe multipath")) << c.all_logs();
        EXPECT_TRUE(c.logged("/dev/nvmeXnY")) << c.all_logs();
        EXPECT_TRUE(c.opened.empty()) << action;
    }
    EXPECT_TRUE(c.registered(2));
    // Behind a link: the canonical path decides, and the message names the paths.
    c.links["/dev/disk/by-id/wwn-shared"] = "/dev/dm-3";
    c.logs.clear();
    EXPECT_EQ(c.run("n1", map + "devices=/dev/disk/by-id/wwn-shared\naction=status\nplug=n2"), kExitError);
    EXPECT_TRUE(c.logged("(dm-3 over nvme0n1, nvme1n1)")) << c.all_logs();
    // A namespace is fine.
    EXPECT_EQ(c.run("n1", map + "devices=/dev/nvme1n1\naction=status\nplug=n2"), kExitOk) << c.all_logs();
}

TEST(FenceAgentActions, DelayOnlyBeforeOff) {
    Cluster c;
    unfence_all(c);
    EXPECT_EQ(c.run("n1", kMap + "delay=7\naction=status\nplug=n2"), kExitOk);
    EXPECT_TRUE(c.slept.empty());
    EXPECT_EQ(c.run("n1", kMap + "delay=7\naction=off\nplug=n2"), kExitOk);
    EXPECT_EQ(c.slept, std::vector<uint32_t>{7});
}

TEST(FenceAgentActions, BadOptionsFailBeforeTouchingTheDevice) {
    Cluster c;
    EXPECT_EQ(c.run("n1", kMap + "action=reboot\nplug=n2"), kExitError);
    EXPECT_EQ(c.run("n1", kMap + "action=off\nplug=n2\nreservation_type=5"), kExitError);
    EXPECT_TRUE(c.logged("NVMe type 3"));
    EXPECT_TRUE(c.t.log.empty());
    // Unknown keys only warn.
    EXPECT_EQ(c.run("n1", kMap + "action=status\nplug=n2\npcmk_monitor_timeout=5"), kExitOff);
    EXPECT_TRUE(c.logged("ignoring unknown option 'pcmk_monitor_timeout=5'"));
}

// Node 1's own Fence on the cluster's target, as the nvfenced of node 1
// holds it (the fake agents below act with it).
struct NodeOneFence {
    explicit NodeOneFence(FakeTarget& t) : port(t, make_host(1)), resv(port, 1), fence(resv, make_host(1), opts(), nullptr) {}
    static FenceOptions opts() {
        FenceOptions fo;
        fo.node = 1;
        fo.type = ResvType::write_exclusive_reg_only;
        return fo;
    }
    HostPort port;
    Reservations resv;
    Fence fence;
};

TEST(FenceAgentActions, ThroughTheLocalAgent) {
    Cluster c;
    unfence_all(c);
    // An nvfenced on n1 owns n1's registration; it takes over with its own
    // key (as nvfenced's takeover does), so fence_nvfence sends nothing itself.
    NodeOneFence n1(c.t);
    Fence& f1 = n1.fence;
    c.agent = [&](const ControlRequest& r) {
        ControlReply rep;
        rep.op = r.op;
        rep.node = 1;
        rep.state = AgentState::standby;
        if (r.op == ControlOp::takeover) {
            auto o = f1.takeover(r.victim ? std::optional<uint64_t>(r.victim) : std::nullopt);
            rep.exit_code = o ? 0 : 1;
            rep.message = o ? "took over" : o.error().message();
        }
        return rep;
    };
    const uint64_t k2 = c.t.find(make_host(2))->key;
    ASSERT_EQ(c.run("n1", kMap + "action=off\nplug=n2"), kExitOk) << c.all_logs();
    EXPECT_FALSE(c.registered(2));
    // Its status first: a check-only watcher would be bypassed.
    ASSERT_EQ(c.agent_requests.size(), 2u);
    EXPECT_EQ(c.agent_requests[0].op, ControlOp::status);
    EXPECT_EQ(c.agent_requests[1].op, ControlOp::takeover);
    EXPECT_EQ(c.agent_requests[1].victim, k2);
    // 'on' with the agent FENCED asks it to rejoin; with another node id it refuses.
    c.agent_requests.clear();
    c.agent = [&](const ControlRequest& r) {
        ControlReply rep;
        rep.op = r.op;
        rep.node = 1;
        rep.state = AgentState::fenced;
        rep.message = r.op == ControlOp::rejoin ? "rejoined" : "FENCED";
        return rep;
    };
    EXPECT_EQ(c.run("n1", kMap + "action=on\nplug=n1"), kExitOk) << c.all_logs();
    ASSERT_EQ(c.agent_requests.size(), 2u);
    EXPECT_EQ(c.agent_requests[1].op, ControlOp::rejoin);
    EXPECT_EQ(c.run("n2", kMap + "action=on\nplug=n2"), kExitError);
    EXPECT_TRUE(c.logged("nvfenced on this host is node 1"));
}

// Issue 27: a check-only watcher (role = watch) registers nothing and
// refuses takeover and rejoin, so 'on', 'off' and 'status' act on the
// device directly, as with no nvfenced at all: only its status is asked.
TEST(FenceAgentActions, ACheckOnlyWatcherIsBypassed) {
    Cluster c;
    unfence_all(c);
    // A watcher of @p node in @p state: answers status, refuses the rest.
    auto watcher = [](uint8_t node, AgentState state) {
        return [node, state](const ControlRequest& r) {
            ControlReply rep;
            rep.op = r.op;
            rep.node = node;
            rep.check_only = true;
            rep.state = state;
            if (r.op != ControlOp::status) {
                rep.exit_code = 1;
                rep.message = "nvfenced is a check-only watcher (role = watch)";
            }
            return rep;
        };
    };
    c.agent = watcher(1, AgentState::watching);
    ASSERT_EQ(c.run("n1", kMap + "action=off\nplug=n2\nverbose=1"), kExitOk) << c.all_logs();
    EXPECT_FALSE(c.registered(2)) << "node 2 not fenced directly";
    for (const auto& r : c.agent_requests) EXPECT_EQ(r.op, ControlOp::status) << "the watcher was asked to act";
    EXPECT_TRUE(c.logged("is a check-only watcher (WATCHING): acting on the device directly")) << c.all_logs();
    // 'on' of a node whose watcher saw its key go: registered directly.
    c.agent_requests.clear();
    c.agent = watcher(2, AgentState::fenced);
    ASSERT_EQ(c.run("n2", kMap + "action=on\nplug=n2"), kExitOk) << c.all_logs();
    EXPECT_TRUE(c.registered(2));
    for (const auto& r : c.agent_requests) EXPECT_EQ(r.op, ControlOp::status) << "the watcher was asked to rejoin";
    // ... and recorded for the watcher (<volume>.unfenced in state_dir), so
    // that it knows of the unfencing before any check of it sees the key.
    size_t records = 0;
    for (const auto& e : std::filesystem::directory_iterator(c.state.path())) {
        if (e.path().extension() != ".unfenced") continue;
        ++records;
        std::ifstream in(e.path());
        std::string line;
        std::getline(in, line);
        ASSERT_EQ(line.rfind("key=", 0), 0u) << line;
        const auto k = parse_key(line.substr(4));
        ASSERT_TRUE(k.ok()) << line;
        ASSERT_TRUE(decode_key(*k));
        EXPECT_EQ(decode_key(*k)->node, 2) << line;
    }
    EXPECT_EQ(records, 1u) << "one record of the unfencing";
    c.agent_requests.clear();
    std::string out;
    ASSERT_EQ(c.run("n2", kMap + "action=status\nplug=n2", &out), kExitOk) << c.all_logs();
    EXPECT_NE(out.find("Status: ON"), std::string::npos) << out;
    for (const auto& r : c.agent_requests) EXPECT_EQ(r.op, ControlOp::status);
}

// nvfence-sim, Pacemaker schedules 4 and 301: unfencing through nvfenced
// left the namespace without a reservation (a target restart without PTPL,
// a first Acquire that failed), so unregistered hosts could write although
// 'on' promises a Registrants Only reservation. 'on' now asks the agent to
// rejoin when nobody holds one; the agent (role = acquire) takes it.
TEST(FenceAgentActions, OnThroughTheAgentAsksItToTakeAReservationNobodyHolds) {
    Cluster c;
    NodeOneFence n1(c.t);
    Fence& f1 = n1.fence;
    ASSERT_TRUE(f1.join(std::nullopt, false));
    ASSERT_EQ(c.t.type, ResvType::none);
    c.agent = [&](const ControlRequest& r) {
        ControlReply rep;
        rep.op = r.op;
        rep.node = 1;
        rep.state = AgentState::standby;
        if (r.op == ControlOp::rejoin) {
            auto a = f1.acquire();
            rep.exit_code = a ? 0 : 1;
            rep.changed = a.ok();
            rep.message = "not fenced (STANDBY); took the reservation nobody held";
        }
        return rep;
    };
    EXPECT_EQ(c.run("n1", kMap + "action=on\nplug=n1"), kExitOk) << c.all_logs();
    ASSERT_EQ(c.agent_requests.size(), 2u);
    EXPECT_EQ(c.agent_requests[0].op, ControlOp::status);
    EXPECT_EQ(c.agent_requests[1].op, ControlOp::rejoin);
    EXPECT_EQ(c.t.type, ResvType::write_exclusive_reg_only);
    EXPECT_FALSE(c.logged("no reservation is held")) << c.all_logs();
    // Held: only the status is asked.
    c.agent_requests.clear();
    EXPECT_EQ(c.run("n1", kMap + "action=on\nplug=n1"), kExitOk) << c.all_logs();
    EXPECT_EQ(c.agent_requests.size(), 1u);
}

// nvfence-sim seed 187761: the Report of 'on' timed out, so the agent was
// not asked, and 'on' succeeded with a warning: the cluster ran without a
// reservation for good. Under Registrants Only 'on' fails when none is held
// after it, and Pacemaker retries the unfencing.
TEST(FenceAgentActions, OnFailsWhenNoReservationIsHeldAfterIt) {
    Cluster c;
    NodeOneFence n1(c.t);
    ASSERT_TRUE(n1.fence.join(std::nullopt, false));
    c.agent = [&](const ControlRequest& r) {
        ControlReply rep;
        rep.op = r.op;
        rep.node = 1;
        rep.state = AgentState::standby;
        rep.message = "not fenced (STANDBY): nothing to do";  // role standby: it does not take it
        return rep;
    };
    EXPECT_EQ(c.run("n1", kMap + "action=on\nplug=n1"), kExitError) << c.all_logs();
    EXPECT_TRUE(c.logged("registered, but no reservation is held")) << c.all_logs();
    EXPECT_EQ(c.t.type, ResvType::none);
}

TEST(FenceAgentOptions, Aptpl) {
    EXPECT_FALSE(argv({"-o", "on"}).opts.aptpl);
    EXPECT_TRUE(argv({"-o", "on", "-a"}).opts.aptpl);
    EXPECT_TRUE(argv({"--aptpl", "-o", "on"}).opts.aptpl);
    EXPECT_TRUE(parse_stdin("action=on\naptpl=1\n").opts.aptpl);
    EXPECT_FALSE(parse_stdin("action=on\naptpl=1\naptpl=off\n").opts.aptpl);
}

TEST(FenceAgentActions, AptplOnANamespaceWithoutPtplChangesNothing) {
    Cluster c;  // RESCAP without PTPL, as nvmet reports it
    EXPECT_EQ(c.run("n1", kMap + "action=on\nplug=n1\naptpl=1"), kExitError);
    EXPECT_TRUE(c.logged("/dev/nvme1n1: aptpl: the namespace does not support Persist Through Power Loss"))
        << c.all_logs();
    EXPECT_TRUE(c.t.regs.empty());
    EXPECT_EQ(c.t.state_commands(), 0u);
}

TEST(FenceAgentActions, AptplRegistersWithCptplAndVerifiesPtpls) {
    Cluster c;
    c.ptpl_capable = true;  // a device that implements PTPL (not nvmet)
    c.t.deviations.cptpl_ignored = false;
    ASSERT_EQ(c.run("n1", kMap + "action=on\nplug=n1\naptpl=1"), kExitOk) << c.all_logs();
    EXPECT_TRUE(c.t.ptpl);
    EXPECT_EQ(c.t.regs.size(), 1u);
    // Without aptpl nothing asks for PTPL.
    Cluster plain;
    plain.ptpl_capable = true;
    ASSERT_EQ(plain.run("n1", kMap + "action=on\nplug=n1"), kExitOk);
    EXPECT_FALSE(plain.t.ptpl);
}

TEST(FenceAgentActions, AptplOnARegisteredNodeKeepsItsKey) {
    Cluster c;
    c.ptpl_capable = true;  // a device that implements PTPL (not nvmet)
    c.t.deviations.cptpl_ignored = false;
    ASSERT_EQ(c.run("n1", kMap + "action=on\nplug=n1"), kExitOk);
    ASSERT_FALSE(c.t.ptpl);
    const uint64_t k = c.t.find(make_host(1))->key;
    ASSERT_EQ(c.run("n1", kMap + "action=on\nplug=n1\naptpl=1"), kExitOk) << c.all_logs();
    EXPECT_TRUE(c.t.ptpl);
    EXPECT_EQ(c.t.find(make_host(1))->key, k);
    EXPECT_TRUE(c.t.is_holder(make_host(1)));
}

TEST(FenceAgentActions, AptplFailsWhenTheDeviceDoesNotPersist) {
    Cluster c;
    c.ptpl_capable = true;              // claims PTPL in RESCAP
    c.t.deviations.cptpl_ignored = true;  // but ignores CPTPL, as nvmet does
    EXPECT_EQ(c.run("n1", kMap + "action=on\nplug=n1\naptpl=1"), kExitError);
    EXPECT_TRUE(c.logged("Persist Through Power Loss off after 'on'")) << c.all_logs();
    EXPECT_TRUE(c.logged("ignores CPTPL")) << c.all_logs();
}

TEST(FenceAgentActions, AptplThroughNvfencedNamesItsPtplKey) {
    Cluster c;
    c.ptpl_capable = true;
    unfence_all(c);  // n1 registered (as its nvfenced would be), PTPL off
    c.agent = [&](const ControlRequest& r) {
        ControlReply rep;
        rep.op = r.op;
        rep.node = 1;
        rep.state = AgentState::standby;
        return rep;
    };
    EXPECT_EQ(c.run("n1", kMap + "action=on\nplug=n1\naptpl=1"), kExitError);
    EXPECT_TRUE(c.logged("set ptpl = true in its configuration")) << c.all_logs();
    EXPECT_FALSE(c.t.ptpl);  // fence_nvfence changed nothing behind the agent's back
}

// ---- several devices -----------------------------------------------------------

const std::string kMap2 = "devices=/dev/nvme1n1,/dev/nvme2n1\nnode_ids=n1:1;n2:2;n3:3\n";

bool registered_on(const FakeTarget& t, uint8_t node) {
    for (const auto& r : t.regs)
        if (auto f = decode_key(r.key); f && f->node == node) return true;
    return false;
}

TEST(FenceAgentDevices, OffOnTwoDevicesFencesTheNodeOnBoth) {
    Cluster c;
    for (const char* n : {"n1", "n2", "n3"})
        ASSERT_EQ(c.run(n, kMap2 + "action=on\nnodename=" + n), kExitOk) << c.all_logs();
    std::string out;
    ASSERT_EQ(c.run("n1", kMap2 + "action=off\nplug=n2", &out), kExitOk) << c.all_logs();
    EXPECT_EQ(out, "Success: Powered OFF\n");
    for (const FakeTarget* t : {&c.t, &c.t2}) {
        EXPECT_FALSE(registered_on(*t, 2));
        EXPECT_TRUE(registered_on(*t, 1));
        EXPECT_TRUE(registered_on(*t, 3));
    }
}

// fence-agents issue 278: two nodes fencing each other must not end with
// each owning one device. Both visit the devices in volume order, whatever
// order devices= lists them in, and a fencer that fails on one device
// touches none after it.
TEST(FenceAgentDevices, AFencerThatLostTheFirstVolumeLeavesTheOthersAlone) {
    Cluster c;
    for (const char* n : {"n1", "n2"})
        ASSERT_EQ(c.run(n, kMap2 + "action=on\nnodename=" + n), kExitOk) << c.all_logs();
    // n2 fenced n1 on vol-test (the first volume) ...
    ASSERT_EQ(c.run("n2", "devices=/dev/nvme1n1\nnode_ids=n1:1;n2:2;n3:3\naction=off\nplug=n1"), kExitOk);
    // ... when n1, listing vol-two first, tries to fence n2.
    c.logs.clear();
    const size_t t2_changes = c.t2.state_commands();
    EXPECT_EQ(c.run("n1", "devices=/dev/nvme2n1,/dev/nvme1n1\nnode_ids=n1:1;n2:2;n3:3\naction=off\nplug=n2"),
              kExitError);
    EXPECT_TRUE(c.logged("/dev/nvme1n1: this host is not registered")) << c.all_logs();
    EXPECT_TRUE(c.logged("not fencing on the devices after /dev/nvme1n1")) << c.all_logs();
    EXPECT_TRUE(registered_on(c.t2, 2)) << "n1 must not take vol-two from n2";
    EXPECT_EQ(c.t2.state_commands(), t2_changes) << "nothing sent to vol-two";
}

TEST(FenceAgentDevices, TheDevicesAfterTheFirstGoTogetherAndAreLoggedInVolumeOrder) {
    Cluster c;
    std::vector<size_t> batches;
    c.run_all = [&](std::vector<std::function<void()>>& jobs) {
        batches.push_back(jobs.size());
        run_all_threads(jobs);
    };
    for (const char* n : {"n1", "n2", "n3"})
        ASSERT_EQ(c.run(n, kMap2 + "action=on\nnodename=" + n), kExitOk) << c.all_logs();
    c.logs.clear();
    // devices= lists vol-two first; vol-test is still fenced first, alone.
    ASSERT_EQ(c.run("n1", "devices=/dev/nvme2n1,/dev/nvme1n1\nnode_ids=n1:1;n2:2;n3:3\naction=off\nplug=n2"),
              kExitOk)
        << c.all_logs();
    EXPECT_EQ(batches, (std::vector<size_t>{2, 1, 2}))
        << "batches: opening every device, fencing every device after the first, the closing Reports";
    EXPECT_FALSE(registered_on(c.t, 2));
    EXPECT_FALSE(registered_on(c.t2, 2));
    size_t first = 0, second = 0;
    for (size_t i = 0; i < c.logs.size(); ++i) {
        if (!first && c.logs[i].second.rfind("/dev/nvme1n1: node 2 fenced", 0) == 0) first = i + 1;
        if (!second && c.logs[i].second.rfind("/dev/nvme2n1: node 2 fenced", 0) == 0) second = i + 1;
    }
    EXPECT_TRUE(first && second && first < second) << c.all_logs();

    // A fencer that lost the first volume opens the devices and runs no
    // other batch.
    ASSERT_EQ(c.run("n2", "devices=/dev/nvme1n1\nnode_ids=n1:1;n2:2;n3:3\naction=on\nnodename=n2"), kExitOk);
    ASSERT_EQ(c.run("n3", "devices=/dev/nvme1n1\nnode_ids=n1:1;n2:2;n3:3\naction=off\nplug=n1"), kExitOk);
    batches.clear();
    EXPECT_EQ(c.run("n1", kMap2 + "action=off\nplug=n3"), kExitError);
    EXPECT_EQ(batches, std::vector<size_t>{2});
    EXPECT_TRUE(registered_on(c.t2, 3));
}

TEST(FenceAgentDevices, RunAllThreadsRunsEveryJobOnceAndAtMostTheBoundAtOnce) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{5}, kMaxParallelDevices * 3 + 1}) {
        std::vector<std::atomic<int>> runs(n);
        std::atomic<size_t> now{0}, peak{0};
        std::vector<std::function<void()>> jobs;
        for (size_t i = 0; i < n; ++i)
            jobs.emplace_back([&, i] {
                const size_t k = ++now;
                for (size_t p = peak.load(); k > p && !peak.compare_exchange_weak(p, k);) {
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(2));
                ++runs[i];
                --now;
            });
        run_all_threads(jobs);
        for (size_t i = 0; i < n; ++i) EXPECT_EQ(runs[i].load(), 1) << "job " << i << " of " << n;
        EXPECT_LE(peak.load(), kMaxParallelDevices);
        static_assert(kMaxParallelDevices == 16, "PACEMAKER.md and the man page say at most 16 at once");
        if (n > kMaxParallelDevices) {
            EXPECT_GT(peak.load(), 1u) << "the jobs ran one after another";
        }
    }
}

TEST(FenceAgentDevices, OffFailsNamingADeviceLeftWithOtherNodes) {
    Cluster c;
    for (const char* n : {"n1", "n2"})
        ASSERT_EQ(c.run(n, kMap2 + "action=on\nnodename=" + n), kExitOk) << c.all_logs();
    // n3 was unfenced on vol-test only.
    ASSERT_EQ(c.run("n3", kMap + "action=on\nnodename=n3"), kExitOk);
    EXPECT_EQ(c.run("n1", kMap2 + "action=off\nplug=n2"), kExitError);
    EXPECT_FALSE(registered_on(c.t, 2));
    EXPECT_FALSE(registered_on(c.t2, 2));
    EXPECT_TRUE(c.logged("/dev/nvme1n1 (vol-test): nodes 1,3; /dev/nvme2n1 (vol-two): nodes 1")) << c.all_logs();
}

TEST(FenceAgentDevices, WithoutDevicesTheLinksUnderDevNvfenceAreUsed) {
    Cluster c;
    const std::string map = "node_ids=n1:1;n2:2;n3:3\n";
    EXPECT_EQ(c.run("n1", map + "action=on\nplug=n1"), kExitError);
    EXPECT_TRUE(c.logged("none found under /dev/nvfence")) << c.all_logs();
    c.discovered = {"/dev/nvme1n1", "/dev/nvme2n1"};
    // The first unfencing names the devices: a namespace without a key of
    // the cluster's tag is not discovered as the cluster's.
    ASSERT_EQ(c.run("n1", map + "devices=/dev/nvme1n1,/dev/nvme2n1\naction=on\nnodename=n1"), kExitOk) << c.all_logs();
    for (const char* n : {"n1", "n2"})
        ASSERT_EQ(c.run(n, map + "action=on\nnodename=" + n), kExitOk) << c.all_logs();
    EXPECT_TRUE(registered_on(c.t, 2) && registered_on(c.t2, 2));
    ASSERT_EQ(c.run("n1", map + "action=off\nplug=n2"), kExitOk) << c.all_logs();
    EXPECT_FALSE(registered_on(c.t, 2));
    EXPECT_FALSE(registered_on(c.t2, 2));
    // Given devices win over discovery.
    c.opened.clear();
    EXPECT_EQ(c.run("n1", kMap + "action=status\nplug=n1"), kExitOk);
    EXPECT_EQ(c.opened, std::vector<std::string>{"/dev/nvme1n1"});
}

// Discovery takes only the namespaces of this cluster: a link under
// /dev/nvfence to another cluster's volume (another tag's keys, foreign
// keys, or no key of this tag at all) is skipped with a warning, by 'on'
// (which would register there and take a reservation nobody holds) and by
// 'off' (which would fail on it).
TEST(FenceAgentDevices, DiscoveryTakesOnlyTheNamespacesOfThisCluster) {
    Cluster c;
    const std::string map = "node_ids=n1:1;n2:2;n3:3\n";
    for (const char* n : {"n1", "n2", "n3"})
        ASSERT_EQ(c.run(n, kMap + "action=on\nnodename=" + n), kExitOk) << c.all_logs();
    // vol-two: another cluster's volume (tag 9), its node 1 holding.
    c.t2.add(make_host(7), key(1, 4, 9));
    c.t2.holder = make_host(7);
    c.t2.type = ResvType::write_exclusive_reg_only;
    c.discovered = {"/dev/nvme1n1", "/dev/nvme2n1"};
    ASSERT_EQ(c.run("n1", map + "action=off\nplug=n2"), kExitOk) << c.all_logs();
    EXPECT_FALSE(registered_on(c.t, 2));
    EXPECT_TRUE(c.logged("/dev/nvme2n1: skipped")) << c.all_logs();
    ASSERT_EQ(c.run("n2", map + "action=on\nplug=n2"), kExitOk) << c.all_logs();
    EXPECT_TRUE(registered_on(c.t, 2));
    ASSERT_EQ(c.t2.regs.size(), 1u) << "nothing registered on the other cluster's volume";
    EXPECT_EQ(c.t2.regs[0].key, key(1, 4, 9));
    // A discovered namespace that carries no key at all is not taken either.
    c.t2.regs.clear();
    c.t2.holder.reset();
    c.t2.type = ResvType::none;
    ASSERT_EQ(c.run("n3", map + "action=on\nplug=n3"), kExitOk) << c.all_logs();
    EXPECT_TRUE(c.t2.regs.empty());
}

// 'on' never takes a reservation where registrants that are not this
// cluster's are present (another tag's keys, foreign keys): it would lock
// that volume's own writers out.
TEST(FenceAgentActions, OnNeverAcquiresBesideKeysThatAreNotThisClusters) {
    for (bool foreign : {false, true}) {
        Cluster c;
        c.t.add(make_host(7), foreign ? 0x1234567812345678ull : key(1, 4, 9));
        EXPECT_EQ(c.run("n1", kMap + "action=on\nplug=n1"), kExitError) << c.all_logs();
        EXPECT_EQ(c.t.type, ResvType::none) << "took the reservation beside another cluster's key";
        EXPECT_TRUE(c.logged("not taking the reservation")) << c.all_logs();
    }
}

// Without cluster_tag, the tag is derived from corosync's cluster name
// (totem.cluster_name): two clusters with default settings on one
// namespace do not share one key space.
TEST(FenceAgentTag, WithoutClusterTagItIsDerivedFromCorosyncsClusterName) {
    Cluster c;
    c.cmap_name = "totem.cluster_name (str) = nvlab\n";
    ASSERT_EQ(c.run("n1", kMap + "action=on\nplug=n1"), kExitOk) << c.all_logs();
    ASSERT_EQ(c.t.regs.size(), 1u);
    EXPECT_EQ(c.t.regs[0].key, key(1, 1, 243)) << format_key(c.t.regs[0].key);
    ASSERT_EQ(c.run("n2", kMap + "action=on\nplug=n2"), kExitOk) << c.all_logs();
    ASSERT_EQ(c.run("n1", kMap + "action=off\nplug=n2"), kExitOk) << c.all_logs();
    EXPECT_FALSE(c.registered(2));
    // An explicit cluster_tag wins (the migration of a tag-0 cluster).
    Cluster z;
    z.cmap_name = "totem.cluster_name (str) = nvlab\n";
    ASSERT_EQ(z.run("n1", kMap + "cluster_tag=0\naction=on\nplug=n1"), kExitOk) << z.all_logs();
    EXPECT_EQ(z.t.regs[0].key, key(1, 1, 0));
    // No corosync on the host (corosync-cmapctl not installed): tag 0.
    Cluster none;
    ASSERT_EQ(none.run("n1", kMap + "action=on\nplug=n1"), kExitOk) << none.all_logs();
    EXPECT_EQ(none.t.regs[0].key, key(1, 1, 0));
}

// corosync installed but its cluster name unreadable (not running, a
// timeout): no guess, nothing touched.
TEST(FenceAgentTag, AClusterNameThatCannotBeReadFailsBeforeTouchingTheDevice) {
    Cluster c;
    c.cmap_name_error = errno_error(EIO);
    EXPECT_EQ(c.run("n1", kMap + "action=on\nplug=n1"), kExitError);
    EXPECT_TRUE(c.logged("cluster_tag")) << c.all_logs();
    EXPECT_TRUE(c.opened.empty());
    EXPECT_TRUE(c.t.regs.empty());
}

// A cluster that used tag 0 and now runs without cluster_tag sees its own
// keys under another tag with the same node ids: refused, with the
// migration in the message, for every action that reads or moves keys.
TEST(FenceAgentTag, AnotherTagsKeysOfTheSameNodeIdsAreRefused) {
    Cluster c;
    unfence_all(c);  // tag 0
    c.cmap_name = "totem.cluster_name (str) = nvlab\n";
    const size_t before = c.t.state_commands();
    for (const char* act : {"action=off\nplug=n2", "action=on\nplug=n1", "action=status\nplug=n2"}) {
        c.logs.clear();
        EXPECT_EQ(c.run("n1", kMap + act), kExitError) << act << "\n" << c.all_logs();
        EXPECT_TRUE(c.logged("cluster tag 0")) << act << "\n" << c.all_logs();
        EXPECT_TRUE(c.logged("cluster_tag=0")) << act << "\n" << c.all_logs();
    }
    EXPECT_EQ(c.t.state_commands(), before) << "nothing changed";
    EXPECT_TRUE(c.registered(2));
    // With the migration's cluster_tag=0 the cluster works as before.
    EXPECT_EQ(c.run("n1", kMap + "cluster_tag=0\naction=off\nplug=n2"), kExitOk) << c.all_logs();
}

TEST(FenceAgentDevices, DiscoverLinksKeepsBlockDevicesInNameOrder) {
    TempDir dir;
    EXPECT_TRUE(discover_links(dir.path() + "/missing").empty());
    std::string block;  // any block device of this machine
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/dev", ec))
        if (e.is_block_file(ec)) {
            block = e.path().string();
            break;
        }
    std::ofstream(dir.path() + "/plain-file") << "x";
    std::filesystem::create_symlink("/dev/null", dir.path() + "/char-device");
    if (block.empty()) {
        EXPECT_TRUE(discover_links(dir.path()).empty());
        GTEST_SKIP() << "no block device under /dev to link to";
    }
    std::filesystem::create_symlink(block, dir.path() + "/vol-b");
    std::filesystem::create_symlink(block, dir.path() + "/vol-a");
    std::filesystem::create_symlink(block, dir.path() + "/.hidden");
    EXPECT_EQ(discover_links(dir.path()), (std::vector<std::string>{dir.path() + "/vol-a", dir.path() + "/vol-b"}));
}

// -h lists every option the metadata documents, in the metadata's own
// command line form (stdin-only options and port, plug's old name, aside).
TEST(FenceAgentMetadata, UsageListsEveryOption) {
    const std::string usage = usage_text();
    for (const auto& p : parameter_docs()) {
        if (p.stdin_only || p.deprecated_for) continue;
        EXPECT_NE(usage.find(std::string("   ") + p.getopt), std::string::npos) << p.name << ": " << p.getopt;
    }
}

TEST(FenceAgentMetadata, MatchesTheGoldenFile) {
    std::ifstream f(std::string(NVFENCE_SOURCE_DIR) + "/tests/fence_nvfence/metadata.xml");
    ASSERT_TRUE(f);
    std::stringstream ss;
    ss << f.rdbuf();
    EXPECT_EQ(metadata_xml(), ss.str());
    Cluster c;
    std::string out;
    EXPECT_EQ(c.run("n1", "action=metadata"), kExitOk);
    EXPECT_EQ(c.run("n1", "action=metadata\nfoo=bar", &out), kExitOk);
    EXPECT_EQ(out, ss.str());
    for (const char* a : {"name=\"on\" on_target=\"1\" automatic=\"1\"", "name=\"off\"", "name=\"status\"",
                          "name=\"monitor\"", "name=\"list\"", "name=\"list-status\"", "name=\"manpage\"",
                          "name=\"validate-all\"", "name=\"separator\""})
        EXPECT_NE(out.find(a), std::string::npos) << a;
    EXPECT_EQ(out.find("\"reboot\""), std::string::npos);
}

// ---- the man page (fence_nvfence -o manpage) -----------------------------------

std::string read_source(const std::string& rel) {
    std::ifstream f(std::string(NVFENCE_SOURCE_DIR) + "/" + rel);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// The text between ".SH name" and the next ".SH".
std::string man_section(const std::string& man, const std::string& name) {
    const size_t b = man.find("\n.SH " + name + "\n");
    if (b == std::string::npos) return {};
    const size_t e = man.find("\n.SH ", b + 1);
    return man.substr(b, e == std::string::npos ? std::string::npos : e - b);
}

std::string unroff(std::string s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == 'e' || s[i + 1] == '-')) {
            out += s[i + 1] == 'e' ? '\\' : '-';
            ++i;
        } else {
            out += s[i];
        }
    }
    return out;
}

TEST(FenceAgentManpage, EverySectionAndEveryEntryOfTheMetadata) {
    const std::string man = manpage_text();
    EXPECT_EQ(man.rfind(".\\\"", 0), 0u);
    EXPECT_NE(man.find("\n.TH FENCE_NVFENCE 8 "), std::string::npos);
    EXPECT_NE(man.find("\n.SH NAME\nfence_nvfence \\- "), std::string::npos);  // whatis
    for (const char* sec : {"NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "ACTIONS", "STDIN PARAMETERS",
                            "EXIT STATUS", "EXAMPLES", "SEE ALSO"})
        EXPECT_FALSE(man_section(man, sec).empty()) << sec;
    const std::string meta = metadata_xml();
    const std::string options = unroff(man_section(man, "OPTIONS"));
    const std::string params = man_section(man, "STDIN PARAMETERS");
    const std::string actions = man_section(man, "ACTIONS");
    // Every parameter and action of the metadata is in the man page.
    for (size_t pos = 0; (pos = meta.find("<parameter name=\"", pos)) != std::string::npos;) {
        pos += 17;
        const std::string name = meta.substr(pos, meta.find('"', pos) - pos);
        EXPECT_NE(params.find("\n.B " + unroff(name) + "\n"), std::string::npos) << name;
        const size_t g = meta.find("mixed=\"", pos) + 7;
        const std::string getopt = meta.substr(g, meta.find('"', g) - g);
        EXPECT_NE(options.find("\n.B " + getopt + "\n"), std::string::npos) << getopt;
    }
    for (size_t pos = 0; (pos = meta.find("<action name=\"", pos)) != std::string::npos;) {
        pos += 14;
        const std::string name = meta.substr(pos, meta.find('"', pos) - pos);
        EXPECT_NE(unroff(actions).find("\n.B " + name + "\n"), std::string::npos) << name;
    }
    // What Pacemaker sends but no one configures.
    for (const char* n : {"nodename", "nodeid"}) EXPECT_NE(params.find("\n.B " + std::string(n) + "\n"), std::string::npos);
    EXPECT_EQ(meta.find("\"nodename\""), std::string::npos);
    // The action prints it, from argv and stdin alike.
    Cluster c;
    std::string out;
    EXPECT_EQ(c.run("n1", "action=manpage\nfoo=bar", &out), kExitOk);
    EXPECT_EQ(out, man);
}

// The hand-written page's example fed printf "\node_ids" (a newline and
// "ode_ids"). The example is now escaped by the generator: what printf makes
// of it is the options it shows.
TEST(FenceAgentManpage, TheStdinExampleFeedsTheAgentWhatItSays) {
    const std::string ex = unroff(man_section(manpage_text(), "EXAMPLES"));
    const size_t b = ex.find("printf '");
    ASSERT_NE(b, std::string::npos) << ex;
    const size_t e = ex.find('\'', b + 8);
    const std::string fmt = ex.substr(b + 8, e - b - 8);
    std::string text;  // printf's \n
    for (size_t i = 0; i < fmt.size(); ++i) {
        if (fmt[i] == '\\' && i + 1 < fmt.size() && fmt[i + 1] == 'n') {
            text += '\n';
            ++i;
        } else {
            ASSERT_NE(fmt[i], '\\') << fmt;
            text += fmt[i];
        }
    }
    const Parsed p = parse_stdin(text);
    EXPECT_TRUE(p.ok());
    EXPECT_TRUE(p.warnings.empty()) << p.warnings.front();
    EXPECT_EQ(p.opts.action, Action::off);
    EXPECT_EQ(p.opts.plug, "n2");
    EXPECT_EQ(p.opts.devices, std::vector<std::string>{"/dev/nvme1n1"});
    EXPECT_EQ(p.opts.node_ids, "n1:1;n2:2");
    // And no roff escape is left unescaped in the examples' source.
    EXPECT_EQ(man_section(manpage_text(), "EXAMPLES").find("\\n"), std::string::npos);
}

TEST(FenceAgentManpage, TheCheckedInPageIsTheGeneratedOne) {
    // No diff here (the fence_nvfence_manpage test prints one).
    EXPECT_TRUE(read_source("man/fence_nvfence.8") == manpage_text())
        << "man/fence_nvfence.8 is not fence_nvfence -o manpage: "
           "regenerate it with build/bin/fence_nvfence -o manpage > man/fence_nvfence.8";
}

}  // namespace
}  // namespace nvfence::fence_agent
