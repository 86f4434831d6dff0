// SPDX-License-Identifier: MIT
#include "agent/agent_config.hpp"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <string_view>
#include <filesystem>
#include <fstream>
#include <set>

#include "nvfence/command.hpp"
#include "nvfence/error.hpp"
#include "nvfence/key.hpp"
#include "internal/invariant.hpp"
#include "internal/list.hpp"
#include "nvfence/report.hpp"

namespace nvfence {
namespace {

constexpr size_t kMaxWriterUnits = 32;
constexpr size_t kMaxValueBytes = 4096;

bool printable(const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u >= 0x20 && u != 0x7f;
    });
}

bool is_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

bool all_digits(std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// systemd unit names: letters, digits and ":-_.\@", a known type suffix.
bool valid_unit(const std::string& u) {
    static const char* const kSuffixes[] = {"service", "target", "scope",  "mount",  "socket", "slice",
                                            "timer",   "path",   "swap",   "device", "automount"};
    const size_t dot = u.rfind('.');
    if (u.size() > 256 || dot == std::string::npos || dot == 0) return false;
    const std::string_view suffix(u.c_str() + dot + 1);
    if (std::none_of(std::begin(kSuffixes), std::end(kSuffixes), [&](const char* x) { return suffix == x; }))
        return false;
    return std::all_of(u.begin(), u.begin() + static_cast<std::ptrdiff_t>(dot), [](char c) {
        return is_alnum(c) || c == ':' || c == '_' || c == '.' || c == '\\' || c == '@' || c == '-';
    });
}

// A group name as useradd accepts it, or a numeric gid.
bool valid_group(const std::string& g) {
    if (all_digits(g)) return g.size() <= 10;
    if (g.empty() || g.size() > 33 || !(std::isalpha(static_cast<unsigned char>(g[0])) || g[0] == '_')) return false;
    for (size_t i = 1; i < g.size(); ++i) {
        const char c = g[i];
        if (is_alnum(c) || c == '_' || c == '.' || c == '-') continue;
        if (c == '$' && i + 1 == g.size()) continue;
        return false;
    }
    return g.size() <= 32 || g.back() == '$';
}

// "nvme<X>n<Y>" -> true; "nvme<X>c<Z>n<Y>" (a multipath path) -> the head
// "nvme<X>n<Y>" in @p head.
bool namespace_name(const std::string& n, std::string& head) {
    if (n.rfind("nvme", 0) != 0) return false;
    const std::string_view rest(n.c_str() + 4);
    const size_t npos = rest.find('n');
    if (npos == std::string_view::npos || !all_digits(rest.substr(npos + 1))) return false;
    const std::string_view left = rest.substr(0, npos);
    const size_t cpos = left.find('c');
    if (cpos == std::string_view::npos) {
        if (!all_digits(left)) return false;
        head = n;
        return true;
    }
    if (!all_digits(left.substr(0, cpos)) || !all_digits(left.substr(cpos + 1))) return false;
    head = "nvme" + std::string(left.substr(0, cpos)) + "n" + std::string(rest.substr(npos + 1));
    return true;
}

std::string shown(const std::string& v) {
    std::string s = "\"";
    for (char c : v.substr(0, std::min<size_t>(v.size(), 200))) {
        const auto u = static_cast<unsigned char>(c);
        s.push_back((u < 0x20 || u == 0x7f) ? '?' : c);
    }
    return s + "\"";
}

std::string trim(const std::string& s) {
    const size_t a = s.find_first_not_of(" \t\r\n");
    if (a == std::string::npos) return {};
    const size_t b = s.find_last_not_of(" \t\r\n");
    return s.substr(a, b - a + 1);
}

std::string read_first_line(const std::filesystem::path& p) {
    std::ifstream f(p);
    std::string s;
    if (f) std::getline(f, s);
    return trim(s);
}

}  // namespace

const char* fence_action_name(FenceActionKind k) {
    switch (k) {
    case FenceActionKind::none: return "none";
    case FenceActionKind::command: return "command";
    case FenceActionKind::stop_unit: return "stop-unit";
    case FenceActionKind::reboot: return "reboot";
    }
    return "unknown";
}

