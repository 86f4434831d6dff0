// SPDX-License-Identifier: MIT
#include "sqlite/volume.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>

#include "nvfence/error.hpp"
#include "nvfence/key.hpp"
#include "nvfence/reservation.hpp"
#include "internal/invariant.hpp"

namespace nvfence::sqlite {
namespace {

constexpr size_t kBounceBytes = 256 * 1024;  // bounce buffer: one chunk of region I/O
constexpr uint32_t kQueueDepth = 4;          // only synchronous I/O is sent

std::mutex g_registry_mu;
std::map<std::string, std::weak_ptr<Volume>>& registry() {
    static std::map<std::string, std::weak_ptr<Volume>> m;
    return m;
}
// A child of fork() must not share its parent's volumes (their ring, lock
// and cached lengths): it opens its own, and its own flock() tells it
// whether the parent still has the database.
void forget_volumes_in_child() { registry().clear(); }
[[maybe_unused]] const int g_atfork = ::pthread_atfork(nullptr, nullptr, forget_volumes_in_child);
BackendOpener& opener() {
    static BackendOpener op;
    return op;
}

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// How long an open waits while only shared flocks are held on the media:
// systemd-udevd holds one on a block device while it probes it (systemd's
// block device locking), for instance right after a writer closed it.
constexpr auto kProbeWait = std::chrono::seconds(10);
constexpr useconds_t kProbePoll_us = 10'000;

// How often a failed command's classification tries a failing Report
// again, within Backend::report_retry.
constexpr useconds_t kReportRetryPoll_us = 100'000;

// The process-exclusive lock on the media: a second process gets
// SQLITE_BUSY at once (it holds the lock exclusively); a prober's shared
// lock is waited for, bounded by kProbeWait.
int lock_media(const std::string& path, Fd& out, std::string& why) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
        why = "cannot open " + path + ": " + std::strerror(errno);
        return errno == EACCES || errno == EPERM ? SQLITE_PERM : SQLITE_CANTOPEN;
    }
    const auto end = std::chrono::steady_clock::now() + kProbeWait;
    while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
        if (errno == EINTR) continue;
        if (errno != EWOULDBLOCK) {
            why = "cannot lock " + path + ": " + std::strerror(errno);
            return SQLITE_IOERR_LOCK;
        }
        // Only shared holders (a prober) when a shared lock is granted.
        const bool only_shared = ::flock(fd.get(), LOCK_SH | LOCK_NB) == 0;
        if (only_shared) (void)::flock(fd.get(), LOCK_UN);
        if (!only_shared || std::chrono::steady_clock::now() >= end) {
            why = path + " is in use by another process (the nvfence VFS allows one process per database)";
            return SQLITE_BUSY;
        }
        ::usleep(kProbePoll_us);
    }
    out = std::move(fd);
    return SQLITE_OK;
}

int create_regular(const OpenRequest& rq, std::string& why) {
    Fd fd(::open(rq.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!fd) {
        if (errno == EEXIST) return SQLITE_OK;
        why = "cannot create " + rq.path + ": " + std::strerror(errno);
        return SQLITE_CANTOPEN;
    }
    if (::ftruncate(fd.get(), static_cast<off_t>(rq.create_bytes)) != 0) {
        why = "cannot size " + rq.path + ": " + std::strerror(errno);
        ::unlink(rq.path.c_str());
        return SQLITE_CANTOPEN;
    }
    return SQLITE_OK;
}

int open_device(const OpenRequest& rq, Backend& out, std::string& why) {
    auto ns = Namespace::open(rq.path);
    if (!ns) {
        why = "cannot open namespace " + rq.path + ": " + ns.error().message();
        const auto e = ns.error();
        return e == std::errc::permission_denied || e == std::errc::operation_not_permitted ? SQLITE_PERM
                                                                                             : SQLITE_CANTOPEN;
    }
    std::string no_resv;
    if (!rq.read_only && !(*ns)->require_reservations(&no_resv)) {
        why = rq.path + ": " + no_resv;
        return SQLITE_CANTOPEN;
    }
    out.device = true;
    out.nsid = (*ns)->info().nsid;
    out.host = (*ns)->info().host_id;
    out.ns = std::move(*ns);
    out.port = &out.ns->passthru();
    const std::string block = out.ns->info().paths.block;
    out.make_writer = [block](uint64_t epoch) {
        return FencedWriter::open(block, {.mode = WriterMode::block, .queue_depth = kQueueDepth, .epoch = epoch});
    };
    return SQLITE_OK;
}

}  // namespace

