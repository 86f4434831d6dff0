// SPDX-License-Identifier: MIT
// nvfence-bench: random O_DIRECT writes through FencedWriter against fio on
// the same target with the same parameters, alternating the two, and a
// table of medians and ratios. See docs/PERFORMANCE.md.
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nvfence/error.hpp"
#include "nvfence/namespace.hpp"
#include "nvfence/writer.hpp"

extern char** environ;

namespace {

using namespace nvfence;

int64_t now_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

[[noreturn]] void die(const std::string& msg) {
    std::fprintf(stderr, "nvfence-bench: %s\n", msg.c_str());
    std::exit(1);
}

// Log-linear latency histogram: exact below 1024 ns, then 512 sub-buckets
// per power of two (0.2 % resolution). Fixed size, so recording a sample
// never allocates.
class Histogram {
public:
    static constexpr int kSub = 9;
    static constexpr size_t kBuckets = (size_t{1} << (kSub + 1)) + size_t{54} * (size_t{1} << kSub);

    Histogram() : counts_(kBuckets, 0) {}

    void add(uint64_t ns, uint64_t n = 1) {
        counts_[index(ns)] += n;
        total_ += n;
    }
    void merge(const Histogram& o) {
        for (size_t i = 0; i < kBuckets; ++i) counts_[i] += o.counts_[i];
        total_ += o.total_;
    }
    uint64_t total() const { return total_; }

    // Value (ns) at quantile q in [0, 1]: the midpoint of the bucket that
    // holds the ceil(q * total)-th sample.
    double quantile(double q) const {
        if (total_ == 0) return 0;
        auto rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(total_)));
        rank = std::clamp<uint64_t>(rank, 1, total_);
        uint64_t seen = 0;
        for (size_t i = 0; i < counts_.size(); ++i) {
            seen += counts_[i];
            if (seen >= rank) return midpoint(i);
        }
        return midpoint(counts_.size() - 1);
    }

private:
    static size_t index(uint64_t v) {
        constexpr uint64_t lin = uint64_t{1} << (kSub + 1);
        if (v < lin) return static_cast<size_t>(v);
        const int shift = static_cast<int>(std::bit_width(v)) - (kSub + 1);
        const uint64_t top = v >> shift;  // in [512, 1023]
        const size_t i = static_cast<size_t>(lin + uint64_t(shift - 1) * (uint64_t{1} << kSub) + (top - (lin >> 1)));
        return std::min(i, kBuckets - 1);
    }
    static double midpoint(size_t i) {
        constexpr size_t lin = size_t{1} << (kSub + 1);
        if (i < lin) return static_cast<double>(i);
        const size_t k = i - lin;
        const int shift = static_cast<int>(k >> kSub) + 1;
        const uint64_t top = (k & ((size_t{1} << kSub) - 1)) + (lin >> 1);
        return static_cast<double>(top << shift) + static_cast<double>(uint64_t{1} << shift) / 2.0;
    }

    std::vector<uint64_t> counts_;
    uint64_t total_ = 0;
};

// Every sample of every round of one tool at one depth: percentiles of the
// pooled samples are far steadier than a median of per-round p99.9s (a
// 3-second round at 10k IOPS has 30 samples above its p99.9).
struct Pool {
    Histogram lat;   // nvfence: queue to reap; fio: lat (queue to completion)
    Histogram clat;  // fio only: submit to completion
};

struct RunResult {
    double iops = 0;
    double p50_us = 0, p99_us = 0, p999_us = 0;           // nvfence: submit to reap; fio: clat
    double lat_p50_us = 0, lat_p99_us = 0, lat_p999_us = 0;  // fio only: total latency
    double cpu_us_per_io = 0;  // user + system CPU of the I/O thread per I/O
    uint64_t ios = 0;
};

double thread_cpu_us() {
    rusage ru{};
    ::getrusage(RUSAGE_THREAD, &ru);
    auto us = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec); };
    return us(ru.ru_utime) + us(ru.ru_stime);
}

// The io_uring features nvfence's writer uses in one run.
struct NvFeatures {
    std::string name;            // "plain", "fixed", "st", "fixed+st"
    bool fixed_bufs = false;     // FencedWriter::register_buffers over the I/O buffers
    bool single_thread = false;  // WriterOptions::single_thread (SINGLE_ISSUER|DEFER_TASKRUN, registered ring fd)
};

// One contender: nvfence with some features, or fio with its defaults or
// with the io_uring features nvfence uses.
struct Tool {
    std::string label;
    bool is_nv = false;
    NvFeatures nv;
    bool fio_same = false;  // fio: --registerfiles=1 (+ --fixedbufs=1 when nvfence uses fixed buffers)
};

