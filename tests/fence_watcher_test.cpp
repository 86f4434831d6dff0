// SPDX-License-Identifier: MIT
// fence_nvfence's setup-watcher and check-config (tools/fence_nvfence/
// watcher_setup.hpp): the CIB read, the watcher's file and record, and both
// actions against a scripted host (files in memory, programs recorded, the
// CIB as cibadmin prints it).

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "fake_passthru.hpp"
#include "fence_agent.hpp"
#include "nvfence/error.hpp"
#include "options.hpp"
#include "watcher_setup.hpp"

namespace nvfence::fence_agent {
namespace {

using test::FakeTarget;
using test::HostPort;
using test::make_host;

// One namespace per path; only its volume name matters here.
class VolumeDevice final : public Device {
public:
    VolumeDevice(FakeTarget& t, std::string path, std::string volume)
        : path_(std::move(path)), volume_(std::move(volume)), id_(make_host(1)), port_(t, id_), resv_(port_, 1) {}
    const std::string& path() const override { return path_; }
    const std::string& volume() const override { return volume_; }
    const HostId& host_id() const override { return id_; }
    bool supports(ResvType) const override { return true; }
    bool ptpl_capable() const override { return false; }
    uint32_t nsid() const override { return 1; }
    Reservations& resv() override { return resv_; }

private:
    std::string path_, volume_;
    HostId id_;
    HostPort port_;
    Reservations resv_;
};

std::string stonith_xml(const std::string& id, const std::string& params) {
    return "<primitive id=\"" + id + "\" class=\"stonith\" type=\"fence_nvfence\">\n"
           "  <instance_attributes id=\"" + id + "-ia\">\n" + params +
           "  </instance_attributes>\n"
           "  <meta_attributes id=\"" + id + "-meta\"><nvpair id=\"m1\" name=\"provides\" value=\"unfencing\"/>"
           "</meta_attributes>\n"
           "  <operations><op id=\"" + id + "-mon\" name=\"monitor\" interval=\"10s\"/></operations>\n"
           "</primitive>\n";
}

std::string nvpair(const std::string& name, const std::string& value) {
    return "    <nvpair id=\"p-" + name + "\" name=\"" + name + "\" value=\"" + value + "\"/>\n";
}

const std::string kParams = nvpair("devices", "/dev/nvme1n1") + nvpair("node_ids", "a:1;b:2;c:3") +
                            nvpair("cluster_tag", "7") + nvpair("pcmk_host_list", "a b c");

std::string node_xml(const std::string& id, const std::string& uname, const std::string& record) {
    std::string s = "<node id=\"" + id + "\" uname=\"" + uname + "\"";
    if (record.empty()) return s + "/>\n";
    return s + "><instance_attributes id=\"n" + id + "\"><nvpair id=\"n" + id + "-w\" name=\"nvfence-watcher\" value=\"" +
           record + "\"/></instance_attributes></node>\n";
}

std::string cib(const std::string& resources, const std::string& nodes) {
    return "<cib epoch=\"5\"><configuration><crm_config/><nodes>\n" + nodes + "</nodes><resources>\n" + resources +
           "<primitive id=\"writer\" class=\"systemd\" type=\"nvwriter\"><instance_attributes id=\"w\">"
           "<nvpair id=\"w1\" name=\"devices\" value=\"/dev/other\"/></instance_attributes></primitive>\n"
           "</resources></configuration><status><node_state id=\"1\" uname=\"a\"/></status></cib>\n";
}

// A host: files in memory, programs recorded (cibadmin prints `the_cib`).
struct Scripted {
    FakeTarget t;
    std::map<std::string, std::string> files;
    std::vector<std::string> ran;  // "prog arg arg"
    std::string the_cib;
    bool crm_fails = false;
    std::vector<std::pair<Level, std::string>> logs;

