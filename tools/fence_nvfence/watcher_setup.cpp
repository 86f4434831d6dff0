// SPDX-License-Identifier: MIT
#include "watcher_setup.hpp"

#include <algorithm>
#include <set>
#include <sstream>
#include <utility>

#include "internal/list.hpp"
#include "nvfence/command.hpp"
#include "nvfence/error.hpp"

namespace nvfence::fence_agent {
namespace {

// Bounds on what is read from the CIB and the programs.
constexpr size_t kMaxPrimitives = 64;
constexpr uint32_t kQueryTimeoutMs = 30000;
constexpr uint32_t kSystemctlTimeoutMs = 120000;  // a restart waits for nvfenced's READY=1

// The watcher's fence action: leave the membership at once (docs/PACEMAKER.md).
constexpr const char* kWatcherFenceCommand =
    "\"systemctl kill --signal=KILL corosync.service || true && systemctl stop --no-block pacemaker.service\"";

void log(Host& h, Level l, const std::string& s) {
    if (h.log) h.log(l, s);
}

std::string join(const std::vector<std::string>& v, const char* sep) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
    return s;
}

std::string short_name(const std::string& n) { return n.substr(0, n.find('.')); }

// XML entities of attribute values (&quot; &amp; &lt; &gt; &apos; &#N;).
std::string xml_unescape(std::string_view v) {
    static const std::pair<std::string_view, char> kNamed[] = {
        {"&quot;", '"'}, {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&apos;", '\''}};
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) {
        bool done = false;
        if (v[i] == '&') {
            for (const auto& [name, c] : kNamed)
                if (v.substr(i, name.size()) == name) {
                    out.push_back(c);
                    i += name.size() - 1;
                    done = true;
                    break;
                }
            const size_t semi = v.find(';', i);
            if (!done && v.substr(i, 2) == "&#" && semi != std::string_view::npos && semi - i <= 6) {
                if (auto n = parse_uint(std::string(v.substr(i + 2, semi - i - 2)), 1, 127)) {
                    out.push_back(static_cast<char>(*n));
                    i = semi;
                    done = true;
                }
            }
        }
        if (!done) out.push_back(v[i]);
    }
    return out;
}

// One XML tag: its name ("/name" for a closing tag) and attributes.
struct Tag {
    std::string name;
    std::map<std::string, std::string> attrs;
    bool self_closing = false;
};

// The tags of @p xml in order (text, comments and declarations skipped).
std::vector<Tag> xml_tags(std::string_view xml) {
    std::vector<Tag> tags;
    size_t i = 0;
    while ((i = xml.find('<', i)) != std::string_view::npos) {
        const size_t end = xml.find('>', i);
        if (end == std::string_view::npos) break;
        std::string_view body = xml.substr(i + 1, end - i - 1);
        i = end + 1;
        if (body.empty() || body[0] == '?' || body[0] == '!') continue;
        Tag t;
        t.self_closing = body.back() == '/';
        if (t.self_closing) body.remove_suffix(1);
        const size_t name_end = std::min(body.find_first_of(" \t\r\n"), body.size());
        t.name = std::string(body.substr(0, name_end));
        size_t p = name_end;
        while (p < body.size()) {
            const size_t eq = body.find('=', p);
            if (eq == std::string_view::npos || eq + 1 >= body.size()) break;
            const char q = body[eq + 1];
            const size_t close = body.find(q, eq + 2);
            if ((q != '"' && q != '\'') || close == std::string_view::npos) break;
            std::string key(body.substr(p, eq - p));
            key.erase(std::remove_if(key.begin(), key.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); }),
                      key.end());
            t.attrs[key] = xml_unescape(body.substr(eq + 2, close - eq - 2));
            p = close + 1;
        }
        tags.push_back(std::move(t));
    }
    return tags;
}

std::string attr(const Tag& t, const char* k) {
    auto it = t.attrs.find(k);
    return it == t.attrs.end() ? std::string() : it->second;
}

}  // namespace

