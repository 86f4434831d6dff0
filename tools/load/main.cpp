// SPDX-License-Identifier: MIT
// nvfence-load: a FencedWriter workload for the lab. Writes stamped blocks
// (host, key, epoch, sequence) with a bounded number in flight, logs every
// completion, and shows what happens when the device fences this host: the
// completions turn fenced, the writer latches, later submissions fail fast,
// and nothing hangs.
//
// Log lines (one per event, flushed as they happen):
//   C <lba> <seq> ok|fenced|error <detail>     a completion
//   F <next>                                    the first fenced completion: every seq the
//                                               writer had queued is below <next>
//   Q <ms> <ok_after_fenced>                    settled: every I/O handed to the kernel
//                                               before the latch completed, <ms> after F
//   L <seq> <error>                             a submission refused at once after the latch
//   E <text>                                    stopped early: too many I/O errors (--max-errors)
//   S <json>                                    the summary, last line
//
// --plain MODE (pwrite | pwrite-buffered | mmap) does not use FencedWriter at
// all: it is "another process" writing --count blocks of 512-byte text
// records "NVFENCE-PLAIN <mode> <tag>" from --start (512-byte units) of a
// block device or a file, as any program would, then syncs, and prints
//   P <mode> write=<ok|errno text> sync=<ok|errno text>
// exit 0 when both succeeded, 3 when either failed with EBADE (the
// device's Reservation Conflict), 1 for any other failure.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "nvfence/error.hpp"
#include "nvfence/key.hpp"
#include "nvfence/stamp.hpp"
#include "nvfence/writer.hpp"

using namespace nvfence;

