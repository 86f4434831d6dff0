// SPDX-License-Identifier: MIT
#include "agent/agent_config.hpp"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <string_view>
#include <filesystem>
#include <fstream>
#include <set>

#include "nvfence/error.hpp"
#include "nvfence/key.hpp"
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
    };
    return keys;
}

bool valid_instance_name(const std::string& s) {
    if (s.empty() || s.size() > 64 || !(is_alnum(s[0]) || s[0] == '_')) return false;
    return std::all_of(s.begin(), s.end(), [](char c) { return is_alnum(c) || c == '.' || c == '_' || c == '-'; });
}

Result<AgentSettings> parse_agent_settings(const SettingsMap& kv, std::string& why) {
    const auto bad = make_error_code(Errc::invalid_argument);
    const auto& keys = agent_setting_keys();
    for (const auto& [k, v] : kv) {
        if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
            why = "unknown key '" + k + "'";
            return bad;
        }
        if (v.size() > kMaxValueBytes || !printable(v)) {
            why = k + " = " + shown(v) + ": too long or contains control characters";
            return bad;
        }
    }
    auto get = [&](const char* k) -> const std::string* {
        auto it = kv.find(k);
        return it == kv.end() ? nullptr : &it->second;
    };
    auto fail = [&](const char* k, const std::string& what) -> Result<AgentSettings> {
        why = std::string(k) + " = " + shown(*get(k)) + ": " + what;
        return bad;
    };
    auto number = [&](const char* k, uint64_t lo, uint64_t hi, auto& out) -> bool {
        const std::string* v = get(k);
        if (!v) return true;
        auto n = parse_uint(*v, lo, hi);
        if (!n) {
            why = std::string(k) + " = " + shown(*v) + ": must be a whole number from " + std::to_string(lo) +
                  " to " + std::to_string(hi);
            return false;
        }
        out = static_cast<std::remove_reference_t<decltype(out)>>(*n);
        return true;
    };

    AgentSettings s;
    const std::string* dev = get("device");
    if (!dev || dev->empty()) {
        why = "device: required (a namespace such as /dev/nvme1n1, a /dev/disk/by-id/ link, or an EBS volume id vol-...)";
        return bad;
    }
    s.device = *dev;
    if (const std::string* v = get("node_id")) {
        uint8_t n = 0;
        if (!number("node_id", 1, kMaxNode, n)) return bad;
        (void)v;
        s.node = n;
    }
    if (!number("cluster_tag", 0, 255, s.tag)) return bad;
    if (const std::string* v = get("mode")) {
        if (*v == "exclusive" || *v == "we") s.type = ResvType::write_exclusive;
        else if (*v == "shared" || *v == "wero") s.type = ResvType::write_exclusive_reg_only;
        else return fail("mode", "must be exclusive (Write Exclusive) or shared (Write Exclusive - Registrants Only)");
    }
    if (const std::string* v = get("role")) {
        if (*v == "standby") s.role = StartRole::standby;
        else if (*v == "acquire") s.role = StartRole::acquire;
        else return fail("role", "must be standby or acquire (take the reservation at start if nobody holds it)");
    }
    if (!number("interval_ms", kMinIntervalMs, kMaxIntervalMs, s.interval_ms)) return bad;
    if (!number("device_timeout_ms", kMinDeviceTimeoutMs, kMaxDeviceTimeoutMs, s.device_timeout_ms)) return bad;
    if (!number("fence_timeout_ms", 100, 600000, s.fence_timeout_ms)) return bad;
    if (const std::string* v = get("fence_action")) {
        if (*v == "none") s.fence_action = FenceActionKind::none;
        else if (*v == "command") s.fence_action = FenceActionKind::command;
        else if (*v == "stop-unit" || *v == "stop_unit") s.fence_action = FenceActionKind::stop_unit;
        else if (*v == "reboot") s.fence_action = FenceActionKind::reboot;
        else return fail("fence_action", "must be none, command, stop-unit or reboot");
    }
    if (const std::string* v = get("fence_command")) {
        if (s.fence_action != FenceActionKind::command)
            return fail("fence_command", "is set but fence_action is not command");
        if (trim(*v).empty()) return fail("fence_command", "must not be empty");
        s.fence_command = *v;
    } else if (s.fence_action == FenceActionKind::command) {
        why = "fence_command: required when fence_action = command";
        return bad;
    }
    if (const std::string* v = get("fence_unit")) {
        if (s.fence_action != FenceActionKind::stop_unit)
            return fail("fence_unit", "is set but fence_action is not stop-unit");
        if (!valid_unit(*v)) return fail("fence_unit", "not a systemd unit name (e.g. postgresql.service)");
        s.fence_unit = *v;
    } else if (s.fence_action == FenceActionKind::stop_unit) {
        why = "fence_unit: required when fence_action = stop-unit";
        return bad;
    }
    if (const std::string* v = get("reboot_method")) {
        if (*v == "sysrq") s.reboot_method = RebootMethod::sysrq;
        else if (*v == "force") s.reboot_method = RebootMethod::force;
        else return fail("reboot_method", "must be sysrq (immediate, no sync) or force (reboot -f)");
    }
    if (const std::string* v = get("writer_units")) {
        for (const std::string& unit : split_list(*v)) {
            if (!valid_unit(unit)) {
                why = "writer_units = " + shown(*v) + ": " + shown(unit) + " is not a systemd unit name";
                return bad;
            }
            if (std::find(s.writer_units.begin(), s.writer_units.end(), unit) == s.writer_units.end())
                s.writer_units.push_back(unit);
        }
        if (s.writer_units.size() > kMaxWriterUnits)
            return fail("writer_units", "at most " + std::to_string(kMaxWriterUnits) + " units");
    }
    if (const std::string* v = get("control_socket")) {
        if (v->empty() || (*v)[0] != '/') return fail("control_socket", "must be an absolute path");
        if (v->size() > 107) return fail("control_socket", "longer than a unix socket path may be (107 bytes)");
        s.control_socket = *v;
    }
    if (const std::string* v = get("socket_group")) {
        if (!valid_group(*v)) return fail("socket_group", "not a group name or numeric gid");
        s.socket_group = *v;
        s.socket_mode = 0660;
    }
    if (const std::string* v = get("socket_mode")) {
        if (*v == "0600" || *v == "600") s.socket_mode = 0600;
        else if (*v == "0660" || *v == "660") s.socket_mode = 0660;
        else return fail("socket_mode", "must be 0600 (root only) or 0660 (root and socket_group)");
        if (s.socket_mode == 0660 && s.socket_group.empty())
            return fail("socket_mode", "0660 needs socket_group");
    }
    if (const std::string* v = get("state_dir")) {
        if (v->empty() || (*v)[0] != '/') return fail("state_dir", "must be an absolute path");
        s.state_dir = *v;
    }
    if (const std::string* v = get("keep_registration")) {
        if (*v == "true" || *v == "yes" || *v == "1" || *v == "on") s.keep_registration = true;
        else if (*v == "false" || *v == "no" || *v == "0" || *v == "off") s.keep_registration = false;
        else return fail("keep_registration", "must be true or false");
    }
    if (const std::string* v = get("ptpl")) {
        if (*v == "true" || *v == "yes" || *v == "1" || *v == "on") s.ptpl = true;
        else if (*v == "false" || *v == "no" || *v == "0" || *v == "off") s.ptpl = false;
        else return fail("ptpl", "must be true or false");
    }
    if (const std::string* v = get("rejoin")) {
        if (*v == "auto") s.rejoin_auto = true;
        else if (*v == "manual") s.rejoin_auto = false;
        else return fail("rejoin", "must be auto or manual");
    }
    if (get("view_timeout_ms") && *get("view_timeout_ms") != "0" &&
        !number("view_timeout_ms", 1000, 600000, s.view_timeout_ms))
        return bad;
    if (const std::string* v = get("fence_on_view_loss")) {
        if (*v == "true" || *v == "yes" || *v == "1" || *v == "on") s.fence_on_view_loss = true;
        else if (*v == "false" || *v == "no" || *v == "0" || *v == "off") s.fence_on_view_loss = false;
        else return fail("fence_on_view_loss", "must be true or false");
    }
    if (const std::string* v = get("aen_wakeup")) {
        if (*v == "true" || *v == "yes" || *v == "1" || *v == "on") s.aen_wakeup = true;
        else if (*v == "false" || *v == "no" || *v == "0" || *v == "off") s.aen_wakeup = false;
        else return fail("aen_wakeup", "must be true or false");
    }
    if (const std::string* v = get("name")) {
        if (!valid_instance_name(*v))
            return fail("name", "1 to 64 characters of A-Z a-z 0-9 . _ -, not starting with . or -");
        s.name = *v;
    }
    if (const std::string* v = get("log_level")) {
        if (*v == "debug" || *v == "info" || *v == "warning" || *v == "error") s.log_level = *v;
        else if (*v == "warn") s.log_level = "warning";
        else return fail("log_level", "must be debug, info, warning or error");
    }
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

std::string default_socket_path(const std::string& name) { return "/run/nvfence/" + name + ".sock"; }

}  // namespace nvfence
