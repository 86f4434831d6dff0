// SPDX-License-Identifier: MIT
// The SQLite VFS `nvfence` (docs/SQLITE.md): the sqlite3_vfs and
// sqlite3_io_methods glue over Volume. Compiled twice: with SQLITE_CORE
// into libnvfence_sqlite.a (nvf_sqlite_register, for programs that link
// SQLite themselves), and without it into the loadable extension
// nvfence_sqlite.so, whose calls into SQLite go through the API table the
// loading SQLite hands over.
#include <sqlite3ext.h>

#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>

#include "nvfence/sqlite.h"
#include "sqlite/volume.hpp"

#ifndef SQLITE_CORE
SQLITE_EXTENSION_INIT1
#endif

#define NVF_SQLITE_EXPORT extern "C" __attribute__((visibility("default")))

namespace nvfence::sqlite {
namespace {

thread_local std::string g_last_error;
sqlite3_vfs g_vfs{};
sqlite3_vfs* g_default = nullptr;

// What SQLite's own URI parameters and ours are: anything else is refused.
constexpr std::string_view kKnownParams[] = {"vfs",       "mode", "cache",          "psow",
                                             "nolock",    "immutable", "size", "block_cache_mib"};

struct NvFile {
    sqlite3_file base;
    std::shared_ptr<Volume> vol;
    Region region = Region::db;
    JournalKind kind = JournalKind::none;
    int level = SQLITE_LOCK_NONE;
};

Volume& vol_of(sqlite3_file* f) { return *reinterpret_cast<NvFile*>(f)->vol; }
NvFile& nv(sqlite3_file* f) { return *reinterpret_cast<NvFile*>(f); }

int fail_open(int rc, const std::string& why) {
    g_last_error = "nvfence VFS: " + why;
    sqlite3_log(rc, "%s", g_last_error.c_str());
    return rc;
}

// "<db>-journal" / "<db>-wal" -> ("<db>", kind); kind none otherwise.
std::string split_journal(const char* name, JournalKind& kind) {
    const std::string_view n(name);
    kind = JournalKind::none;
    for (auto [suffix, k] : {std::pair{std::string_view("-journal"), JournalKind::rollback},
                             std::pair{std::string_view("-wal"), JournalKind::wal}}) {
        if (n.size() > suffix.size() && n.substr(n.size() - suffix.size()) == suffix) {
            kind = k;
            return std::string(n.substr(0, n.size() - suffix.size()));
        }
    }
    return std::string(n);
}

int x_close(sqlite3_file* f) {
    NvFile& file = nv(f);
    if (file.vol && file.region == Region::db) file.vol->unlock(&file, file.level, SQLITE_LOCK_NONE);
    file.~NvFile();
    return SQLITE_OK;
}
int x_read(sqlite3_file* f, void* p, int amt, sqlite3_int64 off) { return vol_of(f).read(nv(f).region, p, amt, off); }
int x_write(sqlite3_file* f, const void* p, int amt, sqlite3_int64 off) {
    return vol_of(f).write(nv(f).region, p, amt, off);
}
int x_truncate(sqlite3_file* f, sqlite3_int64 size) { return vol_of(f).truncate(nv(f).region, size); }
int x_sync(sqlite3_file* f, int) { return vol_of(f).sync(); }
int x_file_size(sqlite3_file* f, sqlite3_int64* out) {
    *out = vol_of(f).size(nv(f).region);
    return SQLITE_OK;
}
int x_lock(sqlite3_file* f, int level) { return vol_of(f).lock(f, nv(f).level, level); }
int x_unlock(sqlite3_file* f, int level) { return vol_of(f).unlock(f, nv(f).level, level); }
int x_check_reserved(sqlite3_file* f, int* out) {
    *out = vol_of(f).reserved() ? 1 : 0;
    return SQLITE_OK;
}
int x_file_control(sqlite3_file* f, int op, void* arg) {
    if (op == NVF_SQLITE_FCNTL_STATUS) {
        *static_cast<nvf_sqlite_info*>(arg) = vol_of(f).status();
        return SQLITE_OK;
    }
    if (op == SQLITE_FCNTL_LOCKSTATE) {  // PRAGMA lock_status
        *static_cast<int*>(arg) = nv(f).level;
        return SQLITE_OK;
    }
    if (op == SQLITE_FCNTL_HAS_MOVED) {  // SQLite answers SQLITE_READONLY_DBMOVED to a write
        *static_cast<int*>(arg) = vol_of(f).moved() ? 1 : 0;
        return SQLITE_OK;
    }
    if (op == SQLITE_FCNTL_VFSNAME) {
        *static_cast<char**>(arg) = sqlite3_mprintf("%s", NVF_SQLITE_VFS_NAME);
        return SQLITE_OK;
    }
    return SQLITE_NOTFOUND;
}
int x_sector_size(sqlite3_file* f) { return static_cast<int>(vol_of(f).block_bytes()); }
// SAFE_APPEND: a region's length reaches the media only after the bytes it
// covers (Volume::write_superblock_), so SQLite writes no record count into
// the journal header and syncs the journal once per commit, not twice.
int x_device_characteristics(sqlite3_file*) { return SQLITE_IOCAP_SAFE_APPEND; }

// Version 1: no shared-memory methods, so WAL works only with
// locking_mode=EXCLUSIVE (SQLite keeps the WAL index in heap memory).
const sqlite3_io_methods kMethods = {
    1,         x_close,         x_read,           x_write,          x_truncate,
    x_sync,    x_file_size,     x_lock,           x_unlock,         x_check_reserved,
    x_file_control, x_sector_size, x_device_characteristics, nullptr, nullptr,
    nullptr,   nullptr,         nullptr,          nullptr,
};

bool check_params(const char* name, std::string& why) {
    for (int i = 0;; ++i) {
        const char* key = sqlite3_uri_key(name, i);
        if (!key) return true;
        bool known = false;
        for (auto k : kKnownParams) known = known || k == key;
        if (!known) {
            why = std::string("unknown URI parameter '") + key +
                  "' (known: vfs, mode, cache, psow, nolock, immutable, size, block_cache_mib); nothing changed";
            return false;
        }
    }
}

// block_cache_mib=N: 0..kMaxBlockCacheMiB decimal digits, or absent (the default).
bool block_cache_param(const char* name, uint64_t& bytes, std::string& why) {
    const char* v = sqlite3_uri_parameter(name, "block_cache_mib");
    bytes = kDefaultBlockCacheMiB * kMiB;
    if (!v) return true;
    uint64_t mib = 0;
    const std::string_view t(v);
    bool ok = !t.empty() && t.size() <= 5;
    for (char ch : t) {
        ok = ok && ch >= '0' && ch <= '9';
        mib = mib * 10 + static_cast<uint64_t>(ch - '0');
    }
    if (!ok || mib > kMaxBlockCacheMiB) {
        why = "block_cache_mib must be a whole number of MiB from 0 to " + std::to_string(kMaxBlockCacheMiB) +
              ", not '" + std::string(t) + "'; nothing changed";
        return false;
    }
    bytes = mib * kMiB;
    return true;
}

int open_main(const char* name, NvFile& file, int flags, int* out_flags) {
    std::string why;
    if (!check_params(name, why)) return fail_open(SQLITE_CANTOPEN, why);
    uint64_t cache_bytes = 0;
    if (!block_cache_param(name, cache_bytes, why)) return fail_open(SQLITE_CANTOPEN, why);
    OpenRequest rq;
    rq.path = name;
    rq.read_only = (flags & SQLITE_OPEN_READONLY) != 0;
    rq.create = (flags & SQLITE_OPEN_CREATE) != 0;
    rq.block_cache_bytes = cache_bytes;
    const sqlite3_int64 size = sqlite3_uri_int64(name, "size", static_cast<sqlite3_int64>(rq.create_bytes));
    rq.create_bytes = size > 0 ? static_cast<uint64_t>(size) : 0;
    int rc = SQLITE_OK;
    file.vol = Volume::acquire(rq, rc, why);
    if (!file.vol) return fail_open(rc, why);
    if (out_flags) *out_flags = file.vol->read_only() ? (flags & ~SQLITE_OPEN_READWRITE) | SQLITE_OPEN_READONLY : flags;
    return SQLITE_OK;
}

int x_open(sqlite3_vfs*, const char* name, sqlite3_file* f, int flags, int* out_flags) {
    const int ours = SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_MAIN_JOURNAL | SQLITE_OPEN_WAL;
    if (!name || !(flags & ours)) return g_default->xOpen(g_default, name, f, flags, out_flags);
    g_last_error.clear();
    auto* file = new (f) NvFile{};
    file->base.pMethods = nullptr;  // xClose is not called when xOpen fails
    int rc = SQLITE_OK;
    if (flags & SQLITE_OPEN_MAIN_DB) {
        rc = open_main(name, *file, flags, out_flags);
    } else {
        const std::string base = split_journal(name, file->kind);
        file->vol = Volume::find(base);
        file->region = Region::journal;
        if (!file->vol || file->kind == JournalKind::none) rc = fail_open(SQLITE_CANTOPEN, std::string(name) + ": its database is not open on the nvfence VFS");
        else if ((rc = file->vol->open_journal(file->kind)) != SQLITE_OK)
            fail_open(rc, std::string(name) + ": the journal region holds the other journal kind");
        if (out_flags) *out_flags = flags;
    }
    if (rc != SQLITE_OK) {
        file->~NvFile();
        return rc;
    }
    file->base.pMethods = &kMethods;
    return SQLITE_OK;
}

int x_delete(sqlite3_vfs*, const char* name, int sync_dir) {
    JournalKind kind;
    const std::string base = split_journal(name, kind);
    if (kind != JournalKind::none) {
        if (auto v = Volume::find(base)) return v->delete_journal(kind);
    }
    return g_default->xDelete(g_default, name, sync_dir);
}

int x_access(sqlite3_vfs*, const char* name, int flags, int* out) {
    JournalKind kind;
    const std::string base = split_journal(name, kind);
    if (kind != JournalKind::none) {
        if (auto v = Volume::find(base)) {
            const bool exists = v->journal_exists(kind);
            *out = flags == SQLITE_ACCESS_EXISTS ? exists : exists && !v->read_only();
            return SQLITE_OK;
        }
    }
    return g_default->xAccess(g_default, name, flags, out);
}

int x_full_pathname(sqlite3_vfs*, const char* name, int n, char* out) {
    return g_default->xFullPathname(g_default, name, n, out);
}
void* x_dlopen(sqlite3_vfs*, const char* p) { return g_default->xDlOpen(g_default, p); }
void x_dlerror(sqlite3_vfs*, int n, char* out) { g_default->xDlError(g_default, n, out); }
void (*x_dlsym(sqlite3_vfs*, void* h, const char* s))(void) { return g_default->xDlSym(g_default, h, s); }
void x_dlclose(sqlite3_vfs*, void* h) { g_default->xDlClose(g_default, h); }
int x_randomness(sqlite3_vfs*, int n, char* out) { return g_default->xRandomness(g_default, n, out); }
int x_sleep(sqlite3_vfs*, int us) { return g_default->xSleep(g_default, us); }
int x_current_time(sqlite3_vfs*, double* t) { return g_default->xCurrentTime(g_default, t); }
int x_get_last_error(sqlite3_vfs*, int n, char* out) {
    if (n > 0) std::snprintf(out, static_cast<size_t>(n), "%s", g_last_error.c_str());
    return 0;
}
int x_current_time64(sqlite3_vfs*, sqlite3_int64* t) {
    if (g_default->iVersion >= 2 && g_default->xCurrentTimeInt64) return g_default->xCurrentTimeInt64(g_default, t);
    double d = 0;
    const int rc = g_default->xCurrentTime(g_default, &d);
    *t = static_cast<sqlite3_int64>(d * 86400000.0);
    return rc;
}

const char* schema_arg(sqlite3_value** argv, int argc) {
    return argc > 0 ? reinterpret_cast<const char*>(sqlite3_value_text(argv[0])) : "main";
}

std::string json_string(const char* text) {
    std::string out = "\"";
    for (const char* p = text; *p; ++p) {
        const auto c = static_cast<unsigned char>(*p);
        if (c == '"' || c == '\\') out += '\\';
        if (c < 0x20) {
            char esc[8];
            std::snprintf(esc, sizeof esc, "\\u%04x", c);
            out += esc;
        } else {
            out += static_cast<char>(c);
        }
    }
    return out + "\"";
}

void fn_status(sqlite3_context* ctx, int argc, sqlite3_value** argv) {
    nvf_sqlite_info st{};
    if (sqlite3_file_control(sqlite3_context_db_handle(ctx), schema_arg(argv, argc), NVF_SQLITE_FCNTL_STATUS, &st) !=
        SQLITE_OK) {
        sqlite3_result_null(ctx);
        return;
    }
    const std::string json = std::string("{\"fenced\":") + (st.fenced ? "true" : "false") +
                             ",\"token\":" + std::to_string(st.token) + ",\"device\":" + (st.device ? "true" : "false") +
                             ",\"read_only\":" + (st.read_only ? "true" : "false") + ",\"holder\":" +
                             (st.holder_known ? json_string(st.holder) : "null") +
                             ",\"message\":" + json_string(st.message) + "}";
    sqlite3_result_text(ctx, json.c_str(), -1, SQLITE_TRANSIENT);
}

void fn_token(sqlite3_context* ctx, int argc, sqlite3_value** argv) {
    nvf_sqlite_info st{};
    if (sqlite3_file_control(sqlite3_context_db_handle(ctx), schema_arg(argv, argc), NVF_SQLITE_FCNTL_STATUS, &st) !=
        SQLITE_OK)
        sqlite3_result_null(ctx);
    else
        sqlite3_result_int64(ctx, static_cast<sqlite3_int64>(st.token));
}

void fn_last_error(sqlite3_context* ctx, int, sqlite3_value**) {
    sqlite3_result_text(ctx, g_last_error.c_str(), -1, SQLITE_TRANSIENT);
}

int add_functions(sqlite3* db, char**, const sqlite3_api_routines*) {
    const int flags = SQLITE_UTF8;
    int rc = SQLITE_OK;
    for (int argc : {0, 1}) {
        if (rc == SQLITE_OK) rc = sqlite3_create_function(db, "nvfence_status", argc, flags, nullptr, fn_status, nullptr, nullptr);
        if (rc == SQLITE_OK) rc = sqlite3_create_function(db, "nvfence_token", argc, flags, nullptr, fn_token, nullptr, nullptr);
    }
    if (rc == SQLITE_OK)
        rc = sqlite3_create_function(db, "nvfence_last_error", 0, flags, nullptr, fn_last_error, nullptr, nullptr);
    return rc;
}

void fill_vfs() {
    g_vfs.iVersion = 2;
    g_vfs.szOsFile = std::max<int>(static_cast<int>(sizeof(NvFile)), g_default->szOsFile);
    g_vfs.mxPathname = g_default->mxPathname;
    g_vfs.zName = NVF_SQLITE_VFS_NAME;
    g_vfs.xOpen = x_open;
    g_vfs.xDelete = x_delete;
    g_vfs.xAccess = x_access;
    g_vfs.xFullPathname = x_full_pathname;
    g_vfs.xDlOpen = x_dlopen;
    g_vfs.xDlError = x_dlerror;
    g_vfs.xDlSym = x_dlsym;
    g_vfs.xDlClose = x_dlclose;
    g_vfs.xRandomness = x_randomness;
    g_vfs.xSleep = x_sleep;
    g_vfs.xCurrentTime = x_current_time;
    g_vfs.xGetLastError = x_get_last_error;
    g_vfs.xCurrentTimeInt64 = x_current_time64;
}

}  // namespace
}  // namespace nvfence::sqlite

