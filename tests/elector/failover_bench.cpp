// SPDX-License-Identifier: MIT
// nvfence-failover-bench: nvfence's own part of a failover under etcd, on a
// real CPU (issue 24, "time to useful"). A real etcd on this machine; the
// new leader is the real ElectorThread, ElectorBridge and Agent of
// nvfenced, on the device model (FakeTarget: nvmet's reservation rules).
//
// One nvfence round: an old leader (a bare EtcdElector) wins, takes its
// token and holds the device with it; the candidate host starts, registers
// and queues in the election; then the old leader's lease is revoked. The
// figure: from sending the revoke to the candidate's agent entering HOLDER,
// which it does only after its verified preempt-and-abort with the token
// as epoch (checked on the device model after each round).
//
// The peer, measured side by side in alternating rounds: etcd's own
// election client, `etcdctl elect`, queued the same way, from the same
// revoke to its printing that it leads. Its time is etcd's part alone
// (the revoke, the watch, the campaign); nvfence adds the token
// transaction, the Report, the preempt-and-abort and the Report after.
//
// Usage: nvfence-failover-bench [--rounds N] (default 30 of each)
// Prints every round and the medians, p99s and ratios; exit 0, 1 when a
// round did not end in a verified takeover, 2 on bad usage.
#include <curl/curl.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "../fake_passthru.hpp"
#include "etcd_server.hpp"
#include "agent/agent.hpp"
#include "elector/agent_elector.hpp"
#include "agent/agent_state_file.hpp"
#include "nvfence/epoch_store.hpp"
#include "elector/etcd.hpp"
#include "nvfence/key.hpp"

using namespace nvfence;
using namespace nvfence::test;
using Steady = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

namespace {

constexpr uint8_t kTag = 0;
constexpr const char* kElection = "nvfence/vol-bench";
constexpr Ms kCall{2000};
constexpr Ms kRoundBound{20000};

double ms_since(Steady::time_point t0, Steady::time_point t1) {
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

// Hooks that note when the agent enters HOLDER.
class TimingHooks final : public AgentHooks {
public:
    std::atomic<int64_t> holder_at_ns{0};
    void event(const AgentEvent& e) override {
        if (e.kind == AgentEventKind::state_changed && e.to == AgentState::holder && holder_at_ns.load() == 0)
            holder_at_ns = Steady::now().time_since_epoch().count();
    }
    Status stop_writers(const std::string&) override { return Ok{}; }
    Status fence_action(const std::string&) override { return Ok{}; }
};

EtcdOptions options(const EtcdServer& etcd, const std::string& value) {
    EtcdOptions o;
    o.endpoints = {etcd.client_url()};
    o.election = kElection;
    o.value = value;
    o.ttl_s = 5;
    o.volume = "vol-bench";
    return o;
}

// POST /v3/lease/revoke for @p lease; true when etcd answered 200.
bool revoke(const EtcdServer& etcd, int64_t lease) {
    CURL* h = curl_easy_init();
    if (!h) return false;
    const std::string url = etcd.client_url() + "/v3/lease/revoke";
    const std::string body = "{\"ID\":\"" + std::to_string(lease) + "\"}";
    std::string reply;
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, +[](char* p, size_t s, size_t n, void* u) {
        static_cast<std::string*>(u)->append(p, s * n);
        return s * n;
    });
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &reply);
    long status = 0;
    const bool ok = curl_easy_perform(h) == CURLE_OK &&
                    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK && status == 200;
    curl_easy_cleanup(h);
    return ok;
}

// Candidates queued in the election (keys under it).
size_t candidates(const EtcdServer& etcd) {
    std::string out;
    if (etcd.ctl({"get", "--prefix", std::string(kElection) + "/", "--keys-only"}, &out) != 0) return 0;
    return static_cast<size_t>(std::count(out.begin(), out.end(), '/') / 2);
}

bool wait_for_candidates(const EtcdServer& etcd, size_t n) {
    const auto until = Steady::now() + Ms(10000);
    while (Steady::now() < until) {
        if (candidates(etcd) >= n) return true;
        std::this_thread::sleep_for(Ms(20));
    }
    return false;
}

// The old leader: campaigns until it leads and takes its token.
struct OldLeader {
    std::unique_ptr<EtcdElector> e;
    uint32_t token = 0;
    bool start(const EtcdServer& etcd) {
        auto c = EtcdElector::create(options(etcd, "node=9 host=old"));
        if (!c) return false;
        e = std::move(*c);
        const auto until = Steady::now() + Ms(10000);
        while (Steady::now() < until) {
            auto w = e->campaign(Ms(1000));
            if (w) {
                auto t = e->term(0, kCall);
                if (!t) return false;
                token = t->epoch;
                return true;
            }
            (void)e->keepalive(kCall);
        }
        return false;
    }
};