std::vector<CibPrimitive> cib_fence_nvfence_resources(std::string_view cib_xml) {
    std::vector<CibPrimitive> out;
    bool in_primitive = false, in_instance = false;
    for (const Tag& t : xml_tags(cib_xml)) {
        if (t.name == "primitive" && !t.self_closing) {
            in_primitive = attr(t, "class") == "stonith" && attr(t, "type") == "fence_nvfence";
            if (in_primitive && out.size() < kMaxPrimitives) out.push_back({attr(t, "id"), {}});
            else in_primitive = false;
        } else if (t.name == "/primitive") {
            in_primitive = in_instance = false;
        } else if (in_primitive && t.name == "instance_attributes") {
            in_instance = !t.self_closing;
        } else if (t.name == "/instance_attributes") {
            in_instance = false;
        } else if (in_primitive && in_instance && t.name == "nvpair") {
            out.back().params[attr(t, "name")] = attr(t, "value");
        }
    }
    return out;
}

std::map<std::string, std::string> cib_node_attribute(std::string_view cib_xml, const std::string& name) {
    std::map<std::string, std::string> out;
    std::string node;
    bool in_nodes = false;
    for (const Tag& t : xml_tags(cib_xml)) {
        if (t.name == "nodes" && !t.self_closing) in_nodes = true;
        else if (t.name == "/nodes") in_nodes = false;
        else if (in_nodes && t.name == "node") node = t.self_closing ? std::string() : attr(t, "uname");
        else if (t.name == "/node") node.clear();
        else if (in_nodes && !node.empty() && t.name == "nvpair" && attr(t, "name") == name)
            out[node] = attr(t, "value");
    }
    return out;
}

Parsed stonith_options(const CibPrimitive& r, const std::string& action) {
    std::string text;
    for (const auto& [k, v] : r.params)
        if (v.find('\n') == std::string::npos) text += k + "=" + v + "\n";
    text += "action=" + action + "\n";
    return parse_stdin(text);
}

WatcherSettings watcher_for(const Options& o, uint8_t node, std::vector<std::string> devices) {
    WatcherSettings w;
    w.node = node;
    w.tag = o.tag;
    w.devices = std::move(devices);
    w.interval_ms = o.watcher_interval_ms;
    w.device_timeout_ms = o.watcher_device_timeout_ms;
    w.state_dir = o.state_dir;
    return w;
}

std::string watcher_conf_text(const WatcherSettings& w, const std::string& device) {
    std::ostringstream s;
    s << kWatcherHeader << "\n"
      << "device = " << device << "\n"
      << "node_id = " << unsigned{w.node} << "\n"
      << "cluster_tag = " << unsigned{w.tag} << "\n"
      << "role = watch\n"
      << "interval_ms = " << w.interval_ms << "\n"
      << "device_timeout_ms = " << w.device_timeout_ms << "\n"
      << "state_dir = " << w.state_dir << "\n"
      << "fence_action = command\n"
      << "fence_command = " << kWatcherFenceCommand << "\n";
    return s.str();
}

std::string watcher_record(const WatcherSettings& w) {
    return "node_id=" + std::to_string(w.node) + " cluster_tag=" + std::to_string(w.tag) +
           " interval_ms=" + std::to_string(w.interval_ms) + " device_timeout_ms=" +
           std::to_string(w.device_timeout_ms) + " state_dir=" + w.state_dir + " devices=" + join(w.devices, ",");
}

