// SPDX-License-Identifier: MIT
#include "elector/etcd_json.hpp"

#include <algorithm>
#include <charconv>
#include <limits>

#include <nlohmann/json.hpp>

#include "nvfence/error.hpp"
#include "elector/etcd.hpp"
#include "internal/invariant.hpp"
#include "nvfence/key.hpp"

namespace nvfence {

std::optional<TokenRecord> parse_token_record(std::string_view text) {
    TokenRecord r;
    bool have_cluster = false, have_epoch = false;
    while (!text.empty()) {
        const size_t nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
        if (line.empty()) continue;
        const size_t sp = line.find(' ');
        if (sp == std::string_view::npos) return std::nullopt;
        const std::string_view k = line.substr(0, sp);
        const std::string_view v = line.substr(sp + 1);
        if (k == "cluster_id" && !have_cluster) {
            auto n = parse_uint(v, 0, UINT64_MAX);
            if (!n) return std::nullopt;
            r.cluster_id = *n;
            have_cluster = true;
        } else if (k == "epoch" && !have_epoch) {
            auto n = parse_uint(v, 0, kMaxEpoch);
            if (!n) return std::nullopt;
            r.epoch = static_cast<uint32_t>(*n);
            have_epoch = true;
        } else {
            return std::nullopt;
        }
    }
    if (!have_cluster || !have_epoch) return std::nullopt;
    return r;
}

std::string format_token_record(const TokenRecord& r) {
    return "cluster_id " + std::to_string(r.cluster_id) + "\nepoch " + std::to_string(r.epoch) + "\n";
}

namespace etcd {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxKvs = 64;
constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::error_code malformed() { return make_error_code(Errc::malformed_data); }

// True when no array or object in @p text nests deeper than @p max_depth.
// Iterative and linear: brackets inside strings (escapes included) do not
// count. Malformed text may pass; the parser refuses it then, within the
// depth bound.
bool nesting_within(std::string_view text, size_t max_depth) {
    size_t depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') ++i;
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') in_string = true;
        else if (c == '[' || c == '{') {
            if (++depth > max_depth) return false;
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return true;
}

// nlohmann's parse without exceptions: a discarded value on any error. Its
// parser and destructor recurse per nesting level: the depth is bounded
// first (a 200 KB line of brackets overflowed the stack).
std::optional<json> parse_object(std::string_view body) {
    if (body.size() > kMaxReplyBytes) return std::nullopt;
    if (!nesting_within(body, kMaxJsonDepth)) return std::nullopt;
    json j = json::parse(body.begin(), body.end(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) return std::nullopt;
    return j;
}

const json* member(const json& o, const char* name) {
    if (!o.is_object()) return nullptr;
    auto it = o.find(name);
    return it == o.end() ? nullptr : &*it;
}

// An int64 the gateway sends as a string ("123"); a JSON number is taken too.
// Missing: 0 (proto3 omits zero values).
template <class T>
bool get_int(const json& o, const char* name, T& out) {
    out = 0;
    const json* v = member(o, name);
    if (!v || v->is_null()) return true;
    if (v->is_number_unsigned()) {
        const auto u = v->get<uint64_t>();
        if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
        out = static_cast<T>(u);
        return true;
    }
    if (v->is_number_integer()) {
        const auto s = v->get<int64_t>();
        if constexpr (std::numeric_limits<T>::is_signed) {
            out = static_cast<T>(s);
            return true;
        } else {
            if (s < 0) return false;
            out = static_cast<T>(s);
            return true;
        }
    }
    if (!v->is_string()) return false;
    const std::string& s = v->get_ref<const std::string&>();
    if (s.empty() || s.size() > 20) return false;
    const char* b = s.data();
    const char* e = b + s.size();
    auto [p, ec] = std::from_chars(b, e, out);
    return ec == std::errc() && p == e;
}

bool get_bool(const json& o, const char* name, bool& out) {
    out = false;
    const json* v = member(o, name);
    if (!v || v->is_null()) return true;
    if (!v->is_boolean()) return false;
    out = v->get<bool>();
    return true;
}

bool get_bytes(const json& o, const char* name, std::string& out) {
    out.clear();
    const json* v = member(o, name);
    if (!v || v->is_null()) return true;
    if (!v->is_string()) return false;
    auto d = base64_decode(v->get_ref<const std::string&>());
    if (!d) return false;
    out = std::move(*d);
    return true;
}

bool get_header(const json& o, Header& h) {
    h = {};
    const json* v = member(o, "header");
    if (!v || v->is_null()) return true;
    if (!v->is_object()) return false;
    return get_int(*v, "cluster_id", h.cluster_id) && get_int(*v, "member_id", h.member_id) &&
           get_int(*v, "revision", h.revision) && get_int(*v, "raft_term", h.raft_term);
}

bool get_kv(const json& o, Kv& kv) {
    if (!o.is_object()) return false;
    return get_bytes(o, "key", kv.key) && get_bytes(o, "value", kv.value) &&
           get_int(o, "create_revision", kv.create_revision) &&
           get_int(o, "mod_revision", kv.mod_revision) && get_int(o, "version", kv.version) &&
           get_int(o, "lease", kv.lease);
}

std::optional<ServerError> error_of(const json& o) {
    // 3.4: {"error":"text","message":"text","code":N}; 3.5: {"code":N,"message":"text"};
    // in a stream: {"error":{"grpc_code":N,"http_code":N,"message":"text",...}}.
    const json* err = member(o, "error");
    const json* src = &o;
    if (err && err->is_object()) src = err;
    const json* msg = member(*src, "message");
    const json* code = member(*src, "code");
    if (!code) code = member(*src, "grpc_code");
    const bool has_result = member(o, "result") || member(o, "header");
    if (has_result) return std::nullopt;
    if (!(msg && msg->is_string()) && !(code && code->is_number_integer())) {
        if (err && err->is_string()) return ServerError{0, err->get<std::string>()};
        return std::nullopt;
    }
    ServerError e;
    if (msg && msg->is_string()) e.message = msg->get<std::string>();
    else if (err && err->is_string()) e.message = err->get<std::string>();
    if (code && code->is_number_integer()) {
        const auto c = code->get<int64_t>();
        if (c >= 0 && c <= 1000) e.code = static_cast<int>(c);
    }
    return e;
}

// Every reply: an error body, or an object with an optional header.
// @p inner selects the object the fields are read from ("result" for streams).
Result<std::pair<json, Reply>> open_reply(std::string_view body, bool stream) {
    auto j = parse_object(body);
    if (!j) return malformed();
    Reply r;
    if (auto e = error_of(*j)) {
        r.error = std::move(e);
        return std::pair<json, Reply>{json::object(), std::move(r)};
    }
    json inner = std::move(*j);
    if (stream) {
        const json* res = member(inner, "result");
        if (!res || !res->is_object()) return malformed();
        json tmp = *res;
        inner = std::move(tmp);
    }
    if (!get_header(inner, r.header)) return malformed();
    return std::pair<json, Reply>{std::move(inner), std::move(r)};
}

bool get_range(const json& o, RangeReply& out) {
    if (!o.is_object() || !get_header(o, out.reply.header)) return false;
    const json* kvs = member(o, "kvs");
    if (!kvs || kvs->is_null()) return true;
    if (!kvs->is_array()) return false;
    for (const auto& k : *kvs) {
        if (out.kvs.size() >= kMaxKvs) break;
        Kv kv;
        if (!get_kv(k, kv)) return false;
        out.kvs.push_back(std::move(kv));
    }
    NVF_INVARIANT(out.kvs.size() <= kMaxKvs);  // a reply's size bounds what is kept, whatever etcd sends
    return true;
}

Result<LeaderInfo> leader_from_kv(const json& o, const Reply& r) {
    if (r.error) return classify_error(*r.error);
    const json* kv = member(o, "kv");
    if (!kv || kv->is_null()) return make_error_code(ElectorErrc::no_leader);
    Kv k;
    if (!get_kv(*kv, k)) return malformed();
    if (k.key.empty() || k.create_revision <= 0) return malformed();
    LeaderInfo l;
    l.key = std::move(k.key);
    l.value = std::move(k.value);
    l.revision = k.create_revision;
    l.lease = k.lease;
    return l;
}

std::string json_i64(int64_t v) { return "\"" + std::to_string(v) + "\""; }

}  // namespace

std::string base64_encode(std::string_view in) {
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        const uint32_t n = (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8) |
                           uint8_t(in[i + 2]);
        out += kB64[(n >> 18) & 63];
        out += kB64[(n >> 12) & 63];
        out += kB64[(n >> 6) & 63];
        out += kB64[n & 63];
    }
    const size_t rest = in.size() - i;
    if (rest > 0) {
        uint32_t n = uint32_t(uint8_t(in[i])) << 16;
        if (rest == 2) n |= uint32_t(uint8_t(in[i + 1])) << 8;
        out += kB64[(n >> 18) & 63];
        out += kB64[(n >> 12) & 63];
        out += rest == 2 ? kB64[(n >> 6) & 63] : '=';
        out += '=';
    }
    // Four characters for each started group of three bytes, as reserved.
    NVF_INVARIANT(out.size() == (in.size() + 2) / 3 * 4);
    return out;
}

std::optional<std::string> base64_decode(std::string_view in) {
    auto val = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        if (c == '+') return 62;
        if (c == '/') return 63;
        return -1;
    };
    size_t len = in.size();
    size_t pad = 0;
    while (len > 0 && in[len - 1] == '=' && pad < 2) {
        --len;
        ++pad;
    }
    if (pad > 0 && (len + pad) % 4 != 0) return std::nullopt;
    if (len % 4 == 1) return std::nullopt;
    std::string out;
    out.reserve(len * 3 / 4);
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; ++i) {
        const int v = val(in[i]);
        if (v < 0) return std::nullopt;
        acc = (acc << 6) | static_cast<uint32_t>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += static_cast<char>((acc >> bits) & 0xff);
        }
    }
    // Leftover bits must be zero: one encoding per byte string.
    if (bits > 0 && (acc & ((1u << bits) - 1)) != 0) return std::nullopt;
    // Three bytes per four characters, a partial group one or two: fewer
    // than 8 bits can be left over.
    NVF_INVARIANT(bits < 8 && out.size() == len * 3 / 4);
    return out;
}