namespace {

const char* status_word(IoStatus s) {
    switch (s) {
    case IoStatus::ok: return "ok";
    case IoStatus::fenced: return "fenced";
    case IoStatus::io_error: return "error";
    }
    return "?";
}

uint64_t now_ns() {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
}

// Bad input on the real device: each must fail before anything is sent.
int bad_input(FencedWriter& w) {
    const uint32_t bs = w.block_bytes();
    AlignedBuffer buf(size_t{bs} * 2, 4096);
    int failures = 0;
    auto check = [&](const char* what, Status s, Errc want) {
        const bool ok = !s && s.error() == want && w.in_flight() == 0;
        std::printf("B %s %s %s\n", what, ok ? "ok" : "WRONG", s ? "accepted" : s.error().message().c_str());
        if (!ok) ++failures;
    };
    check("misaligned-buffer", w.queue_write(0, std::span<const uint8_t>(buf.data() + 1, bs), 1), Errc::misaligned);
    check("misaligned-length", w.queue_write(0, std::span<const uint8_t>(buf.data(), bs - 1), 2), Errc::misaligned);
    check("zero-length", w.queue_write(0, std::span<const uint8_t>(buf.data(), 0), 3), Errc::invalid_argument);
    check("past-end", w.queue_write(w.size_blocks(), std::span<const uint8_t>(buf.data(), bs), 4), Errc::out_of_bounds);
    check("straddles-end", w.queue_write(w.size_blocks() - 1, std::span<const uint8_t>(buf.data(), 2 * size_t{bs}), 5),
          Errc::out_of_bounds);
    // Queue overflow: fill the queue without submitting, then one more.
    std::vector<AlignedBuffer> bufs;
    uint32_t queued = 0;
    for (;; ++queued) {
        bufs.emplace_back(bs, 4096);
        auto s = w.queue_read(queued, bufs.back().span().first(bs), 100 + queued);
        if (!s) {
            const bool ok = s.error() == Errc::queue_full && w.in_flight() == queued;
            std::printf("B queue-overflow %s after %u queued: %s\n", ok ? "ok" : "WRONG", queued,
                        s.error().message().c_str());
            if (!ok) ++failures;
            break;
        }
        if (queued > 4096) {
            std::printf("B queue-overflow WRONG: no bound\n");
            ++failures;
            break;
        }
    }
    // Drain what was queued so the writer ends clean.
    if (auto n = w.submit(); !n) ++failures;
    std::vector<Completion> comps(queued + 1);
    uint32_t got = 0;
    while (got < queued) {
        auto r = w.reap(comps, 1);
        if (!r) { ++failures; break; }
        got += static_cast<uint32_t>(*r);
    }
    std::printf("S {\"bad_input_failures\":%d}\n", failures);
    return failures ? 1 : 0;
}

// A program that knows nothing of nvfence: plain system calls.
int plain_write(const std::string& path, const std::string& mode, uint64_t start, uint64_t count,
                const std::string& tag) {
    constexpr size_t kRec = 512;
    if (mode != "pwrite" && mode != "pwrite-buffered" && mode != "mmap") {
        std::fprintf(stderr, "nvfence-load: --plain: unknown mode '%s' (pwrite, pwrite-buffered, mmap)\n",
                     mode.c_str());
        return 2;
    }
    const size_t bytes = count * kRec;
    const off_t off = static_cast<off_t>(start * kRec);
    AlignedBuffer buf(bytes, 4096);
    for (uint64_t i = 0; i < count; ++i) {
        char* rec = reinterpret_cast<char*>(buf.data() + i * kRec);
        std::snprintf(rec, kRec, "NVFENCE-PLAIN %s %s %llu\n", mode.c_str(), tag.c_str(),
                      static_cast<unsigned long long>(start + i));
    }
    int werr = 0, serr = 0;
    const int flags = O_RDWR | O_CLOEXEC | (mode == "pwrite" ? O_DIRECT : 0);
    const int fd = ::open(path.c_str(), flags);
    if (fd < 0) {
        std::fprintf(stderr, "nvfence-load: %s: %s\n", path.c_str(), std::strerror(errno));
        return 2;
    }
    if (mode == "mmap") {
        // Map whole pages around the records; the file must already be that long.
        const off_t pg = off / 4096 * 4096;
        const size_t len = static_cast<size_t>(off - pg) + bytes;
        void* m = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, pg);
        if (m == MAP_FAILED) {
            werr = errno;
        } else {
            std::memcpy(static_cast<uint8_t*>(m) + (off - pg), buf.data(), bytes);
            if (::msync(m, len, MS_SYNC) != 0) serr = errno;
            ::munmap(m, len);
        }
        if (!serr && ::fsync(fd) != 0) serr = errno;
    } else {
        const ssize_t n = ::pwrite(fd, buf.data(), bytes, off);
        if (n < 0) werr = errno;
        else if (static_cast<size_t>(n) != bytes) werr = EIO;
        if (::fsync(fd) != 0) serr = errno;
    }
    ::close(fd);
    std::printf("P %s write=%s sync=%s\n", mode.c_str(), werr ? std::strerror(werr) : "ok",
                serr ? std::strerror(serr) : "ok");
    if (werr == EBADE || serr == EBADE) return 3;
    return werr || serr ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"nvfence-load: stamped FencedWriter workload (lab tool)"};
    std::string dev, key_s;
    uint64_t start = 0, count = 1024;
    uint32_t qd = 32, timeout_ms = 30000, interval_us = 0, writer_id = static_cast<uint32_t>(::getpid());
    uint32_t max_errors = 64, blocks_per_io = 1;
    bool passthrough = false, bad = false;
    std::string plain, tag = "x";
    app.add_option("device", dev, "namespace block device or /dev/ngXnY")->required();
    app.add_option("--start", start, "first LBA");
    app.add_option("--count", count, "blocks to write, one I/O each")->check(CLI::Range(1ull, 1ull << 32));
    app.add_option("--qd", qd, "I/Os in flight (1-1024)")->check(CLI::Range(1u, 1024u));
    app.add_option("--key", key_s, "reservation key to stamp (nf:T:N:E or 0x...)");
    app.add_option("--writer-id", writer_id, "stamped writer id");
    app.add_option("--timeout-ms", timeout_ms, "bound on every wait")->check(CLI::Range(1u, 600000u));
    app.add_option("--interval-us", interval_us, "pause between submissions (0: none)")->check(CLI::Range(0u, 1000000u));
    app.add_option("--max-errors", max_errors, "stop submitting after this many I/O errors (a device gone)")
        ->check(CLI::Range(1u, 1000000u));
    app.add_option("--blocks-per-io", blocks_per_io,
                   "blocks per write (each stamped with its own LBA and the write's seq); I/O i covers LBAs "
                   "start + i*N .. start + i*N + N-1")
        ->check(CLI::Range(1u, 65536u));
    app.add_flag("--passthrough", passthrough, "NVMe passthrough on /dev/ngXnY");
    app.add_option("--plain", plain, "write as a plain program would: pwrite (O_DIRECT), pwrite-buffered, mmap");
    app.add_option("--tag", tag, "--plain: text put in every record");
    app.add_flag("--bad-input", bad, "check that bad input fails before reaching the device");
    CLI11_PARSE(app, argc, argv);

    if (!plain.empty()) return plain_write(dev, plain, start, count, tag);
    uint64_t key = 0;
    if (!key_s.empty()) {
        auto k = parse_key(key_s);
        if (!k) {
            std::fprintf(stderr, "nvfence-load: --key: %s\n", k.error().message().c_str());
            return 2;
        }
        key = *k;
    }
    const auto fields = decode_key(key);
    WriterOptions wo;
    wo.mode = passthrough ? WriterMode::passthrough : WriterMode::block;
    wo.queue_depth = qd;
    wo.timeout_ms = timeout_ms;
    wo.epoch = fields ? fields->epoch : 0;
    auto opened = FencedWriter::open(dev, wo);
    if (!opened) {
        std::fprintf(stderr, "nvfence-load: %s: %s\n", dev.c_str(), opened.error().message().c_str());
        return exit_code_for(opened.error()) == ExitCode::ok ? 1 : static_cast<int>(exit_code_for(opened.error()));
    }
    auto& w = **opened;
    setvbuf(stdout, nullptr, _IOLBF, 0);
    if (bad) return bad_input(w);
    if (uint64_t{blocks_per_io} * w.block_bytes() > w.max_io_bytes()) {
        std::fprintf(stderr, "nvfence-load: --blocks-per-io %u is above this writer's max_io_bytes %u\n", blocks_per_io,
                     w.max_io_bytes());
        return 2;
    }
    const uint64_t span_blocks = count * blocks_per_io;
    if (start + span_blocks > w.size_blocks()) {
        std::fprintf(stderr, "nvfence-load: LBAs %llu..%llu are past the end (%llu blocks)\n",
                     static_cast<unsigned long long>(start), static_cast<unsigned long long>(start + span_blocks),
                     static_cast<unsigned long long>(w.size_blocks()));
        return 2;
    }
    const uint32_t bs = w.block_bytes();
    // One buffer per slot: a buffer is reused only after its completion.
    std::vector<AlignedBuffer> slots;
    std::vector<uint32_t> free_slots;
    for (uint32_t i = 0; i < qd; ++i) {
        slots.emplace_back(size_t{bs} * blocks_per_io, 4096);
        free_slots.push_back(i);
    }
    std::vector<Completion> comps(qd);
    char host[32] = {};
    ::gethostname(host, sizeof host - 1);
    uint64_t next = 0, n_ok = 0, n_fenced = 0, n_err = 0, latched_rejects = 0, ok_after_fenced = 0;
    bool seen_fenced = false, settled_seen = false;
    double settled_ms = -1;
    auto t_fenced = std::chrono::steady_clock::now();
    const auto t0 = std::chrono::steady_clock::now();
    int rc = 0;
    while (true) {
        // Queue as many as there are free slots, unless latched.
        bool queued_any = false;
        while (next < count && !free_slots.empty()) {
            const uint32_t slot = free_slots.back();
            // AlignedBuffer rounds its size up to 4096: write exactly the blocks of this I/O.
            auto span = slots[slot].span().first(size_t{bs} * blocks_per_io);
            const uint64_t lba0 = start + next * blocks_per_io;
            Stamp s;
            s.key = key;
            s.epoch = fields ? fields->epoch : 0;
            s.node = fields ? fields->node : 0;
            s.tag = fields ? fields->tag : 0;
            s.seq = next;
            s.time_ns = now_ns();
            s.host = host;
            s.writer_id = writer_id;
            for (uint32_t j = 0; j < blocks_per_io; ++j) {
                s.lba = lba0 + j;
                write_stamp(span.subspan(size_t{j} * bs, bs), s);
            }
            const uint64_t user = (next << 16) | slot;
            auto st = w.queue_write(lba0, span, user);
            if (!st) {
                if (st.error() == Errc::fenced) {
                    std::printf("L %llu %s\n", static_cast<unsigned long long>(next), st.error().message().c_str());
                    ++latched_rejects;
                    next = count;  // the writer is latched: stop producing
                    break;
                }
                std::fprintf(stderr, "nvfence-load: queue: %s\n", st.error().message().c_str());
                return 1;
            }
            free_slots.pop_back();
            ++next;
            queued_any = true;
            if (interval_us) break;  // paced: one per round
        }
        if (queued_any) {
            if (auto n = w.submit(); !n) {
                std::fprintf(stderr, "nvfence-load: submit: %s\n", n.error().message().c_str());
                return 1;
            }
        }
        if (w.in_flight() == 0 && next >= count) break;
        auto r = w.reap(comps, interval_us && next < count ? 0 : 1);
        if (!r) {
            std::fprintf(stderr, "nvfence-load: reap: %s (%u in flight)\n", r.error().message().c_str(), w.in_flight());
            rc = 1;
            break;
        }
        for (size_t i = 0; i < *r; ++i) {
            const auto& c = comps[i];
            const uint64_t seq = c.user_data >> 16;
            free_slots.push_back(static_cast<uint32_t>(c.user_data & 0xffff));
            std::printf("C %llu %llu %s %s\n", static_cast<unsigned long long>(start + seq * blocks_per_io),
                        static_cast<unsigned long long>(seq), status_word(c.status),
                        c.error ? c.error.message().c_str() : "-");
            if (c.status == IoStatus::ok) {
                ++n_ok;
                if (seen_fenced) ++ok_after_fenced;
            } else if (c.status == IoStatus::fenced) {
                ++n_fenced;
                if (!seen_fenced) {
                    std::printf("F %llu\n", static_cast<unsigned long long>(next));
                    t_fenced = std::chrono::steady_clock::now();
                }
                seen_fenced = true;
            } else {
                ++n_err;
                if (n_err == max_errors && next < count) {
                    std::printf("E stopping after %llu I/O errors (last: %s)\n", static_cast<unsigned long long>(n_err),
                                c.error ? c.error.message().c_str() : "-");
                    next = count;  // bounded: a device that is gone fails every write
                }
            }
        }
        if (seen_fenced && !settled_seen && w.settled()) {
            settled_seen = true;
            settled_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_fenced).count();
            std::printf("Q %.1f %llu\n", settled_ms, static_cast<unsigned long long>(ok_after_fenced));
        }
        if (interval_us && next < count) std::this_thread::sleep_for(std::chrono::microseconds(interval_us));
    }
    // After the latch, one more submission must fail at once, unsent.
    if (w.fenced()) {
        auto probe = w.queue_write(start, slots[0].span().first(bs), ~0ull);  // one block is enough
        std::printf("L probe %s\n", probe ? "ACCEPTED" : probe.error().message().c_str());
        if (probe) rc = 1;
        else ++latched_rejects;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("S {\"ok\":%llu,\"fenced\":%llu,\"error\":%llu,\"latched_rejects\":%llu,\"ok_after_first_fenced\":%llu,"
                "\"latched\":%s,\"settled\":%s,\"settled_ms\":%.1f,\"in_flight\":%u,\"seconds\":%.3f,\"mode\":\"%s\",\"qd\":%u,\"max_io_bytes\":%u,\"blocks_per_io\":%u}\n",
                static_cast<unsigned long long>(n_ok), static_cast<unsigned long long>(n_fenced),
                static_cast<unsigned long long>(n_err), static_cast<unsigned long long>(latched_rejects),
                static_cast<unsigned long long>(ok_after_fenced), w.fenced() ? "true" : "false", w.settled() ? "true" : "false", settled_ms, w.in_flight(), secs,
                writer_mode_name(w.mode()), qd, w.max_io_bytes(), blocks_per_io);
    if (rc) return rc;
    return n_fenced ? 3 : (n_err ? 1 : 0);
}