struct Params {
    std::string target;      // what nvfence opens
    std::string fio_target;  // what fio opens (the /dev/ng node in passthrough)
    bool fio_fixedbufs = false;  // the "same features" fio also gets --fixedbufs=1
    WriterMode mode = WriterMode::block;
    uint32_t bs = 4096;
    uint64_t region_bytes = 0;
    unsigned runtime_s = 5;
    unsigned ramp_s = 1;
    // fio's iodepth_batch_submit: submit once this many I/Os are queued (and
    // always before waiting); 0 means the queue depth.
    uint32_t batch_submit = 1;
    // nvfence only: CPU work per write between its completion and the next
    // write (a busy wait, as an engine's own work per write).
    unsigned nv_spin_us = 0;
    std::string fio = "fio";
};

// ------------------------------------------------------------------ nvfence

// The submit batch both tools get at this depth (fio is given the number,
// not 0, so its meaning of 0 does not matter).
uint32_t effective_batch(const Params& p, uint32_t qd) {
    return p.batch_submit == 0 ? qd : std::min(p.batch_submit, qd);
}

// Opens the writer of one nvfence run; the I/O size must be whole blocks.
std::unique_ptr<FencedWriter> open_nv_writer(const Params& p, const NvFeatures& f, uint32_t qd) {
    WriterOptions o;
    o.mode = p.mode;
    o.queue_depth = qd;
    o.timeout_ms = 30000;
    o.allow_regular_file = true;
    o.single_thread = f.single_thread;  // this thread opens, drives and destroys the writer
    auto wr = FencedWriter::open(p.target, o);
    if (!wr) die(p.target + ": cannot open FencedWriter: " + wr.error().message());
    if (p.bs % (*wr)->block_bytes() != 0)
        die("--bs must be a multiple of the block size " + std::to_string((*wr)->block_bytes()));
    if (p.bs > (*wr)->max_io_bytes())
        die("--bs " + std::to_string(p.bs) + " is above the largest single I/O of " + p.target + " (" +
            std::to_string((*wr)->max_io_bytes()) + " bytes: the device's max_sectors_kb, or its MDTS in passthrough)");
    return std::move(*wr);
}

// One timed nvfence run over an open writer: random writes of p.bs to
// `slots` slots of the region, qd in flight. Everything the loop touches is
// allocated by the constructor, before the clock runs.
class NvRun {
public:
    NvRun(const Params& p, FencedWriter& w, uint32_t qd, uint64_t slots)
        : p_(p), w_(w), qd_(qd), slots_(slots), per_io_blocks_(p.bs / w.block_bytes()),
          bufs_(size_t{qd} * p.bs, std::max<size_t>(4096, w.block_bytes())),
          rng_(0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(now_ns())), started_(qd, 0), comps_(qd),
          batch_(effective_batch(p, qd)) {
        for (auto& b : bufs_.span()) b = static_cast<uint8_t>(next_random());
    }

    void register_buffers() {
        const std::span<uint8_t> region = bufs_.span();
        if (auto st = w_.register_buffers({&region, 1}); !st)
            die("register_buffers: " + st.error().message() + " (run without fixed buffers: --nv-features plain)");
    }

