// SPDX-License-Identifier: MIT
#include "agent/cluster_tag.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "internal/invariant.hpp"
#include "nvfence/error.hpp"
#include "nvfence/fd.hpp"

namespace nvfence {
namespace {

constexpr size_t kMaxConfBytes = 1 << 20;
constexpr int kMaxSectionDepth = 16;

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}

}  // namespace

uint8_t cluster_tag_for_name(std::string_view name) {
    uint32_t h = 2166136261u;
    for (char c : name) {
        h ^= static_cast<unsigned char>(c);
        h *= 16777619u;
    }
    const uint32_t tag = 1 + h % 255;
    NVF_INVARIANT(tag >= 1 && tag <= 255);
    return static_cast<uint8_t>(tag);
}

std::optional<std::string> cmap_string_value(std::string_view output, std::string_view key) {
    while (!output.empty()) {
        const size_t nl = output.find('\n');
        std::string_view line = trim(output.substr(0, nl));
        output = nl == std::string_view::npos ? std::string_view() : output.substr(nl + 1);
        if (line.substr(0, key.size()) != key) continue;
        std::string_view rest = line.substr(key.size());
        if (rest.empty() || (rest.front() != ' ' && rest.front() != '\t')) continue;  // a longer key
        const size_t eq = rest.find(" = ");
        if (eq == std::string_view::npos) continue;
        const std::string_view value = trim(rest.substr(eq + 3));
        if (value.empty()) return std::nullopt;
        return std::string(value);
    }
    return std::nullopt;
}

std::optional<std::string> corosync_conf_cluster_name(std::string_view text) {
    // corosync.conf: `name {` opens a section, `}` closes it, `key: value`
    // items, `#` comments. Only totem's own cluster_name counts.
    std::string_view sections[kMaxSectionDepth];
    int depth = 0;
    while (!text.empty()) {
        const size_t nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
        if (const size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
        line = trim(line);
        if (line.empty()) continue;
        if (line.back() == '{') {
            if (depth == kMaxSectionDepth) return std::nullopt;
            sections[depth++] = trim(line.substr(0, line.size() - 1));
            continue;
        }
        if (line == "}") {
            if (depth > 0) --depth;
            continue;
        }
        const size_t colon = line.find(':');
        if (depth != 1 || sections[0] != "totem" || colon == std::string_view::npos) continue;
        if (trim(line.substr(0, colon)) != "cluster_name") continue;
        const std::string_view value = trim(line.substr(colon + 1));
        if (value.empty()) return std::nullopt;
        return std::string(value);
    }
    return std::nullopt;
}

Result<uint8_t> tag_from_corosync_conf(const std::string& path, std::string& why) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
    if (!fd && errno == ENOENT) return uint8_t{0};
    const auto bad = make_error_code(Errc::invalid_argument);
    if (!fd) {
        why = "cluster_tag is not set and " + path + " cannot be read (" + std::strerror(errno) +
              "): set cluster_tag, or make the file readable";
        return bad;
    }
    std::string text;
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(fd.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        text.append(buf, static_cast<size_t>(n));
        if (text.size() > kMaxConfBytes) break;
    }
    auto name = corosync_conf_cluster_name(text);
    if (!name) {
        why = "cluster_tag is not set and " + path + " names no cluster (totem { cluster_name: ... }): set cluster_tag";
        return bad;
    }
    return cluster_tag_for_name(*name);
}

}  // namespace nvfence
