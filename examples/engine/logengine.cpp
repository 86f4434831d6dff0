// SPDX-License-Identifier: MIT
// nvfence-logengine: a small storage engine that embeds libnvfence. An
// append-only log on the raw shared namespace; the primary holds the
// reservation through nvfence::Fence and appends with nvfence::FencedWriter.
// The device, not this process, decides who may write: a primary that was
// frozen and preempted gets its appends refused (fenced) and stops.
//
// On-disk layout, from block --base-lba, one record per logical block:
//   block 0      superblock: "NVFLOGSB", log id (u64), block bytes, crc32c
//   block 1 + n  record n:   "NVFLOGRC", log id, seq n (u64), epoch (u32),
//                node (u8), payload length (u32), crc32c, payload
// A record is one block, so it is written whole or not at all; a torn or
// foreign block fails its crc. Recovery scans from record 0 and stops at
// the first block that is not a valid record of this log with seq == n and
// an epoch no lower than its predecessor's: records a fenced primary left
// behind a newer primary's are never read as part of the log.
//
// Commands:
//   format DEV --node N          take the reservation, write a superblock
//   serve DEV --node N [--takeover] [--appends K] [--ack-log FILE]
//                                takeover (preempt-and-abort the holder) if
//                                asked, recover, then append client records
//                                "<node>-<i>" with up to --depth in flight;
//                                every acknowledged append is logged as
//                                "A <seq> <epoch> <payload>" (flushed). On a
//                                fenced completion it stops appending and
//                                exits 3; other I/O errors exit 1.
//   check DEV [--count-only]     scan the log, print "R <seq> <epoch> <payload>"
//                                per record (unless --count-only) and a summary.
//   fill DEV --node N --records K  benchmark set-up: K records in large writes
// Time to useful (serve prints): takeover_ms, recovery_ms (scan), records
// recovered, recovery MiB/s, first_append_ms.
//
// The reservation commands and the writer come through one seam, device():
// the namespace here; the engine's own failover unit test
// (logengine_kit_test.cpp) builds this file with LOGENGINE_NO_MAIN and
// points the seam at the testing kit's simulated hosts.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "nvfence/epoch_store.hpp"
#include "nvfence/error.hpp"
#include "nvfence/fence.hpp"
#include "nvfence/key.hpp"
#include "nvfence/namespace.hpp"
#include "nvfence/reservation.hpp"
#include "nvfence/stamp.hpp"
#include "nvfence/writer.hpp"

using namespace nvfence;

