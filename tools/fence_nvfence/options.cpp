// SPDX-License-Identifier: MIT
#include "options.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include "nvfence/command.hpp"
#include "nvfence/error.hpp"
#include "nvfence/key.hpp"
#include "internal/list.hpp"

namespace nvfence::fence_agent {
namespace {
// Node maps also use ";" between entries (node_ids=n1:1;n2:2), as fence_scsi does.
constexpr std::string_view kNodeMapSeparators = ";, \t\n\v\f\r";

enum class Kind { value, flag };

struct Spec {
    const char* name;   // canonical, with '_'
    char short_opt;     // 0: none
    const char* longopt;
    Kind kind;
};

// fence-agents' option names where one exists (action, plug, devices, key,
// delay, aptpl, verbose, quiet, debug_file, corosync_cmap_path), so a stonith
// resource written for fence_scsi reads the same.
constexpr Spec kSpecs[] = {
    {"action", 'o', "action", Kind::value},
    {"plug", 'n', "plug", Kind::value},
    {"nodename", 0, "nodename", Kind::value},
    {"nodeid", 0, "nodeid", Kind::value},
    {"devices", 'd', "devices", Kind::value},
    {"key", 'k', "key", Kind::value},
    {"node_ids", 0, "node-ids", Kind::value},
    {"reservation_type", 0, "reservation-type", Kind::value},
    {"cluster_tag", 0, "cluster-tag", Kind::value},
    {"delay", 0, "delay", Kind::value},
    {"aptpl", 'a', "aptpl", Kind::flag},
    {"verbose", 'v', "verbose", Kind::flag},
    {"quiet", 'q', "quiet", Kind::flag},
    {"debug_file", 'D', "debug-file", Kind::value},
    {"corosync_cmap_path", 0, "corosync-cmap-path", Kind::value},
    {"state_dir", 0, "state-dir", Kind::value},
    {"agent_socket", 0, "agent-socket", Kind::value},
    {"separator", 'C', "separator", Kind::value},
    {"watcher_interval_ms", 0, "watcher-interval-ms", Kind::value},
    {"watcher_device_timeout_ms", 0, "watcher-device-timeout-ms", Kind::value},
    {"help", 'h', "help", Kind::flag},
    {"version", 'V', "version", Kind::flag},
};

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string trim(std::string_view s) {
    size_t b = 0, e = s.size();
    while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
    return std::string(s.substr(b, e - b));
}

// stdin names: '-' and '_' equivalent; port is plug's deprecated alias.
const Spec* find_name(std::string name) {
    std::replace(name.begin(), name.end(), '-', '_');
    if (name == "port") name = "plug";
    if (name == "option") name = "action";  // FenceAgentAPI: deprecated name of action
    for (const auto& s : kSpecs)
        if (name == s.name) return &s;
    return nullptr;
}

const Spec* find_long(std::string_view name) {
    if (name == "port") name = "plug";  // not a fence-agents longopt, but harmless
    for (const auto& s : kSpecs)
        if (name == s.longopt) return &s;
    return nullptr;
}

const Spec* find_short(char c) {
    for (const auto& s : kSpecs)
        if (s.short_opt == c) return &s;
    return nullptr;
}

std::optional<Action> parse_action(const std::string& a) {
    const std::string s = lower(a);
    if (s == "on" || s == "enable") return Action::on;
    if (s == "off" || s == "disable") return Action::off;
    if (s == "status") return Action::status;
    if (s == "monitor") return Action::monitor;
    if (s == "list") return Action::list;
    if (s == "list-status") return Action::list_status;
    if (s == "metadata" || s == "meta-data") return Action::metadata;
    if (s == "manpage") return Action::manpage;
    if (s == "validate-all") return Action::validate_all;
    if (s == "setup-watcher") return Action::setup_watcher;
    if (s == "check-config") return Action::check_config;
    return std::nullopt;
}

void apply_action(Parsed& p, const std::string& value) {
    if (auto a = parse_action(value)) {
        p.opts.action = *a;
    } else if (lower(value) == "reboot") {
        p.errors.push_back(
            "action 'reboot' is not supported: fence_nvfence fences at the storage (fabric fencing); "
            "Pacemaker turns a reboot into 'off' for such devices, and unfencing ('on') happens when the node "
            "rejoins");
    } else {
        p.errors.push_back("unrecognised action '" + value +
                           "' (on, off, status, monitor, list, list-status, metadata, manpage, validate-all, "
                           "setup-watcher, check-config)");
    }
}

void apply_reservation_type(Parsed& p, const std::string& value) {
    const std::string v = lower(value);
    const auto t = parse_resv_type(value);  // the one parser of type names
    if (t && *t == ResvType::write_exclusive_reg_only) {
        p.opts.mode = Mode::registrants_only;
    } else if (t && *t == ResvType::write_exclusive) {
        p.opts.mode = Mode::exclusive;
    } else if (!v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        // A number copied from an sg_persist / fence_scsi setup would
        // name another type on NVMe: SCSI 5 (WERO) is NVMe 3, SCSI 1
        // (WE) is NVMe 1, SCSI 3 (EA) is NVMe 2.
        p.errors.push_back("reservation_type takes a name, not a number ('" + value +
                           "'): NVMe numbers the types differently from SCSI (SCSI type 5, Write Exclusive - "
                           "Registrants Only, is NVMe type 3); use registrants-only or exclusive");
    } else {
        p.errors.push_back("reservation_type '" + value + "' is not registrants-only or exclusive");
    }
}

void apply_key(Parsed& p, const std::string& value) {
    if (auto id = parse_uint(value, 1, kMaxNode)) {
        p.opts.key_node = static_cast<uint8_t>(*id);
    } else if (auto k = parse_key(value); k && decode_key(*k)) {
        p.opts.key_node = decode_key(*k)->node;
    } else {
        p.errors.push_back("key '" + value + "' is not a node id (1-255) nor an nvfence key nf:TAG:NODE:EPOCH");
    }
}

// Options whose value is kept as given.
bool apply_text(Options& o, const std::string& n, const std::string& value) {
    if (n == "plug") o.plug = value;
    else if (n == "nodename") o.nodename = value;
    else if (n == "debug_file") o.debug_file = value;
    else if (n == "corosync_cmap_path") o.corosync_cmap_path = value;
    else if (n == "state_dir") o.state_dir = value;
    else if (n == "agent_socket") o.agent_socket = value;
    else return false;
    return true;
}

void apply_value(Parsed& p, const Spec& s, const std::string& value) {
    Options& o = p.opts;
    const std::string n = s.name;
    if ((n == "debug_file" || n == "corosync_cmap_path" || n == "state_dir") && !value.empty() && value[0] != '/') {
        // Relative to whatever directory the fencer runs the agent in.
        p.errors.push_back(n + " '" + value + "' must be an absolute path");
        return;
    }
    if (apply_text(o, n, value)) return;
    if (n == "action") {
        apply_action(p, value);
    } else if (n == "nodeid") {
        // Pacemaker's; a value it could not have sent is not worth failing for.
        if (auto id = parse_uint(value, 1, UINT32_MAX)) o.nodeid = static_cast<uint32_t>(*id);
        else p.warnings.push_back("ignoring nodeid '" + value + "': not a node id");
    } else if (n == "devices") {
        o.devices = split_devices(value);
    } else if (n == "key") {
        apply_key(p, value);
    } else if (n == "node_ids") {
        std::string why;
        if (!value.empty() && !parse_node_map(value, why)) p.errors.push_back("node_ids: " + why);
        o.node_ids = value;
    } else if (n == "reservation_type") {
        apply_reservation_type(p, value);
    } else if (n == "cluster_tag") {
        if (auto t = parse_uint(value, 0, 255)) {
            o.tag = static_cast<uint8_t>(*t);
            o.tag_given = true;
        } else p.errors.push_back("cluster_tag '" + value + "' is not a number from 0 to 255");
    } else if (n == "delay") {
        if (auto d = parse_uint(value, 0, 3600)) o.delay_s = static_cast<uint32_t>(*d);
        else p.errors.push_back("delay '" + value + "' is not a number of seconds from 0 to 3600");
    } else if (n == "watcher_interval_ms") {
        // nvfenced's interval_ms range.
        if (auto v = parse_uint(value, 50, 60000)) o.watcher_interval_ms = static_cast<uint32_t>(*v);
        else p.errors.push_back("watcher_interval_ms '" + value + "' is not a number from 50 to 60000");
    } else if (n == "watcher_device_timeout_ms") {
        if (auto v = parse_uint(value, 100, 120000)) o.watcher_device_timeout_ms = static_cast<uint32_t>(*v);
        else p.errors.push_back("watcher_device_timeout_ms '" + value + "' is not a number from 100 to 120000");
    } else if (n == "separator") {
        if (value.empty() || value.find_first_of("\n\r") != std::string::npos)
            p.errors.push_back("separator must be one or more characters on one line");
        else o.separator = value;
    }
}

void apply_flag(Parsed& p, const Spec& s, bool on) {
    Options& o = p.opts;
    const std::string n = s.name;
    if (n == "verbose") o.verbose = on ? o.verbose + 1 : 0;
    else if (n == "quiet") o.quiet = on;
    else if (n == "aptpl") o.aptpl = on;
    else if (n == "help") o.help = on;
    else if (n == "version") o.version = on;
}

}  // namespace

const char* action_name(Action a) {
    switch (a) {
    case Action::on: return "on";
    case Action::off: return "off";
    case Action::status: return "status";
    case Action::monitor: return "monitor";
    case Action::list: return "list";
    case Action::list_status: return "list-status";
    case Action::metadata: return "metadata";
    case Action::manpage: return "manpage";
    case Action::validate_all: return "validate-all";
    case Action::setup_watcher: return "setup-watcher";
    case Action::check_config: return "check-config";
    }
    return "?";
}

const char* mode_name(Mode m) { return m == Mode::exclusive ? "exclusive" : "registrants-only"; }

std::vector<std::string> split_devices(std::string_view text) { return split_list(text); }

Result<std::map<std::string, uint8_t>> parse_node_map(std::string_view text, std::string& why) {
    std::map<std::string, uint8_t> out;
    std::set<uint8_t> ids;
    auto take = [&](const std::string& raw) -> bool {
        const std::string it = trim(raw);
        if (it.empty()) return true;
        size_t sep = it.find_last_of(":=");
        if (sep == std::string::npos || sep == 0 || sep + 1 == it.size()) {
            why = "'" + it + "' is not name:id";
            return false;
        }
        const std::string name = trim(it.substr(0, sep));
        auto id = parse_uint(trim(it.substr(sep + 1)), 1, kMaxNode);
        if (!id) {
            why = "the id of '" + name + "' is not a node id from 1 to 255";
            return false;
        }
        if (out.count(name)) {
            why = "node '" + name + "' appears twice";
            return false;
        }
        if (!ids.insert(static_cast<uint8_t>(*id)).second) {
            why = "node id " + std::to_string(*id) + " is given to two nodes";
            return false;
        }
        out[name] = static_cast<uint8_t>(*id);
        return true;
    };
    for (const std::string& item : split_list(text, kNodeMapSeparators))
        if (!take(item)) return make_error_code(Errc::invalid_argument);
    if (out.empty()) {
        why = "the map is empty (use name:id;name:id)";
        return make_error_code(Errc::invalid_argument);
    }
    return out;
}

namespace {
// "key (type) = value" lines of corosync-cmapctl.
std::map<std::string, std::string> cmap_lines(std::string_view text) {
    std::map<std::string, std::string> out;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        if (nl == std::string_view::npos) nl = text.size();
        std::string_view line = text.substr(pos, nl - pos);
        pos = nl + 1;
        const size_t sp = line.find(' ');
        const size_t eq = line.find(" = ");
        if (sp == std::string_view::npos || eq == std::string_view::npos || eq < sp) continue;
        out[std::string(line.substr(0, sp))] = trim(line.substr(eq + 3));
    }
    return out;
}
}  // namespace