int open_default_backend(const OpenRequest& rq, Backend& out, std::string& why) {
    struct stat st {};
    const bool exists = ::stat(rq.path.c_str(), &st) == 0;
    if (!exists && !(rq.create && !rq.read_only)) {
        why = "no such file or namespace: " + rq.path;
        return SQLITE_CANTOPEN;
    }
    if (!exists || S_ISREG(st.st_mode)) {
        if (!exists) {
            if (int rc = create_regular(rq, why); rc != SQLITE_OK) return rc;
        }
        if (int rc = lock_media(rq.path, out.lock_fd, why); rc != SQLITE_OK) return rc;
        const std::string path = rq.path;
        out.make_writer = [path](uint64_t epoch) {
            return FencedWriter::open(path, {.mode = WriterMode::block, .queue_depth = kQueueDepth, .epoch = epoch,
                                             .allow_regular_file = true});
        };
        return SQLITE_OK;
    }
    if (int rc = lock_media(rq.path, out.lock_fd, why); rc != SQLITE_OK) return rc;
    return open_device(rq, out, why);
}

int check_holder(const OpenRequest& rq, Backend& b, uint64_t& token, std::string& why) {
    token = 0;
    if (!b.port) return SQLITE_OK;  // a regular file: no reservation
    Reservations resv(*b.port, b.nsid);
    auto st = resv.report();
    if (!st) {
        if (rq.read_only) return SQLITE_OK;
        why = "cannot read the reservation of " + rq.path + ": " + st.error().message();
        return SQLITE_CANTOPEN;
    }
    const Registrant* me = b.host ? st->find_host(*b.host) : nullptr;
    if (me && me->holder) {
        const auto f = decode_key(me->key);
        token = f ? f->epoch : 0;
        return SQLITE_OK;
    }
    if (rq.read_only) return SQLITE_OK;
    const Registrant* h = st->holder();
    why = "this host is not the reservation holder of " + rq.path + " (" +
          (h ? "held by " + format_key(h->key) : std::string("nobody holds it")) +
          "): take it first (nvfence acquire, or nvfence preempt), or open read-only (mode=ro); nothing changed";
    return SQLITE_PERM;
}

void Volume::set_backend_opener(BackendOpener op) { opener() = std::move(op); }

std::shared_ptr<Volume> Volume::find(const std::string& path) {
    std::lock_guard g(g_registry_mu);
    auto it = registry().find(path);
    return it == registry().end() ? nullptr : it->second.lock();
}

std::shared_ptr<Volume> Volume::acquire(const OpenRequest& rq, int& rc, std::string& why) {
    std::lock_guard g(g_registry_mu);
    if (auto it = registry().find(rq.path); it != registry().end()) {
        if (auto v = it->second.lock()) {
            if (!v->still_at(rq.path)) {
                rc = SQLITE_CANTOPEN;
                why = rq.path + " was deleted or replaced while this process still has the old file open through "
                      "the nvfence VFS; close those connections first; nothing changed";
                return nullptr;
            }
            if (v->read_only() && !rq.read_only) {
                rc = SQLITE_BUSY;
                why = rq.path + " is already open read-only in this process; close it before opening it for writing";
                return nullptr;
            }
            return v;
        }
    }
    Backend b;
    rc = opener() ? opener()(rq, b, why) : open_default_backend(rq, b, why);
    if (rc != SQLITE_OK) return nullptr;
    uint64_t token = 0;
    if ((rc = check_holder(rq, b, token, why)) != SQLITE_OK) return nullptr;
    auto v = std::make_shared<Volume>(std::move(b), rq.read_only, token, rq.path, rq.block_cache_bytes);
    if ((rc = v->init(why)) != SQLITE_OK) return nullptr;
    registry()[rq.path] = v;
    return v;
}

