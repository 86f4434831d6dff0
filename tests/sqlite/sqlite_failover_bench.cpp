// SPDX-License-Identifier: MIT
// SQLite failover time through the nvfence VFS on a real CPU, over the
// testing kit's device model (docs/PERFORMANCE.md, "SQLite failover"):
//   sqlite_failover_bench [--rounds N] [--commits N]
// Each round the holder commits N rows, one per transaction, then stops in
// the middle of a transaction that spilled pages (a hot journal on the
// media); the other host takes over (preempt-and-abort), opens the
// database, rolls the journal back and commits one row. Timed per round
// with the monotonic clock: the takeover (the preempt itself), and from its
// return to the first acknowledged commit (open, rollback, commit). The
// model answers at once, so the figures are the CPU's part: nvfence's and
// SQLite's code, not a device's latency; the number of commands is printed
// so a device's latency can be added. Every round is checked (the old
// holder is fenced, the new one sees exactly the committed rows); a failed
// check exits 1, bad arguments exit 2.
#include <sqlite3.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>
#include "kit_backend.hpp"
#include "nvfence/sqlite.h"

namespace {

using nvfence::test::KitSqlite;
using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& what) {
    std::fprintf(stderr, "sqlite_failover_bench: check failed: %s\n", what.c_str());
    std::exit(1);
}

sqlite3* open_host(size_t i) {
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(KitSqlite::uri(i).c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI,
                        nullptr) != SQLITE_OK)
        fail(std::string("open: ") + nvf_sqlite_last_error());
    return db;
}

void exec(sqlite3* db, const std::string& sql) {
    if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) fail(sql + ": " + sqlite3_errmsg(db));
}

int64_t scalar(sqlite3* db, const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) fail(sql);
    const int64_t v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return v;
}

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double pct(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
    return v[i];
}

struct Round {
    double takeover_ms, open_commit_ms;
    uint64_t writes;
};

// The holder (db) commits, leaves a hot journal; host `next` takes over.
Round one_round(nvfence::testkit::SimCluster& c, sqlite3*& db, size_t next, int commits, int64_t& rows) {
    for (int i = 0; i < commits; ++i) exec(db, "INSERT INTO t(tok, pad) VALUES(nvfence_token(), randomblob(2000))");
    rows += commits;
    // Changes the last 40 committed rows (pages of their own) with a cache
    // too small to hold them: the changed pages spill over the database
    // after the journal is synced.
    exec(db, "PRAGMA cache_size = 2; BEGIN; UPDATE t SET tok = 0, pad = randomblob(2500) WHERE id > " +
                 std::to_string(rows - 40));
    const uint64_t landed0 = c.writes_landed();
    const auto t0 = Clock::now();
    if (!c.host(next).takeover()) fail("takeover");
    const auto t1 = Clock::now();
    sqlite3* nb = open_host(next);
    exec(nb, "INSERT INTO t(tok) VALUES(nvfence_token())");
    const auto t2 = Clock::now();
    rows += 1;
    const uint64_t writes = c.writes_landed() - landed0;
    if (sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr) == SQLITE_OK || nvf_sqlite_fenced(db, "main") != 1)
        fail("the old holder was not fenced");
    sqlite3_close(db);
    if (scalar(nb, "SELECT count(*) FROM t") != rows || scalar(nb, "SELECT count(*) FROM t WHERE tok = 0") != 0)
        fail("rows after the failover (the hot journal not rolled back?)");
    db = nb;
    return {ms(t1 - t0), ms(t2 - t1), writes};
}

int parse(int argc, char** argv, int& rounds, int& commits) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        int* dst = a == "--rounds" ? &rounds : a == "--commits" ? &commits : nullptr;
        if (!dst || i + 1 >= argc) return 2;
        char* end = nullptr;
        const long v = std::strtol(argv[++i], &end, 10);
        if (*end || v < 1 || v > 100000) return 2;
        *dst = static_cast<int>(v);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    int rounds = 100, commits = 50;
    if (parse(argc, argv, rounds, commits) != 0) {
        std::fprintf(stderr, "usage: sqlite_failover_bench [--rounds 1..100000] [--commits 1..100000]\n");
        return 2;
    }
    std::string load;
    std::getline(std::ifstream("/proc/loadavg"), load);
    if (nvf_sqlite_register(0) != SQLITE_OK) fail("register");
    nvfence::testkit::SimCluster c({.hosts = 2});
    KitSqlite kit(c);
    if (!c.host(0).takeover()) fail("first takeover");
    sqlite3* db = open_host(0);
    exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, tok INTEGER, pad BLOB)");
    int64_t rows = 0;
    std::vector<double> take, open_commit, total;
    uint64_t writes = 0;
    for (int r = 0; r < rounds; ++r) {
        const Round x = one_round(c, db, static_cast<size_t>((r + 1) % 2), commits, rows);
        take.push_back(x.takeover_ms);
        open_commit.push_back(x.open_commit_ms);
        total.push_back(x.takeover_ms + x.open_commit_ms);
        writes += x.writes;
    }
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, nullptr);
    const bool ok = sqlite3_step(st) == SQLITE_ROW && std::strcmp(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "ok") == 0;
    sqlite3_finalize(st);
    sqlite3_close(db);
    if (!ok) fail("integrity_check");
    std::printf("load average at start: %s\n", load.c_str());
    std::printf("%d failovers, %d commits each, every one checked; integrity ok\n", rounds, commits);
    std::printf("%-30s %10s %10s %10s\n", "ms", "median", "p99", "max");
    auto row = [](const char* n, const std::vector<double>& v) {
        std::printf("%-30s %10.3f %10.3f %10.3f\n", n, pct(v, 0.5), pct(v, 0.99), pct(v, 1.0));
    };
    row("takeover (the preempt)", take);
    row("open + rollback + 1st commit", open_commit);
    row("takeover to 1st commit", total);
    std::printf("writes landed per failover (mean): %.1f\n", static_cast<double>(writes) / rounds);
    return 0;
}