    RunResult measure(Pool& pool) {
        const double cpu0 = thread_cpu_us();
        const int64_t t0 = now_ns();
        const int64_t measure_from = t0 + int64_t{p_.ramp_s} * 1'000'000'000;
        const int64_t stop_at = measure_from + int64_t{p_.runtime_s} * 1'000'000'000;
        for (uint32_t i = 0; i < qd_; ++i) issue(i, i + 1 == qd_);
        uint64_t counted = 0, all = 0;
        while (w_.in_flight() > 0) {
            queued_ = 0;
            auto r = w_.submit_and_reap(comps_, 1);
            if (!r)
                die("submit_and_reap: " + r.error().message() + " (" + std::to_string(w_.in_flight()) +
                    " I/Os in flight, " + std::to_string(all) + " completed)");
            const int64_t t = now_ns();
            for (size_t k = 0; k < *r; ++k) {
                const Completion& c = comps_[k];
                if (c.status != IoStatus::ok)
                    die(std::string("write failed: ") + (c.status == IoStatus::fenced ? "FENCED: " : "") +
                        c.error.message());
                const auto i = static_cast<uint32_t>(c.user_data);
                ++all;
                if (t >= measure_from && t < stop_at) {
                    h_.add(static_cast<uint64_t>(t - started_[i]));
                    ++counted;
                }
                if (t < stop_at) {
                    spin(p_.nv_spin_us);
                    issue(i, k + 1 == *r);
                }
            }
        }
        RunResult res;
        res.cpu_us_per_io = (thread_cpu_us() - cpu0) / static_cast<double>(std::max<uint64_t>(all, 1));
        res.ios = counted;
        res.iops = static_cast<double>(counted) / static_cast<double>(p_.runtime_s);
        res.p50_us = h_.quantile(0.50) / 1000.0;
        res.p99_us = h_.quantile(0.99) / 1000.0;
        res.p999_us = h_.quantile(0.999) / 1000.0;
        pool.lat.merge(h_);
        return res;
    }

private:
    static void spin(unsigned us) {
        if (us == 0) return;
        const int64_t until = now_ns() + int64_t{us} * 1000;
        while (now_ns() < until) {
        }
    }
    uint64_t next_random() {
        rng_ ^= rng_ << 13, rng_ ^= rng_ >> 7, rng_ ^= rng_ << 17;
        return rng_;
    }
    uint64_t next_lba() {
        const auto slot = static_cast<uint64_t>((static_cast<unsigned __int128>(next_random()) * slots_) >> 64);
        return slot * per_io_blocks_;
    }
    // `last`: the final I/O of this refill; it rides on the submit_and_reap
    // that waits next, as fio commits before it waits.
    // Each write's clock starts just before its own queue_write, as fio's
    // lat does, not when the reap that freed its slot returned: with a
    // burst of k completions, the k-th rewrite is queued after k-1 submits.
    void issue(uint32_t i, bool last) {
        started_[i] = now_ns();
        auto st = w_.queue_write(next_lba(), bufs_.span().subspan(size_t{i} * p_.bs, p_.bs), i);
        if (!st) die("queue_write: " + st.error().message());
        if (++queued_ >= batch_ && !last) {
            auto s = w_.submit();
            if (!s) die("submit: " + s.error().message());
            queued_ = 0;
        }
    }

    const Params& p_;
    FencedWriter& w_;
    const uint32_t qd_;
    const uint64_t slots_;
    const uint64_t per_io_blocks_;
    AlignedBuffer bufs_;
    uint64_t rng_;
    std::vector<int64_t> started_;
    std::vector<Completion> comps_;
    Histogram h_;
    const uint32_t batch_;
    uint32_t queued_ = 0;
};

RunResult run_nvfence(const Params& p, const NvFeatures& f, uint32_t qd, Pool& pool) {
    const std::unique_ptr<FencedWriter> w = open_nv_writer(p, f, qd);
    const uint64_t slots = std::min<uint64_t>(p.region_bytes, w->size_blocks() * w->block_bytes()) / p.bs;
    if (slots == 0) die("region smaller than one I/O");
    NvRun run(p, *w, qd, slots);
    if (f.fixed_bufs) run.register_buffers();
    return run.measure(pool);
}

// ------------------------------------------------------------------ fio

// Runs argv, returns its stdout; stderr passes through.
std::string run_capture(const std::vector<std::string>& argv, int& status) {
    int pfd[2];
    if (::pipe2(pfd, O_CLOEXEC) < 0) die("pipe: " + std::string(std::strerror(errno)));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], STDOUT_FILENO);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(pfd[1]);
    if (rc != 0) {
        ::close(pfd[0]);
        die("cannot run " + argv[0] + ": " + std::strerror(rc));
    }
    std::string out;
    char buf[65536];
    for (;;) {
        const ssize_t n = ::read(pfd[0], buf, sizeof buf);
        if (n > 0) out.append(buf, static_cast<size_t>(n));
        else if (n == 0 || errno != EINTR) break;
    }
    ::close(pfd[0]);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    return out;
}

