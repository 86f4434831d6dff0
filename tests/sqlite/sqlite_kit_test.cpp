// SPDX-License-Identifier: MIT
// The SQLite VFS's failover on the testing kit (nvfence/testing.hpp): two
// simulated hosts over the reservation model with the library's own
// FencedWriter, the same path an engine's unit test takes (docs/SQLITE.md).
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <string>
#include "kit_backend.hpp"
#include "nvfence/key.hpp"
#include "nvfence/sqlite.h"

namespace nvfence {
namespace {

using test::KitSqlite;

struct Registered {
    Registered() { EXPECT_EQ(nvf_sqlite_register(0), SQLITE_OK); }
};
const Registered g_registered;

sqlite3* open_host(size_t i) {
    sqlite3* db = nullptr;
    const int rc = sqlite3_open_v2(KitSqlite::uri(i).c_str(), &db,
                                   SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI, nullptr);
    if (rc != SQLITE_OK) {
        ADD_FAILURE() << "open " << KitSqlite::uri(i) << ": " << nvf_sqlite_last_error();
        sqlite3_close(db);
        return nullptr;
    }
    return db;
}

int exec(sqlite3* db, const std::string& sql) { return sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr); }

int64_t scalar(sqlite3* db, const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) return -1;
    const int64_t v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -2;
    sqlite3_finalize(st);
    return v;
}

std::string text(sqlite3* db, const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK)
        return std::string("<prepare failed: ") + sqlite3_errmsg(db) + " / " + nvf_sqlite_last_error() + ">";
    std::string out = "<no row>";
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return out;
}

uint64_t epoch_of(const Result<Outcome>& o) { return decode_key(o->key)->epoch; }

// A kit cluster of @p hosts whose host 0 holds the reservation and has the
// database open as `a` (closed at the end unless a test closed it and set
// it to null).
struct Held {
    explicit Held(size_t hosts) : c({.hosts = hosts}), kit(c) {
        EXPECT_TRUE(c.host(0).takeover());
        a = open_host(0);
    }
    ~Held() { sqlite3_close(a); }
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;
    testkit::SimCluster c;
    KitSqlite kit;
    sqlite3* a = nullptr;
};