Volume::Volume(Backend b, bool read_only, uint64_t token, std::string path, uint64_t block_cache_bytes)
    : b_(std::move(b)), ro_(read_only), token_(token), path_(std::move(path)), bounce_(kBounceBytes),
      held_(read_only ? 0 : kBounceBytes), edge_(kSlotBytes), tmp_(kSlotBytes), cache_bytes_(block_cache_bytes) {
    if (b_.lock_fd.get() < 0 || ::fstat(b_.lock_fd.get(), &id_) != 0) id_ = {};
}

bool Volume::still_at(const std::string& path) const {
    if (id_.st_ino == 0) return true;
    struct stat now {};
    if (::stat(path.c_str(), &now) != 0) return false;
    // A block device is the device number (udev may make its node again);
    // a regular file is its file system's device and inode, as for the
    // unix VFS.
    if (S_ISBLK(id_.st_mode)) return S_ISBLK(now.st_mode) && now.st_rdev == id_.st_rdev;
    return now.st_dev == id_.st_dev && now.st_ino == id_.st_ino;
}

Volume::~Volume() {
    std::lock_guard g(mu_);
    if (!fenced_ && w_) flush_held_();
    if (dirty_ && !fenced_ && w_) write_superblock_();
}

int Volume::init(std::string& why) {
    auto w = b_.make_writer(token_);
    if (!w) {
        why = "cannot open " + path_ + " for direct I/O: " + w.error().message();
        return SQLITE_CANTOPEN;
    }
    w_ = std::move(*w);
    block_ = w_->block_bytes();
    if (block_ > kSlotBytes) {
        why = path_ + ": logical block size " + std::to_string(block_) + " is above 4096, which the layout needs";
        return SQLITE_CANTOPEN;
    }
    media_bytes_ = w_->size_blocks() * block_;
    // Only a writer may cache: a read-only volume reads under the holder's writes.
    cache_ = BlockCache(ro_ ? 0 : cache_bytes_ / block_, block_);
    chunk_ = std::min<size_t>(kBounceBytes, w_->max_io_bytes()) / block_ * block_;
    std::lock_guard g(mu_);
    uint8_t* hdr = bounce_.data();
    if (media_bytes_ >= kHeaderBytes) {
        if (int rc = io_(IoKind::read, 0, {hdr, kHeaderBytes}); rc != SQLITE_OK) {
            why = path_ + ": cannot read the superblocks";
            return SQLITE_CANTOPEN;
        }
    } else {
        std::memset(hdr, 0, kHeaderBytes);
    }
    const Pick p = pick_superblock({hdr, kHeaderBytes}, media_bytes_);
    if (p.kind == Pick::Kind::fresh) return format_(why);
    if (p.kind != Pick::Kind::ok) {
        why = path_ + ": " + describe_pick(p);
        return p.kind == Pick::Kind::newer ? SQLITE_CANTOPEN : SQLITE_NOTADB;
    }
    sb_ = p.sb;
    slot_ = p.slot;
    if (ro_) return SQLITE_OK;
    if (b_.device && sb_.epoch > token_) {
        why = path_ + " was written under fencing token " + std::to_string(sb_.epoch) +
              ", above this host's token " + std::to_string(token_) + ": a newer term owns it; nothing changed";
        return SQLITE_PERM;
    }
    if (sb_.epoch == token_) return SQLITE_OK;
    sb_.epoch = token_;
    if (int rc = write_superblock_(); rc != SQLITE_OK) {
        why = fenced_ ? path_ + ": " + fence_msg_ : path_ + ": cannot write the superblock";
        return rc;
    }
    return SQLITE_OK;
}

int Volume::format_(std::string& why) {
    Superblock sb;
    if (!plan_layout(media_bytes_, sb, why)) {
        why = path_ + ": " + why + "; nothing changed";
        return SQLITE_CANTOPEN;
    }
    sb_ = sb;
    sb_.epoch = token_;
    if (ro_) return SQLITE_OK;  // an empty database until a writer formats it
    slot_ = 1;                  // the first write goes to slot 0
    std::memset(bounce_.data(), 0, kHeaderBytes);
    if (int rc = io_(IoKind::write, kSlotBytes, {bounce_.data(), kSlotBytes}); rc != SQLITE_OK) {
        why = path_ + ": " + (fenced_ ? fence_msg_ : std::string("cannot format"));
        return rc;
    }
    if (int rc = write_superblock_(); rc != SQLITE_OK) {
        why = path_ + ": " + (fenced_ ? fence_msg_ : std::string("cannot format"));
        return rc;
    }
    return SQLITE_OK;
}

