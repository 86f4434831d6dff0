// SPDX-License-Identifier: MIT
#include "elector/elector_config.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <cerrno>
#include <cstring>

#include "nvfence/error.hpp"
#include "nvfence/fd.hpp"
#include "nvfence/key.hpp"
#include "internal/invariant.hpp"
#include "internal/list.hpp"

namespace nvfence {
namespace {

constexpr size_t kMaxEndpoints = 16;
constexpr size_t kMaxValueBytes = 4096;

std::error_code bad(std::string& why, const std::string& key, const std::string& value, const std::string& what) {
    why = key + " = \"" + value + "\": " + what;
    return make_error_code(Errc::invalid_argument);
}

bool printable_no_space(const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u > 0x20 && u < 0x7f;
    });
}

// http(s)://host:port with host a name, IPv4 or [IPv6]; no path, no user.
bool valid_endpoint(const std::string& e, bool& https) {
    std::string rest;
    if (e.rfind("http://", 0) == 0) {
        https = false;
        rest = e.substr(7);
    } else if (e.rfind("https://", 0) == 0) {
        https = true;
        rest = e.substr(8);
    } else {
        return false;
    }
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0) return false;
    const std::string host = rest.substr(0, colon);
    if (!parse_uint(rest.substr(colon + 1), 1, 65535)) return false;
    if (host.size() > 253) return false;
    if (host.front() == '[') {
        if (host.back() != ']' || host.size() < 3) return false;
        return std::all_of(host.begin() + 1, host.end() - 1, [](char c) {
            return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' || c == '.';
        });
    }
    return std::all_of(host.begin(), host.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
    });
}

// etcd_user and etcd_password_file: both or neither.
Status parse_auth_keys(const std::string* user, const std::string* file, ElectorSettings& s, std::string& why) {
    if (user) {
        if (user->empty() || user->size() > 128 || !printable_no_space(*user))
            return bad(why, "etcd_user", *user, "must be 1 to 128 printable characters without spaces");
        if (!file) return bad(why, "etcd_user", *user, "needs etcd_password_file (the user's password)");
        s.user = *user;
    }
    if (file) {
        if (file->empty() || file->front() != '/' || !printable_no_space(*file))
            return bad(why, "etcd_password_file", *file, "must be an absolute path without spaces");
        if (!user) return bad(why, "etcd_password_file", *file, "needs etcd_user");
        s.password_file = *file;
    }
    return Ok{};
}

// Valid UTF-8 without control characters (etcd's JSON gateway takes the
// password as a JSON string).
bool valid_password_text(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c < 0x20 || c == 0x7f) return false;
        size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
        for (size_t k = 1; k < n; ++k) {
            const auto d = static_cast<unsigned char>(s[i + k]);
            if ((d >> 6) != 0x2) return false;
            cp = (cp << 6) | (d & 0x3f);
        }
        const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || (cp >= 0x80 && cp < 0xa0))
            return false;
        i += n;
    }
    return true;
}

std::error_code password_error(std::string& why, const std::string& path, const std::string& what) {
    why = "etcd_password_file = " + path + ": " + what;
    return make_error_code(ElectorErrc::auth_failed);
}

}  // namespace

Result<std::string> read_etcd_password(const std::string& path, std::string& why) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
    if (!fd) return password_error(why, path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return password_error(why, path, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return password_error(why, path, "not a regular file");
    if ((st.st_mode & S_IRWXO) != 0)
        return password_error(why, path, "accessible by others (chmod o-rwx, e.g. 0600 or 0640)");
    if (st.st_size > static_cast<off_t>(kMaxPasswordFileBytes))
        return password_error(why, path, "longer than " + std::to_string(kMaxPasswordFileBytes) + " bytes");
    std::string text(kMaxPasswordFileBytes + 1, '\0');
    size_t got = 0;
    while (got < text.size()) {
        const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return password_error(why, path, std::strerror(errno));
        if (n == 0) break;
        got += static_cast<size_t>(n);
    }
    if (got > kMaxPasswordFileBytes)
        return password_error(why, path, "longer than " + std::to_string(kMaxPasswordFileBytes) + " bytes");
    text.resize(got);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.empty()) return password_error(why, path, "empty (the password goes on the first line)");
    if (!valid_password_text(text))
        return password_error(why, path, "one line of UTF-8 text without control characters expected");
    return text;
}