std::vector<std::string> fio_argv(const Params& p, uint32_t qd, bool same) {
    std::vector<std::string> a = {p.fio, "--name=nvfence-bench", "--filename=" + p.fio_target};
    if (p.mode == WriterMode::passthrough) {
        // NVMe commands on the generic char device bypass the page cache by
        // nature; fio refuses --direct=1 there ("destination does not
        // support O_DIRECT").
        a.emplace_back("--ioengine=io_uring_cmd");
        a.emplace_back("--cmd_type=nvme");
    } else {
        a.emplace_back("--ioengine=io_uring");
        a.emplace_back("--direct=1");
    }
    const std::vector<std::string> rest = {
        "--rw=randwrite", "--bs=" + std::to_string(p.bs), "--iodepth=" + std::to_string(qd),
        "--size=" + std::to_string(p.region_bytes), "--time_based=1", "--runtime=" + std::to_string(p.runtime_s),
        "--ramp_time=" + std::to_string(p.ramp_s), "--norandommap=1", "--randrepeat=0", "--clat_percentiles=1",
        "--lat_percentiles=1", "--percentile_list=50:99:99.9", "--iodepth_batch_submit=" + std::to_string(effective_batch(p, qd)),
        "--output-format=json+"};
    a.insert(a.end(), rest.begin(), rest.end());
    if (same) {
        // The io_uring features nvfence's writer uses: it always registers
        // its file; fixed buffers when they are on. (fio 3.3x always sets up
        // its ring with SINGLE_ISSUER|DEFER_TASKRUN|COOP_TASKRUN.)
        a.emplace_back("--registerfiles=1");
        if (p.fio_fixedbufs) a.emplace_back("--fixedbufs=1");
    }
    return a;
}

// fio's json+ histogram of one latency (its bins: value in ns -> count).
void pool_fio_bins(const nlohmann::json& wr, const char* which, Histogram& h) {
    const nlohmann::json::json_pointer ptr(std::string("/") + which + "/bins");
    if (!wr.contains(ptr) || !wr.at(ptr).is_object()) die(std::string("fio JSON has no write.") + which + ".bins");
    for (const auto& [k, v] : wr.at(ptr).items()) {
        if (!v.is_number_unsigned()) die(std::string("fio JSON: a bin of write.") + which + " is not a count");
        h.add(std::strtoull(k.c_str(), nullptr, 10), v.get<uint64_t>());
    }
}

RunResult run_fio(const Params& p, uint32_t qd, bool same, Pool& pool) {
    int status = 0;
    const auto argv = fio_argv(p, qd, same);
    const std::string out = run_capture(argv, status);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("fio failed (status " + std::to_string(status) + ")");
    const size_t brace = out.find('{');
    if (brace == std::string::npos) die("fio printed no JSON");
    const std::string json = out.substr(brace);
    // nlohmann's parser without exceptions: a malformed document is "discarded".
    const nlohmann::json doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) die("cannot parse fio's JSON output");
    const nlohmann::json::json_pointer wr_path("/jobs/0/write");
    if (!doc.contains(wr_path)) die("fio JSON has no jobs[0].write");
    const nlohmann::json& job = doc.at(nlohmann::json::json_pointer("/jobs/0"));
    const nlohmann::json& wr = doc.at(wr_path);
    auto number = [](const nlohmann::json& v, const std::string& path) -> std::optional<double> {
        const nlohmann::json::json_pointer ptr(path);
        if (!v.contains(ptr) || !v.at(ptr).is_number()) return std::nullopt;
        return v.at(ptr).get<double>();
    };
    auto pct = [&](const char* which, const char* key) {
        auto n = number(wr, std::string("/") + which + "/percentile/" + key);
        if (!n) die(std::string("fio JSON has no write.") + which + ".percentile." + key);
        return *n / 1000.0;
    };
    RunResult r;
    auto iops = number(wr, "/iops");
    if (!iops) die("fio JSON has no write.iops");
    r.iops = *iops;
    auto ios = number(wr, "/total_ios");
    r.ios = ios ? static_cast<uint64_t>(*ios) : 0;
    r.p50_us = pct("clat_ns", "50.000000");
    r.p99_us = pct("clat_ns", "99.000000");
    r.p999_us = pct("clat_ns", "99.900000");
    r.lat_p50_us = pct("lat_ns", "50.000000");
    r.lat_p99_us = pct("lat_ns", "99.000000");
    r.lat_p999_us = pct("lat_ns", "99.900000");
    pool_fio_bins(wr, "clat_ns", pool.clat);
    pool_fio_bins(wr, "lat_ns", pool.lat);
    // fio's usr_cpu/sys_cpu are percentages of the measured runtime for the
    // job's thread, so this matches nvfence's figure for its own I/O thread.
    auto cpu = [&](const char* k) { return number(job, std::string("/") + k).value_or(0.0); };
    if (r.ios > 0)
        r.cpu_us_per_io = (cpu("usr_cpu") + cpu("sys_cpu")) / 100.0 * p.runtime_s * 1e6 / static_cast<double>(r.ios);
    return r;
}

// ------------------------------------------------------------------ target