// Host 0 commits 20 rows, then is preempted by host 1 in the middle of a
// transaction that changed them and is big enough that SQLite spilled the
// changed pages to the database (the journal is hot on the media). Host 0's next write is an SQLite I/O error
// that says fenced, by whom; host 1 opens, rolls the journal back, finds
// exactly the 20 acknowledged rows and commits under its own token; nothing
// of host 0 lands after the preempt, not even at its close.
TEST(SqliteKit, FailoverRollsBackTheHotJournalKeepsEveryAckAndFencesTheOldHolder) {
    testkit::SimCluster c({.hosts = 2});
    KitSqlite kit(c);
    auto ta = c.host(0).takeover();
    ASSERT_TRUE(ta) << ta.error().message();
    sqlite3* a = open_host(0);
    ASSERT_TRUE(a);
    ASSERT_EQ(exec(a, "CREATE TABLE t(id INTEGER PRIMARY KEY, tok INTEGER, pad BLOB)"), SQLITE_OK);
    for (int i = 1; i <= 20; ++i)
        ASSERT_EQ(exec(a, "INSERT INTO t VALUES(" + std::to_string(i) + ", nvfence_token(), randomblob(2000))"), SQLITE_OK);
    ASSERT_EQ(exec(a, "PRAGMA cache_size = 2; BEGIN; UPDATE t SET tok = 0, pad = randomblob(2500)"), SQLITE_OK);
    const uint64_t landed_before_txn = c.writes_landed();
    ASSERT_EQ(exec(a, "WITH RECURSIVE s(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM s WHERE v < 200) "
                      "INSERT INTO t SELECT v + 1000, 0, randomblob(3000) FROM s"), SQLITE_OK)
        << sqlite3_errmsg(a);
    ASSERT_GT(c.writes_landed(), landed_before_txn) << "no page spilled: the journal is not hot";

    auto tb = c.host(1).takeover();
    ASSERT_TRUE(tb) << tb.error().message();
    const uint64_t landed_at_fence = c.writes_landed();
    EXPECT_EQ(exec(a, "WITH RECURSIVE s(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM s WHERE v < 50) "
                   "INSERT INTO t SELECT v + 5000, 0, randomblob(3000) FROM s") & 0xff,
              SQLITE_IOERR);
    EXPECT_EQ(nvf_sqlite_fenced(a, "main"), 1);
    nvf_sqlite_info st{};
    ASSERT_EQ(nvf_sqlite_status(a, nullptr, &st), SQLITE_OK);
    EXPECT_EQ(st.token, epoch_of(ta));
    EXPECT_EQ(st.holder_known, 1);
    EXPECT_EQ(st.holder_key, tb->key);
    EXPECT_GE(c.writes_refused(), 1u);
    exec(a, "COMMIT");
    sqlite3_close(a);
    EXPECT_EQ(c.writes_landed(), landed_at_fence) << "host 0 wrote after the preempt";

    sqlite3* b = open_host(1);
    ASSERT_TRUE(b);
    EXPECT_EQ(text(b, "PRAGMA integrity_check"), "ok");
    EXPECT_EQ(scalar(b, "SELECT count(*) FROM t"), 20) << "the hot journal was not rolled back";
    EXPECT_EQ(scalar(b, "SELECT count(*) FROM t WHERE tok = " + std::to_string(epoch_of(ta))), 20);
    ASSERT_EQ(exec(b, "INSERT INTO t VALUES(21, nvfence_token(), NULL)"), SQLITE_OK) << sqlite3_errmsg(b);
    EXPECT_EQ(scalar(b, "SELECT tok FROM t WHERE id = 21"), static_cast<int64_t>(epoch_of(tb)));
    sqlite3_close(b);
}

// The host that lost the reservation cannot open for writing: refused with
// the holder named, before any writer exists (nothing reaches the device).
TEST(SqliteKit, TheOldHolderCannotReopenForWriting) {
    Held h(2);
    testkit::SimCluster& c = h.c;
    sqlite3*& a = h.a;
    ASSERT_TRUE(a);
    ASSERT_EQ(exec(a, "CREATE TABLE t(x)"), SQLITE_OK);
    sqlite3_close(a);
    a = nullptr;
    ASSERT_TRUE(c.host(1).takeover());
    const uint64_t landed = c.writes_landed(), refused = c.writes_refused();
    sqlite3* again = nullptr;
    const int rc = sqlite3_open_v2(KitSqlite::uri(0).c_str(), &again, SQLITE_OPEN_READWRITE | SQLITE_OPEN_URI, nullptr);
    if (rc == SQLITE_OK) {
        EXPECT_NE(exec(again, "SELECT count(*) FROM t") & 0xff, SQLITE_OK);
    }
    sqlite3_close(again);
    EXPECT_NE(std::string(nvf_sqlite_last_error()).find("not the reservation holder"), std::string::npos)
        << nvf_sqlite_last_error();
    EXPECT_EQ(c.writes_landed(), landed);
    EXPECT_EQ(c.writes_refused(), refused);
}