std::optional<ServerError> parse_error(std::string_view body) {
    auto j = parse_object(body);
    if (!j) return std::nullopt;
    return error_of(*j);
}

std::error_code classify_error(const ServerError& e) {
    const std::string& m = e.message;
    if (m.find("requested lease not found") != std::string::npos) return make_error_code(ElectorErrc::lease_expired);
    if (m.find("election: no leader") != std::string::npos) return make_error_code(ElectorErrc::no_leader);
    if (m.find("election: not leader") != std::string::npos ||
        m.find("election: session expired") != std::string::npos)
        return make_error_code(ElectorErrc::not_leader);
    return make_error_code(ElectorErrc::server_error);
}

Result<LeaseGrant> parse_lease_grant(std::string_view body) {
    auto o = open_reply(body, false);
    if (!o) return o.error();
    LeaseGrant g;
    g.reply = o->second;
    if (g.reply.error) return classify_error(*g.reply.error);
    if (!get_int(o->first, "ID", g.id) || !get_int(o->first, "TTL", g.ttl_s)) return malformed();
    // "error" as a non-empty string is grant's own failure field.
    if (const json* e = member(o->first, "error"); e && e->is_string() && !e->get_ref<const std::string&>().empty())
        return make_error_code(ElectorErrc::server_error);
    if (g.id <= 0 || g.ttl_s <= 0 || g.ttl_s > kMaxLeaseTtlS) return malformed();
    return g;
}

