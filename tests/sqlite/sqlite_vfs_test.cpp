// SPDX-License-Identifier: MIT
// Unit tests of the SQLite VFS `nvfence` (src/sqlite, docs/SQLITE.md): the
// region layout, and the VFS through SQLite itself on a regular file, with
// fencing from the reservation model (FakeTarget) and a scripted ring
// (FakeRing) whose responder moves the data to and from a scratch file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fake_passthru.hpp"
#include "fake_ring.hpp"
#include "nvfence/key.hpp"
#include "nvfence/sqlite.h"
#include "sqlite/block_cache.hpp"
#include "sqlite/layout.hpp"
#include "sqlite/volume.hpp"
#include "writer/ring_writer.hpp"

namespace nvfence {
namespace {

using sqlite::Superblock;
using test::FakeTarget;
using test::HostPort;
using test::make_host;
using test::TempDir;
using FakeWriter = detail::RingWriter<test::FakeRing>;

// ------------------------------------------------------------------ layout

TEST(SqliteLayout, PlanRefusesANamespaceBelowTheMinimum) {
    Superblock sb;
    std::string why;
    EXPECT_FALSE(sqlite::plan_layout(sqlite::kMinCapacity - 1, sb, why));
    EXPECT_NE(why.find("too small"), std::string::npos) << why;
    ASSERT_TRUE(sqlite::plan_layout(64 * sqlite::kMiB, sb, why));
    EXPECT_EQ(sb.journal_off, sqlite::kMiB);
    EXPECT_EQ(sb.journal_cap, 15 * sqlite::kMiB);
    EXPECT_EQ(sb.db_off, 16 * sqlite::kMiB);
    EXPECT_EQ(sb.db_cap, 48 * sqlite::kMiB);
}

std::vector<uint8_t> header_with(const Superblock& a, const Superblock* b) {
    std::vector<uint8_t> h(sqlite::kHeaderBytes, 0);
    auto ea = sqlite::encode_superblock(a);
    std::memcpy(h.data(), ea.data(), ea.size());
    if (b) {
        auto eb = sqlite::encode_superblock(*b);
        std::memcpy(h.data() + sqlite::kSlotBytes, eb.data(), eb.size());
    }
    return h;
}

Superblock planned(uint64_t seq) {
    Superblock sb;
    std::string why;
    EXPECT_TRUE(sqlite::plan_layout(64 * sqlite::kMiB, sb, why));
    sb.seq = seq;
    sb.db_len = 4096 * seq;
    return sb;
}

TEST(SqliteLayout, NewestValidSlotWinsAndATornOneFallsBack) {
    const Superblock a = planned(7), b = planned(8);
    auto h = header_with(a, &b);
    auto p = sqlite::pick_superblock(h, 64 * sqlite::kMiB);
    ASSERT_EQ(p.kind, sqlite::Pick::Kind::ok);
    EXPECT_EQ(p.slot, 1);
    EXPECT_EQ(p.sb, b);
    h[sqlite::kSlotBytes + 70] ^= 0xff;  // slot 1 torn: its checksum fails
    p = sqlite::pick_superblock(h, 64 * sqlite::kMiB);
    ASSERT_EQ(p.kind, sqlite::Pick::Kind::ok);
    EXPECT_EQ(p.slot, 0);
    EXPECT_EQ(p.sb, a);
}

TEST(SqliteLayout, ZeroIsFreshOtherDataIsForeignANewerVersionIsRefused) {
    std::vector<uint8_t> h(sqlite::kHeaderBytes, 0);
    EXPECT_EQ(sqlite::pick_superblock(h, 64 * sqlite::kMiB).kind, sqlite::Pick::Kind::fresh);
    h[1100] = 0x53;  // e.g. an ext4 superblock at 1024
    EXPECT_EQ(sqlite::pick_superblock(h, 64 * sqlite::kMiB).kind, sqlite::Pick::Kind::foreign);
    Superblock n = planned(1);
    n.version = sqlite::kLayoutVersion + 1;
    auto p = sqlite::pick_superblock(header_with(n, nullptr), 64 * sqlite::kMiB);
    EXPECT_EQ(p.kind, sqlite::Pick::Kind::newer);
    EXPECT_EQ(p.found_version, sqlite::kLayoutVersion + 1);
    EXPECT_NE(sqlite::describe_pick(p).find("newer"), std::string::npos);
    // Regions beyond the media (a namespace that shrank) do not check out.
    EXPECT_EQ(sqlite::pick_superblock(header_with(planned(1), nullptr), 32 * sqlite::kMiB).kind,
              sqlite::Pick::Kind::corrupt);
}

// ------------------------------------------------------------------ helpers

struct Registered {
    Registered() { EXPECT_EQ(nvf_sqlite_register(0), SQLITE_OK); }
};
const Registered g_registered;

std::string uri(const std::string& path, const std::string& extra = "") {
    return "file:" + path + "?vfs=nvfence" + extra;
}

sqlite3* open_db(const std::string& u, int flags, int* rc_out = nullptr) {
    sqlite3* db = nullptr;
    const int rc = sqlite3_open_v2(u.c_str(), &db, flags | SQLITE_OPEN_URI, nullptr);
    if (rc_out) *rc_out = rc;
    if (rc != SQLITE_OK) {
        sqlite3_close(db);
        return nullptr;
    }
    return db;
}
constexpr int kRwc = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;

int exec(sqlite3* db, const std::string& sql) { return sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr); }

std::string scalar(sqlite3* db, const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) return "<prepare failed>";
    std::string out = "<no row>";
    if (sqlite3_step(st) == SQLITE_ROW)
        out = sqlite3_column_text(st, 0) ? reinterpret_cast<const char*>(sqlite3_column_text(st, 0)) : "<null>";
    sqlite3_finalize(st);
    return out;
}