const std::vector<std::string>& agent_setting_keys() {
    static const std::vector<std::string> keys = {
        "device",           "node_id",        "cluster_tag",   "mode",          "role",
        "interval_ms",      "device_timeout_ms", "fence_action", "fence_command", "fence_unit",
        "reboot_method",    "fence_timeout_ms", "writer_units", "control_socket", "socket_group",
        "socket_mode",      "state_dir",      "keep_registration", "name",      "log_level",
        "view_timeout_ms",  "fence_on_view_loss",
        "aen_wakeup",       "rejoin",         "ptpl",
        "hardware_watchdog", "hardware_watchdog_timeout_s",
        "metrics_dir",
    };
    return keys;
}

uint32_t min_hardware_watchdog_timeout_s(uint32_t interval_ms, uint32_t device_timeout_ms) {
    const uint64_t ms = 2 * (uint64_t{interval_ms} + device_timeout_ms);
    return static_cast<uint32_t>(ms / 1000 + 1);
}

bool valid_instance_name(const std::string& s) {
    if (s.empty() || s.size() > 64 || !(is_alnum(s[0]) || s[0] == '_')) return false;
    return std::all_of(s.begin(), s.end(), [](char c) { return is_alnum(c) || c == '.' || c == '_' || c == '-'; });
}

namespace {

// The values of one configuration, read key by key: each reader returns
// false (with @c why set) on a bad value and leaves the setting alone when
// the key is not given.
struct SettingsReader {
    const SettingsMap& kv;
    std::string& why;