std::map<std::string, uint32_t> parse_cmap_nodelist(std::string_view cmap_output) {
    const auto kv = cmap_lines(cmap_output);
    std::map<std::string, std::string> names, addrs, ids;  // by index
    const std::string prefix = "nodelist.node.";
    for (const auto& [k, v] : kv) {
        if (k.rfind(prefix, 0) != 0) continue;
        const std::string rest = k.substr(prefix.size());
        const size_t dot = rest.find('.');
        if (dot == std::string::npos) continue;
        const std::string idx = rest.substr(0, dot), field = rest.substr(dot + 1);
        if (v.empty()) continue;  // an empty name or address names no node
        if (field == "name") names[idx] = v;
        else if (field == "ring0_addr") addrs[idx] = v;
        else if (field == "nodeid") ids[idx] = v;
    }
    std::map<std::string, uint32_t> out;
    for (const auto& [idx, idtext] : ids) {
        auto id = parse_uint(idtext, 1, UINT32_MAX);
        if (!id) continue;
        if (auto n = names.find(idx); n != names.end()) out[n->second] = static_cast<uint32_t>(*id);
        if (auto a = addrs.find(idx); a != addrs.end() && !out.count(a->second))
            out[a->second] = static_cast<uint32_t>(*id);
    }
    return out;
}