// A transaction's pages go to the device in runs, not one write per page:
// SQLite writes them in ascending order and the VFS holds back a run of
// whole blocks until a read, a sync or a write elsewhere (docs/SQLITE.md).
TEST(SqliteKit, ACommitsPagesReachTheDeviceInRuns) {
    Held h(1);
    testkit::SimCluster& c = h.c;
    sqlite3*& a = h.a;
    ASSERT_TRUE(a);
    ASSERT_EQ(exec(a, "CREATE TABLE t(id INTEGER PRIMARY KEY, pad BLOB)"), SQLITE_OK);
    const uint64_t before = c.writes_landed();
    ASSERT_EQ(exec(a, "WITH RECURSIVE s(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM s WHERE v < 200) "
                      "INSERT INTO t SELECT v, randomblob(3000) FROM s"),
              SQLITE_OK);
    const uint64_t writes = c.writes_landed() - before;
    EXPECT_GT(writes, 0u);
    EXPECT_LT(writes, 40u) << "about 200 pages written one by one";
    EXPECT_EQ(scalar(a, "SELECT count(*) FROM t WHERE length(pad) = 3000"), 200);
    sqlite3_close(a);
    a = nullptr;
}


// What a commit costs in device flushes (journal_mode DELETE, synchronous
// FULL): the journal's sync (its bytes, then the superblock with its length),
// the database's sync (plus the superblock when the database grew), and the
// superblock that empties the journal; no flush when nothing was written
// since the last one, and one journal sync per commit (SAFE_APPEND).
TEST(SqliteKit, ACommitCostsFourFlushesAndOneMoreWhenTheDatabaseGrows) {
    Held h(1);
    testkit::SimCluster& c = h.c;
    sqlite3*& a = h.a;
    ASSERT_TRUE(a);
    ASSERT_EQ(exec(a, "PRAGMA synchronous = FULL; CREATE TABLE t(id INTEGER PRIMARY KEY, v INTEGER, pad BLOB);"
                      "INSERT INTO t VALUES(1, 0, randomblob(100))"),
              SQLITE_OK);
    uint64_t flushes = 0;
    c.plan = [&flushes](const testkit::SimIo& io) {
        flushes += io.kind == IoKind::flush;
        return testkit::IoPlan{};
    };
    ASSERT_EQ(exec(a, "UPDATE t SET v = 1"), SQLITE_OK);
    EXPECT_EQ(flushes, 4u) << "a commit that does not grow the database";
    flushes = 0;
    ASSERT_EQ(exec(a, "INSERT INTO t VALUES(2, 0, randomblob(20000))"), SQLITE_OK);
    EXPECT_EQ(flushes, 5u) << "a commit that grows the database";
    sqlite3_close(a);
    a = nullptr;
}