using namespace nvfence::sqlite;

NVF_SQLITE_EXPORT int nvf_sqlite_register(int make_default) {
    if (!g_default) {
        sqlite3_vfs* def = sqlite3_vfs_find(nullptr);
        if (!def) return SQLITE_ERROR;
        if (std::strcmp(def->zName, NVF_SQLITE_VFS_NAME) == 0) return SQLITE_OK;
        g_default = def;
        fill_vfs();
    }
    int rc = sqlite3_vfs_register(&g_vfs, make_default);
    if (rc == SQLITE_OK) rc = sqlite3_auto_extension(reinterpret_cast<void (*)(void)>(add_functions));
    return rc;
}

NVF_SQLITE_EXPORT int nvf_sqlite_status(sqlite3* db, const char* schema, nvf_sqlite_info* out) {
    return sqlite3_file_control(db, schema ? schema : "main", NVF_SQLITE_FCNTL_STATUS, out);
}

NVF_SQLITE_EXPORT int nvf_sqlite_fenced(sqlite3* db, const char* schema) {
    nvf_sqlite_info st{};
    return nvf_sqlite_status(db, schema, &st) == SQLITE_OK && st.fenced;
}

NVF_SQLITE_EXPORT const char* nvf_sqlite_last_error(void) { return g_last_error.c_str(); }

#ifndef SQLITE_CORE
/// The loadable extension's entry point (SQLite derives the name from
/// nvfence_sqlite.so). Stays loaded: the VFS outlives the connection.
NVF_SQLITE_EXPORT int sqlite3_nvfencesqlite_init(sqlite3* db, char** err, const sqlite3_api_routines* api) {
    SQLITE_EXTENSION_INIT2(api);
    int rc = nvf_sqlite_register(0);
    if (rc == SQLITE_OK) rc = add_functions(db, err, api);
    return rc == SQLITE_OK ? SQLITE_OK_LOAD_PERMANENTLY : rc;
}
#endif