// One synchronous I/O at absolute byte @p abs; a fenced completion latches.
// A read or a flush first sends the writes held back (hold_()), so that it
// sees them and so that a flush makes them durable.
int Volume::io_(IoKind k, uint64_t abs, std::span<uint8_t> buf) {
    if (k != IoKind::write) {
        if (int rc = flush_held_(); rc != SQLITE_OK) return rc;
    }
    if (k == IoKind::flush && !unflushed_) return SQLITE_OK;  // nothing written since the last flush
    if (k == IoKind::write) {
        unflushed_ = true;  // even one that fails may have landed
        edge_abs_ = kNoEdge;
    }
    Completion c;
    if (k == IoKind::write) c = w_->write(abs / block_, buf);
    else if (k == IoKind::read) c = w_->read(abs / block_, buf);
    else c = w_->flush();
    if (k != IoKind::flush) {  // the block cache follows the media: what was read or written, or nothing
        for (uint64_t i = 0; i < buf.size() / block_; ++i) {
            if (c.status == IoStatus::ok) cache_.put(abs / block_ + i, buf.data() + i * block_);
            else if (k == IoKind::write) cache_.erase(abs / block_ + i, 1);
        }
    }
    if (c.status == IoStatus::ok) {
        if (k == IoKind::flush) unflushed_ = false;
        if (k == IoKind::write) {  // its last block is the edge block a next append starts in
            edge_abs_ = abs + buf.size() - block_;
            std::memcpy(edge_.data(), buf.data() + buf.size() - block_, block_);
        }
        return SQLITE_OK;
    }
    if (c.status == IoStatus::fenced) on_fenced_();
    else if (k != IoKind::read || !ro_) classify_failure_();
    if (k == IoKind::read) return SQLITE_IOERR_READ;
    return k == IoKind::write ? SQLITE_IOERR_WRITE : SQLITE_IOERR_FSYNC;
}

// Holds back a write at @p abs of region @p r that continues the run held
// back so far: SQLite writes a transaction's pages in ascending order, and
// its rollback journal as one append (each record a page number, the page
// and a checksum: three writes, none block-aligned). One device write per
// run of up to a chunk instead of one per page, or a read-modify-write per
// record piece. The run sits in held_ at its offset in its first block.
// False when it does not fit; the caller sends the held run first.
bool Volume::hold_(Region r, uint64_t abs, const uint8_t* src, uint64_t n) {
    if (held_.size() == 0 || n == 0) return false;
    if (held_len_ > 0 && (abs != held_abs_ + held_len_ || r != held_region_)) return false;
    const uint64_t start = held_len_ > 0 ? held_abs_ / block_ * block_ : abs / block_ * block_;
    if (round_up(abs + n, block_) - start > chunk_) return false;
    if (held_len_ == 0) {
        held_abs_ = abs;
        held_region_ = r;
    }
    NVF_INVARIANT(abs >= start && abs - start + n <= held_.size());
    std::memcpy(held_.data() + (abs - start), src, n);
    held_len_ += n;
    return true;
}

// Sends the run held back, its partial first and last blocks completed from
// the media (the edge block cache first; nothing past the region's logical
// end is read). A run that fails is remembered: every later sync() fails,
// as SQLite was told its pages were written.
int Volume::flush_held_() {
    if (held_len_ == 0) return SQLITE_OK;
    const uint64_t start = held_abs_ / block_ * block_, data_end = held_abs_ + held_len_;
    const uint64_t end = round_up(data_end, block_);
    const Span s = span_(held_region_);
    NVF_INVARIANT(start % block_ == 0 && end - start <= held_.size());
    held_len_ = 0;
    uint8_t* b = held_.data();
    int rc = SQLITE_OK;
    if (held_abs_ > start && (rc = fill_edge_(start, s.off + s.len, tmp_.data())) == SQLITE_OK)
        std::memcpy(b, tmp_.data(), held_abs_ - start);
    const uint64_t last = end - block_;
    if (rc == SQLITE_OK && data_end < end) {
        if (data_end >= s.off + s.len) std::memset(b + (data_end - start), 0, end - data_end);
        else if ((rc = fill_edge_(last, s.off + s.len, tmp_.data())) == SQLITE_OK)
            std::memcpy(b + (data_end - start), tmp_.data() + (data_end - last), end - data_end);
    }
    if (rc == SQLITE_OK) rc = io_(IoKind::write, start, {b, end - start});
    if (rc != SQLITE_OK) write_lost_ = true;
    return rc;
}

