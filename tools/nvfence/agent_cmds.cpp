// SPDX-License-Identifier: MIT
#include "agent_cmds.hpp"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <vector>

#include "json.hpp"
#include "status_all.hpp"
#include "agent/agent_config.hpp"
#include "nvfence/control.hpp"
#include "nvfence/error.hpp"
#include "nvfence/key.hpp"

namespace nvfence::cli {
namespace {

constexpr uint32_t kStatusTimeoutMs = 5000;
constexpr uint32_t kChangeTimeoutMs = 60000;

int code(ExitCode c) { return static_cast<int>(c); }

const char* verb(const AgentCli& st) {
    if (st.status && st.status->parsed()) return "status";
    if (st.takeover && st.takeover->parsed()) return "takeover";
    if (st.handoff && st.handoff->parsed()) return "handoff";
    return "rejoin";
}

// As every nvfence failure: one line on stderr, and with --json the object
// {"command", "error", "exit_code", "cause"} (nvfence(8)), @p cause the
// error behind it.
int fail(const AgentCli& st, const std::string& what, int rc, std::error_code cause, const std::string& hint = {}) {
    std::string line = std::string("nvfence: ") + verb(st) + ": " + what;
    if (!hint.empty()) line += ": " + hint;
    std::cerr << line << "\n";
    if (st.json) {
        Json j;
        j.begin_object().key("command").str(verb(st)).key("error").str(line);
        j.key("exit_code").num(static_cast<uint64_t>(rc)).key("cause").str(cause.message()).end_object();
        std::cout << j.text() << "\n";
    }
    return rc;
}

// The socket to talk to: --socket, else /run/nvfence/VOLUME.sock, else the
// only agent socket in /run/nvfence.
std::optional<std::string> socket_path(const AgentCli& st, int& rc) {
    if (!st.socket.empty()) return st.socket;
    if (!st.volume.empty()) {
        if (!valid_instance_name(st.volume)) {
            rc = fail(st, "\"" + st.volume + "\" is not a volume name", code(ExitCode::usage), make_error_code(Errc::invalid_argument),
                      "give the volume id or instance name (e.g. vol-0123456789abcdef0), or --socket PATH");
            return std::nullopt;
        }
        return control_socket_path(st.volume);
    }
    std::vector<std::string> found;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(kRunDir, ec)) {
        if (e.path().extension() == ".sock" && e.is_socket(ec)) found.push_back(e.path().string());
        if (found.size() > 16) break;
    }
    if (found.size() == 1) return found.front();
    std::string hint = "give VOLUME or --socket PATH";
    if (found.empty()) hint += " (no agent socket in " + std::string(kRunDir) + ")";
    else hint += " (several agents run here)";
    rc = fail(st, "which agent?", code(ExitCode::usage), make_error_code(Errc::invalid_argument), hint);
    return std::nullopt;
}

int fail_transport(const AgentCli& st, const std::string& path, std::error_code ec, uint32_t timeout_ms) {
    const auto f = transport_failure(path, ec, timeout_ms);
    return fail(st, f.what, f.exit_code, ec, f.hint);
}

void print_status(const ControlReply& r) {
    std::printf("volume:      %s (%s)\n", r.volume.c_str(), r.device.c_str());
    std::printf("state:       %s\n", agent_state_name(r.state));
    if (r.check_only)
        std::printf("role:        check-only watcher (role = watch): never registers; runs the fence action when "
                    "this node's key, once seen, is gone\n");
    std::printf("key:         %s%s\n", key_words(r.key).c_str(),
                r.check_only && r.key ? " (this node's key, registered by the cluster manager)" : "");
    std::printf("holder:      %s%s\n", key_words(r.holder).c_str(), r.holder_self ? " (this host)" : "");
    std::printf("generation:  %u\n", r.generation);
    std::printf("reservation: %s, mode %s, %u registrant(s)\n",
                r.resv_type == ResvType::none ? "none" : resv_type_name(r.resv_type),
                r.mode == ResvType::write_exclusive ? "exclusive" : "shared", r.registrants);
    if (r.last_check_age_ms == kControlNever)
        std::printf("last check:  never\n");
    else
        std::printf("last check:  %s ago (%s)\n", duration_words(r.last_check_age_ms).c_str(),
                    utc(r.last_check_unix_ms).c_str());
    if (r.state == AgentState::fenced) {
        std::printf("fenced:      for %s: %s\n",
                    r.fenced_for_ms == kControlNever ? "?" : duration_words(r.fenced_for_ms).c_str(),
                    r.fence_reason.c_str());
        if (r.check_only)
            std::printf("             WATCHING again once the cluster manager unfences this node (its key is back)\n");
        else
            std::printf("             only 'nvfence rejoin' brings this host back (as a standby)\n");
    } else {
        std::printf("fenced:      no\n");
    }
    if (r.check_failures)
        std::printf("failing:     %u consecutive check(s): %s\n", r.check_failures, r.last_error.c_str());
    // nvfenced with an elector appends its state to the status message.
    if (auto at = r.message.find("; elector: "); at != std::string::npos)
        std::printf("elector:     %s\n", r.message.c_str() + at + 11);
    std::printf("agent:       pid %u, up %s, %llu checks, %llu notifications\n", r.pid,
                duration_words(r.uptime_ms).c_str(), static_cast<unsigned long long>(r.checks),
                static_cast<unsigned long long>(r.notifications));
}

// status --all and its directories.
void add_status_all(CLI::App* status, CLI::Option* vol, CLI::Option* sock, AgentCli& st) {
    auto* all = status->add_flag("--all", st.all,
                                 "every agent of this host, one line each: every volume configured in --config-dir "
                                 "and every agent socket in --run-dir");
    all->excludes(vol)->excludes(sock);
    // Not needs(all): CLI11 would print "Needs: --all" into the option's
    // column; run_agent_commands() refuses them without --all instead.
    st.config_dir_opt = status->add_option(
        "--config-dir", st.config_dir,
        "with --all: where nvfenced@.service's configurations are, DIR/VOLUME.conf (default /etc/nvfence)");
    st.run_dir_opt =
        status->add_option("--run-dir", st.run_dir, "with --all: where the agents' sockets are (default /run/nvfence)");
}

// status --all: every agent of this host, one line each.
int run_status_all(const AgentCli& st) {
    auto volumes = find_volumes(st.config_dir, st.run_dir);
    ask_all(volumes, st.timeout_ms ? st.timeout_ms : kStatusTimeoutMs);
    const int rc = status_all_exit_code(volumes);
    const std::string error = status_all_error(volumes, st.config_dir, st.run_dir);
    for (const auto& v : volumes)
        if (!v.answered() && !v.reply)
            std::cerr << "nvfence: status: " << v.volume << ": " << v.failure.what
                      << (v.failure.hint.empty() ? "" : ": " + v.failure.hint) << "\n";
    if (!error.empty()) std::cerr << "nvfence: status: " << error << "\n";
    if (st.json) std::cout << status_all_json(volumes, rc, error) << "\n";
    else if (!volumes.empty()) std::cout << format_status_table(volumes);
    return rc;
}

}  // namespace

