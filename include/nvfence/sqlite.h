/* SPDX-License-Identifier: MIT */
#ifndef NVFENCE_SQLITE_H
#define NVFENCE_SQLITE_H
/**
 * @file sqlite.h
 * The SQLite VFS `nvfence`: a database and its journal directly on a shared
 * NVMe namespace (or a regular file), every write through libnvfence's
 * FencedWriter. docs/SQLITE.md is the manual.
 *
 * Two ways to get it:
 *  - the loadable extension `nvfence_sqlite.so` (`.load` in the sqlite3
 *    shell, `load_extension()` in Python): it registers the VFS and the SQL
 *    functions nvfence_status(), nvfence_token() and nvfence_last_error();
 *  - static linking: link libnvfence_sqlite.a (and libnvfence, sqlite3) and
 *    call nvf_sqlite_register() once.
 *
 * Then open `file:/dev/nvme1n1?vfs=nvfence` (URI filenames) or a regular
 * file the same way.
 */
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sqlite3;

/** The VFS name. */
#define NVF_SQLITE_VFS_NAME "nvfence"

/** sqlite3_file_control() opcode: fills a struct nvf_sqlite_info. */
#define NVF_SQLITE_FCNTL_STATUS 0x6e766601

/** What the VFS knows about the term it writes under. */
struct nvf_sqlite_info {
    int fenced;             /**< 1 once the device refused a write of this host (or the writer latched). */
    int holder_known;       /**< 1 when holder_key was read from the device after the fence. */
    int device;             /**< 1 on an NVMe namespace, 0 on a regular file. */
    int read_only;          /**< 1 when opened without write access. */
    uint64_t token;         /**< The fencing token (the key's epoch) this host writes under; 0: none. */
    uint64_t holder_key;    /**< After fenced: the reservation key holding now (0: nobody / unknown). */
    char holder[64];        /**< holder_key in the documented text form ("nf:<tag>:<node>:<epoch>"), or "". */
    char message[256];      /**< A sentence for people ("fenced: ..." or "ok"). */
};

/**
 * Registers the VFS `nvfence` with the SQLite linked into the program.
 * @p make_default non-zero makes it the default VFS. Idempotent.
 * Returns an SQLite result code.
 */
int nvf_sqlite_register(int make_default);

/**
 * Fills @p out for database @p schema ("main" when NULL) of @p db.
 * Returns SQLITE_OK, or SQLITE_NOTFOUND when that database is not on the
 * nvfence VFS. Same as sqlite3_file_control(db, schema,
 * NVF_SQLITE_FCNTL_STATUS, out).
 */
int nvf_sqlite_status(struct sqlite3* db, const char* schema, struct nvf_sqlite_info* out);

/** 1 when database @p schema of @p db was fenced, 0 otherwise. */
int nvf_sqlite_fenced(struct sqlite3* db, const char* schema);

/**
 * Why the last open of this thread failed (an nvfence VFS error: not the
 * holder, namespace too small, newer layout, unknown URI parameter...),
 * or "" when it did not. The text stays valid until this thread's next open.
 */
const char* nvf_sqlite_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* NVFENCE_SQLITE_H */