    int run(const std::string& local, const std::string& stdin_text, std::string& out) {
        Parsed p = parse_stdin(stdin_text);
        EXPECT_TRUE(p.ok()) << (p.errors.empty() ? "" : p.errors.front());
        Host h;
        h.local_name = local;
        h.open = [this](const std::string& path, std::string& why) -> Result<std::unique_ptr<Device>> {
            if (path != "/dev/nvme1n1") {
                why = "no such device";
                return make_error_code(Errc::not_found);
            }
            return std::unique_ptr<Device>(std::make_unique<VolumeDevice>(t, path, "vol-0abc"));
        };
        h.run_program = [this](const std::string& prog, const std::vector<std::string>& args,
                               uint32_t) -> Result<std::string> {
            std::string line = prog;
            for (const auto& a : args) line += " " + a;
            ran.push_back(line);
            if (prog == "cibadmin") {
                if (the_cib.empty()) return errno_error(EIO);
                return the_cib;
            }
            if (prog == "crm_attribute" && crm_fails) return errno_error(EIO);
            return std::string();
        };
        h.read_file = [this](const std::string& path) -> Result<std::string> {
            auto it = files.find(path);
            if (it == files.end()) return errno_error(ENOENT);
            return it->second;
        };
        h.write_file = [this](const std::string& path, const std::string& text) -> Status {
            files[path] = text;
            return Ok{};
        };
        h.watcher_conf_dir = [] { return std::string("/etc/nvfence"); };
        h.log = [this](Level l, const std::string& s) { logs.emplace_back(l, s); };
        return fence_agent::run(p, h, out);
    }
    std::string all_logs() const {
        std::string s;
        for (const auto& [l, m] : logs) s += m + "\n";
        return s;
    }
};

const char* kConf = "/etc/nvfence/vol-0abc.conf";

TEST(FenceWatcher, TheCibsFenceNvfenceResourceAndNodeAttributes) {
    const std::string text =
        cib(stonith_xml("nv", kParams + nvpair("verbose", "&quot;1&quot;")),
            node_xml("1", "a", "node_id=1 cluster_tag=7") + node_xml("2", "b", "") + node_xml("3", "c", "x&amp;y"));
    auto rs = cib_fence_nvfence_resources(text);
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].id, "nv");
    EXPECT_EQ(rs[0].params.at("devices"), "/dev/nvme1n1");
    EXPECT_EQ(rs[0].params.at("cluster_tag"), "7");
    EXPECT_EQ(rs[0].params.at("verbose"), "\"1\"");
    EXPECT_EQ(rs[0].params.count("provides"), 0u) << "a meta attribute is not a parameter";
    const auto attrs = cib_node_attribute(text, kWatcherAttribute);
    EXPECT_EQ(attrs, (std::map<std::string, std::string>{{"a", "node_id=1 cluster_tag=7"}, {"c", "x&y"}}));
    Parsed p = stonith_options(rs[0], "setup-watcher");
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p.opts.action, Action::setup_watcher);
    EXPECT_EQ(p.opts.tag, 7);
    EXPECT_EQ(p.opts.devices, std::vector<std::string>{"/dev/nvme1n1"});
}

TEST(FenceWatcher, TheRecordRoundTripsAndNamesEveryDifference) {
    Options o;
    o.tag = 7;
    WatcherSettings w = watcher_for(o, 2, {"/dev/a", "/dev/b"});
    EXPECT_EQ(watcher_record(w),
              "node_id=2 cluster_tag=7 interval_ms=500 device_timeout_ms=5000 state_dir=/var/lib/nvfence "
              "devices=/dev/a,/dev/b");
    std::string why;
    auto back = parse_watcher_record(watcher_record(w), why);
    ASSERT_TRUE(back) << why;
    EXPECT_TRUE(watcher_differences(w, *back).empty());
    WatcherSettings other = *back;
    other.node = 5;
    other.interval_ms = 1000;
    other.devices = {"/dev/a"};
    const auto d = watcher_differences(w, other);
    ASSERT_EQ(d.size(), 3u);
    EXPECT_EQ(d[0], "node_id 5, the stonith resource says 2");
    EXPECT_EQ(d[1], "devices /dev/a, the stonith resource says /dev/a,/dev/b");
    EXPECT_EQ(d[2], "interval_ms 1000, the stonith resource says 500");
    EXPECT_FALSE(parse_watcher_record("node_id=2 junk", why));
    EXPECT_FALSE(parse_watcher_record("node_id=0 cluster_tag=1 interval_ms=1 device_timeout_ms=1 state_dir=/x", why));
}

