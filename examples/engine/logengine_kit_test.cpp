// SPDX-License-Identifier: MIT
// The example engine's own failover unit test, on the testing kit
// (nvfence/testing.hpp): logengine's code (format, serve with recovery,
// the scan) built unchanged with its device seam pointed at two simulated
// hosts. Host 1 (node 1) formats and appends 20 records; host 2 takes over,
// recovers all 20 and appends 5; host 1, resumed as a primary that slept
// past its term and still believes it leads (its old epoch, no command to
// the device), appends: every append is refused, it exits fenced (3), and
// the log is the 20 + 5 records, nothing of the stale primary after them.
// Exit 0 when every check holds, 1 otherwise.
#define LOGENGINE_NO_MAIN
#include "logengine.cpp"  // NOLINT: the engine's own code, not a copy

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nvfence/testing.hpp>

namespace {

int failures = 0;
void expect(bool ok, const std::string& what) {
    if (!ok) {
        std::fprintf(stderr, "FAIL: %s\n", what.c_str());
        ++failures;
    }
}

size_t lines_in(const std::string& path) {
    std::ifstream f(path);
    return static_cast<size_t>(std::count(std::istreambuf_iterator<char>(f), {}, '\n'));
}

// The seam: node N is the kit's host N - 1. take() with takeover is the
// kit's verified preempt-and-abort; without, the epoch this host last held
// (the stale primary's belief: nothing is sent to the device).
void point_at(testkit::SimCluster& c, std::map<unsigned, uint32_t>& last_epoch) {
    Device& d = device();
    d.take = [&c, &last_epoch](const Opts& o, bool takeover) -> Result<uint32_t> {
        if (!takeover && last_epoch.count(o.node)) return last_epoch[o.node];
        auto out = c.host(o.node - 1).takeover();
        if (!out) return out.error();
        return last_epoch[o.node] = decode_key(out->key)->epoch;
    };
    d.holder_key = [&c](const Opts& o) -> Result<uint64_t> {
        auto st = c.host(o.node ? o.node - 1 : 0).reservations().report();
        if (!st) return st.error();
        return st->holder() ? st->holder()->key : uint64_t{0};
    };
    d.open_writer = [&c](const Opts& o, const WriterOptions& wo) {
        return c.host(o.node ? o.node - 1 : 0).open_writer(wo);
    };
}

}  // namespace

int main() {
    testkit::SimCluster c({.hosts = 2, .block_bytes = 4096, .size_blocks = 1024});
    std::map<unsigned, uint32_t> last_epoch;
    point_at(c, last_epoch);
    char dir[] = "/tmp/logengine-kit-XXXXXX";
    if (!::mkdtemp(dir)) return 1;
    const std::string acks1 = std::string(dir) + "/acks1", acks2 = std::string(dir) + "/acks2";

    Opts a;
    a.node = 1;
    a.state_dir = dir;
    expect(cmd_format(a) == 0, "node 1 formats");
    a.appends = 20;
    a.ack_log = acks1;
    expect(cmd_serve(a) == 0, "node 1 appends 20");
    expect(lines_in(acks1) == 20, "node 1 has 20 acknowledged appends");

    Opts b = a;
    b.node = 2;
    b.takeover = true;
    b.appends = 5;
    b.ack_log = acks2;
    expect(cmd_serve(b) == 0, "node 2 takes over, recovers and appends 5");
    expect(lines_in(acks2) == 5, "node 2 has 5 acknowledged appends");

    const uint64_t refused = c.writes_refused();
    a.appends = 5;
    expect(cmd_serve(a) == kExitFenced, "the stale node 1 exits fenced");
    expect(lines_in(acks1) == 20, "the stale node 1 acknowledged nothing more");
    expect(c.writes_refused() > refused, "the device refused the stale node's appends");

    Opts r = b;
    expect(cmd_check(r, true) == 0, "check scans the log");
    (void)cmd_fill;  // the benchmark set-up: not part of the failover
    auto l = open_log(r, 0);
    expect(l.ok(), "open the log");
    if (l) {
        auto id = read_superblock(*l);
        expect(id.ok(), "superblock");
        l->log_id = id ? *id : 0;
        std::vector<Record> recs;
        auto s = scan(*l, &recs);
        expect(s.ok() && recs.size() == 25, "the log holds 20 + 5 records");
        for (size_t i = 0; i < recs.size(); ++i) {
            expect(recs[i].seq == i, "record " + std::to_string(i) + " in order");
            expect(recs[i].node == (i < 20 ? 1 : 2), "record " + std::to_string(i) + " of the right node");
            expect(recs[i].epoch == (i < 20 ? last_epoch[1] : last_epoch[2]), "record " + std::to_string(i) + " epoch");
        }
    }
    std::filesystem::remove_all(dir);
    std::printf("logengine on the testing kit: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