// Creates or refills a regular file so every block is allocated and
// written: both tools then overwrite in place, with no unwritten extents
// to convert on the first touch.
void prepare_file(const std::string& path, uint64_t bytes) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) == bytes) {
        std::printf("# reusing %s (%llu bytes)\n", path.c_str(), static_cast<unsigned long long>(bytes));
        return;
    }
    std::printf("# writing %s (%llu bytes) ...\n", path.c_str(), static_cast<unsigned long long>(bytes));
    std::fflush(stdout);
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) die(path + ": " + std::strerror(errno));
    std::vector<uint8_t> chunk(1 << 20);
    uint64_t rng = 0x2545f4914f6cdd1dull;
    for (auto& b : chunk) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        b = static_cast<uint8_t>(rng);
    }
    for (uint64_t off = 0; off < bytes;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), bytes - off));
        const ssize_t w = ::pwrite(fd, chunk.data(), n, static_cast<off_t>(off));
        if (w <= 0) die(path + ": write: " + std::strerror(errno));
        off += static_cast<uint64_t>(w);
    }
    if (::fsync(fd) < 0) die(path + ": fsync: " + std::strerror(errno));
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
}

uint64_t parse_size(const std::string& s) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (end == s.c_str() || v <= 0) die("bad size: " + s);
    uint64_t mult = 1;
    switch (std::tolower(static_cast<unsigned char>(*end))) {
    case '\0': break;
    case 'k': mult = uint64_t{1} << 10; break;
    case 'm': mult = uint64_t{1} << 20; break;
    case 'g': mult = uint64_t{1} << 30; break;
    case 't': mult = uint64_t{1} << 40; break;
    default: die("bad size suffix: " + s);
    }
    return static_cast<uint64_t>(v * static_cast<double>(mult));
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

std::string first_line_of(const std::vector<std::string>& argv) {
    int status = 0;
    std::string out = run_capture(argv, status);
    if (auto nl = out.find('\n'); nl != std::string::npos) out.resize(nl);
    return out;
}

// The command line, as parsed.
struct BenchArgs {
    Params p;
    std::string target, size_s = "1G", mode_s = "auto";
    std::vector<uint32_t> qds = {1, 32};
    std::vector<std::string> nv_list = {"fixed+st"}, fio_list = {"default", "same"};
    unsigned repeat = 5;
    bool no_fio = false, allow_device = false;
};

void add_options(CLI::App& app, BenchArgs& a) {
    Params& p = a.p;
    app.add_option("target", a.target,
                   "A regular file (created and filled at --size if missing or of another size; left in place) "
                   "or an NVMe namespace device")
        ->required();
    app.add_option("--size", a.size_s, "Region written, e.g. 1G (file size for a file target)")->capture_default_str();
    app.add_option("--bs", p.bs, "I/O size in bytes")->capture_default_str();
    app.add_option("--qd", a.qds, "Queue depths, comma separated")->delimiter(',')->capture_default_str();
    app.add_option("--runtime", p.runtime_s, "Measured seconds per run")->capture_default_str();
    app.add_option("--ramp", p.ramp_s, "Unmeasured warm-up seconds per run (fio --ramp_time)")->capture_default_str();
    app.add_option("--repeat", a.repeat, "Rounds: runs per tool and queue depth (medians are reported)")
        ->capture_default_str();
    app.add_option("--mode", a.mode_s, "nvfence mode on a device: auto, block, passthrough (a file is always block)")
        ->check(CLI::IsMember({"auto", "block", "passthrough"}))
        ->capture_default_str();
    app.add_option("--nv-features", a.nv_list,
                   "nvfence variants, comma separated: plain, fixed (registered buffers), st "
                   "(WriterOptions::single_thread), fixed+st")
        ->delimiter(',')
        ->check(CLI::IsMember({"plain", "fixed", "st", "fixed+st"}))
        ->capture_default_str();
    app.add_option("--fio-variants", a.fio_list,
                   "fio variants, comma separated: default (fio's defaults), same (the io_uring features nvfence "
                   "uses: --registerfiles=1, and --fixedbufs=1 if an nvfence variant uses fixed buffers)")
        ->delimiter(',')
        ->check(CLI::IsMember({"default", "same"}))
        ->capture_default_str();
    app.add_option("--batch-submit", p.batch_submit,
                   "Submit once this many I/Os are queued, and before every wait; 0 = the queue depth. Passed to "
                   "fio as --iodepth_batch_submit (fio's default is 1: each I/O as soon as it is queued)")
        ->capture_default_str();
    app.add_option("--nv-spin-us", p.nv_spin_us,
                   "nvfence only: busy-wait this many microseconds per write between its completion and the "
                   "next write (an engine's own work per write; fio gets none)")
        ->check(CLI::Range(0u, 1000000u))
        ->capture_default_str();
    app.add_option("--fio", p.fio, "fio executable")->capture_default_str();
    app.add_flag("--no-fio", a.no_fio, "Run nvfence only");
    app.add_flag("--destroy-device-data", a.allow_device,
                 "Required to write to a device target: its contents in the region are overwritten");
}