std::optional<WatcherSettings> parse_watcher_record(std::string_view text, std::string& why) {
    std::map<std::string, std::string> kv;
    for (const std::string& item : split_list(text, " \t\n")) {
        const size_t eq = item.find('=');
        if (eq == std::string::npos) {
            why = "'" + item + "' is not name=value";
            return std::nullopt;
        }
        kv[item.substr(0, eq)] = item.substr(eq + 1);
    }
    WatcherSettings w;
    const auto node = parse_uint(kv["node_id"], 1, 255);
    const auto tag = parse_uint(kv["cluster_tag"], 0, 255);
    const auto iv = parse_uint(kv["interval_ms"], 1, UINT32_MAX);
    const auto dt = parse_uint(kv["device_timeout_ms"], 1, UINT32_MAX);
    if (!node || !tag || !iv || !dt || kv["state_dir"].empty()) {
        why = "node_id, cluster_tag, interval_ms, device_timeout_ms or state_dir missing or not valid";
        return std::nullopt;
    }
    w.node = static_cast<uint8_t>(*node);
    w.tag = static_cast<uint8_t>(*tag);
    w.interval_ms = static_cast<uint32_t>(*iv);
    w.device_timeout_ms = static_cast<uint32_t>(*dt);
    w.state_dir = kv["state_dir"];
    w.devices = split_list(kv["devices"], ",");
    return w;
}

std::vector<std::string> watcher_differences(const WatcherSettings& want, const WatcherSettings& have) {
    std::vector<std::string> d;
    auto cmp = [&d](const char* what, const std::string& w, const std::string& h) {
        if (w != h) d.push_back(std::string(what) + " " + (h.empty() ? "(none)" : h) + ", the stonith resource says " +
                                (w.empty() ? "(none)" : w));
    };
    cmp("node_id", std::to_string(want.node), std::to_string(have.node));
    cmp("cluster_tag", std::to_string(want.tag), std::to_string(have.tag));
    cmp("devices", join(want.devices, ","), join(have.devices, ","));
    cmp("interval_ms", std::to_string(want.interval_ms), std::to_string(have.interval_ms));
    cmp("device_timeout_ms", std::to_string(want.device_timeout_ms), std::to_string(have.device_timeout_ms));
    cmp("state_dir", want.state_dir, have.state_dir);
    return d;
}

