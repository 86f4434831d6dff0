// SPDX-License-Identifier: MIT
#pragma once
/// @file volume.hpp
/// One namespace (or regular file) holding an SQLite database and its
/// journal (layout.hpp), shared by every connection of this process that
/// opens it: region I/O through one FencedWriter (O_DIRECT reads and writes,
/// read-modify-write of partial blocks), the superblock, durability
/// (sync), the fence latch and what the device said about it, and SQLite's
/// lock levels between the connections of this process. Another process
/// is kept out by an exclusive flock() on the media.
///
/// Every method returns an SQLite result code. Thread-safe (one mutex).
#include <sqlite3.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "nvfence/fd.hpp"
#include "nvfence/namespace.hpp"
#include "nvfence/passthru.hpp"
#include "nvfence/report.hpp"
#include "nvfence/result.hpp"
#include "nvfence/sqlite.h"
#include "nvfence/writer.hpp"
#include "sqlite/block_cache.hpp"
#include "sqlite/layout.hpp"

namespace nvfence::sqlite {

/// The default size of a read-write volume's block cache (URI parameter
/// block_cache_mib).
inline constexpr uint64_t kDefaultBlockCacheMiB = 64;
inline constexpr uint64_t kMaxBlockCacheMiB = 65536;

/// Which "file" of the volume.
enum class Region { db, journal };

/// What an open asks for.
struct OpenRequest {
    std::string path;                     ///< Full path of the database.
    bool read_only = false;
    bool create = false;                  ///< Create a missing regular file.
    uint64_t create_bytes = 64 * kMiB;    ///< Size of a regular file created.
    uint64_t block_cache_bytes = kDefaultBlockCacheMiB * kMiB;  ///< A read-write volume's BlockCache.
};

/// The media behind a volume, before any write.
struct Backend {
    /// Opens the writer under fencing token @p epoch, called after the
    /// holder check so that nothing is opened for writing before it.
    std::function<Result<std::unique_ptr<FencedWriter>>(uint64_t epoch)> make_writer;
    std::unique_ptr<Namespace> ns;        ///< A device: identity and passthrough.
    Passthru* port = nullptr;             ///< Reservation Reports (null: a regular file).
    uint32_t nsid = 0;
    std::optional<HostId> host;           ///< This host's id on the device.
    bool device = false;
    Fd lock_fd;                           ///< Holds the process-exclusive flock().
    /// How long the classification of a failed command tries a failing
    /// Report again: a fabric controller reconnecting after its host was
    /// paused fails passthrough commands at once until it is connected.
    std::chrono::milliseconds report_retry{5000};
};

/// Opens the media of a request; on failure returns an SQLite code and a
/// sentence in @p why. Replaceable for tests (set_backend_opener).
using BackendOpener = std::function<int(const OpenRequest&, Backend&, std::string& why)>;

/// The default opener: a regular file (created when asked) or an NVMe
/// namespace (Namespace::open, reservations required for writing).
int open_default_backend(const OpenRequest& rq, Backend& out, std::string& why);

/// The holder check of an open: a read-write open on a device must hold the
/// reservation; sets @p token to the epoch of this host's key.
int check_holder(const OpenRequest& rq, Backend& b, uint64_t& token, std::string& why);

class Volume {
public:
    /// The volume of rq.path, opened (and formatted when never formatted
    /// and writable) on first use. nullptr with @p rc and @p why on failure.
    static std::shared_ptr<Volume> acquire(const OpenRequest& rq, int& rc, std::string& why);
    /// The open volume of @p path, if any (journal and WAL opens).
    static std::shared_ptr<Volume> find(const std::string& path);
    /// Tests: replaces the backend opener; nullptr restores the default.
    static void set_backend_opener(BackendOpener op);

    Volume(Backend b, bool read_only, uint64_t token, std::string path,
           uint64_t block_cache_bytes = kDefaultBlockCacheMiB * kMiB);
    ~Volume();
    Volume(const Volume&) = delete;
    Volume& operator=(const Volume&) = delete;