std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
}

void make_file(const std::string& path, size_t bytes, const std::string& head = "") {
    std::string data(bytes, '\0');
    std::memcpy(data.data(), head.data(), std::min(head.size(), bytes));
    std::ofstream(path, std::ios::binary) << data;
}

sqlite::Pick read_pick(const std::string& path) {
    std::vector<uint8_t> h(sqlite::kHeaderBytes);
    std::ifstream f(path, std::ios::binary);
    f.read(reinterpret_cast<char*>(h.data()), static_cast<std::streamsize>(h.size()));
    struct stat sb {};
    ::stat(path.c_str(), &sb);
    return sqlite::pick_superblock(h, static_cast<uint64_t>(sb.st_size));
}

// ------------------------------------------------------------------ regular file

TEST(SqliteVfs, RegularFileCommitsSurviveReopenWithTokenZero) {
    TempDir d;
    const std::string path = d.path() + "/a.db";
    sqlite3* db = open_db(uri(path), kRwc);
    ASSERT_TRUE(db) << nvf_sqlite_last_error();
    ASSERT_EQ(exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(1),(2),(3);"), SQLITE_OK);
    EXPECT_EQ(scalar(db, "SELECT nvfence_token()"), "0");
    EXPECT_EQ(nvf_sqlite_fenced(db, nullptr), 0);
    nvf_sqlite_info st{};
    ASSERT_EQ(nvf_sqlite_status(db, "main", &st), SQLITE_OK);
    EXPECT_EQ(st.device, 0);
    EXPECT_STREQ(st.message, "ok");
    sqlite3_close(db);
    struct stat sb {};
    ASSERT_EQ(::stat(path.c_str(), &sb), 0);
    EXPECT_EQ(static_cast<uint64_t>(sb.st_size), 64 * sqlite::kMiB);
    auto p = read_pick(path);
    ASSERT_EQ(p.kind, sqlite::Pick::Kind::ok);
    EXPECT_GT(p.sb.db_len, 0u);
    EXPECT_EQ(p.sb.journal_len, 0u);  // committed: the journal is gone
    db = open_db(uri(path), SQLITE_OPEN_READONLY);
    ASSERT_TRUE(db) << nvf_sqlite_last_error();
    EXPECT_EQ(scalar(db, "SELECT group_concat(x) FROM t"), "1,2,3");
    EXPECT_EQ(scalar(db, "PRAGMA integrity_check"), "ok");
    sqlite3_close(db);
}

TEST(SqliteVfs, UnknownUriParameterIsRefusedAndCreatesNothing) {
    TempDir d;
    const std::string path = d.path() + "/a.db";
    int rc = 0;
    EXPECT_EQ(open_db(uri(path, "&journal=wal"), kRwc, &rc), nullptr);
    EXPECT_EQ(rc, SQLITE_CANTOPEN);
    EXPECT_NE(std::string(nvf_sqlite_last_error()).find("unknown URI parameter 'journal'"), std::string::npos)
        << nvf_sqlite_last_error();
    EXPECT_NE(::access(path.c_str(), F_OK), 0);
}

TEST(SqliteVfs, ABadBlockCacheSizeIsRefusedAndCreatesNothing) {
    TempDir d;
    const std::string path = d.path() + "/a.db";
    for (const std::string bad : {"-1", "65537", "12x", "", "0x10", "999999"}) {
        int rc = 0;
        EXPECT_EQ(open_db(uri(path, "&block_cache_mib=" + bad), kRwc, &rc), nullptr) << bad;
        EXPECT_EQ(rc, SQLITE_CANTOPEN) << bad;
        EXPECT_NE(std::string(nvf_sqlite_last_error()).find("block_cache_mib must be a whole number of MiB from 0 to 65536"),
                  std::string::npos)
            << nvf_sqlite_last_error();
        EXPECT_NE(::access(path.c_str(), F_OK), 0) << bad;
    }
    for (const std::string good : {"0", "65536", "8"}) {
        sqlite3* db = open_db(uri(path, "&block_cache_mib=" + good), kRwc);
        EXPECT_NE(db, nullptr) << good << ": " << nvf_sqlite_last_error();
        sqlite3_close(db);
    }
}

// ------------------------------------------------------------- block cache

TEST(SqliteBlockCache, KeepsTheMostRecentlyUsedBlocksUpToItsCapacity) {
    sqlite::BlockCache c(2, 512);
    std::vector<uint8_t> a(512, 'a'), b(512, 'b'), x(512, 'x'), got(512);
    c.put(1, a.data());
    c.put(2, b.data());
    ASSERT_TRUE(c.get(1, got.data()));  // 1 is now the most recently used
    EXPECT_EQ(got, a);
    c.put(3, x.data());                 // evicts 2
    EXPECT_EQ(c.size(), 2u);
    EXPECT_FALSE(c.get(2, got.data()));
    EXPECT_TRUE(c.get(3, got.data()));
    EXPECT_EQ(got, x);
    c.put(1, b.data());                 // an update, not a new block
    ASSERT_TRUE(c.get(1, got.data()));
    EXPECT_EQ(got, b);
    EXPECT_EQ(c.size(), 2u);
    c.erase(0, 2);
    EXPECT_FALSE(c.get(1, got.data()));
    EXPECT_TRUE(c.get(3, got.data()));
    c.erase(3, ~uint64_t{0} - 3);       // a long range walks the cache
    EXPECT_EQ(c.size(), 0u);
    c.put(4, a.data());
    c.clear();
    EXPECT_FALSE(c.get(4, got.data()));
    sqlite::BlockCache none(0, 512);
    none.put(1, a.data());
    EXPECT_FALSE(none.get(1, got.data()));
}

TEST(SqliteVfs, NamespaceTooSmallIsRefusedAndLeftUnchanged) {
    TempDir d;
    const std::string path = d.path() + "/small.img";
    make_file(path, 1 << 20);
    const std::string before = slurp(path);
    int rc = 0;
    EXPECT_EQ(open_db(uri(path), kRwc, &rc), nullptr);
    EXPECT_EQ(rc, SQLITE_CANTOPEN);
    EXPECT_NE(std::string(nvf_sqlite_last_error()).find("too small"), std::string::npos) << nvf_sqlite_last_error();
    EXPECT_EQ(slurp(path), before);
}

TEST(SqliteVfs, NewerLayoutAndForeignDataAreRefusedAndLeftUnchanged) {
    TempDir d;
    const std::string newer = d.path() + "/newer.img", foreign = d.path() + "/foreign.img";
    Superblock sb = planned(1);
    sb.version = sqlite::kLayoutVersion + 1;
    const auto enc = sqlite::encode_superblock(sb);
    make_file(newer, 4 << 20, std::string(enc.begin(), enc.end()));
    make_file(foreign, 4 << 20, std::string(2000, 'x'));
    for (const auto& [path, rc_want, words] : {std::tuple{newer, SQLITE_CANTOPEN, "newer nvfence"},
                                               std::tuple{foreign, SQLITE_NOTADB, "other data"}}) {
        const std::string before = slurp(path);
        int rc = 0;
        EXPECT_EQ(open_db(uri(path), kRwc, &rc), nullptr);
        EXPECT_EQ(rc, rc_want);
        EXPECT_NE(std::string(nvf_sqlite_last_error()).find(words), std::string::npos) << nvf_sqlite_last_error();
        EXPECT_EQ(slurp(path), before);
    }
}

TEST(SqliteVfs, ConnectionsOfOneProcessShareLocksAndASecondProcessIsBusy) {
    TempDir d;
    const std::string path = d.path() + "/a.db";
    sqlite3* a = open_db(uri(path), kRwc);
    sqlite3* b = open_db(uri(path), kRwc);
    ASSERT_TRUE(a && b) << nvf_sqlite_last_error();
    ASSERT_EQ(exec(a, "CREATE TABLE t(x); BEGIN IMMEDIATE; INSERT INTO t VALUES(1);"), SQLITE_OK);
    EXPECT_EQ(exec(b, "BEGIN IMMEDIATE"), SQLITE_BUSY);
    ASSERT_EQ(exec(a, "COMMIT"), SQLITE_OK);
    EXPECT_EQ(scalar(b, "SELECT count(*) FROM t"), "1");
    const pid_t pid = ::fork();
    if (pid == 0) {
        int rc = 0;
        sqlite3* c = open_db(uri(path), kRwc, &rc);
        ::_exit(c == nullptr && rc == SQLITE_BUSY ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sqlite3_close(a);
    sqlite3_close(b);
}

// The file at a path deleted or replaced while a connection of this process
// still has the old one open: a new open of the path must not be handed the
// old file's volume (its writes would land in the deleted file and be lost,
// or read the replaced file's data). It is refused with a clear error until
// those connections close; they still read the file they opened and, as
// with the unix VFS, may not write it (SQLITE_READONLY_DBMOVED). Found by
// SQLite's fts5misc (16.x), sessioninvert (4.1.2) and pager4 (1.3) through
// the VFS.
TEST(SqliteVfs, APathDeletedOrReplacedWhileOpenIsRefusedUntilTheOldFileIsClosed) {
    TempDir d;
    const std::string path = d.path() + "/a.db";
    sqlite3* old_db = open_db(uri(path), kRwc);
    ASSERT_TRUE(old_db) << nvf_sqlite_last_error();
    ASSERT_EQ(exec(old_db, "CREATE TABLE old_t(x); INSERT INTO old_t VALUES(1);"), SQLITE_OK);
    ASSERT_EQ(::unlink(path.c_str()), 0);
    int rc = SQLITE_OK;
    EXPECT_EQ(open_db(uri(path), kRwc, &rc), nullptr);
    EXPECT_EQ(rc, SQLITE_CANTOPEN);
    EXPECT_NE(std::string(nvf_sqlite_last_error()).find("deleted or replaced"), std::string::npos)
        << nvf_sqlite_last_error();
    EXPECT_NE(::access(path.c_str(), F_OK), 0) << "the refused open created a file";
    // The old connection still reads the file it opened; a write is refused
    // as the unix VFS refuses it (SQLITE_FCNTL_HAS_MOVED), not lost in a
    // deleted file.
    EXPECT_EQ(scalar(old_db, "SELECT count(*) FROM old_t"), "1");
    EXPECT_EQ(exec(old_db, "INSERT INTO old_t VALUES(2)"), SQLITE_READONLY);
    EXPECT_EQ(sqlite3_extended_errcode(old_db), SQLITE_READONLY_DBMOVED);
    EXPECT_EQ(scalar(old_db, "SELECT count(*) FROM old_t"), "1");
    // Replaced: a different file renamed over the path.
    const std::string other = d.path() + "/b.db";
    sqlite3* b = open_db(uri(other), kRwc);
    ASSERT_TRUE(b) << nvf_sqlite_last_error();
    ASSERT_EQ(exec(b, "CREATE TABLE new_t(y)"), SQLITE_OK);
    sqlite3_close(b);
    ASSERT_EQ(::rename(other.c_str(), path.c_str()), 0);
    EXPECT_EQ(open_db(uri(path), kRwc, &rc), nullptr);
    EXPECT_EQ(rc, SQLITE_CANTOPEN);
    sqlite3_close(old_db);
    // Once the old file is closed, the path opens the file that is there now.
    sqlite3* now = open_db(uri(path), kRwc);
    ASSERT_TRUE(now) << nvf_sqlite_last_error();
    EXPECT_EQ(scalar(now, "SELECT group_concat(name) FROM sqlite_schema"), "new_t");
    sqlite3_close(now);
}

// systemd-udevd holds a shared flock on a block device while it probes it,
// for instance right after a writer closed it (systemd's block device
// locking). The open waits for that, bounded; an exclusive holder (another
// process of this VFS) still makes it SQLITE_BUSY at once. Found by the
// etcd lab: a dd of the superblocks, then the example's open, failed with
// "in use by another process".
TEST(SqliteVfs, AProbesSharedLockIsWaitedForAnExclusiveOneIsBusy) {
    TempDir d;
    const std::string path = d.path() + "/a.db";
    sqlite3* db = open_db(uri(path), kRwc);
    ASSERT_TRUE(db) << nvf_sqlite_last_error();
    ASSERT_EQ(exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(1);"), SQLITE_OK);
    sqlite3_close(db);
    const pid_t pid = ::fork();
    if (pid == 0) {   // the prober: a shared lock for 300 ms
        const int fd = ::open(path.c_str(), O_RDONLY);
        if (fd < 0 || ::flock(fd, LOCK_SH) != 0) ::_exit(2);
        ::usleep(300'000);
        ::_exit(0);
    }
    ::usleep(50'000);
    int rc = 0;
    db = open_db(uri(path), kRwc, &rc);
    EXPECT_TRUE(db != nullptr) << rc << ": " << nvf_sqlite_last_error();
    if (db) {
        EXPECT_EQ(scalar(db, "SELECT count(*) FROM t"), "1");
        sqlite3_close(db);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    const int ex = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(ex, 0);
    ASSERT_EQ(::flock(ex, LOCK_EX), 0);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(open_db(uri(path), kRwc, &rc), nullptr);
    EXPECT_EQ(rc, SQLITE_BUSY);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
    EXPECT_NE(std::string(nvf_sqlite_last_error()).find("in use by another process"), std::string::npos);
    ::close(ex);
}

TEST(SqliteVfs, HotJournalOfACrashedWriterIsRolledBackByTheNextOpen) {
    TempDir d;
    const std::string path = d.path() + "/a.db";
    sqlite3* db = open_db(uri(path), kRwc);
    ASSERT_TRUE(db);
    ASSERT_EQ(exec(db, "CREATE TABLE t(x); WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<200)"
                       " INSERT INTO t SELECT randomblob(500) FROM c;"),
              SQLITE_OK);
    const std::string sum = scalar(db, "SELECT sum(length(x)) || ':' || count(*) FROM t");
    sqlite3_close(db);
    const pid_t pid = ::fork();
    if (pid == 0) {  // a writer that dies mid-transaction, its pages spilled over the database
        sqlite3* c = open_db(uri(path), kRwc);
        exec(c, "PRAGMA cache_size=5; BEGIN; UPDATE t SET x = randomblob(900); DELETE FROM t WHERE rowid % 3 = 0;");
        ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    auto p = read_pick(path);
    ASSERT_EQ(p.kind, sqlite::Pick::Kind::ok);
    EXPECT_EQ(p.sb.journal_kind, sqlite::JournalKind::rollback);
    EXPECT_GT(p.sb.journal_len, 0u);  // hot
    db = open_db(uri(path), kRwc);
    ASSERT_TRUE(db);
    EXPECT_EQ(scalar(db, "SELECT sum(length(x)) || ':' || count(*) FROM t"), sum);
    EXPECT_EQ(scalar(db, "PRAGMA integrity_check"), "ok");
    sqlite3_close(db);
    EXPECT_EQ(read_pick(path).sb.journal_len, 0u);
}

TEST(SqliteVfs, JournalModesThatWorkAndWalOnlyInExclusiveLockingMode) {
    TempDir d;
    for (const char* mode : {"delete", "truncate", "persist", "memory", "off"}) {
        const std::string path = d.path() + "/" + mode + ".db";
        sqlite3* db = open_db(uri(path), kRwc);
        ASSERT_TRUE(db);
        EXPECT_EQ(scalar(db, std::string("PRAGMA journal_mode=") + mode), mode);
        ASSERT_EQ(exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(1); INSERT INTO t VALUES(2);"), SQLITE_OK);
        sqlite3_close(db);
        db = open_db(uri(path), kRwc);
        EXPECT_EQ(scalar(db, "SELECT sum(x) FROM t"), "3") << mode;
        sqlite3_close(db);
    }
    const std::string path = d.path() + "/wal.db";
    sqlite3* db = open_db(uri(path), kRwc);
    EXPECT_EQ(scalar(db, "PRAGMA journal_mode=wal"), "delete");  // refused: no shared memory
    EXPECT_EQ(scalar(db, "PRAGMA locking_mode=exclusive"), "exclusive");
    EXPECT_EQ(scalar(db, "PRAGMA journal_mode=wal"), "wal");
    ASSERT_EQ(exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(40); INSERT INTO t VALUES(2);"), SQLITE_OK);
    sqlite3_close(db);
    db = open_db(uri(path), kRwc);
    EXPECT_EQ(scalar(db, "PRAGMA locking_mode=exclusive"), "exclusive");
    EXPECT_EQ(scalar(db, "SELECT sum(x) FROM t"), "42");
    EXPECT_EQ(scalar(db, "PRAGMA integrity_check"), "ok");
    sqlite3_close(db);
}

// ------------------------------------------------------------------ fencing

// Host A on a FakeTarget, its writes through a FakeRing whose responder
// moves the data to a scratch file, or refuses them (-EBADE) once fenced.
constexpr size_t kFakeBytes = 4 << 20;

struct FencedHost {
    FakeTarget target;
    HostId a = make_host(1), b = make_host(2);
    HostPort port{target, a};
    std::string file;
    FakeWriter* writer = nullptr;
    int fd = -1;
    bool device_fenced = false;
    int write_errno = 0;  ///< Writes and flushes fail with this errno (an aborted or failed command).
    int read_errno = 0;   ///< Reads fail with this errno.
    int writers_made = 0;
    size_t writes_landed_after_fence = 0;

    explicit FencedHost(const std::string& f) : file(f) {
        make_file(file, kFakeBytes);
        fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC);
        target.add(a, *make_key({.tag = 1, .node = 1, .epoch = 5}));
        target.add(b, *make_key({.tag = 1, .node = 2, .epoch = 4}));
        target.hold(a, ResvType::write_exclusive);
        sqlite::Volume::set_backend_opener([this](const sqlite::OpenRequest&, sqlite::Backend& bk, std::string&) {
            bk.port = &port;
            bk.nsid = 1;
            bk.host = a;
            bk.device = true;
            bk.report_retry = std::chrono::milliseconds(1000);
            bk.make_writer = [this](uint64_t epoch) -> Result<std::unique_ptr<FencedWriter>> { return make(epoch); };
            return SQLITE_OK;
        });
    }
    ~FencedHost() {
        sqlite::Volume::set_backend_opener(nullptr);
        ::close(fd);
    }
    std::unique_ptr<FencedWriter> make(uint64_t epoch) {
        ++writers_made;
        detail::WriterTarget t;
        t.fd = Fd(-1);
        t.mode = WriterMode::block;
        t.block_bytes = 4096;
        t.size_blocks = kFakeBytes / 4096;
        t.nsid = 1;
        t.max_io_bytes = 128 * 1024;
        auto w = std::make_unique<FakeWriter>(std::move(t), WriterOptions{.queue_depth = 4, .epoch = epoch});
        EXPECT_TRUE(w->init().ok());
        w->ring().responder = [this](const test::SentIo& io) -> std::optional<int32_t> { return respond(io); };
        writer = w.get();
        return w;
    }
    int32_t respond(const test::SentIo& io) {
        auto* p = reinterpret_cast<void*>(io.addr);
        if (io.opcode == IORING_OP_READ || io.opcode == IORING_OP_READ_FIXED) {
            if (read_errno) return -read_errno;
            return static_cast<int32_t>(::pread(fd, p, io.len, static_cast<off_t>(io.off)));
        }
        if (device_fenced) return -EBADE;  // Reservation Conflict, through the block layer
        if (write_errno) return -write_errno;
        if (io.opcode == IORING_OP_FSYNC) return 0;
        return static_cast<int32_t>(::pwrite(fd, p, io.len, static_cast<off_t>(io.off)));
    }
    // B preempts A (and aborts): A's registration is gone, B holds with epoch 6.
    void preempt_by_b(bool refuse = true) {
        target.regs.clear();
        target.add(b, *make_key({.tag = 1, .node = 2, .epoch = 6}));
        target.hold(b, ResvType::write_exclusive);
        device_fenced = refuse;
    }
};

TEST(SqliteVfs, FencedWriteIsAnIoErrorThatSaysFencedByWhomAndNothingLandsAfter) {
    TempDir d;
    FencedHost h(d.path() + "/ns.img");
    sqlite3* db = open_db(uri(h.file), kRwc);
    ASSERT_TRUE(db) << nvf_sqlite_last_error();
    ASSERT_EQ(exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(1);"), SQLITE_OK);
    EXPECT_EQ(scalar(db, "SELECT nvfence_token()"), "5");
    h.preempt_by_b();
    const std::string at_fence = slurp(h.file);
    auto writes_sent = [&] {
        size_t n = 0;
        for (const auto& io : h.writer->ring().sent)
            n += io.opcode == IORING_OP_WRITE || io.opcode == IORING_OP_WRITE_FIXED || io.opcode == IORING_OP_FSYNC;
        return n;
    };
    const size_t sent_at_fence = writes_sent();
    const int rc = exec(db, "INSERT INTO t VALUES(2)");
    EXPECT_EQ(rc & 0xff, SQLITE_IOERR);
    EXPECT_EQ(sqlite3_extended_errcode(db) & 0xff, SQLITE_IOERR);
    nvf_sqlite_info st{};
    ASSERT_EQ(nvf_sqlite_status(db, nullptr, &st), SQLITE_OK);
    EXPECT_EQ(st.fenced, 1);
    EXPECT_EQ(st.token, 5u);
    EXPECT_EQ(st.holder_known, 1);
    EXPECT_EQ(st.holder_key, *make_key({.tag = 1, .node = 2, .epoch = 6}));
    EXPECT_STREQ(st.holder, "nf:1:2:6");
    EXPECT_NE(std::string(st.message).find("fenced"), std::string::npos) << st.message;
    EXPECT_EQ(nvf_sqlite_fenced(db, "main"), 1);
    EXPECT_NE(scalar(db, "SELECT nvfence_status()").find("\"fenced\":true"), std::string::npos);
    // The latch: one refused write reached the device; nothing after it.
    EXPECT_EQ(writes_sent() - sent_at_fence, 1u);
    EXPECT_NE(exec(db, "INSERT INTO t VALUES(3)") & 0xff, SQLITE_OK);
    EXPECT_EQ(writes_sent() - sent_at_fence, 1u);
    EXPECT_EQ(slurp(h.file), at_fence);
    sqlite3_close(db);
    EXPECT_EQ(slurp(h.file), at_fence);  // not even at close
}

// Host h's database, opened read-write, with an empty table t.
sqlite3* open_with_table(const FencedHost& h) {
    sqlite3* db = open_db(uri(h.file), kRwc);
    EXPECT_TRUE(db) << nvf_sqlite_last_error();
    if (db) {
        EXPECT_EQ(exec(db, "CREATE TABLE t(x)"), SQLITE_OK);
    }
    return db;
}

TEST(SqliteVfs, AWriteAbortedByThePreemptIsFencedAnIoErrorOfAHolderIsNot) {
    TempDir d;
    {
        FencedHost h(d.path() + "/io.img");
        sqlite3* db = open_with_table(h);
        ASSERT_TRUE(db);
        h.write_errno = EIO;  // still the holder: a plain I/O error
        EXPECT_EQ(exec(db, "INSERT INTO t VALUES(1)") & 0xff, SQLITE_IOERR);
        EXPECT_EQ(nvf_sqlite_fenced(db, nullptr), 0);
        sqlite3_close(db);
    }
    FencedHost h(d.path() + "/abort.img");
    sqlite3* db = open_with_table(h);
    ASSERT_TRUE(db);
    h.preempt_by_b(/*refuse=*/false);
    h.write_errno = EIO;  // A's admitted command aborted by B's preempt-and-abort
    EXPECT_EQ(exec(db, "INSERT INTO t VALUES(1)") & 0xff, SQLITE_IOERR);
    nvf_sqlite_info st{};
    ASSERT_EQ(nvf_sqlite_status(db, nullptr, &st), SQLITE_OK);
    EXPECT_EQ(st.fenced, 1);
    EXPECT_STREQ(st.holder, "nf:1:2:6");
    sqlite3_close(db);
}

// After a VM pause the fabric controller may still be reconnecting when the
// VFS asks whose reservation it is: that Report fails, and the error stays
// a plain I/O error for the moment. Asked later (nvf_sqlite_fenced, the
// status), the VFS reads the Report again and says fenced, and latches.
// A Report that fails for a moment is tried again (5 s; here 1 s) first.
// A read that the preempt-and-abort aborted is fenced too.
TEST(SqliteVfs, AnAbortedCommandIsFencedWhenAskedEvenIfTheReportFailedAtFirst) {
    TempDir d;
    {
        FencedHost h(d.path() + "/w.img");
        sqlite3* db = open_with_table(h);
        ASSERT_TRUE(db);
        bool report_down = true;
        h.target.fail = [&report_down](const HostId&, const Command& c) -> std::optional<std::error_code> {
            if (report_down && c.opcode == opcode::kResvReport) return std::make_error_code(std::errc::io_error);
            return std::nullopt;
        };
        h.preempt_by_b(/*refuse=*/false);
        h.write_errno = EIO;
        EXPECT_EQ(exec(db, "INSERT INTO t VALUES(1)") & 0xff, SQLITE_IOERR);
        report_down = false;
        EXPECT_EQ(nvf_sqlite_fenced(db, nullptr), 1);
        nvf_sqlite_info st{};
        ASSERT_EQ(nvf_sqlite_status(db, nullptr, &st), SQLITE_OK);
        EXPECT_STREQ(st.holder, "nf:1:2:6");
        EXPECT_NE(std::string(st.message).find("fenced: the device refused this host's write under fencing token 5"),
                  std::string::npos)
            << st.message;
        h.write_errno = 0;  // the latch: no write or flush is sent any more
        auto writes = [&h] {
            return std::count_if(h.writer->ring().sent.begin(), h.writer->ring().sent.end(), [](const auto& io) {
                return io.opcode != IORING_OP_READ && io.opcode != IORING_OP_READ_FIXED && io.opcode != IORING_OP_NOP;
            });
        };
        const auto sent = writes();
        EXPECT_EQ(exec(db, "INSERT INTO t VALUES(2)") & 0xff, SQLITE_IOERR);
        EXPECT_EQ(writes(), sent);
        sqlite3_close(db);
    }
    {
        // The Report fails three times (a controller reconnecting), then
        // answers: the failing command itself is classified fenced.
        FencedHost h(d.path() + "/retry.img");
        sqlite3* db = open_with_table(h);
        ASSERT_TRUE(db);
        int reports = 0;
        h.target.fail = [&reports](const HostId&, const Command& c) -> std::optional<std::error_code> {
            if (c.opcode != opcode::kResvReport) return std::nullopt;
            if (++reports <= 3) return std::make_error_code(std::errc::io_error);
            return std::nullopt;
        };
        h.preempt_by_b(/*refuse=*/false);
        h.write_errno = EIO;
        EXPECT_EQ(exec(db, "INSERT INTO t VALUES(1)") & 0xff, SQLITE_IOERR);
        EXPECT_GE(reports, 4) << "the failing Report was not tried again";
        const int before = reports;
        EXPECT_EQ(nvf_sqlite_fenced(db, nullptr), 1);
        EXPECT_EQ(reports, before) << "classified only when asked";
        sqlite3_close(db);
    }
    FencedHost h(d.path() + "/r.img");
    sqlite3* db = open_db(uri(h.file, "&block_cache_mib=0"), kRwc);
    ASSERT_TRUE(db) << nvf_sqlite_last_error();
    ASSERT_EQ(exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(1)"), SQLITE_OK);
    h.preempt_by_b(/*refuse=*/false);
    h.read_errno = EIO;  // A's admitted read aborted by B's preempt-and-abort
    EXPECT_NE(exec(db, "PRAGMA cache_size = 0; SELECT * FROM t") & 0xff, SQLITE_OK);
    EXPECT_EQ(nvf_sqlite_fenced(db, nullptr), 1);
    sqlite3_close(db);
}

TEST(SqliteVfs, NonHolderOpeningForWriteIsRefusedBeforeAnyWriterExists) {
    TempDir d;
    FencedHost h(d.path() + "/ns.img");
    h.target.hold(h.b, ResvType::write_exclusive);
    const std::string before = slurp(h.file);
    int rc = 0;
    EXPECT_EQ(open_db(uri(h.file), kRwc, &rc), nullptr);
    EXPECT_EQ(rc, SQLITE_PERM);
    const std::string why = nvf_sqlite_last_error();
    EXPECT_NE(why.find("not the reservation holder"), std::string::npos) << why;
    EXPECT_NE(why.find("held by nf:1:2:4"), std::string::npos) << why;
    EXPECT_EQ(h.writers_made, 0);
    EXPECT_EQ(slurp(h.file), before);
    // Read-only opens are allowed (Write Exclusive lets every host read).
    sqlite3* db = open_db(uri(h.file, "&mode=ro"), SQLITE_OPEN_READONLY, &rc);
    ASSERT_TRUE(db) << nvf_sqlite_last_error();
    EXPECT_EQ(scalar(db, "SELECT count(*) FROM sqlite_schema"), "0");
    sqlite3_close(db);
    EXPECT_EQ(slurp(h.file), before);
}

TEST(SqliteVfs, AnOlderTermIsRefusedByTheTokenInTheSuperblock) {
    TempDir d;
    FencedHost h(d.path() + "/ns.img");
    sqlite3* db = open_with_table(h);
    ASSERT_TRUE(db);
    sqlite3_close(db);
    EXPECT_EQ(read_pick(h.file).sb.epoch, 5u);
    // The device now says A holds under an older epoch than the one stamped.
    h.target.regs.clear();
    h.target.add(h.a, *make_key({.tag = 1, .node = 1, .epoch = 3}));
    h.target.hold(h.a, ResvType::write_exclusive);
    const std::string before = slurp(h.file);
    int rc = 0;
    EXPECT_EQ(open_db(uri(h.file), kRwc, &rc), nullptr);
    EXPECT_EQ(rc, SQLITE_PERM);
    EXPECT_NE(std::string(nvf_sqlite_last_error()).find("fencing token 5"), std::string::npos);
    EXPECT_EQ(slurp(h.file), before);
}

}  // namespace
}  // namespace nvfence
