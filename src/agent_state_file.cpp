// SPDX-License-Identifier: MIT
#include "nvfence/agent_state_file.hpp"

#include <cstdint>

#include "agent_text.hpp"
#include "nvfence/error.hpp"
#include "nvfence/key.hpp"
#include "nvfence/state_file.hpp"

namespace nvfence {
namespace {
using agent_detail::clean_text;
using agent_detail::kMaxReasonBytes;

std::string sanitize_volume(const std::string& volume) {
    std::string v;
    for (char c : volume) {
        const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                          (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
        v.push_back(keep ? c : '_');
    }
    if (v.empty() || v[0] == '.') v.insert(0, "v");
    return v;
}

}  // namespace

// ---- persisted state ----------------------------------------------------------

const char* fence_action_state_name(FenceActionState a) {
    switch (a) {
    case FenceActionState::none: return "none";
    case FenceActionState::pending: return "pending";
    case FenceActionState::done: return "done";
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
    return t;
}

Result<PersistedState> parse_persisted_state(std::string_view text) {
    const auto bad = make_error_code(Errc::state_io);
    if (text.size() > 4096) return bad;
    PersistedState s;
    unsigned seen = 0;
    enum : unsigned { kVersion = 1, kNode = 2, kTag = 4, kRole = 8, kKey = 16, kFenced = 32, kReason = 64, kAction = 128 };
    while (!text.empty()) {
        const size_t nl = text.find('\n');
        if (nl == std::string_view::npos) return bad;  // a torn last line
        std::string_view line = text.substr(0, nl);
        text.remove_prefix(nl + 1);
        if (line.empty() || line[0] == '#') continue;
        const size_t eq = line.find('=');
        if (eq == std::string_view::npos) return bad;
        const std::string_view k = line.substr(0, eq), v = line.substr(eq + 1);
        auto once = [&](unsigned bit) {
            if (seen & bit) return false;
            seen |= bit;
            return true;
        };
        if (k == "version") {
            if (!once(kVersion) || v != "1") return bad;
        } else if (k == "node") {
            auto n = parse_uint(v, 0, kMaxNode);
            if (!once(kNode) || !n) return bad;
            s.node = static_cast<uint8_t>(*n);
        } else if (k == "tag") {
            auto n = parse_uint(v, 0, 255);
            if (!once(kTag) || !n) return bad;
            s.tag = static_cast<uint8_t>(*n);
        } else if (k == "role") {
            if (!once(kRole)) return bad;
            if (v == "none") s.role = PersistedRole::none;
            else if (v == "standby") s.role = PersistedRole::standby;
            else if (v == "holder") s.role = PersistedRole::holder;
            else if (v == "fenced") s.role = PersistedRole::fenced;
            else return bad;
        } else if (k == "key") {
            if (!once(kKey)) return bad;
            if (v == "0x0000000000000000") {
                s.key = 0;
            } else {
                auto key = parse_key(v);
                if (!key) return bad;
                s.key = *key;
            }
        } else if (k == "fenced_unix_ms") {
            auto n = parse_uint(v, 0, INT64_MAX);
            if (!once(kFenced) || !n) return bad;
            s.fenced_unix_ms = static_cast<int64_t>(*n);
        } else if (k == "reason") {
            if (!once(kReason) || v.size() > kMaxReasonBytes) return bad;
            for (char c : v)
                if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return bad;
            s.reason = std::string(v);
        } else if (k == "action") {
            if (!once(kAction)) return bad;
            if (v == "none") s.action = FenceActionState::none;
            else if (v == "pending") s.action = FenceActionState::pending;
            else if (v == "done") s.action = FenceActionState::done;
            else return bad;
        } else {
            return bad;
        }
    }
    // An older agent wrote no action line: it ran the action at entry.
    if (!(seen & kAction)) s.action = s.role == PersistedRole::fenced ? FenceActionState::done : FenceActionState::none;
    if ((seen | kAction) != 255) return bad;
    if (s.action != FenceActionState::none && s.role != PersistedRole::fenced) return bad;
    const bool registered = s.role == PersistedRole::standby || s.role == PersistedRole::holder;
    if (registered && (s.key == 0 || s.node == 0)) return bad;
    if (s.role == PersistedRole::none && s.key != 0) return bad;
    if (s.role == PersistedRole::fenced && s.node == 0) return bad;
    return s;
}

AgentStateFile::AgentStateFile(std::string dir, const std::string& volume) : dir_(std::move(dir)) {
    path_ = dir_ + "/" + sanitize_volume(volume) + ".agent";
}

Result<std::optional<PersistedState>> AgentStateFile::load() const {
    bool absent = false;
    auto text = read_state_file(path_, 4096, absent);
    if (!text) return text.error();
    if (absent) return std::optional<PersistedState>{};
    auto s = parse_persisted_state(*text);
    if (!s) return s.error();
    return std::optional<PersistedState>(*s);
}

Status AgentStateFile::save(const PersistedState& s) const {
    return write_file_atomic(dir_, path_, encode_persisted_state(s));
}

}  // namespace nvfence