namespace {

constexpr char kSbMagic[8] = {'N', 'V', 'F', 'L', 'O', 'G', 'S', 'B'};
constexpr char kRecMagic[8] = {'N', 'V', 'F', 'L', 'O', 'G', 'R', 'C'};
constexpr size_t kHeader = 48;  // magic 8, log id 8, seq 8, epoch 4, node 1, pad 3, len 4, crc 4, pad 8
constexpr uint32_t kScanBatchBlocks = 256;  // 128 KiB reads of 512-byte blocks
constexpr uint32_t kScanInflight = 16;      // scan reads in flight
constexpr int kExitFenced = 3;

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

template <class T>
void put(uint8_t* p, T v) { std::memcpy(p, &v, sizeof v); }
template <class T>
T get(const uint8_t* p) { T v; std::memcpy(&v, p, sizeof v); return v; }

struct Record {
    uint64_t seq = 0;
    uint32_t epoch = 0;
    uint8_t node = 0;
    std::string payload;
};

// The block's crc32c with its crc field (bytes 36..39) read as zero,
// computed in place.
uint32_t block_crc(std::span<const uint8_t> b) {
    static constexpr uint8_t kZero[4] = {0, 0, 0, 0};
    uint32_t c = crc32c(b.first(36));
    c = crc32c(kZero, c);
    return crc32c(b.subspan(40), c);
}

void encode_record(std::span<uint8_t> b, uint64_t log_id, const Record& r) {
    std::memset(b.data(), 0, b.size());
    std::memcpy(b.data(), kRecMagic, 8);
    put(b.data() + 8, log_id);
    put(b.data() + 16, r.seq);
    put(b.data() + 24, r.epoch);
    b[28] = r.node;
    const auto len = static_cast<uint32_t>(std::min(r.payload.size(), b.size() - kHeader));
    put(b.data() + 32, len);
    std::memcpy(b.data() + kHeader, r.payload.data(), len);
    put(b.data() + 36, block_crc(b));
}

std::optional<Record> decode_record(std::span<const uint8_t> b, uint64_t log_id) {
    if (std::memcmp(b.data(), kRecMagic, 8) != 0 || get<uint64_t>(b.data() + 8) != log_id) return std::nullopt;
    const auto len = get<uint32_t>(b.data() + 32);
    if (len > b.size() - kHeader || get<uint32_t>(b.data() + 36) != block_crc(b)) return std::nullopt;
    Record r;
    r.seq = get<uint64_t>(b.data() + 16);
    r.epoch = get<uint32_t>(b.data() + 24);
    r.node = b[28];
    r.payload.assign(reinterpret_cast<const char*>(b.data() + kHeader), len);
    return r;
}

int fail(const std::string& what, std::error_code ec) {
    std::fprintf(stderr, "logengine: %s: %s\n", what.c_str(), ec.message().c_str());
    std::fflush(stdout);
    return static_cast<int>(exit_code_for(ec));
}

struct Opts {
    std::string dev;
    unsigned node = 0;
    uint64_t base = 0;
    bool takeover = false;
    uint64_t appends = 0;  // 0: until fenced or the log is full
    unsigned depth = 8;
    std::string ack_log;
    std::string state_dir = "/var/lib/nvfence";
    uint32_t timeout_ms = 10000;
};

// The reservation, taken through the library: fresh epoch, preempt-and-abort
// of the holder, verified by a Report.
Result<uint32_t> ns_take(const Opts& o, bool takeover) {
    auto ns = Namespace::open(o.dev);
    if (!ns) return ns.error();
    if (Status s = (*ns)->require_reservations(); !s) return s.error();
    if (!(*ns)->info().host_id) return make_error_code(Errc::host_id_unknown);
    Reservations resv((*ns)->passthru(), (*ns)->info().nsid);
    EpochStore store(o.state_dir, (*ns)->info().volume);
    FenceOptions fo;
    fo.node = static_cast<uint8_t>(o.node);
    Fence fence(resv, *(*ns)->info().host_id, fo, &store);
    Result<Outcome> out = make_error_code(Errc::invalid_argument);
    if (takeover) {
        out = fence.takeover(std::nullopt);
    } else {
        auto j = fence.join(std::nullopt, false);
        if (!j) return j.error();
        out = fence.acquire();
    }
    if (!out) return out.error();
    auto k = decode_key(out->key);
    if (!k) return make_error_code(Errc::verify_failed);
    return k->epoch;
}

// The holder's key as the device reports it now (0: nobody holds).
Result<uint64_t> ns_holder_key(const Opts& o) {
    auto ns = Namespace::open(o.dev);
    if (!ns) return ns.error();
    Reservations resv((*ns)->passthru(), (*ns)->info().nsid);
    auto st = resv.report();
    if (!st) return st.error();
    const Registrant* h = st->holder();
    return h ? h->key : uint64_t{0};
}

// Where the engine's reservation commands and I/O go (see the top).
struct Device {
    std::function<Result<uint32_t>(const Opts&, bool takeover)> take = ns_take;
    std::function<Result<uint64_t>(const Opts&)> holder_key = ns_holder_key;
    std::function<Result<std::unique_ptr<FencedWriter>>(const Opts&, const WriterOptions&)> open_writer =
        [](const Opts& o, const WriterOptions& wo) { return FencedWriter::open(o.dev, wo); };
};
Device& device() {
    static Device d;
    return d;
}
Result<uint32_t> take(const Opts& o, bool takeover) { return device().take(o, takeover); }
Result<uint64_t> holder_key(const Opts& o) { return device().holder_key(o); }

uint64_t own_key(const Opts& o, uint32_t epoch) {
    auto k = make_key({0, static_cast<uint8_t>(o.node), epoch});
    return k ? *k : 0;
}

struct Log {
    std::unique_ptr<FencedWriter> w;
    uint64_t base = 0;
    uint64_t log_id = 0;
    uint32_t bs = 0;
};

Result<Log> open_log(const Opts& o, uint32_t epoch) {
    WriterOptions wo;
    wo.epoch = epoch;
    wo.queue_depth = std::max(o.depth, kScanInflight);
    wo.timeout_ms = o.timeout_ms;
    auto w = device().open_writer(o, wo);
    if (!w) return w.error();
    Log l{std::move(*w), o.base, 0, 0};
    l.bs = l.w->block_bytes();
    if (l.bs < 512 || l.base + 2 > l.w->size_blocks()) return make_error_code(Errc::out_of_bounds);
    return l;
}

Result<uint64_t> read_superblock(Log& l) {
    AlignedBuffer b(l.bs, 4096);
    Completion c = l.w->read(l.base, b.span().first(l.bs));
    if (c.status != IoStatus::ok) return c.error;
    if (std::memcmp(b.data(), kSbMagic, 8) != 0 ||
        get<uint32_t>(b.data() + 20) != crc32c(std::span<const uint8_t>(b.data(), 20)))
        return make_error_code(Errc::malformed_data);
    return get<uint64_t>(b.data() + 8);
}

// What a recovery scan found: the log's length (records 0..records-1 are
// valid), the epoch of its last record, and the read rate.
struct ScanResult {
    uint64_t records = 0;
    uint32_t last_epoch = 0;
    uint64_t bytes = 0;
    double mib_s = 0;
};

// Whether block b is record `want` of this log with an epoch no lower than
// min_epoch: the cheap header checks first, then the CRC in place.
bool record_continues(std::span<const uint8_t> b, uint64_t log_id, uint64_t want, uint32_t min_epoch,
                      uint32_t* epoch, const char** why) {
    if (std::memcmp(b.data(), kRecMagic, 8) != 0 || get<uint64_t>(b.data() + 8) != log_id) {
        *why = "not a record of this log";
        return false;
    }
    if (get<uint64_t>(b.data() + 16) != want) {
        *why = "sequence gap";
        return false;
    }
    *epoch = get<uint32_t>(b.data() + 24);
    if (*epoch < min_epoch) {
        *why = "older epoch";
        return false;
    }
    if (get<uint32_t>(b.data() + 32) > b.size() - kHeader || get<uint32_t>(b.data() + 36) != block_crc(b)) {
        *why = "bad length or crc (torn or foreign block)";
        return false;
    }
    return true;
}

// Recovery: sequential reads of kScanBatchBlocks blocks, kScanInflight of
// them in flight (bounded: kScanInflight x 128 KiB of buffers), checked in
// log order as they complete. While one batch is checked the others stay
// in flight, and a checked buffer is reused at once for the next batch. The
// check reads each block in place (no copy, no allocation); only `keep`
// (check) gets decoded records. Stops at the first block that does not
// continue the log.
Result<ScanResult> scan(Log& l, std::vector<Record>* keep) {
    const auto t0 = Clock::now();
    ScanResult res;
    const uint64_t first = l.base + 1, end = l.w->size_blocks();
    const uint32_t batch = std::max<uint32_t>(1, std::min<uint32_t>(kScanBatchBlocks, l.w->max_io_bytes() / l.bs));
    const uint32_t slots = std::min<uint32_t>(kScanInflight, l.w->queue_depth());
    std::vector<AlignedBuffer> bufs;
    for (uint32_t i = 0; i < slots; ++i) bufs.emplace_back(size_t{batch} * l.bs, 4096);
    std::vector<uint64_t> at(slots);
    std::vector<uint32_t> len(slots, 0);
    std::vector<bool> done(slots, false);
    std::deque<uint32_t> order;  // slots in submission (= log) order
    uint64_t next = first;
    auto issue = [&](uint32_t i) -> Status {
        if (next >= end) return Ok{};
        const auto n = static_cast<uint32_t>(std::min<uint64_t>(batch, end - next));
        at[i] = next;
        if (auto s = l.w->queue_read(next, bufs[i].span().first(size_t{n} * l.bs), i); !s) return s;
        next += n;
        order.push_back(i);
        return Ok{};
    };
    for (uint32_t i = 0; i < slots; ++i)
        if (auto s = issue(i); !s) return s.error();
    if (auto s = l.w->submit(); !s) return s.error();
    const bool debug = std::getenv("LOGENGINE_DEBUG") != nullptr;
    bool stop = false;
    Completion cs[kScanInflight];
    while (!order.empty() && !stop) {
        if (!done[order.front()]) {
            auto r = l.w->reap(cs, 1);
            if (!r) return r.error();
            for (size_t k = 0; k < *r; ++k) {
                if (cs[k].status != IoStatus::ok) return cs[k].error;
                done[cs[k].user_data] = true;
                len[cs[k].user_data] = cs[k].bytes;
            }
            continue;
        }
        const uint32_t i = order.front();
        order.pop_front();
        done[i] = false;
        res.bytes += len[i];
        for (uint32_t b = 0; b < len[i] / l.bs; ++b) {
            const auto blk = std::span<const uint8_t>(bufs[i].data() + size_t{b} * l.bs, l.bs);
            const uint64_t want = at[i] + b - first;
            uint32_t epoch = 0;
            const char* why = "";
            if (!record_continues(blk, l.log_id, want, res.last_epoch, &epoch, &why)) {
                stop = true;
                if (debug) {
                    std::fprintf(stderr, "scan: stop at lba %llu (record %llu): %s\n",
                                 static_cast<unsigned long long>(at[i] + b), static_cast<unsigned long long>(want), why);
                    for (int q = 0; q < 48; ++q) std::fprintf(stderr, "%02x%s", blk[q], q % 16 == 15 ? "\n" : " ");
                    std::fprintf(stderr, "log id %016llx crc %08x\n", static_cast<unsigned long long>(l.log_id),
                                 block_crc(blk));
                }
                break;
            }
            res.last_epoch = epoch;
            ++res.records;
            if (keep) {
                auto rec = decode_record(blk, l.log_id);
                if (!rec) return make_error_code(Errc::malformed_data);  // cannot happen: checked above
                keep->push_back(std::move(*rec));
            }
        }
        if (!stop) {
            // The slot goes back to the device before the next batch is checked.
            if (auto s = issue(i); !s) return s.error();
            if (auto s = l.w->submit(); !s) return s.error();
        }
    }
    // Drain what is still in flight before the buffers go away (bounded: each
    // reap waits at most the writer's timeout, and an error ends the scan).
    while (l.w->in_flight() > 0) {
        auto d = l.w->reap(cs, 1);
        if (!d) return d.error();
    }
    const double sec = std::max(ms_since(t0), 0.001) / 1000.0;
    res.mib_s = static_cast<double>(res.bytes) / (1024.0 * 1024.0) / sec;
    return res;
}

int cmd_format(const Opts& o) {
    auto epoch = take(o, true);
    if (!epoch) return fail("take the reservation", epoch.error());
    auto l = open_log(o, *epoch);
    if (!l) return fail("open " + o.dev, l.error());
    std::random_device rd;
    const uint64_t id = (uint64_t{rd()} << 32) | rd();
    AlignedBuffer sb(l->bs, 4096);
    std::memcpy(sb.data(), kSbMagic, 8);
    put(sb.data() + 8, id);
    put(sb.data() + 16, l->bs);
    put(sb.data() + 20, crc32c(std::span<const uint8_t>(sb.data(), 20)));
    // Record 0's block is cleared too, so an older log never continues this one.
    AlignedBuffer zero(l->bs, 4096);
    for (auto [lba, buf] : {std::pair{l->base + 1, &zero}, std::pair{l->base, &sb}}) {
        Completion c = l->w->write(lba, buf->span().first(l->bs));
        if (c.status != IoStatus::ok) return fail("format", c.error);
    }
    if (Completion c = l->w->flush(); c.status != IoStatus::ok) return fail("flush", c.error);
    std::printf("formatted log %016llx at lba %llu, block %u, epoch %u\n", static_cast<unsigned long long>(id),
                static_cast<unsigned long long>(o.base), l->bs, *epoch);
    return 0;
}

int cmd_serve(const Opts& o) {
    const auto t0 = Clock::now();
    auto epoch = take(o, o.takeover);
    if (!epoch) return fail(o.takeover ? "takeover" : "acquire", epoch.error());
    const double takeover_ms = ms_since(t0);
    auto l = open_log(o, *epoch);
    if (!l) return fail("open " + o.dev, l.error());
    auto id = read_superblock(*l);
    if (!id) return fail("superblock", id.error());
    l->log_id = *id;
    const auto t1 = Clock::now();
    auto scanned = scan(*l, nullptr);
    if (!scanned) return fail("recovery", scanned.error());
    const double recovery_ms = ms_since(t1);
    uint64_t seq = scanned->records;
    std::printf("serving: epoch %u node %u, recovered %llu records, takeover_ms %.1f recovery_ms %.1f "
                "recovery_mib_s %.1f scan_io_kib %u scan_inflight %u\n",
                *epoch, o.node, static_cast<unsigned long long>(seq), takeover_ms, recovery_ms, scanned->mib_s,
                kScanBatchBlocks * l->bs / 1024, kScanInflight);
    std::fflush(stdout);

    FILE* acks = o.ack_log.empty() ? stdout : std::fopen(o.ack_log.c_str(), "a");
    if (!acks) return fail("open " + o.ack_log, errno_error(errno));
    const uint64_t cap = l->w->size_blocks() - l->base - 1;
    std::vector<AlignedBuffer> bufs;
    for (unsigned i = 0; i < o.depth; ++i) bufs.emplace_back(l->bs, 4096);
    std::vector<Record> pending(o.depth);
    std::vector<bool> busy(o.depth, false);
    uint64_t issued = 0, acked = 0;
    bool first_logged = false, stopping = false;
    int stalled_waits = 0;
    bool failed = false;               // an append failed: nothing after it is acknowledged
    uint64_t next_ack = seq;            // the next sequence number to acknowledge
    std::map<uint64_t, Record> done;    // completed, waiting for the ones before them
    int rc = 0;
    const auto t2 = Clock::now();
    while (true) {
        // Queue new appends while there is room, the client wants more and
        // nothing has gone wrong.
        for (unsigned i = 0; !stopping && i < o.depth; ++i) {
            if (busy[i] || (o.appends && issued >= o.appends) || seq >= cap) continue;
            Record r{seq, *epoch, static_cast<uint8_t>(o.node),
                     std::to_string(o.node) + "-" + std::to_string(issued)};
            // AlignedBuffer rounds its size up to the alignment: one block only.
            const auto blk = bufs[i].span().first(l->bs);
            encode_record(blk, l->log_id, r);
            Status s = l->w->queue_write(l->base + 1 + seq, blk, i);
            if (!s) {
                std::printf("stopping: append %llu refused: %s\n", static_cast<unsigned long long>(seq),
                            s.error().message().c_str());
                rc = is_fenced(s.error()) ? kExitFenced : 1;
                stopping = true;
                break;
            }
            pending[i] = std::move(r);
            busy[i] = true;
            ++seq;
            ++issued;
        }
        if (l->w->in_flight() == 0) break;
        Completion cs[64];
        // Once stopping, nothing new is sent: only what is in flight is
        // collected (queued I/Os of a latched writer come back as fenced).
        auto r = stopping ? l->w->reap(cs, 1) : l->w->submit_and_reap(cs, 1);
        if (!r) {
            if (stopping) {
                if (++stalled_waits > 3) break;  // bounded: each wait is the writer's timeout
                continue;
            }
            std::printf("stopping: %s\n", r.error().message().c_str());
            rc = is_fenced(r.error()) ? kExitFenced : 1;
            stopping = true;
            continue;
        }
        for (size_t k = 0; k < *r; ++k) {
            const auto i = static_cast<unsigned>(cs[k].user_data);
            busy[i] = false;
            const Record& p = pending[i];
            if (cs[k].status == IoStatus::ok) {
                done.emplace(p.seq, p);
                // Acknowledged to the client only now, and in log order: a
                // record is durable only if every record before it is too
                // (recovery stops at the first hole).
                while (!done.empty() && done.begin()->first == next_ack && !failed) {
                    const Record& d = done.begin()->second;
                    std::fprintf(acks, "A %llu %u %s\n", static_cast<unsigned long long>(d.seq), d.epoch,
                                 d.payload.c_str());
                    std::fflush(acks);
                    done.erase(done.begin());
                    ++next_ack;
                    ++acked;
                    if (!first_logged) {
                        first_logged = true;
                        std::printf("first_append_ms %.1f\n", ms_since(t2));
                        std::fflush(stdout);
                    }
                }
            } else {
                failed = true;
                std::printf("%s: append %llu epoch %u: %s\n",
                            cs[k].status == IoStatus::fenced ? "fenced" : "error",
                            static_cast<unsigned long long>(p.seq), p.epoch, cs[k].error.message().c_str());
                if (!stopping) rc = cs[k].status == IoStatus::fenced ? kExitFenced : 1;
                if (cs[k].status == IoStatus::fenced) rc = kExitFenced;
                stopping = true;
            }
        }
    }
    if (acks != stdout) std::fclose(acks);
    if (rc == 1) {
        // An I/O error that is not a refusal (e.g. a write aborted by the
        // new holder's preempt-and-abort): ask the device who holds now.
        if (auto h = holder_key(o); h && *h != own_key(o, *epoch)) {
            std::printf("preempted: this host no longer holds the reservation (holder %s)\n",
                        *h ? format_key(*h).c_str() : "none");
            rc = kExitFenced;
        }
    }
    std::printf("stopped: %s, %llu appends acknowledged, %llu issued, log tail %llu\n",
                rc == kExitFenced ? "fenced (another primary took over)" : rc ? "I/O error" : "done",
                static_cast<unsigned long long>(acked), static_cast<unsigned long long>(issued),
                static_cast<unsigned long long>(seq));
    return rc;
}

// Benchmark set-up: appends --records records after the tail in large
// writes (many records per I/O), nothing acknowledged to anyone.
int cmd_fill(const Opts& o, uint64_t records) {
    auto epoch = take(o, true);
    if (!epoch) return fail("take the reservation", epoch.error());
    auto l = open_log(o, *epoch);
    if (!l) return fail("open " + o.dev, l.error());
    auto id = read_superblock(*l);
    if (!id) return fail("superblock", id.error());
    l->log_id = *id;
    auto scanned = scan(*l, nullptr);
    if (!scanned) return fail("recovery", scanned.error());
    uint64_t seq = scanned->records;
    const uint64_t end = std::min<uint64_t>(seq + records, l->w->size_blocks() - l->base - 1);
    const uint32_t per_io = std::min<uint32_t>(256, l->w->max_io_bytes() / l->bs);
    AlignedBuffer buf(size_t{per_io} * l->bs, 4096);
    const auto t0 = Clock::now();
    while (seq < end) {
        const auto n = static_cast<uint32_t>(std::min<uint64_t>(per_io, end - seq));
        for (uint32_t k = 0; k < n; ++k)
            encode_record(buf.span().subspan(size_t{k} * l->bs, l->bs), l->log_id,
                          Record{seq + k, *epoch, static_cast<uint8_t>(o.node), "fill-" + std::to_string(seq + k)});
        Completion c = l->w->write(l->base + 1 + seq, buf.span().first(size_t{n} * l->bs));
        if (c.status != IoStatus::ok) return fail("fill", c.error);
        seq += n;
    }
    std::printf("filled to %llu records (%.1f MiB) in %.0f ms, epoch %u\n", static_cast<unsigned long long>(seq),
                static_cast<double>(seq * l->bs) / (1024.0 * 1024.0), ms_since(t0), *epoch);
    return 0;
}

int cmd_check(const Opts& o, bool quiet) {
    auto l = open_log(o, 0);
    if (!l) return fail("open " + o.dev, l.error());
    auto id = read_superblock(*l);
    if (!id) return fail("superblock", id.error());
    l->log_id = *id;
    const auto t0 = Clock::now();
    std::vector<Record> recs;
    auto scanned = scan(*l, quiet ? nullptr : &recs);
    if (!scanned) return fail("scan", scanned.error());
    const double scan_ms = ms_since(t0);
    for (const Record& r : recs)
        std::printf("R %llu %u %s\n", static_cast<unsigned long long>(r.seq), r.epoch, r.payload.c_str());
    std::printf("records %llu scan_ms %.1f mib_s %.1f\n", static_cast<unsigned long long>(scanned->records), scan_ms,
                scanned->mib_s);
    return 0;
}

}  // namespace

