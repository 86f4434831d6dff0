// SPDX-License-Identifier: MIT
// nvfence-load: a FencedWriter workload for the lab. Writes stamped blocks
// (host, key, epoch, sequence) with a bounded number in flight, logs every
// completion, and shows what happens when the device fences this host: the
// completions turn fenced, the writer latches, later submissions fail fast,
// and nothing hangs.
//
// Log lines (one per event, flushed as they happen):
//   C <lba> <seq> ok|fenced|error <detail>     a completion
//   L <seq> <error>                             a submission refused at once after the latch
//   E <text>                                    stopped early: too many I/O errors (--max-errors)
//   S <json>                                    the summary, last line
#include <unistd.h>

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

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"nvfence-load: stamped FencedWriter workload (lab tool)"};
    std::string dev, key_s;
    uint64_t start = 0, count = 1024;
    uint32_t qd = 32, timeout_ms = 30000, interval_us = 0, writer_id = static_cast<uint32_t>(::getpid());
    uint32_t max_errors = 64;
    bool passthrough = false, bad = false;
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
    app.add_flag("--passthrough", passthrough, "NVMe passthrough on /dev/ngXnY");
    app.add_flag("--bad-input", bad, "check that bad input fails before reaching the device");
    CLI11_PARSE(app, argc, argv);

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
    if (start + count > w.size_blocks()) {
        std::fprintf(stderr, "nvfence-load: LBAs %llu..%llu are past the end (%llu blocks)\n",
                     static_cast<unsigned long long>(start), static_cast<unsigned long long>(start + count),
                     static_cast<unsigned long long>(w.size_blocks()));
        return 2;
    }
    const uint32_t bs = w.block_bytes();
    // One buffer per slot: a buffer is reused only after its completion.
    std::vector<AlignedBuffer> slots;
    std::vector<uint32_t> free_slots;
    for (uint32_t i = 0; i < qd; ++i) {
        slots.emplace_back(bs, 4096);
        free_slots.push_back(i);
    }
    std::vector<Completion> comps(qd);
    char host[32] = {};
    ::gethostname(host, sizeof host - 1);
    uint64_t next = 0, n_ok = 0, n_fenced = 0, n_err = 0, latched_rejects = 0, ok_after_fenced = 0;
    bool seen_fenced = false;
    const auto t0 = std::chrono::steady_clock::now();
    int rc = 0;
    while (true) {
        // Queue as many as there are free slots, unless latched.
        bool queued_any = false;
        while (next < count && !free_slots.empty()) {
            const uint32_t slot = free_slots.back();
            auto span = slots[slot].span().first(bs);
            Stamp s;
            s.key = key;
            s.epoch = fields ? fields->epoch : 0;
            s.node = fields ? fields->node : 0;
            s.tag = fields ? fields->tag : 0;
            s.lba = start + next;
            s.seq = next;
            s.time_ns = now_ns();
            s.host = host;
            s.writer_id = writer_id;
            write_stamp(span, s);
            const uint64_t user = (next << 16) | slot;
            auto st = w.queue_write(start + next, span, user);
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
            std::printf("C %llu %llu %s %s\n", static_cast<unsigned long long>(start + seq),
                        static_cast<unsigned long long>(seq), status_word(c.status),
                        c.error ? c.error.message().c_str() : "-");
            if (c.status == IoStatus::ok) {
                ++n_ok;
                if (seen_fenced) ++ok_after_fenced;
            } else if (c.status == IoStatus::fenced) {
                ++n_fenced;
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
        if (interval_us && next < count) std::this_thread::sleep_for(std::chrono::microseconds(interval_us));
    }
    // After the latch, one more submission must fail at once, unsent.
    if (w.fenced()) {
        auto probe = w.queue_write(start, slots[0].span().first(bs), ~0ull);
        std::printf("L probe %s\n", probe ? "ACCEPTED" : probe.error().message().c_str());
        if (probe) rc = 1;
        else ++latched_rejects;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("S {\"ok\":%llu,\"fenced\":%llu,\"error\":%llu,\"latched_rejects\":%llu,\"ok_after_first_fenced\":%llu,"
                "\"latched\":%s,\"in_flight\":%u,\"seconds\":%.3f,\"mode\":\"%s\",\"qd\":%u}\n",
                static_cast<unsigned long long>(n_ok), static_cast<unsigned long long>(n_fenced),
                static_cast<unsigned long long>(n_err), static_cast<unsigned long long>(latched_rejects),
                static_cast<unsigned long long>(ok_after_fenced), w.fenced() ? "true" : "false", w.in_flight(), secs,
                writer_mode_name(w.mode()), qd);
    if (rc) return rc;
    return n_fenced ? 3 : (n_err ? 1 : 0);
}