TEST(FenceWatcher, SetupWritesTheFileEnablesTheUnitAndRecordsIt) {
    Scripted s;
    std::string out;
    const std::string opts = "action=setup-watcher\ndevices=/dev/nvme1n1\nnode_ids=a:1;b:2;c:3\ncluster_tag=7\n"
                             "watcher_interval_ms=250\n";
    ASSERT_EQ(s.run("b.example.com", opts, out), kExitOk) << s.all_logs();
    ASSERT_EQ(s.files.count(kConf), 1u);
    const std::string& conf = s.files[kConf];
    EXPECT_EQ(conf.rfind(kWatcherHeader, 0), 0u);
    for (const char* line : {"\ndevice = /dev/nvme1n1\n", "\nnode_id = 2\n", "\ncluster_tag = 7\n", "\nrole = watch\n",
                             "\ninterval_ms = 250\n", "\ndevice_timeout_ms = 5000\n", "\nstate_dir = /var/lib/nvfence\n",
                             "\nfence_action = command\n"})
        EXPECT_NE(conf.find(line), std::string::npos) << line << "\n" << conf;
    const std::vector<std::string> want = {
        "systemctl enable nvfenced@vol-0abc.service", "systemctl restart nvfenced@vol-0abc.service",
        "crm_attribute --type nodes --node b --name nvfence-watcher --update node_id=2 cluster_tag=7 interval_ms=250 "
        "device_timeout_ms=5000 state_dir=/var/lib/nvfence devices=/dev/nvme1n1"};
    EXPECT_EQ(s.ran, want);
    EXPECT_NE(out.find("written, nvfenced@vol-0abc.service enabled and restarted"), std::string::npos) << out;

    // Again, nothing changed: the unit is started (a no-op when it runs), not restarted.
    s.ran.clear();
    out.clear();
    ASSERT_EQ(s.run("b.example.com", opts, out), kExitOk) << s.all_logs();
    EXPECT_EQ(s.ran[0], "systemctl enable nvfenced@vol-0abc.service");
    EXPECT_EQ(s.ran[1], "systemctl start nvfenced@vol-0abc.service");
    EXPECT_NE(out.find("unchanged"), std::string::npos) << out;
}

TEST(FenceWatcher, SetupNeverReplacesAFileItDidNotWrite) {
    Scripted s;
    s.files[kConf] = "node_id = 9\nrole = watch\n";
    std::string out;
    EXPECT_EQ(s.run("a", "action=setup-watcher\ndevices=/dev/nvme1n1\nnode_ids=a:1;b:2\n", out), kExitError);
    EXPECT_EQ(s.files[kConf], "node_id = 9\nrole = watch\n");
    EXPECT_TRUE(s.ran.empty()) << s.ran.front();
    EXPECT_NE(s.all_logs().find("exists and was not written by setup-watcher: move it aside"), std::string::npos)
        << s.all_logs();
}

TEST(FenceWatcher, SetupFailsWithoutTouchingAnythingForANodeOutsideTheMap) {
    Scripted s;
    std::string out;
    EXPECT_EQ(s.run("z", "action=setup-watcher\ndevices=/dev/nvme1n1\nnode_ids=a:1;b:2\n", out), kExitError);
    EXPECT_TRUE(s.files.empty());
    EXPECT_TRUE(s.ran.empty());
    EXPECT_NE(s.all_logs().find("this node ('z') is not in node_ids"), std::string::npos) << s.all_logs();
}