Result<KeepaliveReply> parse_keepalive(std::string_view line) {
    auto o = open_reply(line, true);
    if (!o) return o.error();
    KeepaliveReply k;
    k.reply = o->second;
    if (k.reply.error) return classify_error(*k.reply.error);
    if (!get_int(o->first, "ID", k.id) || !get_int(o->first, "TTL", k.ttl_s)) return malformed();
    if (k.id <= 0 || k.ttl_s < 0 || k.ttl_s > kMaxLeaseTtlS) return malformed();
    return k;
}

Result<LeaderInfo> parse_leader(std::string_view body, Header* header) {
    auto o = open_reply(body, false);
    if (!o) return o.error();
    if (header) *header = o->second.header;
    return leader_from_kv(o->first, o->second);
}

Result<LeaderInfo> parse_observe(std::string_view line, Header* header) {
    auto o = open_reply(line, true);
    if (!o) return o.error();
    if (header) *header = o->second.header;
    return leader_from_kv(o->first, o->second);
}

Result<RangeReply> parse_range(std::string_view body) {
    auto o = open_reply(body, false);
    if (!o) return o.error();
    if (o->second.error) return classify_error(*o->second.error);
    RangeReply r;
    if (!get_range(o->first, r)) return malformed();
    return r;
}

Result<TxnReply> parse_txn(std::string_view body) {
    auto o = open_reply(body, false);
    if (!o) return o.error();
    TxnReply t;
    t.reply = o->second;
    if (t.reply.error) return classify_error(*t.reply.error);
    if (!get_bool(o->first, "succeeded", t.succeeded)) return malformed();
    const json* rs = member(o->first, "responses");
    if (rs && !rs->is_null()) {
        if (!rs->is_array()) return malformed();
        for (const auto& r : *rs) {
            if (!r.is_object()) return malformed();
            const json* rr = member(r, "response_range");
            if (!rr) continue;
            if (t.ranges.size() >= kMaxKvs) break;
            RangeReply range;
            if (!get_range(*rr, range)) return malformed();
            t.ranges.push_back(std::move(range));
        }
    }
    NVF_INVARIANT(t.ranges.size() <= kMaxKvs);
    return t;
}

