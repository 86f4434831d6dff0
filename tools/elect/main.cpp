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

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"nvfence-elect: run the etcd elector against a device (see docs/ETCD.md)"};
    std::string dev, endpoints, election, lease_loss = "fence", state_dir = "/var/lib/nvfence";
    std::string ca, cert, keyf, user, password_file;
    unsigned node = 0, tag = 0, ttl = 5, hold_s = 10, campaign_s = 60;
    unsigned timeout_ms = 0;
    app.add_option("DEV", dev, "shared namespace (/dev/nvmeXnY)")->required();
    app.add_option("--node", node, "this host's node id, 1..255")->required()->check(CLI::Range(1, 255));
    app.add_option("--tag", tag, "cluster tag, 0..255")->check(CLI::Range(0, 255));
    app.add_option("--etcd-endpoints", endpoints, "http(s)://host:port,...")->required();
    app.add_option("--etcd-ca-file", ca, "PEM CA bundle");
    app.add_option("--etcd-cert-file", cert, "PEM client certificate");
    app.add_option("--etcd-key-file", keyf, "PEM client key");
    app.add_option("--etcd-user", user, "etcd user (with --etcd-password-file)");
    app.add_option("--etcd-password-file", password_file, "file holding the etcd user's password");
    app.add_option("--election-name", election, "default nvfence/<volume>");
    app.add_option("--lease-ttl-s", ttl, "lease TTL, >= 2");
    app.add_option("--etcd-timeout-ms", timeout_ms, "bound of each etcd call");
    app.add_option("--lease-loss", lease_loss, "fence | hold");
    app.add_option("--state-dir", state_dir, "epoch and token records");
    app.add_option("--hold-s", hold_s, "hold this long, then resign (0: until lost)");
    app.add_option("--campaign-s", campaign_s, "give up campaigning after this long");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int rc = app.exit(e);
        return rc == 0 ? 0 : 2;
    }

    std::map<std::string, std::string> kv = {{"elector", "etcd"},       {"etcd_endpoints", endpoints},
                                             {"lease_ttl_s", std::to_string(ttl)}, {"lease_loss", lease_loss}};
    if (!election.empty()) kv["election_name"] = election;
    if (!ca.empty()) kv["etcd_ca_file"] = ca;
    if (!cert.empty()) kv["etcd_cert_file"] = cert;
    if (!keyf.empty()) kv["etcd_key_file"] = keyf;
    if (!user.empty()) kv["etcd_user"] = user;
    if (!password_file.empty()) kv["etcd_password_file"] = password_file;
    if (timeout_ms) kv["etcd_timeout_ms"] = std::to_string(timeout_ms);
    std::string why;
    // Bad flags are usage errors before the device is touched.
    if (auto s = parse_elector_settings(kv, "volume", why); !s || !check_elector_files(*s, why)) {
        std::fprintf(stderr, "nvfence-elect: %s\n", why.c_str());
        return 2;
    }

    auto ns = Namespace::open(dev);
    if (!ns) {
        std::fprintf(stderr, "nvfence-elect: %s: %s\n", dev.c_str(), ns.error().message().c_str());
        return code(ns.error());
    }
    if (auto s = (*ns)->require_reservations(&why); !s) {
        std::fprintf(stderr, "nvfence-elect: %s\n", why.c_str());
        return code(s.error());
    }
    const auto& info = (*ns)->info();
    if (!info.host_id) {
        std::fprintf(stderr, "nvfence-elect: %s: cannot read this host's NVMe host identifier\n", dev.c_str());
        return 1;
    }

    auto settings = parse_elector_settings(kv, info.volume, why);
    if (!settings) {
        std::fprintf(stderr, "nvfence-elect: %s\n", why.c_str());
        return 2;
    }
    char host[256] = "?";
    ::gethostname(host, sizeof host - 1);
    auto elector = EtcdElector::create(
        etcd_options(*settings, "node=" + std::to_string(node) + " host=" + host, state_dir, info.volume));
    if (!elector) {
        std::fprintf(stderr, "nvfence-elect: %s\n", elector.error().message().c_str());
        return 2;
    }
    EtcdElector& e = **elector;
    const Ms call{settings->etcd_timeout_ms};
    const LeaseGuardOptions gopts = lease_guard_options(*settings);

    Reservations resv((*ns)->passthru(), info.nsid);
    EpochStore store(state_dir, info.volume);
    FenceOptions fo;
    fo.node = static_cast<uint8_t>(node);
    fo.tag = static_cast<uint8_t>(tag);
    Fence fence(resv, *info.host_id, fo, &store);

    say("campaigning in " + settings->election_name + " as node " + std::to_string(node) + ", TTL " +
        std::to_string(ttl) + " s");
    const auto give_up = Steady::now() + std::chrono::seconds(campaign_s);
    Backoff backoff(100, 2000);
    std::optional<LeaseGuard> guard;
    std::optional<LeaderInfo> won;
    while (!won) {
        if (Steady::now() >= give_up) {
            say("not elected within " + std::to_string(campaign_s) + " s; last error: " + e.last_error());
            (void)e.resign(call);
            return 1;
        }
        if (e.lease_id() == 0) guard.reset();
        const auto sent = Steady::now();
        if (!guard) guard.emplace(gopts, sent);
        auto r = e.campaign(Ms(gopts.renew_interval_ms));
        if (r) {
            won = *r;
            break;
        }
        if (r.error() != make_error_code(Errc::timeout)) {
            say("campaign: " + r.error().message() + (e.last_error().empty() ? "" : " (" + e.last_error() + ")"));
            std::this_thread::sleep_for(Ms(backoff.next_ms()));
            continue;
        }
        const auto ks = Steady::now();
        guard->on_keepalive(ks, e.keepalive(call));
    }
    if (guard->verdict(Steady::now()) == GuardVerdict::step_down) {
        say("won, but the lease may have expired meanwhile: not acting on this term");
        (void)e.resign(call);
        return 6;
    }
    say("elected: leader key " + won->key + " rev " + std::to_string(won->revision));
    auto w = carry_out_win(e, fence, &store, *info.host_id, fo.tag, call);
    if (!w) {
        say("carrying out the win failed: " + w.error().message());
        (void)e.resign(call);
        return code(w.error());
    }
    say("token " + std::to_string(w->term.epoch) + (w->term.rollback_seen ? " (etcd counter was behind)" : "") +
        ": " + win_action_name(w->decision.action) + ": " + w->decision.why);
    if (w->decision.action == WinAction::stale) {
        (void)e.resign(call);
        return 6;
    }
    say("holding with key epoch " + std::to_string(w->key_epoch));

    const auto until = hold_s ? Steady::now() + std::chrono::seconds(hold_s) : Steady::time_point::max();
    bool announced_hold = false;
    while (Steady::now() < until) {
        const auto now = Steady::now();
        switch (guard->verdict(now)) {
        case GuardVerdict::renew: {
            guard->on_keepalive(now, e.keepalive(call));
            guard->on_leader(e.leader(call), w->term.leader);
            break;
        }
        case GuardVerdict::step_down:
            say(std::string("leadership lost: ") + loss_reason_name(guard->reason(Steady::now())) +
                ": would stop writers and self-fence");
            (void)e.resign(call);
            return 3;
        case GuardVerdict::hold_until_preempted: {
            if (!announced_hold) say("lease may have expired: holding until preempted (lease_loss = hold)");
            announced_hold = true;
            auto st = fence.verify();
            if (st && !(fence.mine(*st) && fence.mine(*st)->holder)) {
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
    if (auto s = e.resign(call); !s) say("resign: " + s.error().message());
    return 0;
}