Result<uint64_t> parse_cli_key(std::string_view text) {
    if (!text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos) {
        auto v = parse_uint(text, 1, UINT64_MAX);
        if (!v) return make_error_code(Errc::invalid_key);
        return *v;
    }
    return parse_key(text);
}

void add_agent_commands(CLI::App& app, AgentCli& st) {
    auto common = [&](CLI::App* sub) {
        auto* vol = sub->add_option("volume", st.volume,
                                    "the agent's volume (socket /run/nvfence/VOLUME.sock); default: the only agent here");
        auto* sock = sub->add_option("--socket", st.socket, "the agent's control socket");
        vol->excludes(sock);
        if (sub == st.status) add_status_all(sub, vol, sock, st);
        sub->add_flag("--json", st.json, "machine-readable output (keys as hex strings)");
        sub->add_option("--timeout-ms", st.timeout_ms, "how long to wait for the agent (default 5000 for status, 60000 otherwise)")
            ->check(CLI::Range(1u, 600000u));
    };
    st.status = app.add_subcommand(
        "status", "the agent's state: key, epoch, holder, generation, last check, time fenced; --all: every agent here");
    common(st.status);
    st.status->footer("\nExample: nvfence status vol-0123456789abcdef0 --json\n         nvfence status --all --json");
    st.takeover = app.add_subcommand(
        "takeover", "ask the agent to take the reservation (verified preempt-and-abort, as 'nvfence preempt')");
    common(st.takeover);
    st.takeover->footer("\nExample: nvfence takeover vol-0123456789abcdef0 --victim nf:0:1:7");
    st.takeover->add_option("--victim", st.victim, "key to preempt (default: the current holder)");
    st.handoff = app.add_subcommand(
        "handoff", "ask the agent to release the reservation and stay registered (another host can then take it without preempting)");
    common(st.handoff);
    st.handoff->footer("\nExample: nvfence handoff vol-0123456789abcdef0");
    st.rejoin = app.add_subcommand(
        "rejoin", "operator: bring a FENCED agent back as a standby with a new epoch (never acquires)");
    common(st.rejoin);
    st.rejoin->footer("\nExample: nvfence rejoin vol-0123456789abcdef0");
}