    const std::string* get(const char* k) const {
        auto it = kv.find(k);
        return it == kv.end() ? nullptr : &it->second;
    }
    bool fail(const char* k, const std::string& what) const {
        why = std::string(k) + " = " + shown(*get(k)) + ": " + what;
        return false;
    }
    bool required(const char* what) const {
        why = what;
        return false;
    }
    template <class T>
    bool number(const char* k, uint64_t lo, uint64_t hi, T& out) const {
        const std::string* v = get(k);
        if (!v) return true;
        auto n = parse_uint(*v, lo, hi);
        if (!n)
            return fail(k, "must be a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
        out = static_cast<T>(*n);
        return true;
    }
    bool boolean(const char* k, bool& out) const {
        const std::string* v = get(k);
        if (!v) return true;
        if (*v == "true" || *v == "yes" || *v == "1" || *v == "on") out = true;
        else if (*v == "false" || *v == "no" || *v == "0" || *v == "off") out = false;
        else return fail(k, "must be true or false");
        return true;
    }
    // One of @p names (each with its value) or fail with @p what.
    template <class T>
    bool choice(const char* k, std::initializer_list<std::pair<const char*, T>> names, const char* what,
                T& out) const {
        const std::string* v = get(k);
        if (!v) return true;
        for (const auto& [name, value] : names)
            if (*v == name) {
                out = value;
                return true;
            }
        return fail(k, what);
    }
};

bool check_keys(const SettingsMap& kv, std::string& why) {
    const auto& keys = agent_setting_keys();
    for (const auto& [k, v] : kv) {
        if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
            why = "unknown key '" + k + "'";
            return false;
        }
        if (v.size() > kMaxValueBytes || !printable(v)) {
            why = k + " = " + shown(v) + ": too long or contains control characters";
            return false;
        }
    }
    return true;
}

// mode: a type name as everywhere (parse_resv_type); the agent runs the two
// Write Exclusive types it supports.
bool agent_type(const SettingsReader& r, ResvType& out) {
    const std::string* v = r.get("mode");
    if (!v) return true;
    auto t = parse_resv_type(*v);
    if (!t || (*t != ResvType::write_exclusive && *t != ResvType::write_exclusive_reg_only))
        return r.fail("mode", "must be exclusive (Write Exclusive) or shared (Write Exclusive - Registrants Only)");
    out = *t;
    return true;
}

// The device, this host's identity, the reservation and the check's timing.
bool read_device(const SettingsReader& r, AgentSettings& s) {
    const std::string* dev = r.get("device");
    if (!dev || dev->empty())
        return r.required(
            "device: required (a namespace such as /dev/nvme1n1, a /dev/disk/by-id/ link, or an EBS volume id vol-...)");
    s.device = *dev;
    if (r.get("node_id")) {
        uint8_t n = 0;
        if (!r.number("node_id", 1, kMaxNode, n)) return false;
        s.node = n;
    }
    s.tag_given = r.get("cluster_tag") != nullptr;
    return r.number("cluster_tag", 0, 255, s.tag) &&
           agent_type(r, s.type) &&
           r.choice<StartRole>("role",
                               {{"standby", StartRole::standby},
                                {"acquire", StartRole::acquire},
                                {"watch", StartRole::watch}},
                               "must be standby, acquire (take the reservation at start if nobody holds it) or "
                               "watch (check-only: never registers)",
                               s.role) &&
           r.number("interval_ms", kMinIntervalMs, kMaxIntervalMs, s.interval_ms) &&
           r.number("device_timeout_ms", kMinDeviceTimeoutMs, kMaxDeviceTimeoutMs, s.device_timeout_ms) &&
           r.number("fence_timeout_ms", 100, 600000, s.fence_timeout_ms);
}

// A setting that only one fence action takes: given for another, or
// missing for its own, is an error.
bool read_action_value(const SettingsReader& r, AgentSettings& s, const char* k, FenceActionKind kind,
                       const char* kind_name, std::string& out) {
    const std::string* v = r.get(k);
    if (!v) {
        if (s.fence_action != kind) return true;
        return r.required((std::string(k) + ": required when fence_action = " + kind_name).c_str());
    }
    if (s.fence_action != kind) return r.fail(k, std::string("is set but fence_action is not ") + kind_name);
    out = *v;
    return true;
}

// What a fence does: the action, its command or unit, and the writers.
bool read_fence(const SettingsReader& r, AgentSettings& s) {
    if (!r.choice<FenceActionKind>("fence_action",
                                   {{"none", FenceActionKind::none},
                                    {"command", FenceActionKind::command},
                                    {"stop-unit", FenceActionKind::stop_unit},
                                    {"stop_unit", FenceActionKind::stop_unit},
                                    {"reboot", FenceActionKind::reboot}},
                                   "must be none, command, stop-unit or reboot", s.fence_action))
        return false;
    if (!read_action_value(r, s, "fence_command", FenceActionKind::command, "command", s.fence_command)) return false;
    if (r.get("fence_command") && trim(s.fence_command).empty()) return r.fail("fence_command", "must not be empty");
    if (!read_action_value(r, s, "fence_unit", FenceActionKind::stop_unit, "stop-unit", s.fence_unit)) return false;
    if (r.get("fence_unit") && !valid_unit(s.fence_unit))
        return r.fail("fence_unit", "not a systemd unit name (e.g. postgresql.service)");
    if (!r.choice<RebootMethod>("reboot_method", {{"sysrq", RebootMethod::sysrq}, {"force", RebootMethod::force}},
                                "must be sysrq (immediate, no sync) or force (reboot -f)", s.reboot_method))
        return false;
    const std::string* v = r.get("writer_units");
    if (!v) return true;
    for (const std::string& unit : split_list(*v)) {
        if (!valid_unit(unit))
            return r.required(("writer_units = " + shown(*v) + ": " + shown(unit) + " is not a systemd unit name").c_str());
        if (std::find(s.writer_units.begin(), s.writer_units.end(), unit) == s.writer_units.end())
            s.writer_units.push_back(unit);
    }
    if (s.writer_units.size() > kMaxWriterUnits)
        return r.fail("writer_units", "at most " + std::to_string(kMaxWriterUnits) + " units");
    return true;
}

// The control socket and the state directory.
bool read_files(const SettingsReader& r, AgentSettings& s) {
    if (const std::string* v = r.get("control_socket")) {
        if (v->empty() || (*v)[0] != '/') return r.fail("control_socket", "must be an absolute path");
        if (v->size() > 107) return r.fail("control_socket", "longer than a unix socket path may be (107 bytes)");
        s.control_socket = *v;
    }
    if (const std::string* v = r.get("socket_group")) {
        if (!valid_group(*v)) return r.fail("socket_group", "not a group name or numeric gid");
        s.socket_group = *v;
        s.socket_mode = 0660;
    }
    if (!r.choice<uint32_t>("socket_mode", {{"0600", 0600}, {"600", 0600}, {"0660", 0660}, {"660", 0660}},
                            "must be 0600 (root only) or 0660 (root and socket_group)", s.socket_mode))
        return false;
    if (r.get("socket_mode") && s.socket_mode == 0660 && s.socket_group.empty())
        return r.fail("socket_mode", "0660 needs socket_group");
    if (const std::string* v = r.get("state_dir")) {
        if (v->empty() || (*v)[0] != '/') return r.fail("state_dir", "must be an absolute path");
        s.state_dir = *v;
    }
    if (const std::string* v = r.get("metrics_dir")) {
        if (v->empty() || (*v)[0] != '/') return r.fail("metrics_dir", "must be an absolute path");
        s.metrics_dir = *v;
    }
    return true;
}

// How the agent behaves: registration, rejoin, the view, its name and log.
bool read_behaviour(const SettingsReader& r, AgentSettings& s) {
    bool rejoin_auto = false;
    if (!r.boolean("keep_registration", s.keep_registration) || !r.boolean("ptpl", s.ptpl) ||
        !r.choice<bool>("rejoin", {{"auto", true}, {"manual", false}}, "must be auto or manual", rejoin_auto))
        return false;
    if (r.get("rejoin")) s.rejoin_auto = rejoin_auto;
    if (const std::string* v = r.get("view_timeout_ms"); v && *v != "0" &&
                                                       !r.number("view_timeout_ms", 1000, 600000, s.view_timeout_ms))
        return false;
    if (!r.boolean("fence_on_view_loss", s.fence_on_view_loss) || !r.boolean("aen_wakeup", s.aen_wakeup)) return false;
    if (const std::string* v = r.get("name")) {
        if (!valid_instance_name(*v))
            return r.fail("name", "1 to 64 characters of A-Z a-z 0-9 . _ -, not starting with . or -");
        s.name = *v;
    }
    return r.choice<std::string>("log_level",
                                 {{"debug", "debug"}, {"info", "info"}, {"warning", "warning"}, {"error", "error"},
                                  {"warn", "warning"}},
                                 "must be debug, info, warning or error", s.log_level);
}

// The hardware watchdog: an absolute device path, and a timeout no
// healthy check can outlast.
bool read_hardware_watchdog(const SettingsReader& r, AgentSettings& s) {
    if (const std::string* v = r.get("hardware_watchdog")) {
        if (v->empty() || (*v)[0] != '/') return r.fail("hardware_watchdog", "must be an absolute path (/dev/watchdog0)");
        s.hardware_watchdog = *v;
    }
    if (!r.number("hardware_watchdog_timeout_s", 1, 3600, s.hardware_watchdog_timeout_s)) return false;
    if (r.get("hardware_watchdog_timeout_s") && s.hardware_watchdog.empty())
        return r.fail("hardware_watchdog_timeout_s", "is set but hardware_watchdog is not");
    const uint32_t least = min_hardware_watchdog_timeout_s(s.interval_ms, s.device_timeout_ms);
    if (!s.hardware_watchdog.empty() && s.hardware_watchdog_timeout_s < least) {
        const char* k = r.get("hardware_watchdog_timeout_s") ? "hardware_watchdog_timeout_s" : "hardware_watchdog";
        return r.fail(k, "the timeout (" + std::to_string(s.hardware_watchdog_timeout_s) +
                             " s) must be above 2 x (interval_ms + device_timeout_ms): at least " +
                             std::to_string(least) + " s, or a slow check gets a healthy host reset");
    }
    return true;
}

// role = watch registers nothing: a key that only means something for an
// agent that registers is a contradiction, refused with the key named.
bool check_watch(const SettingsReader& r, const AgentSettings& s) {
    if (s.role != StartRole::watch) return true;
    if (s.keep_registration)
        return r.fail("keep_registration", "a check-only watcher (role = watch) never registers, so it has no "
                                           "registration to keep");
    if (s.ptpl)
        return r.fail("ptpl", "a check-only watcher (role = watch) never registers; ask for PTPL where the node is "
                              "unfenced (fence_nvfence aptpl)");
    if (s.rejoin_auto.value_or(false))
        return r.fail("rejoin", "a check-only watcher (role = watch) never registers again by itself: the cluster "
                                "manager unfences the node");
    return true;
}

}  // namespace

