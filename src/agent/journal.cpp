// SPDX-License-Identifier: MIT
#include "agent/journal.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "internal/invariant.hpp"
#include "nvfence/fd.hpp"
#include "nvfence/key.hpp"

namespace nvfence {

namespace {

const char* syslog_priority(EventLevel l) {
    switch (l) {
    case EventLevel::debug: return "7";
    case EventLevel::info: return "6";
    case EventLevel::warning: return "4";
    case EventLevel::error: return "3";
    }
    return "6";
}

std::string key_field(uint64_t key) { return key ? format_key(key) : std::string("none"); }

bool valid_field_name(const std::string& n) {
    if (n.empty() || n.front() == '_' || n.size() > 64) return false;
    for (char c : n)
        if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
    return true;
}

}  // namespace

std::vector<JournalField> state_change_fields(const AgentEvent& e) {
    const std::string from = agent_state_name(e.from), to = agent_state_name(e.to);
    const auto k = e.key ? decode_key(e.key) : std::nullopt;
    std::vector<JournalField> f = {
        {"MESSAGE", from + " -> " + to + " (volume " + e.volume + ", key " + key_field(e.key) + "): " + e.text},
        {"MESSAGE_ID", kStateChangeMessageId},
        {"PRIORITY", syslog_priority(e.level)},
        {"SYSLOG_IDENTIFIER", "nvfenced"},
        {"NVFENCE_VOLUME", e.volume},
        {"NVFENCE_STATE", to},
        {"NVFENCE_PREVIOUS_STATE", from},
        {"NVFENCE_KEY", key_field(e.key)},
        {"NVFENCE_EPOCH", std::to_string(k ? k->epoch : 0)},
        {"NVFENCE_NODE", std::to_string(e.node)},
        {"NVFENCE_REASON", e.text},
    };
    if (e.report) {
        const Registrant* h = e.report->holder();
        f.emplace_back("NVFENCE_GENERATION", std::to_string(e.report->generation));
        f.emplace_back("NVFENCE_HOLDER", key_field(h ? h->key : 0));
    }
    return f;
}

std::string journal_datagram(const std::vector<JournalField>& fields) {
    std::string out;
    for (const auto& [name, value] : fields) {
        NVF_INVARIANT(valid_field_name(name));
        if (value.find('\n') == std::string::npos) {
            out += name + "=" + value + "\n";
            continue;
        }
        out += name + "\n";
        uint64_t n = value.size();
        for (int i = 0; i < 8; ++i, n >>= 8) out += static_cast<char>(n & 0xff);
        out += value + "\n";
    }
    return out;
}

bool journal_send(const std::string& datagram, const std::string& socket) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (socket.empty() || socket.size() >= sizeof a.sun_path) return false;
    std::memcpy(a.sun_path, socket.data(), socket.size());
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket.size());
    Fd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) return false;
    const ssize_t n = ::sendto(fd.get(), datagram.data(), datagram.size(), MSG_NOSIGNAL,
                               reinterpret_cast<const sockaddr*>(&a), len);
    return n == static_cast<ssize_t>(datagram.size());
}

bool journald_present(const std::string& socket) {
    const char* j = std::getenv("JOURNAL_STREAM");
    if (j && *j) return true;
    struct stat st {};
    return ::stat(socket.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

}  // namespace nvfence