Result<uint8_t> parse_cmap_nodeid(std::string_view cmap_output, const std::string& name, std::string& why) {
    uint64_t id = 0;
    if (name.empty()) {
        const auto kv = cmap_lines(cmap_output);
        auto it = kv.find("runtime.votequorum.this_node_id");
        if (it == kv.end()) {
            why = "corosync-cmapctl does not give runtime.votequorum.this_node_id";
            return make_error_code(Errc::not_found);
        }
        auto v = parse_uint(it->second, 1, UINT32_MAX);
        if (!v) {
            why = "corosync's this_node_id '" + it->second + "' is not a node id";
            return make_error_code(Errc::invalid_argument);
        }
        id = *v;
    } else {
        const auto nodes = parse_cmap_nodelist(cmap_output);
        auto it = nodes.find(name);
        if (it == nodes.end()) {
            why = "node '" + name + "' is not in corosync's nodelist";
            return make_error_code(Errc::not_found);
        }
        id = it->second;
    }
    if (id > kMaxNode) {
        why = "corosync nodeid " + std::to_string(id) +
              " does not fit the node field of an nvfence key (1-255): give node_ids=name:id;...";
        return make_error_code(Errc::invalid_argument);
    }
    return static_cast<uint8_t>(id);
}

Parsed parse_stdin(std::string_view text) {
    Parsed p;
    size_t pos = 0;
    // Pacemaker passes a few names of its own that no agent needs to know.
    while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        if (nl == std::string_view::npos) nl = text.size();
        const std::string line = trim(text.substr(pos, nl - pos));
        pos = nl + 1;
        if (line.empty() || line[0] == '#') continue;
        const size_t eq = line.find('=');
        const std::string name = trim(eq == std::string::npos ? line : line.substr(0, eq));
        std::string value = eq == std::string::npos ? std::string() : trim(line.substr(eq + 1));
        if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
        const Spec* s = find_name(name);
        if (!s) {
            p.warnings.push_back("ignoring unknown option '" + line + "'");
            continue;
        }
        if (s->kind == Kind::value) {
            apply_value(p, *s, value);
            continue;
        }
        const std::string v = lower(value);
        if (v == "1" || v == "yes" || v == "on" || v == "true") apply_flag(p, *s, true);
        else if (v == "0" || v == "no" || v == "off" || v == "false") apply_flag(p, *s, false);
        else p.warnings.push_back("ignoring option '" + name + "': '" + value + "' is not a boolean (1/yes/on/true, 0/no/off/false)");
    }
    return p;
}