// A writer's reads come from its block cache once it read or wrote a block
// in its term (nobody else can write while it holds the reservation); with
// block_cache_mib=0 every read goes to the device. Once fenced the cache is
// gone (the media is the new holder's). A read-only volume, which reads
// under the holder's writes, never caches.
TEST(SqliteKit, AWritersReadsComeFromItsBlockCacheUntilItIsFenced) {
    testkit::SimCluster c({.hosts = 2});
    KitSqlite kit(c);
    ASSERT_TRUE(c.host(0).takeover());
    uint64_t reads = 0;
    c.plan = [&reads](const testkit::SimIo& io) {
        reads += io.kind == IoKind::read;
        return testkit::IoPlan{};
    };
    const std::string fill = "CREATE TABLE t(id INTEGER PRIMARY KEY, pad BLOB);"
                             "WITH RECURSIVE s(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM s WHERE v < 300) "
                             "INSERT INTO t SELECT v, randomblob(2000) FROM s";
    const std::string scan = "SELECT sum(length(pad)) FROM t";
    sqlite3* a = open_host(0);
    ASSERT_TRUE(a);
    ASSERT_EQ(exec(a, "PRAGMA cache_size = 2; " + fill), SQLITE_OK);  // SQLite's own cache holds 2 pages
    reads = 0;
    for (int i = 0; i < 5; ++i) ASSERT_EQ(scalar(a, scan), 600000);
    EXPECT_EQ(reads, 0u) << "the volume's blocks were written in this term";
    sqlite3_close(a);

    sqlite3* off = nullptr;
    ASSERT_EQ(sqlite3_open_v2((KitSqlite::uri(0) + "&block_cache_mib=0").c_str(), &off,
                              SQLITE_OPEN_READWRITE | SQLITE_OPEN_URI, nullptr), SQLITE_OK) << nvf_sqlite_last_error();
    ASSERT_EQ(exec(off, "PRAGMA cache_size = 2"), SQLITE_OK);
    reads = 0;
    ASSERT_EQ(scalar(off, scan), 600000);
    EXPECT_GT(reads, 100u) << "block_cache_mib=0: every page from the device";
    const uint64_t uncached = reads;
    ASSERT_EQ(scalar(off, scan), 600000);
    EXPECT_GT(reads - uncached, 100u) << "block_cache_mib=0: a second scan reads the pages again";
    sqlite3_close(off);

    sqlite3* ro = nullptr;
    ASSERT_EQ(sqlite3_open_v2((KitSqlite::uri(1) + "&mode=ro").c_str(), &ro, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI,
                              nullptr), SQLITE_OK) << nvf_sqlite_last_error();
    ASSERT_EQ(exec(ro, "PRAGMA cache_size = 2"), SQLITE_OK);
    ASSERT_EQ(scalar(ro, scan), 600000);
    EXPECT_EQ(sqlite::Volume::find("/kit/host1")->cached_blocks(), 0u) << "a read-only volume cached";
    sqlite3_close(ro);

    // Host 0 reads everything into its cache; host 1 takes over and changes
    // every row; host 0's next write is fenced, and its cache is dropped.
    a = open_host(0);
    ASSERT_TRUE(a);
    ASSERT_EQ(exec(a, "PRAGMA cache_size = 2"), SQLITE_OK);
    ASSERT_EQ(scalar(a, scan), 600000);
    EXPECT_GT(sqlite::Volume::find("/kit/host0")->cached_blocks(), 100u);
    ASSERT_TRUE(c.host(1).takeover());
    sqlite3* b = open_host(1);
    ASSERT_TRUE(b);
    ASSERT_EQ(exec(b, "UPDATE t SET pad = randomblob(1000)"), SQLITE_OK);
    sqlite3_close(b);
    EXPECT_EQ(exec(a, "INSERT INTO t VALUES(1000, NULL)") & 0xff, SQLITE_IOERR);
    EXPECT_EQ(nvf_sqlite_fenced(a, "main"), 1);
    EXPECT_EQ(sqlite::Volume::find("/kit/host0")->cached_blocks(), 0u) << "the cache outlived the term";
    sqlite3_close(a);
}

// ---- power loss at every command of a workload (the kit's volatile cache)

struct PowerRun {
    int acked = 0;        // commits SQLite acknowledged before the power failed
    uint64_t commands = 0;  // I/O commands the workload sent (a run without a loss)
};

// Transaction j (1..4) sets v = j in every row whose id % 3 == j % 3, with
// new pads, and inserts row 100 + j: pages of the database change, and it
// grows. Returns the commits acknowledged.
int power_workload(sqlite3* db) {
    int acked = 0;
    for (int j = 1; j <= 4; ++j) {
        const std::string n = std::to_string(j);
        const std::string sql = "BEGIN; UPDATE t SET v = " + n + ", pad = randomblob(1500 + " + n +
                                " * 40) WHERE id % 3 = " + std::to_string(j % 3) + "; INSERT INTO t VALUES(" +
                                std::to_string(100 + j) + ", " + n + ", randomblob(3000)); COMMIT";
        if (exec(db, sql) != SQLITE_OK) {
            exec(db, "ROLLBACK");
            break;
        }
        ++acked;
    }
    return acked;
}