Result<WatchReply> parse_watch(std::string_view line) {
    auto o = open_reply(line, true);
    if (!o) return o.error();
    WatchReply w;
    w.reply = o->second;
    if (w.reply.error) return classify_error(*w.reply.error);
    if (!get_bool(o->first, "created", w.created) || !get_bool(o->first, "canceled", w.canceled) ||
        !get_int(o->first, "compact_revision", w.compact_revision) || w.compact_revision < 0)
        return malformed();
    const json* evs = member(o->first, "events");
    if (evs && !evs->is_null()) {
        if (!evs->is_array()) return malformed();
        for (const auto& e : *evs) {
            if (!e.is_object()) return malformed();
            if (w.events.size() >= kMaxKvs) break;
            WatchEvent ev;
            const json* type = member(e, "type");
            if (type && !type->is_null()) {
                // The gateway names the enum; a number is accepted too (0 PUT, 1 DELETE).
                if (type->is_string() && type->get_ref<const std::string&>() == "DELETE") ev.deleted = true;
                else if (type->is_string() && type->get_ref<const std::string&>() == "PUT") ev.deleted = false;
                else if (type->is_number_integer() && type->get<int64_t>() == 1) ev.deleted = true;
                else if (!(type->is_number_integer() && type->get<int64_t>() == 0)) return malformed();
            }
            const json* kv = member(e, "kv");
            if (kv && !kv->is_null() && !get_kv(*kv, ev.kv)) return malformed();
            w.events.push_back(std::move(ev));
        }
    }
    NVF_INVARIANT(w.events.size() <= kMaxKvs);
    return w;
}

Result<Reply> parse_header_only(std::string_view body) {
    auto o = open_reply(body, false);
    if (!o) return o.error();
    if (o->second.error) return classify_error(*o->second.error);
    return o->second;
}

bool is_candidacy(std::string_view prefix, const Kv& kv) {
    if (kv.lease == 0 || kv.key.size() <= prefix.size() || kv.key.compare(0, prefix.size(), prefix) != 0)
        return false;
    const std::string_view id = std::string_view(kv.key).substr(prefix.size());
    return id.size() <= 16 && id.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

const Kv* first_candidacy(std::string_view prefix, const RangeReply& range) {
    for (const Kv& kv : range.kvs)
        if (is_candidacy(prefix, kv)) return &kv;
    return nullptr;
}

std::string printable_excerpt(std::string_view body) {
    constexpr size_t kMax = 120;
    std::string out;
    bool space = false;
    for (char ch : body) {
        const auto u = static_cast<unsigned char>(ch);
        if (u <= ' ') {
            space = !out.empty();
            continue;
        }
        if (out.size() >= kMax) {
            out += "...";
            break;
        }
        if (space) out += ' ';
        space = false;
        out += u < 0x7f ? ch : '?';
    }
    return out.empty() ? "(empty)" : "'" + out + "'";
}

std::optional<CounterValue> parse_counter(std::string_view text) {
    const size_t sp = text.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp + 1 >= text.size()) return std::nullopt;
    auto num = [](std::string_view s, auto& out) {
        if (s.empty() || s.size() > 19 || s[0] == '0') return false;
        for (char c : s)
            if (c < '0' || c > '9') return false;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
        return ec == std::errc() && p == s.data() + s.size();
    };
    CounterValue c;
    if (!num(text.substr(0, sp), c.epoch) || !num(text.substr(sp + 1), c.leader_rev)) return std::nullopt;
    if (c.epoch == 0 || c.leader_rev <= 0) return std::nullopt;
    return c;
}

std::string format_counter(const CounterValue& c) {
    return std::to_string(c.epoch) + " " + std::to_string(c.leader_rev);
}

