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
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) return "<prepare failed>";
    std::string out = "<no row>";
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return out;
}

uint64_t epoch_of(const Result<Outcome>& o) { return decode_key(o->key)->epoch; }

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
    testkit::SimCluster c({.hosts = 2});
    KitSqlite kit(c);
    ASSERT_TRUE(c.host(0).takeover());
    sqlite3* a = open_host(0);
    ASSERT_TRUE(a);
    ASSERT_EQ(exec(a, "CREATE TABLE t(x)"), SQLITE_OK);
    sqlite3_close(a);
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
    testkit::SimCluster c({.hosts = 1});
    KitSqlite kit(c);
    ASSERT_TRUE(c.host(0).takeover());
    sqlite3* a = open_host(0);
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
}

}  // namespace
}  // namespace nvfence