// Checks what CLI11 cannot, and sets the region and the targets.
void validate(BenchArgs& a) {
    Params& p = a.p;
    if (a.repeat == 0 || p.runtime_s == 0 || a.qds.empty() || p.bs == 0 || p.bs % 512 != 0 || a.nv_list.empty())
        die("--repeat, --runtime, --qd, --nv-features and --bs (a multiple of 512) must be positive");
    for (auto q : a.qds)
        if (q < 1 || q > 1024) die("--qd values must be in 1..1024");
    p.region_bytes = parse_size(a.size_s) / p.bs * p.bs;
    p.target = a.target;
    p.fio_target = a.target;
}

// The contenders: the nvfence variants first, then (unless --no-fio) fio's.
// Sets p.fio_fixedbufs when an nvfence variant uses fixed buffers.
std::vector<Tool> make_tools(BenchArgs& a) {
    std::vector<Tool> tools;
    for (const auto& n : a.nv_list) {
        Tool t;
        t.is_nv = true;
        t.nv.name = n;
        t.nv.fixed_bufs = n == "fixed" || n == "fixed+st";
        t.nv.single_thread = n == "st" || n == "fixed+st";
        t.label = a.nv_list.size() == 1 ? "nvfence" : "nv:" + n;
        if (t.nv.fixed_bufs) a.p.fio_fixedbufs = true;
        tools.push_back(t);
    }
    if (!a.no_fio) {
        for (const auto& f : a.fio_list) {
            Tool t;
            t.fio_same = f == "same";
            t.label = t.fio_same ? "fio-same" : "fio";
            tools.push_back(t);
        }
    }
    return tools;
}

// A file target is created or refilled and written in block mode; a device
// needs --destroy-device-data, and both tools get the node of the mode
// nvfence resolves to.
void prepare_target(BenchArgs& a) {
    Params& p = a.p;
    const std::string& target = a.target;
    struct stat st {};
    const bool exists = ::stat(target.c_str(), &st) == 0;
    if (!exists || S_ISREG(st.st_mode)) {
        prepare_file(target, p.region_bytes);
        p.mode = WriterMode::block;
        return;
    }
    if (!a.allow_device) die(target + " is a device: pass --destroy-device-data to overwrite it");
    auto paths = resolve_namespace(target);
    if (!paths) die(target + ": " + paths.error().message());
    p.mode = a.mode_s == "block" ? WriterMode::block
             : a.mode_s == "passthrough" ? WriterMode::passthrough
                                         : WriterMode::automatic;
    // Learn which mode automatic resolves to, so fio gets the same path.
    WriterOptions o;
    o.mode = p.mode;
    auto w = FencedWriter::open(target, o);
    if (!w) die(target + ": " + w.error().message());
    p.mode = (*w)->mode();
    p.region_bytes = std::min(p.region_bytes, (*w)->size_blocks() * (*w)->block_bytes()) / p.bs * p.bs;
    p.target = p.mode == WriterMode::passthrough ? paths->generic : paths->block;
    p.fio_target = p.target;
}

