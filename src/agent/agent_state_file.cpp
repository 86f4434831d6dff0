// SPDX-License-Identifier: MIT
#include "agent/agent_state_file.hpp"

#include <array>
#include <cstdint>

#include "agent/agent_text.hpp"
#include "internal/file_name.hpp"
#include "internal/invariant.hpp"
#include "nvfence/error.hpp"
#include "nvfence/key.hpp"
#include "nvfence/state_file.hpp"

namespace nvfence {
namespace {
using agent_detail::clean_text;
using agent_detail::kMaxReasonBytes;

}  // namespace

// ---- persisted state ----------------------------------------------------------

const char* fence_action_state_name(FenceActionState a) {
    switch (a) {
    case FenceActionState::none: return "none";
    case FenceActionState::pending: return "pending";
    case FenceActionState::done: return "done";
    case FenceActionState::writers_running: return "writers_running";
    }
    return "unknown";
}

const char* persisted_role_name(PersistedRole r) {
    switch (r) {
    case PersistedRole::none: return "none";
    case PersistedRole::standby: return "standby";
    case PersistedRole::holder: return "holder";
    case PersistedRole::fenced: return "fenced";
    }
    return "unknown";
}

std::string encode_persisted_state(const PersistedState& s) {
    std::string t = "# nvfenced state; written atomically by nvfenced, do not edit while it runs\n";
    t += "version=1\n";
    t += "node=" + std::to_string(s.node) + "\n";
    t += "tag=" + std::to_string(s.tag) + "\n";
    t += std::string("role=") + persisted_role_name(s.role) + "\n";
    t += "key=" + format_key_hex(s.key) + "\n";
    t += "fenced_unix_ms=" + std::to_string(s.fenced_unix_ms < 0 ? 0 : s.fenced_unix_ms) + "\n";
    t += "reason=" + clean_text(s.reason, kMaxReasonBytes) + "\n";
    t += std::string("action=") + fence_action_state_name(s.action) + "\n";
    if (!s.boot_id.empty()) t += "boot_id=" + s.boot_id + "\n";
    return t;
}

namespace {

enum : unsigned {
    kVersion = 1, kNode = 2, kTag = 4, kRole = 8, kKey = 16, kFenced = 32, kReason = 64, kAction = 128, kBoot = 256,
    kEvery = 511
};

// A boot id as the kernel writes it (a UUID; 64 bytes at most here).
bool valid_boot_id(std::string_view v) {
    if (v.empty() || v.size() > 64) return false;
    for (char c : v)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-')) return false;
    return true;
}

// The enum value named @p v among @p names (in enum order), if any.
template <typename E, size_t N>
std::optional<E> named(std::string_view v, const std::array<const char*, N>& names) {
    for (size_t i = 0; i < N; ++i)
        if (v == names[i]) return static_cast<E>(i);
    return std::nullopt;
}

// Parses one `key=value` into @p s; false when it is unknown, repeated or
// out of range.
bool parse_state_line(std::string_view k, std::string_view v, PersistedState& s, unsigned& seen) {
    auto once = [&](unsigned bit) {
        if (seen & bit) return false;
        seen |= bit;
        return true;
    };
    if (k == "version") return once(kVersion) && v == "1";
    if (k == "node" || k == "tag") {
        auto n = parse_uint(v, 0, k == "node" ? kMaxNode : 255);
        if (!once(k == "node" ? kNode : kTag) || !n) return false;
        (k == "node" ? s.node : s.tag) = static_cast<uint8_t>(*n);
        return true;
    }
    if (k == "role") {
        auto r = named<PersistedRole>(v, std::array{"none", "standby", "holder", "fenced"});
        if (!once(kRole) || !r) return false;
        s.role = *r;
        return true;
    }
    if (k == "key") {
        if (!once(kKey)) return false;
        if (v == "0x0000000000000000") {
            s.key = 0;
            return true;
        }
        auto key = parse_key(v);
        if (!key) return false;
        s.key = *key;
        return true;
    }
    if (k == "fenced_unix_ms") {
        auto n = parse_uint(v, 0, INT64_MAX);
        if (!once(kFenced) || !n) return false;
        s.fenced_unix_ms = static_cast<int64_t>(*n);
        return true;
    }
    if (k == "reason") {
        if (!once(kReason) || v.size() > kMaxReasonBytes) return false;
        for (char c : v)
            if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
        s.reason = std::string(v);
        return true;
    }
    if (k == "boot_id") {
        if (!once(kBoot) || !valid_boot_id(v)) return false;
        s.boot_id = std::string(v);
        return true;
    }
    if (k != "action") return false;
    auto a = named<FenceActionState>(v, std::array{"none", "pending", "done", "writers_running"});
    if (!once(kAction) || !a) return false;
    s.action = *a;
    return true;
}

// Role, key, node and fence progress agree with each other.
bool consistent(const PersistedState& s) {
    if (s.action != FenceActionState::none && s.role != PersistedRole::fenced) return false;
    if (!s.boot_id.empty() && (s.role != PersistedRole::fenced || !valid_boot_id(s.boot_id))) return false;
    const bool registered = s.role == PersistedRole::standby || s.role == PersistedRole::holder;
    if (registered && (s.key == 0 || s.node == 0)) return false;
    if (s.role == PersistedRole::none && s.key != 0) return false;
    return !(s.role == PersistedRole::fenced && s.node == 0);
}

}  // namespace

Result<PersistedState> parse_persisted_state(std::string_view text) {
    const auto bad = make_error_code(Errc::state_io);
    if (text.size() > 4096) return bad;
    PersistedState s;
    unsigned seen = 0;
    while (!text.empty()) {
        const size_t nl = text.find('\n');
        if (nl == std::string_view::npos) return bad;  // a torn last line
        std::string_view line = text.substr(0, nl);
        text.remove_prefix(nl + 1);
        if (line.empty() || line[0] == '#') continue;
        const size_t eq = line.find('=');
        if (eq == std::string_view::npos) return bad;
        if (!parse_state_line(line.substr(0, eq), line.substr(eq + 1), s, seen)) return bad;
    }
    // An older agent wrote no action line: it ran the action at entry.
    if (!(seen & kAction)) s.action = s.role == PersistedRole::fenced ? FenceActionState::done : FenceActionState::none;
    if ((seen | kAction | kBoot) != kEvery || !consistent(s)) return bad;
    return s;
}

AgentStateFile::AgentStateFile(std::string dir, const std::string& volume)
    : AgentStateFile(std::move(dir), volume, file_state_medium()) {}

AgentStateFile::AgentStateFile(std::string dir, const std::string& volume, const StateMedium& medium)
    : dir_(std::move(dir)), medium_(&medium) {
    path_ = dir_ + "/" + volume_file_stem(volume) + ".agent";
    unfenced_path_ = dir_ + "/" + volume_file_stem(volume) + ".unfenced";
}

std::string current_boot_id() {
    bool absent = false;
    auto text = file_state_medium().read("/proc/sys/kernel/random/boot_id", 128, absent);
    if (!text || absent) return {};
    std::string id = *text;
    while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
    return valid_boot_id(id) ? id : std::string();
}

Status AgentStateFile::save_unfenced(uint64_t key, const std::string& boot_id) const {
    NVF_INVARIANT(key != 0);  // the key joined with; unfenced_record() reads 0 as "no record"
    NVF_INVARIANT(boot_id.empty() || valid_boot_id(boot_id));
    std::string text = "key=" + format_key_hex(key) + "\n";
    if (!boot_id.empty()) text += "boot_id=" + boot_id + "\n";
    return medium_->write_atomic(dir_, unfenced_path_, text);
}

// `key=<key>\n`, then (fence_nvfence since boot ids) `boot_id=<id>\n`.
UnfencedRecord AgentStateFile::unfenced_record() const {
    bool absent = false;
    auto text = medium_->read(unfenced_path_, 160, absent);
    if (!text || absent) return {};
    std::string_view t = *text;
    const size_t nl = t.find('\n');
    if (t.substr(0, 4) != "key=" || nl == std::string_view::npos) return {};
    auto key = parse_key(t.substr(4, nl - 4));
    if (!key) return {};
    UnfencedRecord r;
    r.key = *key;
    t.remove_prefix(nl + 1);
    if (t.empty()) return r;
    if (t.substr(0, 8) != "boot_id=" || t.back() != '\n' || !valid_boot_id(t.substr(8, t.size() - 9))) return {};
    r.boot_id = std::string(t.substr(8, t.size() - 9));
    return r;
}

Result<std::optional<PersistedState>> AgentStateFile::load() const {
    bool absent = false;
    auto text = medium_->read(path_, 4096, absent);
    if (!text) return text.error();
    if (absent) return std::optional<PersistedState>{};
    auto s = parse_persisted_state(*text);
    if (!s) return s.error();
    return std::optional<PersistedState>(*s);
}

Status AgentStateFile::save(const PersistedState& s) const {
    const std::string text = encode_persisted_state(s);
    // The agent saves only states its next start can load: role, key, node
    // and fence progress agree (a refused file would stop the restart), and
    // they read back as saved.
    const auto back = parse_persisted_state(text);
    NVF_INVARIANT(back && back->role == s.role && back->key == s.key && back->node == s.node);
    NVF_INVARIANT(back->tag == s.tag && back->action == s.action);
    return medium_->write_atomic(dir_, path_, text);
}

}  // namespace nvfence