namespace {

// The CIB (cibadmin --query), or nullopt once the failure is logged.
std::optional<std::string> query_cib(Host& h) {
    if (!h.run_program) return std::nullopt;
    auto cib = h.run_program("cibadmin", {"--query"}, kQueryTimeoutMs);
    if (!cib) {
        log(h, Level::error, "cannot read the CIB (cibadmin --query): " + cib.error().message() +
                                 ": is Pacemaker running on this node?");
        return std::nullopt;
    }
    return *cib;
}

// The one fence_nvfence resource of @p cib, or nullopt once logged.
std::optional<CibPrimitive> the_stonith_resource(Host& h, const std::string& cib) {
    auto rs = cib_fence_nvfence_resources(cib);
    if (rs.size() == 1) return rs.front();
    std::vector<std::string> ids;
    for (const auto& r : rs) ids.push_back(r.id);
    log(h, Level::error, rs.empty() ? std::string("the CIB has no fence_nvfence stonith resource")
                                    : "the CIB has " + std::to_string(rs.size()) +
                                          " fence_nvfence stonith resources (" + join(ids, ", ") +
                                          "): give the stonith parameters as options instead");
    return std::nullopt;
}

// The stonith options: @p o when it names devices or a node map, else the
// CIB's fence_nvfence resource. nullopt once the failure is logged.
std::optional<Options> stonith_of(const Options& o, Host& h, std::string& source) {
    if (!o.devices.empty() || !o.node_ids.empty()) {
        source = "the options given";
        return o;
    }
    auto cib = query_cib(h);
    if (!cib) return std::nullopt;
    auto r = the_stonith_resource(h, *cib);
    if (!r) return std::nullopt;
    Parsed p = stonith_options(*r, action_name(o.action));
    for (const auto& e : p.errors) log(h, Level::error, "stonith resource " + r->id + ": " + e);
    if (!p.ok()) return std::nullopt;
    p.opts.verbose = o.verbose;
    source = "stonith resource " + r->id;
    return p.opts;
}

// The volume of @p path (its nvfenced instance name), or "" once logged.
std::string volume_of(Host& h, const std::string& path) {
    std::string why;
    auto d = h.open ? h.open(path, why) : Result<std::unique_ptr<Device>>(make_error_code(Errc::not_found));
    if (!d) {
        log(h, Level::error, path + ": " + (why.empty() ? d.error().message() : why));
        return {};
    }
    return (*d)->volume();
}

// Writes @p text to @p path unless it is there already; false once logged.
// @p changed: the file was written.
bool write_conf(Host& h, const std::string& path, const std::string& text, bool& changed) {
    changed = false;
    auto old = h.read_file(path);
    if (old && *old == text) return true;
    if (old && old->rfind(kWatcherHeader, 0) != 0) {
        log(h, Level::error, path + " exists and was not written by setup-watcher: move it aside (or delete it) "
                                    "and run setup-watcher again");
        return false;
    }
    if (auto s = h.write_file(path, text); !s) {
        log(h, Level::error, "cannot write " + path + ": " + s.error().message());
        return false;
    }
    changed = true;
    return true;
}

bool systemctl(Host& h, const std::vector<std::string>& args) {
    auto r = h.run_program("systemctl", args, kSystemctlTimeoutMs);
    if (!r) log(h, Level::error, "systemctl " + join(args, " ") + " failed: " + r.error().message());
    return r.ok();
}

// One device: its file, and its unit enabled and running the file.
bool setup_one(const WatcherSettings& w, Host& h, const std::string& dir, const std::string& path, std::string& out) {
    const std::string vol = volume_of(h, path);
    if (vol.empty()) return false;
    const std::string conf = dir + "/" + vol + ".conf";
    const std::string unit = "nvfenced@" + vol + ".service";
    bool changed = false;
    if (!write_conf(h, conf, watcher_conf_text(w, path), changed)) return false;
    if (!systemctl(h, {"enable", unit})) return false;
    if (!systemctl(h, {changed ? "restart" : "start", unit})) return false;
    out += conf + ": " + (changed ? "written, " + unit + " enabled and restarted" : "unchanged, " + unit + " enabled") +
           "\n";
    return true;
}

// This node's name as the node map knows it (full or short name).
std::string map_name(Host& h, const NodeMap& nodes) {
    if (nodes.ids.count(h.local_name)) return h.local_name;
    return short_name(h.local_name);
}

}  // namespace

int action_setup_watcher(const Options& o, Host& h, std::string& out) {
    if (!h.read_file || !h.write_file || !h.run_program || !h.watcher_conf_dir) {
        log(h, Level::error, "setup-watcher needs this host's files and programs (not available here)");
        return kExitError;
    }
    std::string source;
    auto so = stonith_of(o, h, source);
    if (!so || !resolve_cluster_tag(*so, h)) return kExitError;
    std::string why;
    auto node = this_node_id(*so, h, why);
    if (!node) {
        log(h, Level::error, "this node's id: " + why);
        return kExitError;
    }
    const std::vector<std::string> devices = stonith_devices(*so, h);
    if (devices.empty()) {
        log(h, Level::error, "no devices: the stonith resource names none and none were found under /dev/nvfence");
        return kExitError;
    }
    const WatcherSettings w = watcher_for(*so, *node, devices);
    log(h, Level::info, "from " + source + ": " + watcher_record(w));
    const std::string dir = h.watcher_conf_dir();
    for (const auto& path : devices)
        if (!setup_one(w, h, dir, path, out)) return kExitError;
    auto nodes = cluster_nodes(*so, h, why);
    const std::string name = nodes ? map_name(h, *nodes) : h.local_name;
    auto r = h.run_program("crm_attribute", {"--type", "nodes", "--node", name, "--name", kWatcherAttribute,
                                             "--update", watcher_record(w)},
                           kQueryTimeoutMs);
    if (!r)
        log(h, Level::warning, "the watcher runs, but recording it in the CIB (crm_attribute) failed: " +
                                   r.error().message() + "; check-config will not see node " + name +
                                   " until setup-watcher runs again with Pacemaker up");
    else
        out += "recorded as node attribute " + std::string(kWatcherAttribute) + " of " + name + "\n";
    return kExitOk;
}

