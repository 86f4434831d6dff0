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
#include <cmath>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "nvfence/error.hpp"
#include "nvfence/key.hpp"
#include "nvfence/stamp.hpp"
#include "nvfence/writer.hpp"

using namespace nvfence;

namespace {

// The summary line the lab reads: "S " and one JSON object.
void print_summary_line(const nlohmann::ordered_json& j) { std::printf("S %s\n", j.dump().c_str()); }

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
    print_summary_line(nlohmann::ordered_json{{"bad_input_failures", failures}});
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

// The command line, as parsed.
struct LoadArgs {
    std::string dev, key_s;
    uint64_t start = 0, count = 1024;
    uint32_t qd = 32, timeout_ms = 30000, interval_us = 0, writer_id = static_cast<uint32_t>(::getpid());
    uint32_t max_errors = 64, blocks_per_io = 1;
    bool passthrough = false, bad = false;
    std::string plain, tag = "x";
};

void add_options(CLI::App& app, LoadArgs& a) {
    app.add_option("device", a.dev, "namespace block device or /dev/ngXnY")->required();
    app.add_option("--start", a.start, "first LBA");
    app.add_option("--count", a.count, "blocks to write, one I/O each")->check(CLI::Range(1ull, 1ull << 32));
    app.add_option("--qd", a.qd, "I/Os in flight (1-1024)")->check(CLI::Range(1u, 1024u));
    app.add_option("--key", a.key_s, "reservation key to stamp (nf:T:N:E or 0x...)");
    app.add_option("--writer-id", a.writer_id, "stamped writer id");
    app.add_option("--timeout-ms", a.timeout_ms, "bound on every wait")->check(CLI::Range(1u, 600000u));
    app.add_option("--interval-us", a.interval_us, "pause between submissions (0: none)")
        ->check(CLI::Range(0u, 1000000u));
    app.add_option("--max-errors", a.max_errors, "stop submitting after this many I/O errors (a device gone)")
        ->check(CLI::Range(1u, 1000000u));
    app.add_option("--blocks-per-io", a.blocks_per_io,
                   "blocks per write (each stamped with its own LBA and the write's seq); I/O i covers LBAs "
                   "start + i*N .. start + i*N + N-1")
        ->check(CLI::Range(1u, 65536u));
    app.add_flag("--passthrough", a.passthrough, "NVMe passthrough on /dev/ngXnY");
    app.add_option("--plain", a.plain, "write as a plain program would: pwrite (O_DIRECT), pwrite-buffered, mmap");
    app.add_option("--tag", a.tag, "--plain: text put in every record");
    app.add_flag("--bad-input", a.bad, "check that bad input fails before reaching the device");
}

// --key as a number (0 when not given): 0, or the exit code 2 with the
// reason on stderr.
int parse_key_arg(const std::string& key_s, uint64_t& key) {
    key = 0;
    if (key_s.empty()) return 0;
    auto k = parse_key(key_s);
    if (!k) {
        std::fprintf(stderr, "nvfence-load: --key: %s\n", k.error().message().c_str());
        return 2;
    }
    key = *k;
    return 0;
}

// The writes must fit the writer: 0, or the exit code 2 with the reason on
// stderr.
int check_span(const LoadArgs& a, const FencedWriter& w) {
    if (uint64_t{a.blocks_per_io} * w.block_bytes() > w.max_io_bytes()) {
        std::fprintf(stderr, "nvfence-load: --blocks-per-io %u is above this writer's max_io_bytes %u\n",
                     a.blocks_per_io, w.max_io_bytes());
        return 2;
    }
    const uint64_t span_blocks = a.count * a.blocks_per_io;
    if (a.start + span_blocks > w.size_blocks()) {
        std::fprintf(stderr, "nvfence-load: LBAs %llu..%llu are past the end (%llu blocks)\n",
                     static_cast<unsigned long long>(a.start), static_cast<unsigned long long>(a.start + span_blocks),
                     static_cast<unsigned long long>(w.size_blocks()));
        return 2;
    }
    return 0;
}

// The stamped workload: --count writes, --qd in flight, one log line per
// event (see the top of this file), and the summary.
class StampedLoad {
public:
    StampedLoad(const LoadArgs& a, FencedWriter& w, uint64_t key, const std::optional<KeyFields>& fields)
        : a_(a), w_(w), key_(key), fields_(fields), bs_(w.block_bytes()), comps_(a.qd) {
        // One buffer per slot: a buffer is reused only after its completion.
        for (uint32_t i = 0; i < a.qd; ++i) {
            slots_.emplace_back(size_t{bs_} * a.blocks_per_io, 4096);
            free_slots_.push_back(i);
        }
        ::gethostname(host_, sizeof host_ - 1);
    }