// After a failed command of a writer: does this host still hold the
// reservation? A preempt-and-abort completes this host's admitted commands
// (reads too) as aborted, an I/O error rather than a Reservation Conflict;
// the Report tells them apart. When the Report fails too (a fabric
// controller still reconnecting after a VM pause), the failure stays an
// I/O error for now and status() asks again. The first failed Report of
// an episode is tried again for up to Backend::report_retry (a reconnect
// after a resume takes about the fabric's reconnect_delay); while unsure,
// later failures ask once, so a device that is gone costs one wait.
void Volume::classify_failure_() {
    if (!b_.port || !b_.host) return;
    Reservations resv(*b_.port, b_.nsid);
    const auto end = std::chrono::steady_clock::now() + (unsure_ ? std::chrono::milliseconds(0) : b_.report_retry);
    auto st = resv.report();
    while (!st && std::chrono::steady_clock::now() < end) {
        ::usleep(kReportRetryPoll_us);
        st = resv.report();
    }
    if (!st) {
        unsure_ = true;
        return;
    }
    const Registrant* me = st->find_host(*b_.host);
    unsure_ = false;
    if (!me || !me->holder) on_fenced_();
}

void Volume::on_fenced_() {
    if (fenced_) return;
    fenced_ = true;
    cache_ = BlockCache(0, block_);  // the media is another term's now
    std::string by = "the holder now is unknown (no reservation to read)";
    if (b_.port) {
        Reservations resv(*b_.port, b_.nsid);
        auto st = resv.report();
        if (st && st->holder()) {
            holder_key_ = st->holder()->key;
            by = "the reservation is now held by " + format_key(*holder_key_);
        } else if (st) {
            by = "nobody holds the reservation now";
        } else {
            by = "the reservation could not be read: " + st.error().message();
        }
    }
    fence_msg_ = "fenced: the device refused this host's write under fencing token " + std::to_string(token_) +
                 "; " + by + "; nothing more of this host lands";
}

Volume::Span Volume::span_(Region r) const {
    return r == Region::db ? Span{sb_.db_off, sb_.db_cap, sb_.db_len}
                           : Span{sb_.journal_off, sb_.journal_cap, sb_.journal_len};
}

int Volume::read(Region r, void* dst, int amt, int64_t off) {
    std::lock_guard g(mu_);
    const Span s = span_(r);
    auto* out = static_cast<uint8_t*>(dst);
    const uint64_t uoff = static_cast<uint64_t>(off);
    const uint64_t avail = s.len > uoff ? std::min<uint64_t>(static_cast<uint64_t>(amt), s.len - uoff) : 0;
    if (held_len_ > 0 && held_abs_ < s.off + uoff + avail && s.off + uoff < held_abs_ + held_len_) {
        if (int rc = flush_held_(); rc != SQLITE_OK) return rc;  // the cache lacks what is held back
    }
    uint64_t done = 0;
    while (done < avail) {
        const uint64_t abs = s.off + uoff + done;
        const uint64_t start = abs / block_ * block_;
        if (cache_.get(start / block_, tmp_.data())) {
            const uint64_t n = std::min(avail - done, start + block_ - abs);
            std::memcpy(out + done, tmp_.data() + (abs - start), n);
            done += n;
            continue;
        }
        const uint64_t end = std::min(round_up(abs + (avail - done), block_), start + chunk_);
        if (int rc = io_(IoKind::read, start, {bounce_.data(), end - start}); rc != SQLITE_OK) return rc;
        const uint64_t n = std::min(avail - done, end - abs);
        std::memcpy(out + done, bounce_.data() + (abs - start), n);
        done += n;
    }
    if (avail < static_cast<uint64_t>(amt)) {
        std::memset(out + avail, 0, static_cast<size_t>(amt) - avail);
        return SQLITE_IOERR_SHORT_READ;
    }
    return SQLITE_OK;
}