namespace {

// The differences of this node's files from @p want ("" lines: none).
std::vector<std::string> local_file_differences(const WatcherSettings& want, Host& h) {
    std::vector<std::string> d;
    const std::string dir = h.watcher_conf_dir ? h.watcher_conf_dir() : std::string();
    for (const auto& path : want.devices) {
        const std::string vol = volume_of(h, path);
        if (vol.empty()) {
            d.push_back(path + ": cannot be opened on this node");
            continue;
        }
        const std::string conf = dir + "/" + vol + ".conf";
        auto text = h.read_file(conf);
        if (!text) d.push_back(conf + ": missing (" + text.error().message() + ")");
        else if (*text != watcher_conf_text(want, path))
            d.push_back(conf + ": not what setup-watcher writes for the stonith resource (edited by hand?)");
    }
    return d;
}

// One node's line of the report; true when it agrees.
bool check_node(const std::string& name, uint8_t id, const WatcherSettings& want_any,
                const std::map<std::string, std::string>& records, std::string& out) {
    WatcherSettings want = want_any;
    want.node = id;
    auto it = records.find(name);
    const std::string label = name + " (node " + std::to_string(id) + "): ";
    if (it == records.end()) {
        out += label + "no watcher recorded: run 'fence_nvfence -o setup-watcher' on " + name + "\n";
        return false;
    }
    std::string why;
    auto have = parse_watcher_record(it->second, why);
    if (!have) {
        out += label + "unreadable record '" + it->second + "': " + why + "\n";
        return false;
    }
    const auto d = watcher_differences(want, *have);
    out += label + (d.empty() ? std::string("agrees") : "differs: " + join(d, "; ")) + "\n";
    return d.empty();
}

}  // namespace

int action_check_config(Host& h, std::string& out) {
    auto cib = query_cib(h);
    if (!cib) return kExitError;
    auto r = the_stonith_resource(h, *cib);
    if (!r) return kExitError;
    Parsed p = stonith_options(*r, "check-config");
    for (const auto& e : p.errors) log(h, Level::error, "stonith resource " + r->id + ": " + e);
    if (!p.ok() || !resolve_cluster_tag(p.opts, h)) return kExitError;
    std::string why;
    auto nodes = cluster_nodes(p.opts, h, why);
    if (!nodes) {
        log(h, Level::error, "the cluster's nodes: " + why);
        return kExitError;
    }
    const WatcherSettings want = watcher_for(p.opts, 0, stonith_devices(p.opts, h));
    out += "stonith resource " + r->id + ": " + watcher_record(want).substr(std::string("node_id=0 ").size()) + "\n";
    const auto records = cib_node_attribute(*cib, kWatcherAttribute);
    size_t differ = 0;
    for (const auto& [name, id] : nodes->ids) {
        if (id < 1 || id > 255) {
            out += name + ": corosync node id " + std::to_string(id) + " cannot be a key's node (1-255)\n";
            ++differ;
        } else if (!check_node(name, static_cast<uint8_t>(id), want, records, out)) {
            ++differ;
        }
    }
    if (auto id = this_node_id(p.opts, h, why); id && h.read_file) {
        WatcherSettings mine = want;
        mine.node = *id;
        const auto d = local_file_differences(mine, h);
        out += "this node's files: " + (d.empty() ? std::string("agree") : join(d, "; ")) + "\n";
        if (!d.empty()) ++differ;
    }
    out += differ == 0 ? "every node agrees\n" : std::to_string(differ) + " difference(s)\n";
    return differ == 0 ? kExitOk : kExitDiffers;
}

}  // namespace nvfence::fence_agent