Parsed parse_argv(std::span<const std::string> args) {
    Parsed p;
    std::vector<std::string> unused;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--") {
            for (++i; i < args.size(); ++i) unused.push_back(args[i]);
            break;
        }
        if (a.rfind("--", 0) == 0) {
            const size_t eq = a.find('=');
            const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
            const Spec* s = find_long(name);
            if (!s) {
                p.errors.push_back("unrecognised option '--" + name + "'");
                continue;
            }
            if (s->kind == Kind::flag) {
                if (eq != std::string::npos) p.errors.push_back("option '--" + name + "' takes no value");
                else apply_flag(p, *s, true);
                continue;
            }
            if (eq != std::string::npos) {
                apply_value(p, *s, a.substr(eq + 1));
            } else if (i + 1 < args.size()) {
                apply_value(p, *s, args[++i]);
            } else {
                p.errors.push_back("option '--" + name + "' requires a value");
            }
            continue;
        }
        if (a.size() > 1 && a[0] == '-') {
            for (size_t j = 1; j < a.size(); ++j) {
                const Spec* s = find_short(a[j]);
                if (!s) {
                    p.errors.push_back(std::string("unrecognised option '-") + a[j] + "'");
                    break;
                }
                if (s->kind == Kind::flag) {
                    apply_flag(p, *s, true);
                    continue;
                }
                if (j + 1 < a.size()) {
                    apply_value(p, *s, a.substr(j + 1));
                } else if (i + 1 < args.size()) {
                    apply_value(p, *s, args[++i]);
                } else {
                    p.errors.push_back(std::string("option '-") + a[j] + "' requires a value");
                }
                break;
            }
            continue;
        }
        unused.push_back(a);
    }
    if (!unused.empty()) {
        std::string u;
        for (const auto& x : unused) u += (u.empty() ? "" : " ") + x;
        p.warnings.push_back("unused arguments on the command line: " + u);
    }
    return p;
}

}  // namespace nvfence::fence_agent