Result<std::string> parse_auth_token(std::string_view body) {
    auto o = open_reply(body, false);
    if (!o) return o.error();
    if (o->second.error) return make_error_code(ElectorErrc::auth_failed);
    const json* t = member(o->first, "token");
    if (!t || !t->is_string()) return malformed();
    const auto& s = t->get_ref<const std::string&>();
    if (s.empty() || s.size() > kMaxAuthTokenBytes) return malformed();
    // It goes into an HTTP header line: printable ASCII only.
    if (!std::all_of(s.begin(), s.end(), [](char c) { return c > ' ' && c < 0x7f; })) return malformed();
    return s;
}

bool auth_token_rejected(long status, std::string_view body) {
    if (status == 401) return true;
    if (status == 200) return false;
    for (std::string_view m : {"invalid auth token", "user name is empty", "revision of auth store is old"})
        if (body.find(m) != std::string_view::npos) return true;
    return false;
}

std::string auth_request(std::string_view user, std::string_view password) {
    json j = {{"name", std::string(user)}, {"password", std::string(password)}};
    return j.dump();
}

std::string grant_request(int64_t ttl_s) { return "{\"TTL\":" + json_i64(ttl_s) + "}"; }

std::string lease_request(int64_t id) { return "{\"ID\":" + json_i64(id) + "}"; }

std::string name_request(std::string_view name) {
    json j = {{"name", base64_encode(name)}};
    return j.dump();
}

std::string resign_request(std::string_view name, const LeaderInfo& l) {
    json j = {{"leader",
               {{"name", base64_encode(name)},
                {"key", base64_encode(l.key)},
                {"rev", std::to_string(l.revision)},
                {"lease", std::to_string(l.lease)}}}};
    return j.dump();
}

std::string range_request(std::string_view key) {
    json j = {{"key", base64_encode(key)}};
    return j.dump();
}

std::string candidacy_txn_request(std::string_view key, int64_t lease, std::string_view value) {
    const std::string k = base64_encode(key);
    json j = {
        {"compare", json::array({{{"key", k}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}}})},
        {"success",
         json::array({{{"request_put", {{"key", k}, {"value", base64_encode(value)}, {"lease", std::to_string(lease)}}}}})},
        {"failure", json::array({{{"request_range", {{"key", k}}}}})},
    };
    return j.dump();
}

namespace {
json first_created_range(std::string_view prefix) {
    // range_end: the prefix with its last byte incremented (etcd's WithPrefix).
    std::string end(prefix);
    while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
    if (end.empty()) end.assign(1, '\0');
    else end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
    return {{"key", base64_encode(prefix)},
            {"range_end", base64_encode(end)},
            {"limit", std::to_string(kCandidacyScan)},
            {"sort_order", "ASCEND"},
            {"sort_target", "CREATE"}};
}
}  // namespace

std::string first_created_request(std::string_view prefix) { return first_created_range(prefix).dump(); }

std::string leader_and_counter_request(std::string_view prefix, std::string_view counter_key) {
    json j = {{"success", json::array({{{"request_range", first_created_range(prefix)}},
                                       {{"request_range", {{"key", base64_encode(counter_key)}}}}})}};
    return j.dump();
}

std::string watch_request(std::string_view key, int64_t start_revision) {
    json j = {{"create_request", {{"key", base64_encode(key)}, {"start_revision", std::to_string(start_revision)}}}};
    return j.dump();
}

std::string token_txn_request(std::string_view counter_key, const LeaderInfo& leader, int64_t counter_mod_rev,
                              const CounterValue& next) {
    // The counter written names a token (0 is none) and the leadership the
    // compare guards: the elector issues only such values.
    NVF_INVARIANT(next.epoch != 0 && leader.revision == next.leader_rev);
    const std::string ck = base64_encode(counter_key);
    const std::string lk = base64_encode(leader.key);
    json j = {
        {"compare",
         json::array({
             {{"key", lk}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", std::to_string(leader.revision)}},
             {{"key", ck}, {"target", "MOD"}, {"result", "EQUAL"}, {"mod_revision", std::to_string(counter_mod_rev)}},
         })},
        {"success", json::array({{{"request_put", {{"key", ck}, {"value", base64_encode(format_counter(next))}}}}})},
        {"failure", json::array({{{"request_range", {{"key", lk}}}}, {{"request_range", {{"key", ck}}}}})},
    };
    return j.dump();
}

}  // namespace etcd
}  // namespace nvfence