    int read(Region r, void* dst, int amt, int64_t off);
    /// Blocks in the block cache (tests).
    size_t cached_blocks();
    int write(Region r, const void* src, int amt, int64_t off);
    int truncate(Region r, int64_t size);
    /// Durable: flushes the device cache (unless nothing was written since
    /// the last flush), then writes the superblock if a length changed, and
    /// flushes again: one or two flushes.
    int sync();
    int64_t size(Region r);
    /// Claims the journal region for @p kind (rollback journal or WAL).
    int open_journal(JournalKind kind);
    bool journal_exists(JournalKind kind);
    /// Empties the journal durably (SQLite's commit point in DELETE mode).
    int delete_journal(JournalKind kind);

    int lock(const void* who, int& level, int want);
    int unlock(const void* who, int& level, int want);
    bool reserved();

    nvf_sqlite_info status();
    uint32_t block_bytes() const { return block_; }
    bool read_only() const { return ro_; }
    uint64_t token() const { return token_; }

    /// Reads the superblocks and formats or validates (acquire() calls it).
    int init(std::string& why);

    /// Whether @p path still names the file this volume opened: a regular
    /// file by device and inode, a block device by its device number; true
    /// when the backend has no file to compare.
    bool still_at(const std::string& path) const;
    /// The file was deleted, or another renamed over its path, since it was
    /// opened (SQLITE_FCNTL_HAS_MOVED: SQLite then refuses to write it).
    bool moved() const { return !still_at(path_); }

private:
    struct Span { uint64_t off, cap, len; };
    Span span_(Region r) const;
    int io_(IoKind k, uint64_t abs, std::span<uint8_t> buf);
    int fill_edge_(uint64_t block_abs, uint64_t end_abs, uint8_t* dst);
    int write_chunk_(uint64_t abs, const uint8_t* src, uint64_t n, uint64_t logical_end, uint64_t& done);
    int write_superblock_();
    bool hold_(Region r, uint64_t abs, const uint8_t* src, uint64_t n);
    int flush_held_();
    int note_length_(Region r, uint64_t end);
    void on_fenced_();
    void classify_failure_();
    int format_(std::string& why);

    std::mutex mu_;
    Backend b_;
    std::unique_ptr<FencedWriter> w_;
    bool ro_;
    uint64_t token_;
    std::string path_;
    struct stat id_ {};           ///< The opened file's identity (st_ino 0: none to compare).
    uint32_t block_ = 4096;
    uint64_t media_bytes_ = 0;
    size_t chunk_ = 0;
    AlignedBuffer bounce_;
    AlignedBuffer held_;          ///< Writes held back: one run, at its offset in its first block (hold_()).
    uint64_t held_abs_ = 0;       ///< Where the run starts (any byte).
    uint64_t held_len_ = 0;
    Region held_region_ = Region::db;
    static constexpr uint64_t kNoEdge = ~uint64_t{0};
    AlignedBuffer edge_;          ///< The last block written, as the media holds it (fill_edge_()).
    uint64_t edge_abs_ = kNoEdge;
    AlignedBuffer tmp_;           ///< One block: a partial edge of the held run.
    uint64_t cache_bytes_;
    BlockCache cache_{0, 4096};   ///< Blocks of this term (block_cache.hpp); none when read-only or fenced.
    bool write_lost_ = false;     ///< A held-back write failed: sync() fails from then on.
    bool unflushed_ = true;       ///< A write completed since the last flush (a flush is due).
    Superblock sb_;
    int slot_ = 0;
    bool dirty_ = false;
    bool fenced_ = false;
    bool unsure_ = false;         ///< A command failed and the Report could not tell whether this host still holds.
    std::optional<uint64_t> holder_key_;
    std::string fence_msg_;
    int shared_ = 0;
    const void* reserved_ = nullptr;
    const void* pending_ = nullptr;
    const void* exclusive_ = nullptr;
};

}  // namespace nvfence::sqlite