Result<AgentSettings> parse_agent_settings(const SettingsMap& kv, std::string& why) {
    const auto bad = make_error_code(Errc::invalid_argument);
    if (!check_keys(kv, why)) return bad;
    const SettingsReader r{kv, why};
    AgentSettings s;
    if (!read_device(r, s) || !read_fence(r, s) || !read_files(r, s) || !read_behaviour(r, s) || !check_watch(r, s) ||
        !read_hardware_watchdog(r, s))
        return bad;
    // What the agent (its constructor's invariants) and FenceActions assume
    // of parsed settings, set or defaulted.
    NVF_INVARIANT(!s.device.empty() && s.interval_ms >= kMinIntervalMs && s.interval_ms <= kMaxIntervalMs);
    NVF_INVARIANT(s.device_timeout_ms >= kMinDeviceTimeoutMs && s.device_timeout_ms <= kMaxDeviceTimeoutMs);
    NVF_INVARIANT(s.fence_timeout_ms >= 100 && s.writer_units.size() <= kMaxWriterUnits);
    NVF_INVARIANT(s.fence_action != FenceActionKind::command || !trim(s.fence_command).empty());
    NVF_INVARIANT(s.fence_action != FenceActionKind::stop_unit || valid_unit(s.fence_unit));
    NVF_INVARIANT(s.socket_mode == 0600 || (s.socket_mode == 0660 && !s.socket_group.empty()));
    return s;
}

