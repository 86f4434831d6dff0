// SPDX-License-Identifier: MIT
#include "status_all.hpp"

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "agent/agent_config.hpp"
#include "nvfence/error.hpp"
#include "nvfence/key.hpp"

namespace nvfence::cli {

namespace {

constexpr size_t kMaxVolumes = 1024;

std::string trim(std::string s) {
    const auto b = s.find_first_not_of(" \t\r");
    if (b == std::string::npos) return {};
    s = s.substr(b);
    return s.substr(0, s.find_last_not_of(" \t\r") + 1);
}

std::string short_key(uint64_t key) { return key ? format_key(key) : std::string("none"); }

std::string pad(const std::string& s, size_t width) {
    return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

// The cells of one volume's line.
std::vector<std::string> row(const VolumeStatus& v) {
    if (!v.answered()) {
        const std::string why = v.reply ? v.reply->message : v.failure.what;
        return {v.volume, "-", "-", "-", "not answering: " + why};
    }
    const ControlReply& r = *v.reply;
    std::string holder = short_key(r.holder);
    if (r.holder && r.holder_self) holder += " (this host)";
    const std::string age =
        r.last_check_age_ms == kControlNever ? std::string("never") : duration_words(r.last_check_age_ms) + " ago";
    return {v.volume, agent_state_name(r.state), short_key(r.key), holder, age};
}

}  // namespace

std::string key_words(uint64_t key) {
    if (key == 0) return "none";
    if (auto f = decode_key(key))
        return format_key(key) + " (node " + std::to_string(f->node) + ", epoch " + std::to_string(f->epoch) + ")";
    return format_key_hex(key) + " (foreign)";
}

std::string duration_words(uint64_t ms) {
    if (ms < 1000) return std::to_string(ms) + " ms";
    uint64_t s = ms / 1000;
    const uint64_t d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60;
    s %= 60;
    std::string out;
    if (d) out += std::to_string(d) + "d ";
    if (d || h) out += std::to_string(h) + "h ";
    if (d || h || m) out += std::to_string(m) + "m ";
    out += std::to_string(s) + "s";
    return out;
}

std::string utc(uint64_t unix_ms) {
    const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

void json_reply(Json& j, const ControlReply& r) {
    auto key_or_null = [&](const char* name, uint64_t k) {
        j.key(name);
        if (k) j.str(format_key_hex(k)); else j.null();
        std::string text = std::string(name) + "_text";
        j.key(text);
        if (k) j.str(format_key(k)); else j.null();
    };
    auto ms_or_null = [&](const char* name, uint64_t v) {
        j.key(name);
        if (v == kControlNever) j.null(); else j.num(v);
    };
    j.key("state").str(agent_state_name(r.state));
    j.key("check_only").boolean(r.check_only);
    j.key("changed").boolean(r.changed);
    j.key("message").str(r.message);
    j.key("volume").str(r.volume).key("device").str(r.device);
    key_or_null("key", r.key);
    const auto f = r.key ? decode_key(r.key) : std::nullopt;
    j.key("epoch");
    if (f) j.num(f->epoch); else j.null();
    j.key("node").num(r.node).key("tag").num(r.tag);
    j.key("mode").str(resv_type_short(r.mode));
    key_or_null("holder", r.holder);
    j.key("holder_self").boolean(r.holder_self);
    key_or_null("previous_holder", r.previous_holder);
    j.key("generation").num(r.generation);
    j.key("type").str(resv_type_short(r.resv_type));
    j.key("registrants").num(r.registrants);
    ms_or_null("last_check_age_ms", r.last_check_age_ms);
    j.key("last_check");
    if (r.last_check_unix_ms) j.str(utc(r.last_check_unix_ms)); else j.null();
    ms_or_null("fenced_for_ms", r.fenced_for_ms);
    j.key("fence_reason");
    if (r.fence_reason.empty()) j.null(); else j.str(r.fence_reason);
    j.key("check_failures").num(r.check_failures);
    j.key("last_error");
    if (r.last_error.empty()) j.null(); else j.str(r.last_error);
    j.key("checks").num(r.checks).key("notifications").num(r.notifications);
    j.key("pid").num(r.pid).key("uptime_ms").num(r.uptime_ms);
}

TransportFailure transport_failure(const std::string& path, std::error_code ec, uint32_t timeout_ms) {
    const int failure = static_cast<int>(ExitCode::failure);
    if (ec == errno_error(ENOENT))
        return {"no nvfenced listening at " + path, "is the agent running? (systemctl status 'nvfenced@*')", failure};
    if (ec == errno_error(ECONNREFUSED)) return {"nvfenced is not running (stale socket " + path + ")", "", failure};
    if (ec == errno_error(EACCES) || ec == errno_error(EPERM))
        return {"permission denied on " + path, "run as root or as a member of the agent's socket_group",
                static_cast<int>(ExitCode::permission)};
    if (ec == Errc::timeout)
        return {"no answer from " + path + " within " + std::to_string(timeout_ms) + " ms",
                "the agent may be stuck on a slow device; see its journal", failure};
    if (ec == Errc::protocol)
        return {"unexpected answer from " + path,
                "nvfence and nvfenced may be different versions (control protocol " + std::to_string(kControlVersion) +
                    " here)",
                failure};
    return {path + ": " + ec.message(), "", static_cast<int>(exit_code_for(ec))};
}

std::string configured_socket(const std::string& conf_path) {
    std::ifstream in(conf_path);
    std::string line, found;
    while (std::getline(in, line)) {
        line = trim(line.substr(0, line.find('#')));
        const auto eq = line.find('=');
        if (eq == std::string::npos || trim(line.substr(0, eq)) != "control_socket") continue;
        std::string v = trim(line.substr(eq + 1));
        if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front())
            v = v.substr(1, v.size() - 2);
        found = v;
    }
    return found;
}

std::vector<VolumeStatus> find_volumes(const std::string& config_dir, const std::string& run_dir) {
    namespace fs = std::filesystem;
    std::map<std::string, VolumeStatus> by_name;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(config_dir, ec)) {
        const std::string name = e.path().stem().string();
        if (e.path().extension() != ".conf" || !valid_instance_name(name) || by_name.size() >= kMaxVolumes) continue;
        VolumeStatus v;
        v.volume = name;
        v.configured = true;
        v.socket = configured_socket(e.path().string());
        if (v.socket.empty()) v.socket = run_dir + "/" + name + ".sock";
        by_name[name] = v;
    }
    for (const auto& e : fs::directory_iterator(run_dir, ec)) {
        std::error_code sec;
        if (e.path().extension() != ".sock" || !e.is_socket(sec) || by_name.size() >= kMaxVolumes) continue;
        const std::string path = e.path().string();
        const bool named = std::any_of(by_name.begin(), by_name.end(),
                                       [&](const auto& kv) { return kv.second.socket == path; });
        const std::string name = e.path().stem().string();
        if (named || by_name.count(name)) continue;
        VolumeStatus v;
        v.volume = name;
        v.socket = path;
        by_name[name] = v;
    }
    std::vector<VolumeStatus> out;
    for (auto& kv : by_name) out.push_back(std::move(kv.second));
    return out;
}

void ask_all(std::vector<VolumeStatus>& volumes, uint32_t timeout_ms) {
    std::vector<std::thread> askers;
    askers.reserve(volumes.size());
    for (size_t i = 0; i < volumes.size(); ++i) {
        askers.emplace_back([&v = volumes[i], i, timeout_ms] {
            ControlRequest q;
            q.op = ControlOp::status;
            q.id = static_cast<uint32_t>(i + 1);
            auto r = control_request(v.socket, q, timeout_ms);
            if (r) {
                v.reply = *r;
                if (r->exit_code != 0) v.failure = {r->message, "", static_cast<int>(r->exit_code)};
            } else {
                v.error = r.error();
                v.failure = transport_failure(v.socket, r.error(), timeout_ms);
            }
        });
    }
    for (auto& t : askers) t.join();
}

int status_all_exit_code(const std::vector<VolumeStatus>& volumes) {
    if (volumes.empty()) return static_cast<int>(ExitCode::failure);
    bool permission = false, other = false;
    for (const auto& v : volumes) {
        if (v.answered()) continue;
        if (v.failure.exit_code == static_cast<int>(ExitCode::permission)) permission = true;
        else other = true;
    }
    if (other) return static_cast<int>(ExitCode::failure);
    return permission ? static_cast<int>(ExitCode::permission) : 0;
}

std::string format_status_table(const std::vector<VolumeStatus>& volumes) {
    std::vector<std::vector<std::string>> rows = {{"VOLUME", "STATE", "KEY", "HOLDER", "LAST CHECK"}};
    for (const auto& v : volumes) rows.push_back(row(v));
    std::vector<size_t> width(rows.front().size(), 0);
    for (const auto& r : rows)
        for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
    std::string out;
    for (const auto& r : rows) {
        std::string line;
        for (size_t c = 0; c < r.size(); ++c) line += c + 1 < r.size() ? pad(r[c], width[c] + 2) : r[c];
        out += line + "\n";
    }
    return out;
}

std::string status_all_json(const std::vector<VolumeStatus>& volumes, int exit_code, const std::string& error) {
    Json j;
    j.begin_object().key("command").str("status").key("exit_code").num(static_cast<uint64_t>(exit_code));
    if (exit_code != 0) {
        const auto first = std::find_if(volumes.begin(), volumes.end(), [](const auto& v) { return !v.answered(); });
        const std::string cause = first == volumes.end()  ? std::string("no volume found")
                                  : first->reply          ? first->reply->message
                                                          : first->error.message();
        j.key("error").str(error).key("cause").str(cause);
    }
    j.key("volumes").begin_array();
    for (const auto& v : volumes) {
        j.begin_object().key("name").str(v.volume).key("socket").str(v.socket);
        j.key("configured").boolean(v.configured).key("answering").boolean(v.answered());
        if (v.answered()) {
            json_reply(j, *v.reply);  // "volume": the agent's
        } else {
            j.key("volume").str(v.volume).key("error").str(v.failure.what).key("cause");
            j.str(v.reply ? v.reply->message : v.error.message());
        }
        j.end_object();
    }
    j.end_array().end_object();
    return j.text();
}

std::string status_all_error(const std::vector<VolumeStatus>& volumes, const std::string& config_dir,
                             const std::string& run_dir) {
    if (volumes.empty())
        return "no nvfenced volume here: no " + config_dir + "/<volume>.conf and no agent socket in " + run_dir;
    std::string names;
    size_t n = 0;
    for (const auto& v : volumes) {
        if (v.answered()) continue;
        names += (n++ ? ", " : "") + v.volume;
    }
    if (n == 0) return {};
    return std::to_string(n) + " of " + std::to_string(volumes.size()) + " agent" + (volumes.size() == 1 ? "" : "s") +
           " not answering: " + names;
}

}  // namespace nvfence::cli
