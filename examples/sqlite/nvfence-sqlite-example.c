/* SPDX-License-Identifier: MIT
 * An SQLite program on the nvfence VFS, linked statically with it.
 *
 *   nvfence-sqlite-example URI [ROWS [INTERVAL_MS]]
 *     commits ROWS rows (default 10) one transaction each, INTERVAL_MS apart
 *     (default 1000), and prints "ack ID TOKEN" for every acknowledged
 *     commit. Fenced by the device: prints why (and who holds now) to
 *     stderr and exits 3; any other error exits 1.
 *   nvfence-sqlite-example URI check
 *     opens read-only, prints "integrity RESULT", "rows N" and one
 *     "row ID TOKEN" line per row.
 *
 * URI: file:/dev/nvme1n1?vfs=nvfence (the reservation holder) or
 * file:/tmp/demo.db?vfs=nvfence (a regular file).
 */
#include <nvfence/sqlite.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static sqlite3* open_db(const char* uri, int flags) {
    sqlite3* db = NULL;
    if (sqlite3_open_v2(uri, &db, flags | SQLITE_OPEN_URI, NULL) != SQLITE_OK) {
        fprintf(stderr, "open: %s: %s\n", sqlite3_errmsg(db), nvf_sqlite_last_error());
        sqlite3_close(db);
        return NULL;
    }
    return db;
}

static int check(const char* uri) {
    char ro[4096];
    snprintf(ro, sizeof ro, "%s%smode=ro", uri, strchr(uri, '?') ? "&" : "?");
    sqlite3* db = open_db(ro, SQLITE_OPEN_READONLY);
    if (!db) return 1;
    sqlite3_stmt* st = NULL;
    int rc = 1;
    if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        printf("integrity %s\n", (const char*)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    if (sqlite3_prepare_v2(db, "SELECT id, token FROM log ORDER BY id", -1, &st, NULL) == SQLITE_OK) {
        long long n = 0;
        while (sqlite3_step(st) == SQLITE_ROW) {
            printf("row %lld %lld\n", sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1));
            ++n;
        }
        printf("rows %lld\n", n);
        rc = 0;
    } else {
        fprintf(stderr, "check: %s\n", sqlite3_errmsg(db));
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rc;
}

static int fail(sqlite3* db, const char* what) {
    int code = 1;
    if (nvf_sqlite_fenced(db, NULL)) {
        struct nvf_sqlite_info st;
        nvf_sqlite_status(db, NULL, &st);
        fprintf(stderr, "%s\n", st.message);
        code = 3;
    } else {
        fprintf(stderr, "%s: %s\n", what, sqlite3_errmsg(db));
    }
    sqlite3_close(db);
    return code;
}

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s URI [ROWS [INTERVAL_MS]] | URI check\n", argv[0]);
        return 2;
    }
    if (nvf_sqlite_register(0) != SQLITE_OK) return 1;
    if (argc > 2 && strcmp(argv[2], "check") == 0) return check(argv[1]);
    const long rows = argc > 2 ? atol(argv[2]) : 10;
    const long interval_ms = argc > 3 ? atol(argv[3]) : 1000;
    sqlite3* db = open_db(argv[1], SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    if (!db) return 1;
    struct nvf_sqlite_info st;
    nvf_sqlite_status(db, NULL, &st);
    printf("writing under fencing token %llu\n", (unsigned long long)st.token);
    if (sqlite3_exec(db, "CREATE TABLE IF NOT EXISTS log(id INTEGER PRIMARY KEY, token INTEGER)", NULL, NULL, NULL) !=
        SQLITE_OK)
        return fail(db, "create");
    for (long i = 0; i < rows; ++i) {
        char sql[128];
        snprintf(sql, sizeof sql, "INSERT INTO log(token) VALUES(%llu)", (unsigned long long)st.token);
        if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) return fail(db, "commit");
        printf("ack %lld %llu\n", (long long)sqlite3_last_insert_rowid(db), (unsigned long long)st.token);
        fflush(stdout);
        if (interval_ms > 0 && i + 1 < rows) {
            struct timespec ts = {interval_ms / 1000, (interval_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    sqlite3_close(db);
    return 0;
}