// The block at @p block_abs into @p dst: read, or zeros when the whole block
// lies past the region's logical end @p end_abs (nothing there to keep).
int Volume::fill_edge_(uint64_t block_abs, uint64_t end_abs, uint8_t* dst) {
    if (block_abs >= end_abs) {
        std::memset(dst, 0, block_);
        return SQLITE_OK;
    }
    if (held_len_ == 0 && block_abs == edge_abs_) {  // the last block written (block_cache_mib=0 too)
        std::memcpy(dst, edge_.data(), block_);
        return SQLITE_OK;
    }
    if (held_len_ == 0 && cache_.get(block_abs / block_, dst)) return SQLITE_OK;
    return io_(IoKind::read, block_abs, {dst, block_});
}

int Volume::write_chunk_(uint64_t abs, const uint8_t* src, uint64_t n, uint64_t logical_end, uint64_t& done) {
    const uint64_t start = abs / block_ * block_;
    const uint64_t end = std::min(round_up(abs + n, block_), start + chunk_);
    const uint64_t take = std::min(n, end - abs);
    uint8_t* b = bounce_.data();
    if (abs > start) {
        if (int rc = fill_edge_(start, logical_end, b); rc != SQLITE_OK) return rc;
    }
    const uint64_t last = end - block_;
    if (abs + take < end && (last != start || abs == start)) {
        if (int rc = fill_edge_(last, logical_end, b + (last - start)); rc != SQLITE_OK) return rc;
    }
    std::memcpy(b + (abs - start), src, take);
    if (int rc = io_(IoKind::write, start, {b, end - start}); rc != SQLITE_OK) return rc;
    done = take;
    return SQLITE_OK;
}

int Volume::write(Region r, const void* src, int amt, int64_t off) {
    std::lock_guard g(mu_);
    if (ro_) return SQLITE_READONLY;
    if (fenced_) return SQLITE_IOERR_WRITE;
    const Span s = span_(r);
    const uint64_t uoff = static_cast<uint64_t>(off), n = static_cast<uint64_t>(amt);
    if (uoff > s.cap || n > s.cap - uoff) return SQLITE_FULL;
    const auto* in = static_cast<const uint8_t*>(src);
    if (!hold_(r, s.off + uoff, in, n)) {
        if (int rc = flush_held_(); rc != SQLITE_OK) return rc;
        if (hold_(r, s.off + uoff, in, n)) return note_length_(r, uoff + n);
    } else {
        return note_length_(r, uoff + n);
    }
    uint64_t pos = 0;
    while (pos < n) {
        uint64_t took = 0;
        if (int rc = write_chunk_(s.off + uoff + pos, in + pos, n - pos, s.off + s.len, took); rc != SQLITE_OK)
            return rc;
        pos += took;
    }
    return note_length_(r, uoff + n);
}

int Volume::note_length_(Region r, uint64_t end) {
    uint64_t& len = r == Region::db ? sb_.db_len : sb_.journal_len;
    if (end > len) {
        len = end;
        dirty_ = true;
    }
    return SQLITE_OK;
}

int Volume::truncate(Region r, int64_t size) {
    std::lock_guard g(mu_);
    if (ro_) return SQLITE_READONLY;
    if (fenced_) return SQLITE_IOERR_TRUNCATE;
    const uint64_t n = static_cast<uint64_t>(size);
    if (n > span_(r).cap) return SQLITE_FULL;
    uint64_t& len = r == Region::db ? sb_.db_len : sb_.journal_len;
    if (len != n) {
        len = n;
        dirty_ = true;
    }
    return SQLITE_OK;
}

// Writes the superblock to the other slot and flushes. What it describes is
// made durable first (a flush when anything was written since the last):
// a length never reaches the media before the bytes it covers (SQLite's
// SQLITE_IOCAP_SAFE_APPEND), and the slot it overwrites is never the only
// durable one.
int Volume::write_superblock_() {
    if (int rc = io_(IoKind::flush, 0, {}); rc != SQLITE_OK) return rc;
    Superblock next = sb_;
    next.seq = sb_.seq + 1;
    const auto enc = encode_superblock(next);
    AlignedBuffer buf(kSlotBytes, block_);
    std::memcpy(buf.data(), enc.data(), kSlotBytes);
    const int slot = slot_ ^ 1;
    if (int rc = io_(IoKind::write, static_cast<uint64_t>(slot) * kSlotBytes, buf.span()); rc != SQLITE_OK)
        return rc;
    if (int rc = io_(IoKind::flush, 0, {}); rc != SQLITE_OK) return rc;
    sb_.seq = next.seq;
    slot_ = slot;
    dirty_ = false;
    return SQLITE_OK;
}