Status check_elector_files(const ElectorSettings& s, std::string& why) {
    // libcurl reads the TLS files on the first etcd call: a missing or
    // unreadable one would show only as "unreachable" on every call.
    for (const auto& [key, path] : {std::pair<const char*, const std::string*>{"etcd_ca_file", &s.ca_file},
                                    {"etcd_cert_file", &s.cert_file},
                                    {"etcd_key_file", &s.key_file}}) {
        if (path->empty() || ::access(path->c_str(), R_OK) == 0) continue;
        why = std::string(key) + " = " + *path + ": " + std::strerror(errno);
        return make_error_code(Errc::invalid_argument);
    }
    if (!s.password_file.empty()) {
        if (auto p = read_etcd_password(s.password_file, why); !p) return make_error_code(Errc::invalid_argument);
    }
    return Ok{};
}

const std::vector<std::string>& elector_setting_keys() {
    static const std::vector<std::string> k = {"elector",       "etcd_endpoints", "etcd_ca_file",
                                               "etcd_cert_file", "etcd_key_file",  "etcd_user",
                                               "etcd_password_file", "election_name", "lease_ttl_s",
                                               "lease_margin_ms", "etcd_timeout_ms", "lease_loss"};
    return k;
}

namespace {

using Getter = std::function<const std::string*(const char*)>;

// etcd_endpoints and the TLS files that go with https:// ones.
Status parse_endpoints(const Getter& get, ElectorSettings& s, std::string& why) {
    const auto* eps = get("etcd_endpoints");
    if (!eps || split_list(*eps).empty()) return bad(why, "etcd_endpoints", eps ? *eps : "", "required with elector = etcd");
    s.endpoints = split_list(*eps);
    if (s.endpoints.size() > kMaxEndpoints) return bad(why, "etcd_endpoints", *eps, "at most 16 endpoints");
    size_t n_https = 0;
    for (const auto& e : s.endpoints) {
        bool https = false;
        if (!valid_endpoint(e, https))
            return bad(why, "etcd_endpoints", e, "each endpoint must be http://HOST:PORT or https://HOST:PORT");
        if (https) ++n_https;
    }
    if (n_https != 0 && n_https != s.endpoints.size())
        return bad(why, "etcd_endpoints", *eps, "mixes http and https endpoints");
    const bool tls = n_https != 0;
    for (const char* k : {"etcd_ca_file", "etcd_cert_file", "etcd_key_file"}) {
        const auto* v = get(k);
        if (!v) continue;
        if (v->empty() || v->front() != '/' || !printable_no_space(*v))
            return bad(why, k, *v, "must be an absolute path without spaces");
        if (!tls) return bad(why, k, *v, "TLS files need https:// endpoints");
    }
    if (const auto* v = get("etcd_ca_file")) s.ca_file = *v;
    if (const auto* v = get("etcd_cert_file")) s.cert_file = *v;
    if (const auto* v = get("etcd_key_file")) s.key_file = *v;
    if (s.cert_file.empty() != s.key_file.empty()) {
        const char* k = s.cert_file.empty() ? "etcd_key_file" : "etcd_cert_file";
        return bad(why, k, *get(k), "etcd_cert_file and etcd_key_file go together");
    }
    NVF_INVARIANT(!s.endpoints.empty() && s.endpoints.size() <= kMaxEndpoints);
    NVF_INVARIANT(s.ca_file.empty() || tls);
    return Ok{};
}

// The lease's TTL and the margins and timeouts derived from it.
Status parse_timing(const Getter& get, ElectorSettings& s, std::string& why) {
    if (const auto* v = get("lease_ttl_s")) {
        auto n = parse_uint(*v, 2, 3600);
        if (!n) return bad(why, "lease_ttl_s", *v, "must be a whole number from 2 to 3600 (etcd's minimum TTL is 2 s)");
        s.lease_ttl_s = static_cast<uint32_t>(*n);
    }
    const uint32_t ttl_ms = s.lease_ttl_s * 1000;
    s.lease_margin_ms = std::min<uint32_t>(1000, ttl_ms / 4);
    s.etcd_timeout_ms = std::min<uint32_t>(1000, ttl_ms / 3);
    if (const auto* v = get("lease_margin_ms")) {
        auto n = parse_uint(*v, 100, ttl_ms / 2);
        if (!n)
            return bad(why, "lease_margin_ms", *v,
                       "must be a whole number from 100 to " + std::to_string(ttl_ms / 2) + " (half the lease TTL)");
        s.lease_margin_ms = static_cast<uint32_t>(*n);
    }
    if (const auto* v = get("etcd_timeout_ms")) {
        auto n = parse_uint(*v, 100, ttl_ms / 3);
        if (!n)
            return bad(why, "etcd_timeout_ms", *v,
                       "must be a whole number from 100 to " + std::to_string(ttl_ms / 3) + " (a third of the lease TTL)");
        s.etcd_timeout_ms = static_cast<uint32_t>(*n);
    }
    if (const auto* v = get("lease_loss")) {
        if (*v == "fence") s.lease_loss = LeaseLossAction::fence;
        else if (*v == "hold") s.lease_loss = LeaseLossAction::hold;
        else return bad(why, "lease_loss", *v, "must be fence or hold");
    }
    // Within the documented ranges, set or defaulted: the lease guard needs
    // a margin below the TTL, the calls a bound below it.
    NVF_INVARIANT(s.lease_ttl_s >= 2 && s.lease_ttl_s <= 3600);
    NVF_INVARIANT(s.lease_margin_ms >= 100 && s.lease_margin_ms <= ttl_ms / 2);
    NVF_INVARIANT(s.etcd_timeout_ms >= 100 && s.etcd_timeout_ms <= ttl_ms / 3);
    return Ok{};
}

}  // namespace