// One nvfence round; the time in ms, or a negative number on failure.
double nvfence_round(const EtcdServer& etcd, const std::string& dir, int round) {
    OldLeader old;
    if (!old.start(etcd)) return -1;
    FakeTarget target;
    const HostId old_id = make_host(9), new_id = make_host(2);
    target.add(old_id, *make_key({kTag, 9, old.token}));
    target.hold(old_id, ResvType::write_exclusive);

    const std::string state = dir + "/round" + std::to_string(round);
    std::filesystem::create_directories(state);
    EpochStore epochs(state, "vol-bench");
    AgentStateFile statefile(state, "vol-bench");
    HostPort port(target, new_id, 2);
    SystemClock clock;
    TimingHooks hooks;
    AgentOptions ao;
    ao.tag = kTag;
    ao.node = 2;
    ao.role = StartRole::standby;
    ao.interval_ms = 1000;
    ao.volume = "vol-bench";
    ao.device = "/dev/model";
    Agent agent(port, target.nsid, new_id, ao, clock, hooks, &epochs, &statefile);
    if (!agent.start()) return -2;

    ElectorBridge bridge(kTag, new_id, &epochs);
    bridge.publish(agent);
    auto el = EtcdElector::create(options(etcd, "node=2 host=new"));
    if (!el) return -3;
    LeaseGuardOptions g;
    g.ttl_ms = 5000;
    g.margin_ms = 1000;
    g.renew_interval_ms = 1666;
    std::atomic<bool> stop{false};
    std::thread agent_thread;
    double took = -4;
    {
        ElectorThread driver(**el, bridge, g, Ms(1000));
        // The agent's loop, as nvfenced runs it: woken by the bridge.
        agent_thread = std::thread([&] {
            agent.run([&](Clock::Ms wait) {
                pollfd p{bridge.wake_fd(), POLLIN, 0};
                (void)::poll(&p, 1, static_cast<int>(std::min<int64_t>(wait.count(), 50)));
                bridge.drain(agent, hooks, clock);
                return !stop.load();
            });
        });
        if (wait_for_candidates(etcd, 2)) {
            std::this_thread::sleep_for(Ms(100));  // the candidate's watch is in place
            const auto t0 = Steady::now();
            if (revoke(etcd, old.e->lease_id())) {
                const auto until = t0 + kRoundBound;
                while (hooks.holder_at_ns.load() == 0 && Steady::now() < until) std::this_thread::sleep_for(Ms(1));
                if (const int64_t at = hooks.holder_at_ns.load(); at != 0)
                    took = ms_since(t0, Steady::time_point(Steady::duration(at)));
            }
        }
        stop = true;
        agent_thread.join();
    }
    (void)(*el)->resign(kCall);
    (void)old.e->resign(kCall);
    // Verified on the device model: the new host holds with the next
    // token as its key's epoch; the old key is gone.
    const auto* h = target.find(new_id);
    if (took >= 0 &&
        !(h && target.is_holder(new_id) && decode_key(h->key)->epoch > old.token && !target.find(old_id)))
        return -5;
    return took;
}

// One peer round: `etcdctl elect` queued behind an old leader.
double peer_round(const EtcdServer& etcd) {
    OldLeader old;
    if (!old.start(etcd)) return -1;
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return -2;
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::dup2(out[1], 1);
        const std::string ep = "--endpoints=" + etcd.client_url();
        ::setenv("ETCDCTL_API", "3", 1);
        ::execl(etcdctl_bin().c_str(), "etcdctl", ep.c_str(), "elect", kElection, "peer", nullptr);
        ::_exit(127);
    }
    ::close(out[1]);
    double took = -3;
    if (wait_for_candidates(etcd, 2)) {
        std::this_thread::sleep_for(Ms(100));
        const auto t0 = Steady::now();
        if (revoke(etcd, old.e->lease_id())) {
            pollfd p{out[0], POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(kRoundBound.count())) > 0) took = ms_since(t0, Steady::now());
        }
    }
    ::kill(pid, SIGINT);  // etcdctl elect resigns on SIGINT
    ::waitpid(pid, nullptr, 0);
    ::close(out[0]);
    (void)old.e->resign(kCall);
    return took;
}

double percentile(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
    return v[i];
}

}  // namespace

int main(int argc, char** argv) {
    int rounds = 30;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            rounds = std::atoi(argv[++i]);
        } else {
            std::fprintf(stderr, "usage: %s [--rounds N]\n", argv[0]);
            return 2;
        }
    }
    if (rounds < 1 || rounds > 10000) {
        std::fprintf(stderr, "--rounds must be 1..10000\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    EtcdServer etcd;
    if (auto s = etcd.start(); !s) {
        std::fprintf(stderr, "etcd: %s\n", s.message());
        return 1;
    }
    double load[3] = {};
    if (::getloadavg(load, 3) == 3) std::printf("load average at start: %.2f %.2f %.2f\n", load[0], load[1], load[2]);
    std::vector<double> mine, peer;
    for (int r = 0; r < rounds; ++r) {
        const double n = nvfence_round(etcd, etcd.dir(), r);
        const double p = peer_round(etcd);
        std::printf("round %d: nvfence %.1f ms, etcdctl elect %.1f ms\n", r + 1, n, p);
        std::fflush(stdout);
        if (n < 0 || p < 0) {
            std::fprintf(stderr, "round %d failed (%g, %g): no verified takeover\n", r + 1, n, p);
            return 1;
        }
        mine.push_back(n);
        peer.push_back(p);
    }
    const double m50 = percentile(mine, 0.5), m99 = percentile(mine, 0.99);
    const double p50 = percentile(peer, 0.5), p99 = percentile(peer, 0.99);
    std::printf("nvfence (revoke -> verified preempt, HOLDER): median %.1f ms, p99 %.1f ms (%d rounds)\n", m50, m99,
                rounds);
    std::printf("etcdctl elect (revoke -> elected):            median %.1f ms, p99 %.1f ms\n", p50, p99);
    std::printf("ratio nvfence / etcdctl elect: median %.2f, p99 %.2f; nvfence's own part: median %.1f ms\n",
                m50 / p50, m99 / p99, m50 - p50);
    std::printf("target: median <= 100 ms %s, p99 <= 300 ms %s\n", m50 <= 100 ? "met" : "NOT met",
                m99 <= 300 ? "met" : "NOT met");
    return 0;
}