int Volume::sync() {
    std::lock_guard g(mu_);
    if (ro_) return SQLITE_OK;
    if (fenced_ || write_lost_) return SQLITE_IOERR_FSYNC;
    return dirty_ ? write_superblock_() : io_(IoKind::flush, 0, {});
}

size_t Volume::cached_blocks() {
    std::lock_guard g(mu_);
    return cache_.size();
}

int64_t Volume::size(Region r) {
    std::lock_guard g(mu_);
    return static_cast<int64_t>(span_(r).len);
}

int Volume::open_journal(JournalKind kind) {
    std::lock_guard g(mu_);
    if (sb_.journal_kind == kind) return SQLITE_OK;
    if (sb_.journal_len > 0 && sb_.journal_kind != JournalKind::none) return SQLITE_CANTOPEN;  // the other one is live
    if (ro_) return SQLITE_CANTOPEN;
    sb_.journal_kind = kind;
    sb_.journal_len = 0;
    dirty_ = true;
    return SQLITE_OK;
}

bool Volume::journal_exists(JournalKind kind) {
    std::lock_guard g(mu_);
    return sb_.journal_kind == kind && sb_.journal_len > 0;
}

int Volume::delete_journal(JournalKind kind) {
    std::lock_guard g(mu_);
    if (sb_.journal_kind != kind) return SQLITE_OK;
    if (ro_) return SQLITE_READONLY;
    if (fenced_) return SQLITE_IOERR_DELETE;
    sb_.journal_kind = JournalKind::none;
    sb_.journal_len = 0;
    dirty_ = true;
    return write_superblock_() == SQLITE_OK ? SQLITE_OK : SQLITE_IOERR_DELETE;
}

int Volume::lock(const void* who, int& level, int want) {
    std::lock_guard g(mu_);
    if (level >= want) return SQLITE_OK;
    if (want == SQLITE_LOCK_SHARED) {
        if (pending_ || exclusive_) return SQLITE_BUSY;
        ++shared_;
        level = SQLITE_LOCK_SHARED;
        return SQLITE_OK;
    }
    if (want == SQLITE_LOCK_RESERVED) {
        if (reserved_ && reserved_ != who) return SQLITE_BUSY;
        reserved_ = who;
        level = SQLITE_LOCK_RESERVED;
        return SQLITE_OK;
    }
    if ((pending_ && pending_ != who) || (exclusive_ && exclusive_ != who)) return SQLITE_BUSY;
    pending_ = who;
    level = std::max(level, SQLITE_LOCK_PENDING);
    if (shared_ > 1) return SQLITE_BUSY;
    exclusive_ = who;
    level = SQLITE_LOCK_EXCLUSIVE;
    return SQLITE_OK;
}

int Volume::unlock(const void* who, int& level, int want) {
    std::lock_guard g(mu_);
    if (level <= want) return SQLITE_OK;
    if (exclusive_ == who) exclusive_ = nullptr;
    if (pending_ == who) pending_ = nullptr;
    if (reserved_ == who) reserved_ = nullptr;
    if (want == SQLITE_LOCK_NONE && level >= SQLITE_LOCK_SHARED) --shared_;
    level = want;
    return SQLITE_OK;
}

bool Volume::reserved() {
    std::lock_guard g(mu_);
    return reserved_ || pending_ || exclusive_;
}

nvf_sqlite_info Volume::status() {
    std::lock_guard g(mu_);
    if (unsure_ && !fenced_) classify_failure_();
    nvf_sqlite_info s{};
    s.fenced = fenced_ || (w_ && w_->fenced());
    s.holder_known = holder_key_.has_value();
    s.device = b_.device;
    s.read_only = ro_;
    s.token = token_;
    s.holder_key = holder_key_.value_or(0);
    if (holder_key_) std::snprintf(s.holder, sizeof s.holder, "%s", format_key(*holder_key_).c_str());
    std::snprintf(s.message, sizeof s.message, "%s", s.fenced ? fence_msg_.c_str() : "ok");
    return s;
}

}  // namespace nvfence::sqlite
