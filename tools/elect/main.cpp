// SPDX-License-Identifier: MIT
// nvfence-elect: the etcd elector and the Fence on one device, before
// nvfenced integrates them: campaign in etcd, carry the win out on the device
// (token = key epoch, verified preempt-and-abort), hold while the lease may
// live, and say when and why leadership ended. One line per event, with
// milliseconds since start, so a lab run can be timed.
//
// Exit codes: 0 held for --hold-s and resigned; 2 usage; 3 leadership lost
// (the host would stop its writers and fence itself) or the device refused
// us; 4 device unsupported; 5 permission; 6 stale token or lost race; 1
// anything else (etcd unreachable for --campaign-s included).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "elector/elector_config.hpp"
#include "elector/elector_run.hpp"
#include "nvfence/error.hpp"
#include "elector/etcd.hpp"
#include "nvfence/key.hpp"
#include "nvfence/namespace.hpp"
#include "nvfence/reservation.hpp"

using namespace nvfence;
using Steady = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

namespace {

const Steady::time_point kStart = Steady::now();

long long since_ms() { return std::chrono::duration_cast<Ms>(Steady::now() - kStart).count(); }

void say(const std::string& s) {
    std::printf("[%7lld ms] %s\n", since_ms(), s.c_str());
    std::fflush(stdout);
}

int code(std::error_code ec) { return static_cast<int>(exit_code_for(ec)); }

// The command line, as CLI11 fills it in.
struct Args {
    std::string dev, endpoints, election, lease_loss = "fence", state_dir = "/var/lib/nvfence";
    std::string ca, cert, keyf, user, password_file;
    unsigned node = 0, tag = 0, ttl = 5, hold_s = 10, campaign_s = 60;
    unsigned timeout_ms = 0;
};

void add_options(CLI::App& app, Args& a) {
    app.add_option("DEV", a.dev, "shared namespace (/dev/nvmeXnY)")->required();
    app.add_option("--node", a.node, "this host's node id, 1..255")->required()->check(CLI::Range(1, 255));
    app.add_option("--tag", a.tag, "cluster tag, 0..255")->check(CLI::Range(0, 255));
    app.add_option("--etcd-endpoints", a.endpoints, "http(s)://host:port,...")->required();
    app.add_option("--etcd-ca-file", a.ca, "PEM CA bundle");
    app.add_option("--etcd-cert-file", a.cert, "PEM client certificate");
    app.add_option("--etcd-key-file", a.keyf, "PEM client key");
    app.add_option("--etcd-user", a.user, "etcd user (with --etcd-password-file)");
    app.add_option("--etcd-password-file", a.password_file, "file holding the etcd user's password");
    app.add_option("--election-name", a.election, "default nvfence/<volume>");
    app.add_option("--lease-ttl-s", a.ttl, "lease TTL, >= 2");
    app.add_option("--etcd-timeout-ms", a.timeout_ms, "bound of each etcd call");
    app.add_option("--lease-loss", a.lease_loss, "fence | hold");
    app.add_option("--state-dir", a.state_dir, "epoch and token records");
    app.add_option("--hold-s", a.hold_s, "hold this long, then resign (0: until lost)");
    app.add_option("--campaign-s", a.campaign_s, "give up campaigning after this long");
}

// The flags as nvfenced's configuration keys, so parse_elector_settings()
// checks them as it checks the daemon's.
std::map<std::string, std::string> elector_kv(const Args& a) {
    std::map<std::string, std::string> kv = {{"elector", "etcd"},       {"etcd_endpoints", a.endpoints},
                                             {"lease_ttl_s", std::to_string(a.ttl)}, {"lease_loss", a.lease_loss}};
    if (!a.election.empty()) kv["election_name"] = a.election;
    if (!a.ca.empty()) kv["etcd_ca_file"] = a.ca;
    if (!a.cert.empty()) kv["etcd_cert_file"] = a.cert;
    if (!a.keyf.empty()) kv["etcd_key_file"] = a.keyf;
    if (!a.user.empty()) kv["etcd_user"] = a.user;
    if (!a.password_file.empty()) kv["etcd_password_file"] = a.password_file;
    if (a.timeout_ms) kv["etcd_timeout_ms"] = std::to_string(a.timeout_ms);
    return kv;
}

// Opens DEV and checks that it can carry a Fence; null (and @p rc set, the
// error said) when it cannot.
std::unique_ptr<Namespace> open_device(const std::string& dev, int& rc) {
    std::string why;
    auto ns = Namespace::open(dev);
    if (!ns) {
        std::fprintf(stderr, "nvfence-elect: %s: %s\n", dev.c_str(), ns.error().message().c_str());
        rc = code(ns.error());
        return nullptr;
    }
    if (auto s = (*ns)->require_reservations(&why); !s) {
        std::fprintf(stderr, "nvfence-elect: %s\n", why.c_str());
        rc = code(s.error());
        return nullptr;
    }
    if (!(*ns)->info().host_id) {
        std::fprintf(stderr, "nvfence-elect: %s: cannot read this host's NVMe host identifier\n", dev.c_str());
        rc = 1;
        return nullptr;
    }
    return std::move(*ns);
}

// What the campaign, the win and the hold share.
struct Run {
    const Args& a;
    EtcdElector& e;
    Fence& fence;
    EpochStore& store;
    const HostId& self;
    const Ms call;
    const LeaseGuardOptions gopts;
    std::optional<LeaseGuard> guard;
};

// Campaigns until elected, keeping the lease alive meanwhile; nullopt when
// --campaign-s ran out (resigned, said why).
std::optional<LeaderInfo> campaign(Run& r) {
    EtcdElector& e = r.e;
    const auto give_up = Steady::now() + std::chrono::seconds(r.a.campaign_s);
    Backoff backoff(100, 2000);
    while (true) {
        if (Steady::now() >= give_up) {
            say("not elected within " + std::to_string(r.a.campaign_s) + " s; last error: " + e.last_error());
            (void)e.resign(r.call);
            return std::nullopt;
        }
        if (e.lease_id() == 0) r.guard.reset();
        const auto sent = Steady::now();
        if (!r.guard) r.guard.emplace(r.gopts, sent);
        auto won = e.campaign(Ms(r.gopts.renew_interval_ms));
        if (won) return *won;
        if (won.error() != make_error_code(Errc::timeout)) {
            say("campaign: " + won.error().message() + (e.last_error().empty() ? "" : " (" + e.last_error() + ")"));
            std::this_thread::sleep_for(Ms(backoff.next_ms()));
            continue;
        }
        const auto ks = Steady::now();
        r.guard->on_keepalive(ks, e.keepalive(r.call));
    }
}

// Carries the win out on the device (token = key epoch, verified
// preempt-and-abort); nullopt and @p rc (resigned, said why) when this term is
// not to be held.
std::optional<WinResult> act_on_win(Run& r, const LeaderInfo& won, int& rc) {
    if (r.guard->verdict(Steady::now()) == GuardVerdict::step_down) {
        say("won, but the lease may have expired meanwhile: not acting on this term");
        (void)r.e.resign(r.call);
        rc = 6;
        return std::nullopt;
    }
    say("elected: leader key " + won.key + " rev " + std::to_string(won.revision));
    const auto may_act = [&r] {
        const GuardVerdict v = r.guard->verdict(Steady::now());
        return v == GuardVerdict::hold || v == GuardVerdict::renew;
    };
    auto w = carry_out_win(r.e, r.fence, &r.store, r.self, static_cast<uint8_t>(r.a.tag), r.call, may_act);
    if (!w) {
        const bool expired = w.error() == make_error_code(ElectorErrc::lease_expired);
        say(expired ? std::string("the lease may have expired while the token was asked for: not acting on this term")
                    : "carrying out the win failed: " + w.error().message());
        (void)r.e.resign(r.call);
        rc = expired ? 6 : code(w.error());
        return std::nullopt;
    }
    say("token " + std::to_string(w->term.epoch) + (w->term.rollback_seen ? " (etcd counter was behind)" : "") +
        ": " + win_action_name(w->decision.action) + ": " + w->decision.why);
    if (w->decision.action == WinAction::stale) {
        (void)r.e.resign(r.call);
        rc = 6;
        return std::nullopt;
    }
    say("holding with key epoch " + std::to_string(w->key_epoch));
    return std::move(*w);
}

// Holds the won term for --hold-s (0: until lost), renewing the lease; the
// exit code: 0 held and resigned, 3 leadership lost or preempted.
int hold(Run& r, const WinResult& w) {
    EtcdElector& e = r.e;
    const unsigned hold_s = r.a.hold_s;
    const auto until = hold_s ? Steady::now() + std::chrono::seconds(hold_s) : Steady::time_point::max();
    bool announced_hold = false;
    while (Steady::now() < until) {
        const auto now = Steady::now();
        switch (r.guard->verdict(now)) {
        case GuardVerdict::renew: {
            r.guard->on_keepalive(now, e.keepalive(r.call));
            r.guard->on_leader(e.leader(r.call), w.term.leader);
            break;
        }
        case GuardVerdict::step_down:
            say(std::string("leadership lost: ") + loss_reason_name(r.guard->reason(Steady::now())) +
                ": would stop writers and self-fence");
            (void)e.resign(r.call);
            return 3;
        case GuardVerdict::hold_until_preempted: {
            if (!announced_hold) say("lease may have expired: holding until preempted (lease_loss = hold)");
            announced_hold = true;
            auto st = r.fence.verify();
            if (st && !(r.fence.mine(*st) && r.fence.mine(*st)->holder)) {
                say("preempted on the device");
                return 3;
            }
            break;
        }
        case GuardVerdict::hold: break;
        }
        std::this_thread::sleep_for(Ms(50));
    }
    say("held for " + std::to_string(hold_s) + " s; resigning (the reservation stays for the next leader to preempt)");
    if (auto s = e.resign(r.call); !s) say("resign: " + s.error().message());
    return 0;
}

// Everything after the device checked out: the elector and the Fence, then
// campaign, win, hold.
int run(const Args& a, const std::map<std::string, std::string>& kv, Namespace& ns) {
    std::string why;
    const auto& info = ns.info();
    auto settings = parse_elector_settings(kv, info.volume, why);
    if (!settings) {
        std::fprintf(stderr, "nvfence-elect: %s\n", why.c_str());
        return 2;
    }
    char host[256] = "?";
    ::gethostname(host, sizeof host - 1);
    std::string detail;
    auto elector = EtcdElector::create(
        etcd_options(*settings, "node=" + std::to_string(a.node) + " host=" + host, a.state_dir, info.volume),
        &detail);
    if (!elector) {
        std::fprintf(stderr, "nvfence-elect: %s\n", detail.empty() ? elector.error().message().c_str() : detail.c_str());
        return 2;
    }
    Reservations resv(ns.passthru(), info.nsid);
    EpochStore store(a.state_dir, info.volume);
    FenceOptions fo;
    fo.node = static_cast<uint8_t>(a.node);
    fo.tag = static_cast<uint8_t>(a.tag);
    Fence fence(resv, *info.host_id, fo, &store);
    Run r{a, **elector, fence, store, *info.host_id, Ms{settings->etcd_timeout_ms}, lease_guard_options(*settings), {}};

    say("campaigning in " + settings->election_name + " as node " + std::to_string(a.node) + ", TTL " +
        std::to_string(a.ttl) + " s");
    auto won = campaign(r);
    if (!won) return 1;
    int rc = 0;
    auto w = act_on_win(r, *won, rc);
    if (!w) return rc;
    return hold(r, *w);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"nvfence-elect: run the etcd elector against a device (see docs/ETCD.md)"};
    Args a;
    add_options(app, a);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int rc = app.exit(e);
        return rc == 0 ? 0 : 2;
    }

    const auto kv = elector_kv(a);
    std::string why;
    // Bad flags are usage errors before the device is touched.
    if (auto s = parse_elector_settings(kv, "volume", why); !s || !check_elector_files(*s, why)) {
        std::fprintf(stderr, "nvfence-elect: %s\n", why.c_str());
        return 2;
    }
    int rc = 0;
    auto ns = open_device(a.dev, rc);
    if (!ns) return rc;
    return run(a, kv, *ns);
}