// The "# ..." lines that say what runs, and the per-run table's heading.
void print_header(const BenchArgs& a, const std::vector<Tool>& tools, size_t n_nv) {
    const Params& p = a.p;
    utsname u{};
    ::uname(&u);
    std::printf("# kernel %s, %ld online CPUs, nvfence mode %s, target %s, region %llu MiB, bs %u, runtime %us + "
                "ramp %us, %u rounds, batch-submit %u%s\n",
                u.release, ::sysconf(_SC_NPROCESSORS_ONLN), writer_mode_name(p.mode), p.target.c_str(),
                static_cast<unsigned long long>(p.region_bytes >> 20), p.bs, p.runtime_s, p.ramp_s, a.repeat,
                p.batch_submit, p.batch_submit == 0 ? " (= queue depth)" : "");
    for (size_t i = 0; i < n_nv; ++i)
        std::printf("# %-8s FencedWriter %s mode, registered file%s%s\n", tools[i].label.c_str(),
                    writer_mode_name(p.mode), tools[i].nv.fixed_bufs ? ", fixed buffers (register_buffers)" : "",
                    tools[i].nv.single_thread ? ", single_thread (SINGLE_ISSUER|DEFER_TASKRUN, registered ring fd)"
                                              : ", COOP_TASKRUN");
    if (p.nv_spin_us > 0)
        std::printf("# nvfence spins %u us per write before writing again (--nv-spin-us; fio does not)\n",
                    p.nv_spin_us);
    if (!a.no_fio) {
        std::printf("# %s\n", first_line_of({p.fio, "--version"}).c_str());
        for (size_t i = n_nv; i < tools.size(); ++i) {
            std::string cmd;
            for (const auto& arg : fio_argv(p, a.qds.front(), tools[i].fio_same))
                cmd += (cmd.empty() ? "" : " ") + arg;
            std::printf("# %-8s %s  (%s with --qd)\n", tools[i].label.c_str(), cmd.c_str(),
                        p.batch_submit == 0 ? "iodepth and iodepth_batch_submit vary" : "iodepth varies");
        }
    }
    std::printf("# latency: nvfence = queue to reap (includes submission); fio clat = submit to completion, fio "
                "lat = queue to completion (shown in brackets)\n# cpu/io: user+system CPU microseconds of the I/O "
                "thread per I/O\n");
    std::printf("%-4s %-11s %-3s %10s %9s %9s %9s %7s\n", "qd", "tool", "run", "IOPS", "p50_us", "p99_us",
                "p99.9_us", "cpu/io");
    std::fflush(stdout);
}

// runs[qd][tool] = one RunResult per round; pools[qd][tool] = all their samples
struct Results {
    std::map<uint32_t, std::vector<std::vector<RunResult>>> runs;
    std::map<uint32_t, std::vector<Pool>> pools;
};

// Every round runs every tool at every queue depth, one line a run.
Results run_rounds(const BenchArgs& a, const std::vector<Tool>& tools) {
    Results res;
    for (uint32_t qd : a.qds) {
        res.runs[qd].assign(tools.size(), {});
        res.pools[qd] = std::vector<Pool>(tools.size());
    }
    for (unsigned rep = 0; rep < a.repeat; ++rep) {
        for (uint32_t qd : a.qds) {
            // Rotate which tool goes first so drift on a shared machine
            // does not favour one of them.
            for (size_t k = 0; k < tools.size(); ++k) {
                const size_t ti = (k + rep) % tools.size();
                const Tool& t = tools[ti];
                Pool& pool = res.pools[qd][ti];
                RunResult r = t.is_nv ? run_nvfence(a.p, t.nv, qd, pool) : run_fio(a.p, qd, t.fio_same, pool);
                res.runs[qd][ti].push_back(r);
                std::printf("%-4u %-11s %-3u %10.0f %9.1f %9.1f %9.1f %7.2f", qd, t.label.c_str(), rep + 1, r.iops,
                            r.p50_us, r.p99_us, r.p999_us, r.cpu_us_per_io);
                if (!t.is_nv) std::printf("   (lat %.1f %.1f %.1f)", r.lat_p50_us, r.lat_p99_us, r.lat_p999_us);
                std::printf("\n");
                std::fflush(stdout);
            }
        }
    }
    return res;
}

// The median over rounds of one field of the results.
double median_of(const std::vector<RunResult>& v, double RunResult::*f) {
    std::vector<double> x;
    for (const auto& r : v) x.push_back(r.*f);
    return median(x);
}

void print_medians(const BenchArgs& a, const std::vector<Tool>& tools, Results& res) {
    std::printf("\nMedians of %u rounds (latency in microseconds)\n", a.repeat);
    std::printf("%-4s %-15s %10s %9s %9s %9s %7s\n", "qd", "tool", "IOPS", "p50", "p99", "p99.9", "cpu/io");
    for (uint32_t qd : a.qds) {
        for (size_t ti = 0; ti < tools.size(); ++ti) {
            const auto& r = res.runs[qd][ti];
            const std::string l = tools[ti].is_nv ? tools[ti].label : tools[ti].label + " clat";
            std::printf("%-4u %-15s %10.0f %9.1f %9.1f %9.1f %7.2f\n", qd, l.c_str(), median_of(r, &RunResult::iops),
                        median_of(r, &RunResult::p50_us), median_of(r, &RunResult::p99_us),
                        median_of(r, &RunResult::p999_us), median_of(r, &RunResult::cpu_us_per_io));
            if (!tools[ti].is_nv)
                std::printf("%-4u %-15s %10s %9.1f %9.1f %9.1f\n", qd, (tools[ti].label + " lat").c_str(), "",
                            median_of(r, &RunResult::lat_p50_us), median_of(r, &RunResult::lat_p99_us),
                            median_of(r, &RunResult::lat_p999_us));
        }
    }
}