TEST(FenceWatcher, SetupReadsTheStonithResourceFromTheCib) {
    Scripted s;
    s.the_cib = cib(stonith_xml("nv", kParams), node_xml("1", "a", ""));
    std::string out;
    ASSERT_EQ(s.run("c", "action=setup-watcher\n", out), kExitOk) << s.all_logs();
    EXPECT_EQ(s.ran.front(), "cibadmin --query");
    EXPECT_NE(s.files[kConf].find("\nnode_id = 3\ncluster_tag = 7\n"), std::string::npos) << s.files[kConf];
    // A crm_attribute that fails (Pacemaker down) is a warning: the watcher runs.
    Scripted t;
    t.the_cib = s.the_cib;
    t.crm_fails = true;
    ASSERT_EQ(t.run("c", "action=setup-watcher\n", out), kExitOk);
    EXPECT_NE(t.all_logs().find("recording it in the CIB (crm_attribute) failed"), std::string::npos);
    // No resource, or two: refused, nothing written.
    for (const std::string& resources : {std::string(), stonith_xml("one", kParams) + stonith_xml("two", kParams)}) {
        Scripted u;
        u.the_cib = cib(resources, "");
        EXPECT_EQ(u.run("c", "action=setup-watcher\n", out), kExitError);
        EXPECT_TRUE(u.files.empty());
    }
}

TEST(FenceWatcher, CheckConfigReportsEveryNodeAndExitsTwoOnADifference) {
    Options o;
    o.tag = 7;
    const auto rec = [&](uint8_t node, uint8_t tag) {
        Options x = o;
        x.tag = tag;
        return watcher_record(watcher_for(x, node, {"/dev/nvme1n1"}));
    };
    Scripted s;
    std::string out;
    // Every node recorded what the resource says, and this node's file agrees.
    s.the_cib = cib(stonith_xml("nv", kParams),
                    node_xml("1", "a", rec(1, 7)) + node_xml("2", "b", rec(2, 7)) + node_xml("3", "c", rec(3, 7)));
    s.files[kConf] = watcher_conf_text(watcher_for(o, 1, {"/dev/nvme1n1"}), "/dev/nvme1n1");
    ASSERT_EQ(s.run("a", "action=check-config\n", out), kExitOk) << out << s.all_logs();
    EXPECT_NE(out.find("a (node 1): agrees\nb (node 2): agrees\nc (node 3): agrees\nthis node's files: agree\n"
                       "every node agrees\n"),
              std::string::npos)
        << out;

    // b has another node id and tag, c recorded nothing, a's file was edited.
    s.the_cib = cib(stonith_xml("nv", kParams), node_xml("1", "a", rec(1, 7)) + node_xml("2", "b", rec(5, 0)));
    s.files[kConf] += "interval_ms = 2000\n";
    out.clear();
    ASSERT_EQ(s.run("a", "action=check-config\n", out), kExitDiffers) << out << s.all_logs();
    EXPECT_NE(out.find("b (node 2): differs: node_id 5, the stonith resource says 2; cluster_tag 0, the stonith "
                       "resource says 7\n"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("c (node 3): no watcher recorded: run 'fence_nvfence -o setup-watcher' on c\n"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("/etc/nvfence/vol-0abc.conf: not what setup-watcher writes"), std::string::npos) << out;
    EXPECT_NE(out.find("3 difference(s)"), std::string::npos) << out;

    // No CIB: the check cannot run.
    Scripted none;
    out.clear();
    EXPECT_EQ(none.run("a", "action=check-config\n", out), kExitError);
    EXPECT_NE(none.all_logs().find("cannot read the CIB"), std::string::npos) << none.all_logs();
}

TEST(FenceWatcher, TheWatcherOptionsAreParsedAndBounded) {
    auto p = parse_stdin("action=check-config\nwatcher_interval_ms=100\nwatcher-device-timeout-ms=3000\n");
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p.opts.action, Action::check_config);
    EXPECT_EQ(p.opts.watcher_interval_ms, 100u);
    EXPECT_EQ(p.opts.watcher_device_timeout_ms, 3000u);
    EXPECT_FALSE(parse_stdin("watcher_interval_ms=10\n").ok());
    EXPECT_FALSE(parse_stdin("watcher_device_timeout_ms=120001\n").ok());
    std::vector<std::string> args = {"-o", "setup-watcher", "--watcher-interval-ms=700"};
    auto a = parse_argv(args);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a.opts.action, Action::setup_watcher);
    EXPECT_EQ(a.opts.watcher_interval_ms, 700u);
}

}  // namespace
}  // namespace nvfence::fence_agent