    // Runs to the end; returns the exit code.
    int run() {
        t0_ = std::chrono::steady_clock::now();
        int rc = 0;
        while (true) {
            const Fill filled = fill_slots();
            if (filled == Fill::failed) return 1;
            if (filled == Fill::queued) {
                if (auto n = w_.submit(); !n) {
                    std::fprintf(stderr, "nvfence-load: submit: %s\n", n.error().message().c_str());
                    return 1;
                }
            }
            if (w_.in_flight() == 0 && next_ >= a_.count) break;
            auto r = w_.reap(comps_, a_.interval_us && next_ < a_.count ? 0 : 1);
            if (!r) {
                std::fprintf(stderr, "nvfence-load: reap: %s (%u in flight)\n", r.error().message().c_str(),
                             w_.in_flight());
                rc = 1;
                break;
            }
            for (size_t i = 0; i < *r; ++i) on_completion(comps_[i]);
            note_settled();
            if (a_.interval_us && next_ < a_.count)
                std::this_thread::sleep_for(std::chrono::microseconds(a_.interval_us));
        }
        probe_latch(rc);
        print_summary();
        if (rc) return rc;
        return n_fenced_ ? 3 : (n_err_ ? 1 : 0);
    }

private:
    enum class Fill { none, queued, failed };

    // Queues as many writes as there are free slots, unless latched (one a
    // round when paced). `failed`: a queue error other than the latch,
    // already reported.
    Fill fill_slots() {
        Fill filled = Fill::none;
        while (next_ < a_.count && !free_slots_.empty()) {
            const uint32_t slot = free_slots_.back();
            // AlignedBuffer rounds its size up to 4096: write exactly the blocks of this I/O.
            auto span = slots_[slot].span().first(size_t{bs_} * a_.blocks_per_io);
            const uint64_t lba0 = a_.start + next_ * a_.blocks_per_io;
            stamp_blocks(span, lba0);
            const uint64_t user = (next_ << 16) | slot;
            auto st = w_.queue_write(lba0, span, user);
            if (!st) {
                if (st.error() == Errc::fenced) {
                    std::printf("L %llu %s\n", static_cast<unsigned long long>(next_), st.error().message().c_str());
                    ++latched_rejects_;
                    next_ = a_.count;  // the writer is latched: stop producing
                    break;
                }
                std::fprintf(stderr, "nvfence-load: queue: %s\n", st.error().message().c_str());
                return Fill::failed;
            }
            free_slots_.pop_back();
            ++next_;
            filled = Fill::queued;
            if (a_.interval_us) break;  // paced: one per round
        }
        return filled;
    }

    // Stamps every block of the write of seq next_ at lba0.
    void stamp_blocks(std::span<uint8_t> span, uint64_t lba0) {
        Stamp s;
        s.key = key_;
        s.epoch = fields_ ? fields_->epoch : 0;
        s.node = fields_ ? fields_->node : 0;
        s.tag = fields_ ? fields_->tag : 0;
        s.seq = next_;
        s.time_ns = now_ns();
        s.host = host_;
        s.writer_id = a_.writer_id;
        for (uint32_t j = 0; j < a_.blocks_per_io; ++j) {
            s.lba = lba0 + j;
            write_stamp(span.subspan(size_t{j} * bs_, bs_), s);
        }
    }

