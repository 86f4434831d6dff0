// SPDX-License-Identifier: MIT
// nvfence-sim: the deterministic whole-cluster simulator (issue 25,
// tests/sim/sim_world.hpp).
//
//   nvfence-sim --seed N [--trace] [--events] replay one schedule exactly
//                                            (--events: with the agents' own log lines)
//   nvfence-sim --schedules N [--jobs J]     run seeds first..first+N-1
//   nvfence-sim --seconds S [--jobs J]       run seeds until S seconds passed
// Options: --first-seed S, --steps N (steps with faults per schedule),
// --faults a,b (fault kinds; default the thirteen of kDefaultFaults, all: every kind,
// link_degraded, target_crash_loop, fence_delay, fence_race, paused_win, paused_token and late_timeout included; none: no fault), --known-defects (count the
// invariants the open defects of known_defect() break instead of failing;
// none are open today), --tolerate
// inv,inv, --progress-ms N, --fail-at-step N (a self_test violation at step N:
// tests the reporting, not the product), --cluster any|etcd|pacemaker (who decides
// which host writes; any: the seed picks, one schedule in four Pacemaker), --no-swarm
// (no schedule concentrates on a few fault kinds: the seeds recorded before 2026-12-04),
// --watcher acquire|watch|any (Pacemaker schedules: nvfenced with role = acquire, the
// default and the recorded seeds', or the check-only watcher, role = watch; any: the seed picks),
// --no-slow-writes (admitted writes land within 10 ms and aim at random blocks: the seeds
// recorded before 2026-12-06).
// Exit: 0 no violation, 1 a violation (seed and trace printed), 2 usage; --help: 0.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "sim_world.hpp"