#ifndef LOGENGINE_NO_MAIN
int main(int argc, char** argv) {
    CLI::App app{"nvfence-logengine: an append-only log on a shared NVMe namespace, fenced by the device"};
    app.require_subcommand(1);
    Opts o;
    auto dev = [&](CLI::App* s) {
        s->add_option("device", o.dev, "the shared namespace")->required();
        s->add_option("--base-lba", o.base, "first block of the log (superblock)");
    };
    auto* fmt = app.add_subcommand("format", "take the reservation and write an empty log");
    dev(fmt);
    fmt->add_option("--node", o.node, "node id 1..255")->required()->check(CLI::Range(1, 255));
    fmt->add_option("--state-dir", o.state_dir, "where the highest epoch is persisted");
    auto* srv = app.add_subcommand("serve", "become primary, recover, append client records until fenced");
    dev(srv);
    srv->add_option("--node", o.node, "node id 1..255")->required()->check(CLI::Range(1, 255));
    srv->add_flag("--takeover", o.takeover, "preempt-and-abort the current holder (failover)");
    srv->add_option("--appends", o.appends, "client appends to make (0: until fenced or full)");
    srv->add_option("--depth", o.depth, "appends in flight, 1..64")->check(CLI::Range(1, 64));
    srv->add_option("--ack-log", o.ack_log, "file for acknowledged appends (default stdout)");
    srv->add_option("--state-dir", o.state_dir, "where the highest epoch is persisted");
    auto* chk = app.add_subcommand("check", "scan the log and print every record");
    dev(chk);
    bool quiet = false;
    chk->add_flag("--count-only", quiet, "print only the summary (a pure scan, for benchmarks)");
    uint64_t records = 0;
    auto* fill = app.add_subcommand("fill", "benchmark set-up: append RECORDS records in large writes");
    dev(fill);
    fill->add_option("--node", o.node, "node id 1..255")->required()->check(CLI::Range(1, 255));
    fill->add_option("--records", records, "how many records")->required();
    fill->add_option("--state-dir", o.state_dir, "where the highest epoch is persisted");
    CLI11_PARSE(app, argc, argv);
    if (fill->parsed()) return cmd_fill(o, records);
    if (fmt->parsed()) return cmd_format(o);
    if (srv->parsed()) return cmd_serve(o);
    return cmd_check(o, quiet);
}
#endif  // LOGENGINE_NO_MAIN