Result<ElectorSettings> parse_elector_settings(const std::map<std::string, std::string>& kv,
                                               const std::string& volume, std::string& why) {
    ElectorSettings s;
    const Getter get = [&](const char* k) -> const std::string* {
        auto it = kv.find(k);
        return it == kv.end() ? nullptr : &it->second;
    };
    for (const auto& k : elector_setting_keys()) {
        if (const auto* v = get(k.c_str()); v && v->size() > kMaxValueBytes)
            return bad(why, k, v->substr(0, 32) + "...", "longer than 4096 bytes");
    }
    if (const auto* v = get("elector")) {
        if (*v == "none") s.kind = ElectorKind::none;
        else if (*v == "etcd") s.kind = ElectorKind::etcd;
        else return bad(why, "elector", *v, "must be none or etcd");
    }
    if (s.kind == ElectorKind::none) {
        for (const auto& k : elector_setting_keys()) {
            if (k != "elector" && get(k.c_str()))
                return bad(why, k, *get(k.c_str()), "needs elector = etcd (elector is none)");
        }
        return s;
    }

    // The agent's own key: only etcd may make a host acquire.
    if (const auto* r = get("role"); r && *r == "acquire")
        return bad(why, "role", *r, "must be standby with elector = etcd (the election decides who acquires)");
    if (const auto* r = get("role"); r && *r == "watch")
        return bad(why, "role", *r,
                   "a check-only watcher never registers, so it cannot stand in an election: use elector = none");

    if (auto e = parse_endpoints(get, s, why); !e) return e.error();
    if (auto a = parse_auth_keys(get("etcd_user"), get("etcd_password_file"), s, why); !a) return a.error();
    // parse_endpoints refused a mix: the first endpoint's scheme is every one's.
    if (!s.user.empty() && s.endpoints.front().rfind("http://", 0) == 0)
        return bad(why, "etcd_user", s.user,
                   "the password and etcd's token would cross the network in clear over http:// endpoints: use "
                   "https:// endpoints (etcd's --cert-file and --key-file)");

    if (const auto* v = get("election_name")) {
        if (v->empty() || v->size() > 200 || !printable_no_space(*v))
            return bad(why, "election_name", *v, "must be 1 to 200 printable characters without spaces");
        if (v->back() == '/') return bad(why, "election_name", *v, "must not end with '/'");
        s.election_name = *v;
    } else {
        if (volume.empty()) return bad(why, "election_name", "", "no volume name to default to nvfence/VOLUME");
        s.election_name = "nvfence/" + volume;
    }

    if (auto t = parse_timing(get, s, why); !t) return t.error();
    return s;
}

EtcdOptions etcd_options(const ElectorSettings& s, const std::string& value, const std::string& state_dir,
                         const std::string& volume) {
    EtcdOptions o;
    o.endpoints = s.endpoints;
    o.ca_file = s.ca_file;
    o.cert_file = s.cert_file;
    o.key_file = s.key_file;
    o.user = s.user;
    o.password_file = s.password_file;
    o.election = s.election_name;
    o.value = value;
    o.ttl_s = s.lease_ttl_s;
    o.state_dir = state_dir;
    o.volume = volume;
    return o;
}

LeaseGuardOptions lease_guard_options(const ElectorSettings& s) {
    LeaseGuardOptions o;
    o.ttl_ms = int64_t{s.lease_ttl_s} * 1000;
    o.margin_ms = s.lease_margin_ms;
    o.renew_interval_ms = o.ttl_ms / 3;
    o.on_loss = s.lease_loss;
    return o;
}

}  // namespace nvfence