std::optional<int> run_agent_commands(const AgentCli& st) {
    ControlRequest req;
    if (st.status && st.status->parsed()) req.op = ControlOp::status;
    else if (st.takeover && st.takeover->parsed()) req.op = ControlOp::takeover;
    else if (st.handoff && st.handoff->parsed()) req.op = ControlOp::handoff;
    else if (st.rejoin && st.rejoin->parsed()) req.op = ControlOp::rejoin;
    else return std::nullopt;
    if (req.op == ControlOp::takeover && !st.victim.empty()) {
        auto k = parse_cli_key(st.victim);
        if (!k)
            return fail(st, "--victim \"" + st.victim + "\" is not a reservation key", code(ExitCode::usage),
                        make_error_code(Errc::invalid_argument),
                        "use nf:TAG:NODE:EPOCH, 0x followed by 1-16 hex digits, or a decimal number");
        req.victim = *k;
    }
    if (req.op == ControlOp::status && st.all) return run_status_all(st);
    for (const CLI::Option* o : {st.config_dir_opt, st.run_dir_opt})
        if (o && o->count())
            return fail(st, o->get_name() + " needs --all", code(ExitCode::usage),
                        make_error_code(Errc::invalid_argument), "nvfence status --all " + o->get_name() + " DIR");
    int rc = 0;
    auto path = socket_path(st, rc);
    if (!path) return rc;
    req.id = static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    const uint32_t timeout = st.timeout_ms ? st.timeout_ms : req.op == ControlOp::status ? kStatusTimeoutMs : kChangeTimeoutMs;
    auto reply = control_request(*path, req, timeout);
    if (!reply) return fail_transport(st, *path, reply.error(), timeout);
    const ControlReply& r = *reply;
    if (st.json) {
        Json j;
        j.begin_object().key("command").str(verb(st)).key("exit_code").num(r.exit_code);
        if (r.exit_code) j.key("error").str(r.message);
        json_reply(j, r);
        j.end_object();
        std::cout << j.text() << "\n";
    }
    if (r.exit_code != 0) {
        std::cerr << "nvfence: " << verb(st) << ": " << r.message << "\n";
        return r.exit_code;
    }
    if (st.json) return 0;
    switch (req.op) {
    case ControlOp::status: print_status(r); break;
    case ControlOp::takeover:
        if (!r.changed) {
            std::printf("takeover: this host already holds %s; nothing changed\n", r.volume.c_str());
        } else {
            std::printf("takeover: this host now holds %s\n", r.volume.c_str());
            if (r.previous_holder) std::printf("previous:    %s\n", key_words(r.previous_holder).c_str());
        }
        std::printf("holder:      %s\ngeneration:  %u\n%s\n", key_words(r.key).c_str(), r.generation, r.message.c_str());
        break;
    case ControlOp::handoff:
        std::printf("handoff: %s\nstate:       %s\nkey:         %s\n", r.message.c_str(), agent_state_name(r.state),
                    key_words(r.key).c_str());
        break;
    case ControlOp::rejoin:
        std::printf("rejoin: %s\nstate:       %s\nkey:         %s\n", r.message.c_str(), agent_state_name(r.state),
                    key_words(r.key).c_str());
        break;
    }
    return 0;
}

}  // namespace nvfence::cli