// Percentiles of every sample of every round, per tool and depth.
void print_pooled(const BenchArgs& a, const std::vector<Tool>& tools, Results& res) {
    std::printf("\nPooled: every sample of the %u rounds (latency in microseconds)\n", a.repeat);
    std::printf("%-4s %-15s %10s %9s %9s %9s\n", "qd", "tool", "samples", "p50", "p99", "p99.9");
    auto row = [](uint32_t qd, const std::string& l, const Histogram& h) {
        std::printf("%-4u %-15s %10llu %9.1f %9.1f %9.1f\n", qd, l.c_str(), static_cast<unsigned long long>(h.total()),
                    h.quantile(0.50) / 1000.0, h.quantile(0.99) / 1000.0, h.quantile(0.999) / 1000.0);
    };
    for (uint32_t qd : a.qds) {
        for (size_t ti = 0; ti < tools.size(); ++ti) {
            const Pool& pool = res.pools[qd][ti];
            if (tools[ti].is_nv) {
                row(qd, tools[ti].label, pool.lat);
            } else {
                row(qd, tools[ti].label + " clat", pool.clat);
                row(qd, tools[ti].label + " lat", pool.lat);
            }
        }
    }
}

// Each nvfence variant against each fio variant; printed only when fio ran.
// Latency ratios are against fio's lat, which like nvfence's figure counts
// from the moment the I/O is queued.
void print_ratios(const BenchArgs& a, const std::vector<Tool>& tools, size_t n_nv, Results& res) {
    if (tools.size() <= n_nv) return;
    std::printf("\nRatios nvfence/fio (IOPS: higher is better; latency and cpu/io: lower is better).\n"
                "IOPS/pair = median over rounds of the IOPS ratio of the two runs of the same round;\n"
                "med = ratio of the medians of per-round percentiles; pool = ratio of the pooled percentiles;\n"
                "latency against fio's lat (queue to completion, as nvfence measures)\n");
    std::printf("%-4s %-22s %7s %9s %8s %9s %9s %10s %7s\n", "qd", "nvfence vs", "IOPS", "IOPS/pair", "p99 med",
                "p99.9 med", "p99 pool", "p99.9 pool", "cpu/io");
    for (uint32_t qd : a.qds) {
        for (size_t ni = 0; ni < n_nv; ++ni) {
            for (size_t fi = n_nv; fi < tools.size(); ++fi) {
                const auto& x = res.runs[qd][ni];
                const auto& y = res.runs[qd][fi];
                const Histogram& hx = res.pools[qd][ni].lat;
                const Histogram& hy = res.pools[qd][fi].lat;
                std::vector<double> pair;
                for (size_t r = 0; r < x.size() && r < y.size(); ++r)
                    if (y[r].iops > 0) pair.push_back(x[r].iops / y[r].iops);
                const std::string l = tools[ni].label + " / " + tools[fi].label;
                std::printf("%-4u %-22s %7.3f %9.3f %8.3f %9.3f %9.3f %10.3f %7.3f\n", qd, l.c_str(),
                            median_of(x, &RunResult::iops) / median_of(y, &RunResult::iops), median(pair),
                            median_of(x, &RunResult::p99_us) / median_of(y, &RunResult::lat_p99_us),
                            median_of(x, &RunResult::p999_us) / median_of(y, &RunResult::lat_p999_us),
                            hx.quantile(0.99) / hy.quantile(0.99), hx.quantile(0.999) / hy.quantile(0.999),
                            median_of(x, &RunResult::cpu_us_per_io) / median_of(y, &RunResult::cpu_us_per_io));
            }
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{
        "nvfence-bench: 4 KiB random O_DIRECT writes through nvfence's FencedWriter and through fio, "
        "alternating, on the same target with the same parameters; prints medians and ratios."};
    BenchArgs a;
    add_options(app, a);
    CLI11_PARSE(app, argc, argv);
    validate(a);
    const std::vector<Tool> tools = make_tools(a);
    const size_t n_nv = a.nv_list.size();
    prepare_target(a);
    print_header(a, tools, n_nv);
    Results res = run_rounds(a, tools);
    print_medians(a, tools, res);
    print_pooled(a, tools, res);
    print_ratios(a, tools, n_nv, res);
    return 0;
}