    void on_completion(const Completion& c) {
        const uint64_t seq = c.user_data >> 16;
        free_slots_.push_back(static_cast<uint32_t>(c.user_data & 0xffff));
        std::printf("C %llu %llu %s %s\n", static_cast<unsigned long long>(a_.start + seq * a_.blocks_per_io),
                    static_cast<unsigned long long>(seq), status_word(c.status),
                    c.error ? c.error.message().c_str() : "-");
        if (c.status == IoStatus::ok) {
            ++n_ok_;
            if (seen_fenced_) ++ok_after_fenced_;
        } else if (c.status == IoStatus::fenced) {
            ++n_fenced_;
            if (!seen_fenced_) {
                std::printf("F %llu\n", static_cast<unsigned long long>(next_));
                t_fenced_ = std::chrono::steady_clock::now();
            }
            seen_fenced_ = true;
        } else {
            ++n_err_;
            if (n_err_ == a_.max_errors && next_ < a_.count) {
                std::printf("E stopping after %llu I/O errors (last: %s)\n", static_cast<unsigned long long>(n_err_),
                            c.error ? c.error.message().c_str() : "-");
                next_ = a_.count;  // bounded: a device that is gone fails every write
            }
        }
    }

    // The Q line, once: after the first fenced completion, when the writer settles.
    void note_settled() {
        if (seen_fenced_ && !settled_seen_ && w_.settled()) {
            settled_seen_ = true;
            settled_ms_ =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_fenced_).count();
            std::printf("Q %.1f %llu\n", settled_ms_, static_cast<unsigned long long>(ok_after_fenced_));
        }
    }

    // After the latch, one more submission must fail at once, unsent.
    void probe_latch(int& rc) {
        if (!w_.fenced()) return;
        auto probe = w_.queue_write(a_.start, slots_[0].span().first(bs_), ~0ull);  // one block is enough
        std::printf("L probe %s\n", probe ? "ACCEPTED" : probe.error().message().c_str());
        if (probe) rc = 1;
        else ++latched_rejects_;
    }

    void print_summary() const {
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
        // Rounded as the lab's readers have always seen them.
        const double settled_ms = std::round(settled_ms_ * 10) / 10, seconds = std::round(secs * 1000) / 1000;
        print_summary_line(nlohmann::ordered_json{
            {"ok", n_ok_}, {"fenced", n_fenced_}, {"error", n_err_}, {"latched_rejects", latched_rejects_},
            {"ok_after_first_fenced", ok_after_fenced_}, {"latched", w_.fenced()}, {"settled", w_.settled()},
            {"settled_ms", settled_ms}, {"in_flight", w_.in_flight()}, {"seconds", seconds},
            {"mode", writer_mode_name(w_.mode())}, {"qd", a_.qd}, {"max_io_bytes", w_.max_io_bytes()},
            {"blocks_per_io", a_.blocks_per_io}});
    }

    const LoadArgs& a_;
    FencedWriter& w_;
    const uint64_t key_;
    const std::optional<KeyFields> fields_;
    const uint32_t bs_;
    std::vector<AlignedBuffer> slots_;
    std::vector<uint32_t> free_slots_;
    std::vector<Completion> comps_;
    char host_[32] = {};
    uint64_t next_ = 0, n_ok_ = 0, n_fenced_ = 0, n_err_ = 0, latched_rejects_ = 0, ok_after_fenced_ = 0;
    bool seen_fenced_ = false, settled_seen_ = false;
    double settled_ms_ = -1;
    std::chrono::steady_clock::time_point t_fenced_ = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point t0_;
};

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"nvfence-load: stamped FencedWriter workload (lab tool)"};
    LoadArgs a;
    add_options(app, a);
    CLI11_PARSE(app, argc, argv);

    if (!a.plain.empty()) return plain_write(a.dev, a.plain, a.start, a.count, a.tag);
    uint64_t key = 0;
    if (const int rc = parse_key_arg(a.key_s, key); rc) return rc;
    const auto fields = decode_key(key);
    WriterOptions wo;
    wo.mode = a.passthrough ? WriterMode::passthrough : WriterMode::block;
    wo.queue_depth = a.qd;
    wo.timeout_ms = a.timeout_ms;
    wo.epoch = fields ? fields->epoch : 0;
    auto opened = FencedWriter::open(a.dev, wo);
    if (!opened) {
        std::fprintf(stderr, "nvfence-load: %s: %s\n", a.dev.c_str(), opened.error().message().c_str());
        return exit_code_for(opened.error()) == ExitCode::ok ? 1 : static_cast<int>(exit_code_for(opened.error()));
    }
    auto& w = **opened;
    setvbuf(stdout, nullptr, _IOLBF, 0);
    if (a.bad) return bad_input(w);
    if (const int rc = check_span(a, w); rc) return rc;
    StampedLoad load(a, w, key, fields);
    return load.run();
}