// One run: host 0 sets the table up, then the power fails after
// @p after_commands I/O commands of the workload (0: no loss); host 1 opens
// after power_on and checks. Failures name the mode, the point and the seed.
PowerRun power_run(const std::string& mode, uint64_t after_commands, uint64_t seed) {
    const std::string at = mode + " after " + std::to_string(after_commands) + " commands, seed " + std::to_string(seed);
    PowerRun out;
    testkit::SimCluster c({.hosts = 2});
    KitSqlite kit(c);
    EXPECT_TRUE(c.host(0).takeover());
    sqlite3* a = open_host(0);
    if (!a) return out;
    EXPECT_EQ(exec(a, mode + "; PRAGMA synchronous = FULL; CREATE TABLE t(id INTEGER PRIMARY KEY, v INTEGER, pad BLOB);"
                          "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 30) "
                          "INSERT INTO t SELECT i, 0, randomblob(1500) FROM s"),
              SQLITE_OK) << at << ": " << sqlite3_errmsg(a);
    uint64_t commands = 0;
    c.plan = [&commands](const testkit::SimIo&) {
        ++commands;
        return testkit::IoPlan{};
    };
    if (after_commands > 0) c.power_loss_after(after_commands, seed);
    out.acked = power_workload(a);
    out.commands = commands;
    sqlite3_close(a);
    if (after_commands == 0) return out;
    EXPECT_FALSE(c.powered()) << at << ": the workload ended before the power failed";
    c.power_on();
    EXPECT_TRUE(c.host(1).takeover()) << at;
    sqlite3* b = open_host(1);
    if (!b) return out;
    // A WAL database is read only in exclusive locking mode (no shared memory).
    if (mode.find("WAL") != std::string::npos) {
        EXPECT_EQ(exec(b, "PRAGMA locking_mode = EXCLUSIVE"), SQLITE_OK);
    }
    EXPECT_EQ(text(b, "PRAGMA integrity_check"), "ok") << at;
    EXPECT_EQ(scalar(b, "SELECT count(*) FROM t WHERE id <= 30"), 30) << at;
    const int64_t applied = scalar(b, "SELECT count(*) FROM t WHERE id > 100");
    EXPECT_GE(applied, out.acked) << at << ": an acknowledged commit was lost";
    EXPECT_LE(applied, out.acked + 1) << at;
    EXPECT_EQ(scalar(b, "SELECT coalesce(max(id), 100) FROM t WHERE id > 100"), 100 + applied) << at;
    for (int r = 0; r < 3; ++r) {  // each residue holds the last applied transaction's v, whole
        int64_t want = 0;
        for (int j = 1; j <= applied; ++j)
            if (j % 3 == r) want = j;
        EXPECT_EQ(scalar(b, "SELECT count(*) FROM t WHERE id <= 30 AND id % 3 = " + std::to_string(r) +
                                " AND (v != " + std::to_string(want) + ")"),
                  0) << at << ": a transaction applied in part (residue " << r << ")";
    }
    EXPECT_EQ(exec(b, "INSERT INTO t VALUES(1000, 0, NULL)"), SQLITE_OK) << at << ": " << sqlite3_errmsg(b);
    sqlite3_close(b);
    return out;
}

// The power fails after each command of four commits in turn, with three
// picks of what the volatile cache loses: the database stays whole, every
// acknowledged commit is there, and a commit is there entirely or not at
// all, in each journal mode the VFS supports.
TEST(SqliteKit, PowerLossAtEveryCommandKeepsEveryAcknowledgedCommitAndNoPartOfAnother) {
    for (const std::string mode : {"PRAGMA journal_mode = DELETE", "PRAGMA journal_mode = PERSIST",
                                   "PRAGMA journal_mode = TRUNCATE",
                                   "PRAGMA locking_mode = EXCLUSIVE; PRAGMA journal_mode = WAL"}) {
        const PowerRun whole = power_run(mode, 0, 0);
        ASSERT_EQ(whole.acked, 4) << mode;
        ASSERT_GT(whole.commands, 8u) << mode;
        for (uint64_t k = 1; k <= whole.commands; ++k) {
            for (uint64_t seed = 1; seed <= 3; ++seed) {
                power_run(mode, k, seed);
                if (::testing::Test::HasFailure()) return;
            }
        }
    }
}

}  // namespace
}  // namespace nvfence