AgentOptions agent_options(const AgentSettings& s, uint8_t node) {
    AgentOptions o;
    o.tag = s.tag;
    o.node = node;
    o.type = s.type;
    o.role = s.role;
    o.interval_ms = s.interval_ms;
    o.device_timeout_ms = s.device_timeout_ms;
    o.keep_registration = s.keep_registration;
    o.ptpl = s.ptpl;
    o.rejoin_auto = s.rejoin_auto.value_or(false);
    o.view_timeout_ms = s.view_timeout_ms;
    o.fence_on_view_loss = s.fence_on_view_loss;
    o.fence_action_reboots = s.fence_action == FenceActionKind::reboot;
    return o;
}

Result<std::string> resolve_device_spec(const std::string& spec, const std::string& sys_root,
                                        std::string& why, const std::string& dev_root) {
    namespace fs = std::filesystem;
    if (!spec.empty() && spec[0] == '/') return spec;
    std::string head;
    if (namespace_name(spec, head) && head == spec) return dev_root + "/" + spec;
    const auto want = ebs_volume_id(spec);
    if (!want) {
        std::error_code ec;
        const std::string link = dev_root + "/nvfence/" + spec;
        if (valid_instance_name(spec) && fs::exists(link, ec)) return link;
        why = "device = \"" + spec + "\": not a path, an nvmeXnY name, an EBS volume id (vol-...) or a volume id with a " +
              dev_root + "/nvfence/ link";
        return make_error_code(Errc::invalid_argument);
    }
    std::set<std::string> found;
    std::vector<std::string> ctrls;
    std::error_code ec;
    const fs::path cls = fs::path(sys_root) / "class" / "nvme";
    for (const auto& ent : fs::directory_iterator(cls, ec)) {
        const std::string ctrl = ent.path().filename().string();
        const auto id = ebs_volume_id(read_first_line(ent.path() / "serial"));
        if (!id || *id != *want) continue;
        ctrls.push_back(ctrl);
        std::error_code ec2;
        for (const auto& sub : fs::directory_iterator(ent.path(), ec2)) {
            if (namespace_name(sub.path().filename().string(), head)) found.insert(head);
        }
    }
    if (ctrls.empty()) {
        why = "device = \"" + spec + "\": no NVMe controller with serial " + want->substr(0, 3) +
              want->substr(4) + " under " + cls.string() + " (is the volume attached?)";
        return make_error_code(Errc::not_found);
    }
    std::sort(ctrls.begin(), ctrls.end());
    if (found.empty()) {
        why = "device = \"" + spec + "\": controller " + ctrls.front() + " has no namespace";
        return make_error_code(Errc::not_found);
    }
    if (found.size() > 1) {
        why = "device = \"" + spec + "\" is ambiguous: namespaces";
        for (const auto& f : found) why += " " + f;
        why += " (controllers";
        for (const auto& c : ctrls) why += " " + c;
        why += "); give the device path";
        return make_error_code(Errc::invalid_argument);
    }
    return "/dev/" + *found.begin();
}

std::string agent_volume_name(const NamespaceInfo& info) {
    if (!info.volume.empty()) return info.volume;
    return volume_id(info.ctrl.serial, info.ns, info.nsid);
}


}  // namespace nvfence
