/* SPDX-License-Identifier: MIT
 * An SQLite program on the nvfence VFS, linked statically with it:
 *   nvfence-sqlite-example file:/dev/nvme1n1?vfs=nvfence   (the reservation holder)
 *   nvfence-sqlite-example file:/tmp/demo.db?vfs=nvfence   (a regular file)
 * Commits one row per second and prints each acknowledged commit with the
 * fencing token it was written under. When the device fences this host it
 * says so (and who holds now) and exits 3; any other error exits 1.
 */
#include <nvfence/sqlite.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s file:PATH?vfs=nvfence [ROWS]\n", argv[0]);
        return 2;
    }
    int rows = argc > 2 ? atoi(argv[2]) : 10;
    if (nvf_sqlite_register(0) != SQLITE_OK) return 1;
    sqlite3* db = NULL;
    if (sqlite3_open_v2(argv[1], &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI, NULL) != SQLITE_OK) {
        fprintf(stderr, "open: %s: %s\n", sqlite3_errmsg(db), nvf_sqlite_last_error());
        sqlite3_close(db);
        return 1;
    }
    struct nvf_sqlite_info st;
    nvf_sqlite_status(db, NULL, &st);
    printf("writing under fencing token %llu\n", (unsigned long long)st.token);
    sqlite3_exec(db, "CREATE TABLE IF NOT EXISTS log(id INTEGER PRIMARY KEY, token INTEGER)", NULL, NULL, NULL);
    for (int i = 0; i < rows; ++i) {
        char sql[128];
        snprintf(sql, sizeof sql, "INSERT INTO log(token) VALUES(%llu)", (unsigned long long)st.token);
        if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
            if (nvf_sqlite_fenced(db, NULL)) {
                nvf_sqlite_status(db, NULL, &st);
                fprintf(stderr, "%s\n", st.message);
                sqlite3_close(db);
                return 3;
            }
            fprintf(stderr, "commit: %s\n", sqlite3_errmsg(db));
            sqlite3_close(db);
            return 1;
        }
        printf("ack %lld\n", (long long)sqlite3_last_insert_rowid(db));
        fflush(stdout);
        if (i + 1 < rows) sleep(1);
    }
    sqlite3_close(db);
    return 0;
}