namespace {

using nvfence::sim::Fault;
using nvfence::sim::Inv;
using nvfence::sim::kFaultCount;
using nvfence::sim::kInvCount;
using nvfence::sim::ScheduleResult;
using nvfence::sim::SimOptions;

struct Args {
    std::optional<uint64_t> seed;
    uint64_t schedules = 0;
    uint64_t first_seed = 1;
    double seconds = 0;
    unsigned jobs = 1;
    bool trace = false;
    int64_t progress_ms = 1000;
    SimOptions sim;
};

const char kUsage[] =
    "usage: nvfence-sim --seed N [--trace] [--events] | (--schedules N | --seconds S) [--jobs J] [--first-seed S]\n"
    "       [--steps N] [--faults kind,...] [--known-defects] [--tolerate invariant,...] [--progress-ms N]\n"
    "       [--fail-at-step N] [--cluster any|etcd|pacemaker] [--watcher acquire|watch|any] [--no-swarm]\n"
    "       [--stability] [--no-slow-writes]\n"
    "Runs the product's agent, elector driver, fence_nvfence and writer against a simulated device,\n"
    "etcd, Corosync/Pacemaker membership and hosts (--cluster any: the seed picks, one in four Pacemaker).\n"
    "Exit: 0 no violation, 1 an invariant broke (seed and trace printed), 2 usage.\n";

int usage(const std::string& why) {
    std::fprintf(stderr, "nvfence-sim: %s\n%s", why.c_str(), kUsage);
    return 2;
}

std::optional<uint64_t> parse_u64(const char* s) {
    if (!s || !*s) return std::nullopt;
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(s, &end, 0);
    if (errno || *end || s[0] == '-') return std::nullopt;
    return v;
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    size_t b = 0;
    while (b <= s.size()) {
        const size_t e = s.find(',', b);
        out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
        if (e == std::string::npos) break;
        b = e + 1;
    }
    return out;
}

std::optional<uint32_t> parse_faults(const std::string& list) {
    uint32_t m = 0;
    if (list == "none") return m;
    if (list == "all") return nvfence::sim::kAllFaults;
    for (const auto& n : split(list)) {
        auto f = nvfence::sim::parse_fault(n);
        if (!f) return std::nullopt;
        m |= 1u << static_cast<unsigned>(*f);
    }
    return m;
}

std::optional<uint32_t> parse_invariants(const std::string& list) {
    uint32_t m = 0;
    for (const auto& n : split(list)) {
        bool found = false;
        for (size_t i = 0; i < kInvCount; ++i)
            if (n == nvfence::sim::inv_name(static_cast<Inv>(i))) {
                m |= 1u << i;
                found = true;
            }
        if (!found) return std::nullopt;
    }
    return m;
}

// Returns 0 when parsed, -1 after --help, else the exit code (2).
int parse_args(int argc, char** argv, Args& a) {
    for (int i = 1; i < argc; ++i) {
        const std::string k = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
        auto num = [&](uint64_t& out) {
            auto x = parse_u64(v);
            if (!x) return false;
            out = *x;
            ++i;
            return true;
        };
        uint64_t n = 0;
        if (k == "--help" || k == "-h") {
            std::fputs(kUsage, stdout);
            return -1;
        }
        if (k == "--trace") a.trace = true;
        else if (k == "--events") a.sim.events = a.trace = true;
        else if (k == "--known-defects") a.sim.known_defects = true;
        else if (k == "--no-swarm") a.sim.swarm = false;
        else if (k == "--stability") a.sim.stability = true;
        else if (k == "--no-slow-writes") a.sim.slow_writes = false;
        else if (k == "--seed" && num(n)) a.seed = n;
        else if (k == "--schedules" && num(n)) a.schedules = n;
        else if (k == "--first-seed" && num(n)) a.first_seed = n;
        else if (k == "--jobs" && num(n) && n >= 1 && n <= 256) a.jobs = static_cast<unsigned>(n);
        else if (k == "--steps" && num(n) && n >= 1 && n <= 1000000) a.sim.steps = static_cast<uint32_t>(n);
        else if (k == "--progress-ms" && num(n)) a.progress_ms = static_cast<int64_t>(n);
        else if (k == "--fail-at-step" && num(n) && n >= 1) a.sim.fail_at_step = n;
        else if (k == "--seconds" && num(n) && n > 0) a.seconds = static_cast<double>(n);
        else if (k == "--faults" && v && parse_faults(v)) a.sim.fault_mask = *parse_faults(argv[++i]);
        else if (k == "--tolerate" && v && parse_invariants(v)) a.sim.tolerate = *parse_invariants(argv[++i]);
        else if (k == "--cluster" && v && nvfence::sim::parse_cluster(v))
            a.sim.cluster = *nvfence::sim::parse_cluster(argv[++i]);
        else if (k == "--watcher" && v && nvfence::sim::parse_watcher(v))
            a.sim.watcher = *nvfence::sim::parse_watcher(argv[++i]);
        else return usage("bad or incomplete option: " + k);
    }
    if (!a.seed && a.schedules == 0 && a.seconds == 0) return usage("give --seed, --schedules or --seconds");
    if (a.seed && (a.schedules || a.seconds > 0)) return usage("--seed replays one schedule: no --schedules/--seconds");
    return 0;
}

// "--faults a,b" when the kinds are not the default ones.
std::string faults_option(uint32_t mask) {
    if (mask == nvfence::sim::kDefaultFaults) return {};
    std::string out;
    for (size_t i = 0; i < kFaultCount; ++i)
        if (mask & (1u << i)) out += (out.empty() ? "" : ",") + std::string(nvfence::sim::fault_name(static_cast<Fault>(i)));
    return " --faults " + (out.empty() ? std::string("none") : out);
}

void print_result(const ScheduleResult& r, bool with_trace, const SimOptions& given) {
    const uint32_t steps = given.steps;
    std::printf("seed %llu (%s): %llu steps, %.1f s simulated, %llu invariant checks, trace hash %016llx\n",
                static_cast<unsigned long long>(r.seed), nvfence::sim::cluster_name(r.cluster),
                static_cast<unsigned long long>(r.steps),
                static_cast<double>(r.sim_ms) / 1000.0, static_cast<unsigned long long>(r.checks),
                static_cast<unsigned long long>(r.trace_hash));
    std::string faults;
    for (size_t i = 0; i < kFaultCount; ++i)
        if (r.faults[i])
            faults += std::string(" ") + nvfence::sim::fault_name(static_cast<Fault>(i)) + "=" +
                      std::to_string(r.faults[i]);
    std::printf("faults:%s\n", faults.empty() ? " none" : faults.c_str());
    for (size_t i = 0; i < kInvCount; ++i)
        if (r.tolerated[i])
            std::printf("tolerated %s (known defect %d): %s\n", nvfence::sim::inv_name(static_cast<Inv>(i)),
                        nvfence::sim::known_defect(static_cast<Inv>(i)), r.tolerated_what[i].c_str());
    if (with_trace || r.violation) std::printf("trace:\n%s", r.trace.c_str());
    if (r.violation)
        std::printf("VIOLATION of %s at step %llu (seed %llu): %s\nreplay: nvfence-sim --seed %llu%s\n",
                    nvfence::sim::inv_name(r.violation->inv), static_cast<unsigned long long>(r.violation_step),
                    static_cast<unsigned long long>(r.seed), r.violation->what.c_str(),
                    static_cast<unsigned long long>(r.seed),
                    ((steps == SimOptions{}.steps ? std::string() : " --steps " + std::to_string(steps)) +
                     (given.cluster == nvfence::sim::Cluster::any
                          ? std::string()
                          : std::string(" --cluster ") + nvfence::sim::cluster_name(given.cluster)) +
                     (given.watcher == nvfence::sim::Watcher::acquire
                          ? std::string()
                          : std::string(" --watcher ") + nvfence::sim::watcher_name(given.watcher)) +
                     faults_option(given.fault_mask) + (given.swarm ? "" : " --no-swarm") +
                     (given.stability ? " --stability" : "") + (given.slow_writes ? "" : " --no-slow-writes"))
                        .c_str());
}

int replay(const Args& a) {
    SimOptions o = a.sim;
    o.seed = *a.seed;
    o.keep_trace = a.trace;
    const ScheduleResult r = nvfence::sim::run_schedule(o);
    print_result(r, a.trace, a.sim);
    return r.violation ? 1 : 0;
}

// Totals over every schedule run so far.
struct Totals {
    std::mutex mu;
    uint64_t schedules = 0, steps = 0, checks = 0, pacemaker = 0, watch = 0;
    std::array<uint64_t, kFaultCount> faults{};
    std::array<uint64_t, kInvCount> tolerated{};
    std::array<uint64_t, kInvCount> first_seed{};  // first seed (lowest) per tolerated invariant, 0 none
    std::optional<ScheduleResult> violation;
    void add(const ScheduleResult& r) {
        std::lock_guard lk(mu);
        ++schedules;
        if (r.cluster == nvfence::sim::Cluster::pacemaker) ++pacemaker;
        if (r.cluster == nvfence::sim::Cluster::pacemaker && r.watcher == nvfence::sim::Watcher::watch) ++watch;
        steps += r.steps;
        checks += r.checks;
        for (size_t i = 0; i < kFaultCount; ++i) faults[i] += r.faults[i];
        for (size_t i = 0; i < kInvCount; ++i)
            if (r.tolerated[i]) {
                ++tolerated[i];
                if (first_seed[i] == 0 || r.seed < first_seed[i]) first_seed[i] = r.seed;
            }
        if (r.violation && (!violation || r.seed < violation->seed)) violation = r;
    }
};

void progress(Totals& t, double secs, bool final_line) {
    std::lock_guard lk(t.mu);
    std::string faults;
    for (size_t i = 0; i < kFaultCount; ++i)
        faults += std::string(" ") + nvfence::sim::fault_name(static_cast<Fault>(i)) + "=" + std::to_string(t.faults[i]);
    std::string known;
    for (size_t i = 0; i < kInvCount; ++i)
        if (t.tolerated[i])
            known += std::string(" ") + nvfence::sim::inv_name(static_cast<Inv>(i)) + "=" +
                     std::to_string(t.tolerated[i]) + " (first seed " + std::to_string(t.first_seed[i]) + ")";
    const double s = secs > 0 ? secs : 1e-9;
    std::printf("%s%llu schedules (%.1f/s; %llu Pacemaker, %llu with role = watch), %llu steps (%.0f/s), %llu invariant "
                "checks; faults:%s%s%s\n",
                final_line ? "done: " : "", static_cast<unsigned long long>(t.schedules),
                static_cast<double>(t.schedules) / s, static_cast<unsigned long long>(t.pacemaker),
                static_cast<unsigned long long>(t.watch), static_cast<unsigned long long>(t.steps),
                static_cast<double>(t.steps) / s, static_cast<unsigned long long>(t.checks), faults.c_str(),
                known.empty() ? "" : "; tolerated:", known.c_str());
    std::fflush(stdout);
}

int run_many(const Args& a) {
    Totals totals;
    std::atomic<uint64_t> next{0};
    std::atomic<bool> stop{false};
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    auto worker = [&] {
        while (!stop.load()) {
            const uint64_t i = next.fetch_add(1);
            if (a.schedules && i >= a.schedules) break;
            if (a.seconds > 0 && elapsed() >= a.seconds) break;
            SimOptions o = a.sim;
            o.seed = a.first_seed + i;
            const ScheduleResult r = nvfence::sim::run_schedule(o);
            totals.add(r);
            if (r.violation) stop = true;
        }
    };
    std::vector<std::thread> threads;
    for (unsigned j = 0; j < a.jobs; ++j) threads.emplace_back(worker);
    std::atomic<bool> finished{false};
    std::thread reporter([&] {
        auto last = std::chrono::steady_clock::now();
        while (!finished.load()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            if (a.progress_ms > 0 && std::chrono::steady_clock::now() - last >= std::chrono::milliseconds(a.progress_ms)) {
                last = std::chrono::steady_clock::now();
                progress(totals, elapsed(), false);
            }
        }
    });
    for (auto& t : threads) t.join();
    finished = true;
    reporter.join();
    progress(totals, elapsed(), true);
    if (totals.violation) {
        // The full trace of the violating seed, replayed for the print.
        print_result(*totals.violation, true, a.sim);
        return 1;
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Args a;
    if (int rc = parse_args(argc, argv, a)) return rc < 0 ? 0 : rc;  // -1: --help
    return a.seed ? replay(a) : run_many(a);
}
