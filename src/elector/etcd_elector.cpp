// SPDX-License-Identifier: MIT
#include "elector/etcd.hpp"

#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <chrono>
#include <functional>
#include <optional>
#include <thread>
#include <utility>

#include "elector/curl_api.hpp"
#include "elector/elector_config.hpp"
#include "internal/file_name.hpp"
#include "internal/invariant.hpp"
#include "nvfence/epoch_store.hpp"
#include "nvfence/error.hpp"
#include "elector/etcd_json.hpp"
#include "nvfence/fd.hpp"
#include "nvfence/key.hpp"
#include "nvfence/state_file.hpp"

namespace nvfence {

namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

// A bounded call's own floor: below this libcurl cannot even connect.
constexpr Ms kMinCallMs{50};
// Token transaction attempts (each a range and a txn) before giving up.
constexpr int kTokenAttempts = 8;
// Leader keys a campaign call waits out before it returns (each a range
// and a watch); the call's timeout bounds it too.
constexpr int kCampaignRounds = 16;

}  // namespace

// ---- TokenStore -----------------------------------------------------------

TokenStore::TokenStore(std::string dir, const std::string& volume) : dir_(std::move(dir)) {
    path_ = dir_ + "/" + volume_file_stem(volume) + ".etcd-token";
}

Result<TokenRecord> TokenStore::load() const {
    Fd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
        if (errno == ENOENT) return TokenRecord{};
        return make_error_code(Errc::state_io);
    }
    char buf[128];
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n <= 0 || n == static_cast<ssize_t>(sizeof buf)) return make_error_code(Errc::state_io);
    auto r = parse_token_record(std::string_view(buf, static_cast<size_t>(n)));
    if (!r) return make_error_code(Errc::state_io);
    return *r;
}

Status TokenStore::raise_to(uint64_t cluster_id, uint32_t epoch) const {
    auto cur = load();
    if (!cur) return cur.error();
    if (cur->epoch >= epoch) return Ok{};
    return write_file_atomic(dir_, path_, format_token_record({cluster_id, epoch}));
}

std::string etcd_counter_key(const std::string& election) { return election + ".epoch"; }

// ---- HTTP -----------------------------------------------------------------

namespace {
// etcd's gRPC gateway answers JSON objects, errors included.
bool looks_like_json(std::string_view body) {
    const size_t i = body.find_first_not_of(" \t\r\n");
    return i != std::string_view::npos && body[i] == '{';
}
}  // namespace

// One POST per call on a fresh easy handle (no state survives a failure);
// endpoints are tried in turn, starting with the last one that answered.
struct EtcdElector::Http {
    struct Reply {
        long status = 0;
        std::string body;
    };
    // Called with each complete line of a streamed reply; true stops reading.
    using LineSink = std::function<bool(std::string_view)>;

    const EtcdOptions& opts;
    const CurlApi& curl;  // every libcurl call goes through it (curl_api.hpp)
    std::string& why;  // the elector's last_error_: curl's reason for a failed transfer
    size_t current = 0;
    std::string token;  // etcd's auth token for opts.user ("": none yet)

    struct Transfer {
        std::string body;
        std::string pending;
        LineSink* sink = nullptr;
        CURL* handle = nullptr;
        const CurlApi* curl = nullptr;
        bool divert = false;  // with authentication, a stream's error reply is kept whole (not streamed)
        bool stopped = false;
        bool too_big = false;
    };

    static size_t on_data(char* p, size_t size, size_t n, void* user) {
        auto* t = static_cast<Transfer*>(user);
        const size_t len = size * n;
        if (t->body.size() + t->pending.size() + len > etcd::kMaxReplyBytes) {
            t->too_big = true;
            return 0;
        }
        if (t->sink && t->body.empty() && t->pending.empty()) {
            // An error reply is kept whole, not streamed: with authentication
            // any (its JSON says whether the token was rejected), and always
            // one that is not etcd's JSON (a proxy's or a restarting member's
            // page), which send() reports with its HTTP status.
            long status = 0;
            t->curl->easy_getinfo(t->handle, CURLINFO_RESPONSE_CODE, &status);
            if (status != 200 && (t->divert || !looks_like_json(std::string_view(p, len)))) t->sink = nullptr;
        }
        if (!t->sink) {
            t->body.append(p, len);
            return len;
        }
        t->pending.append(p, len);
        size_t nl;
        while ((nl = t->pending.find('\n')) != std::string::npos) {
            std::string line = t->pending.substr(0, nl);
            t->pending.erase(0, nl + 1);
            if (line.empty()) continue;
            if ((*t->sink)(line)) {
                t->stopped = true;
                return 0;
            }
        }
        return len;
    }

    // POSTs @p body to @p path; @p sink consumes a stream. Without a sink the
    // whole body is returned; with one, the unterminated rest (if any), or
    // with authentication a whole error reply. With opts.user, the request
    // carries the auth token, taken first when there is none, and taken
    // again once when etcd rejects it (expired, or the auth store changed).
    Result<Reply> post(const std::string& path, const std::string& body, Ms timeout, LineSink* sink = nullptr) {
        const auto deadline = Clock::now() + timeout;
        why.clear();  // a reason belongs to the call that failed, not to later ones
        if (opts.user.empty()) return send(path, body, deadline, sink);
        if (token.empty()) {
            if (auto a = authenticate(deadline); !a) return a.error();
        }
        auto r = send(path, body, deadline, sink);
        if (!r || !etcd::auth_token_rejected(r->status, r->body)) return r;
        token.clear();
        if (auto a = authenticate(deadline); !a) return a.error();
        return send(path, body, deadline, sink);
    }

    // POST /v3/auth/authenticate with opts.user and the password file's
    // password (read now: a new password counts from the next token).
    Status authenticate(Clock::time_point deadline) {
        auto pw = read_etcd_password(opts.password_file, why);
        if (!pw) return pw.error();
        auto r = send("/v3/auth/authenticate", etcd::auth_request(opts.user, *pw), deadline, nullptr);
        if (!r) return r.error();
        auto t = etcd::parse_auth_token(r->body);
        if (!t) {
            const auto e = etcd::parse_error(r->body);
            why = "etcd did not authenticate user " + opts.user + ": " +
                  (e ? e->message : "a reply without a token (HTTP " + std::to_string(r->status) + ")");
            return t.error();
        }
        token = std::move(*t);
        return Ok{};
    }

    // The reply of a transfer that completed: a stream's unterminated rest,
    // or the whole body; one that is not etcd's JSON is not etcd's answer
    // (a proxy's or a restarting member's page): said so, with the status.
    Result<Reply> answered(long status, Transfer& t) {
        if (t.sink) return Reply{status, std::move(t.pending)};
        if (status != 200 && !looks_like_json(t.body)) {
            why = "etcd at " + opts.endpoints[current] + " answered HTTP " + std::to_string(status) +
                  " with a body that is not etcd's JSON: " + etcd::printable_excerpt(t.body);
            return make_error_code(ElectorErrc::server_error);
        }
        return Reply{status, std::move(t.body)};
    }

    // One POST, endpoints tried in turn until @p deadline.
    Result<Reply> send(const std::string& path, const std::string& body, Clock::time_point deadline, LineSink* sink) {
        std::error_code last = make_error_code(ElectorErrc::unreachable);
        for (size_t tried = 0; tried < opts.endpoints.size(); ++tried) {
            const auto left = std::chrono::duration_cast<Ms>(deadline - Clock::now());
            if (left < kMinCallMs) return make_error_code(Errc::timeout);
            // create() refused an empty list; current only moves modulo its size.
            NVF_INVARIANT(current < opts.endpoints.size());
            const std::string url = opts.endpoints[current] + path;
            Transfer t;
            t.sink = sink;
            CURL* h = curl.easy_init();
            if (!h) return make_error_code(std::errc::not_enough_memory);
            t.handle = h;
            t.curl = &curl;
            t.divert = !opts.user.empty();
            curl_slist* hdr = curl.slist_append(nullptr, "Content-Type: application/json");
            // The token never goes to /v3/auth/authenticate itself.
            if (!token.empty() && path != "/v3/auth/authenticate")
                hdr = curl.slist_append(hdr, ("Authorization: " + token).c_str());
            curl.easy_setopt(h, CURLOPT_URL, url.c_str());
            curl.easy_setopt(h, CURLOPT_POST, 1L);
            curl.easy_setopt(h, CURLOPT_POSTFIELDS, body.c_str());
            curl.easy_setopt(h, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
            curl.easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
            char errbuf[CURL_ERROR_SIZE] = {};
            curl.easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
            curl.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
            curl.easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(left.count()));
            curl.easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::min<int64_t>(left.count(), 1000)));
            curl.easy_setopt(h, CURLOPT_WRITEFUNCTION, &Http::on_data);
            curl.easy_setopt(h, CURLOPT_WRITEDATA, &t);
            curl.easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
            curl.easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
            // Never a proxy from the environment (http_proxy, ALL_PROXY): a
            // daemon's etcd traffic must not go wherever a login shell's
            // variables point; "" turns libcurl's proxy use off entirely.
            curl.easy_setopt(h, CURLOPT_PROXY, "");
            if (!opts.ca_file.empty()) curl.easy_setopt(h, CURLOPT_CAINFO, opts.ca_file.c_str());
            if (!opts.cert_file.empty()) curl.easy_setopt(h, CURLOPT_SSLCERT, opts.cert_file.c_str());
            if (!opts.key_file.empty()) curl.easy_setopt(h, CURLOPT_SSLKEY, opts.key_file.c_str());
            const CURLcode rc = curl.easy_perform(h);
            long status = 0;
            curl.easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
            curl.slist_free_all(hdr);
            curl.easy_cleanup(h);
            if (t.stopped) return Reply{status, std::move(t.pending)};
            if (t.too_big) return make_error_code(Errc::malformed_data);
            if (rc == CURLE_OK) return answered(status, t);
            // A member that answered and then ran out of time (a watch or
            // observe stream waiting, or a slow reply) stays the one to ask.
            if (rc == CURLE_OPERATION_TIMEDOUT && (status != 0 || !t.body.empty() || !t.pending.empty()))
                return make_error_code(Errc::timeout);
            // The member did not answer: the next call starts with the next one.
            // Why, in curl's words (a TLS failure says which): the log shows it.
            why = opts.endpoints[current] + ": " + (errbuf[0] ? std::string(errbuf) : curl.easy_strerror(rc));
            current = (current + 1) % opts.endpoints.size();
            if (rc == CURLE_OPERATION_TIMEDOUT) {
                last = make_error_code(Errc::timeout);
                continue;
            }
            last = make_error_code(ElectorErrc::unreachable);
        }
        return last;
    }
};

// ---- EtcdElector ----------------------------------------------------------

Status EtcdElector::load_library(std::string& why) {
    auto api = curl_api(why);
    if (!api) return api.error();
    return Ok{};
}

Result<std::unique_ptr<EtcdElector>> EtcdElector::create(EtcdOptions opts, std::string* why) {
    if (opts.endpoints.empty() || opts.election.empty() || opts.value.empty() || opts.ttl_s < 2 ||
        opts.user.empty() != opts.password_file.empty())
        return make_error_code(Errc::invalid_argument);
    for (auto& e : opts.endpoints) {
        while (!e.empty() && e.back() == '/') e.pop_back();
        if (e.rfind("http://", 0) != 0 && e.rfind("https://", 0) != 0) return make_error_code(Errc::invalid_argument);
    }
    std::string reason;
    auto api = curl_api(reason);
    if (!api) {
        if (why) *why = std::move(reason);
        return api.error();
    }
    return std::unique_ptr<EtcdElector>(new EtcdElector(std::move(opts), **api));
}

EtcdElector::EtcdElector(EtcdOptions opts, const CurlApi& curl)
    : opts_(std::move(opts)), http_(new Http{opts_, curl, last_error_, 0, {}}) {}

EtcdElector::~EtcdElector() = default;

std::error_code EtcdElector::server_error(const std::string& body, std::error_code ec) {
    if (auto e = etcd::parse_error(body)) last_error_ = e->message;
    if (ec == make_error_code(ElectorErrc::lease_expired)) {
        lease_ = 0;
        won_.reset();
        candidate_.reset();
    }
    return ec;
}

Status EtcdElector::grant_lease(Ms timeout) {
    auto r = http_->post("/v3/lease/grant", etcd::grant_request(opts_.ttl_s), timeout);
    if (!r) return r.error();
    auto g = etcd::parse_lease_grant(r->body);
    if (!g) return server_error(r->body, g.error());
    NVF_INVARIANT(g->id > 0);  // parse_lease_grant's postcondition: 0 means "no lease" here
    lease_ = g->id;
    candidate_.reset();
    if (g->reply.header.cluster_id) cluster_id_ = g->reply.header.cluster_id;
    return Ok{};
}

// The candidate key on our lease, or ours from an earlier slice (same
// lease, still queued): its create revision is our place in the queue.
Status EtcdElector::queue_candidacy(const std::string& key, Ms timeout) {
    NVF_INVARIANT(lease_ > 0 && !candidate_);  // campaign() granted the lease; the key goes on it once
    auto r = http_->post("/v3/kv/txn", etcd::candidacy_txn_request(key, lease_, opts_.value), timeout);
    if (!r) return r.error();
    auto t = etcd::parse_txn(r->body);
    if (!t) return server_error(r->body, t.error());
    if (t->reply.header.cluster_id) cluster_id_ = t->reply.header.cluster_id;
    LeaderInfo c;
    c.key = key;
    c.lease = lease_;
    c.value = opts_.value;
    if (t->succeeded) c.revision = t->reply.header.revision;
    else if (!t->ranges.empty() && !t->ranges[0].kvs.empty()) c.revision = t->ranges[0].kvs[0].create_revision;
    if (c.revision <= 0) return make_error_code(Errc::malformed_data);
    candidate_ = c;
    return Ok{};
}

// One round: true when our key is the first created (won_ set), false when
// the leader key was deleted meanwhile (look again), an error otherwise
// (Errc::timeout: not yet).
Result<bool> EtcdElector::lead_or_wait(const std::string& prefix, const std::string& key,
                                       const std::function<Ms()>& left) {
    // campaign() queued our key on the live lease first: its revision is our place.
    NVF_INVARIANT(lease_ > 0 && candidate_ && candidate_->revision > 0 && candidate_->key == key);
    // The counter comes along (same revision): once we lead nobody else
    // can move it, so the token needs one round trip, not two.
    auto r = http_->post("/v3/kv/txn", etcd::leader_and_counter_request(prefix, etcd_counter_key(opts_.election)),
                         left());
    if (!r) return r.error();
    auto t = etcd::parse_txn(r->body);
    if (!t) return server_error(r->body, t.error());
    if (t->reply.header.cluster_id) cluster_id_ = t->reply.header.cluster_id;
    if (t->ranges.size() != 2) return make_error_code(Errc::malformed_data);
    // The first candidacy: keys under the prefix that are not candidacies
    // (another election <election>/x, a key without a lease) never lead.
    const etcd::Kv* leader = etcd::first_candidacy(prefix, t->ranges[0]);
    if (!leader && t->ranges[0].kvs.size() >= static_cast<size_t>(etcd::kCandidacyScan)) {
        last_error_ = "more than " + std::to_string(etcd::kCandidacyScan) + " keys under " + prefix +
                      " that are no candidacy of this election come before ours: remove them (etcdctl get --prefix " +
                      prefix + " --keys-only)";
        return make_error_code(ElectorErrc::server_error);
    }
    if (!leader || leader->create_revision > candidate_->revision) {
        // Our key is gone while the lease lives (deleted by hand): queue again.
        candidate_.reset();
        return make_error_code(Errc::timeout);
    }
    const etcd::Kv& first = *leader;
    if (first.key == key) {
        LeaderInfo l = *candidate_;
        l.revision = first.create_revision;
        won_ = l;
        seen_counter_ = SeenCounter{l.revision, !t->ranges[1].kvs.empty(), {}, 0};
        if (seen_counter_->present) {
            seen_counter_->value = t->ranges[1].kvs[0].value;
            seen_counter_->mod_revision = t->ranges[1].kvs[0].mod_revision;
        }
        return true;
    }
    if (left() < kMinCallMs) return make_error_code(Errc::timeout);
    bool gone = false;
    std::error_code bad;
    Http::LineSink sink = [&](std::string_view line) {
        auto w = etcd::parse_watch(line);
        if (!w) {
            bad = w.error();
            return true;
        }
        // Canceled (the start revision was compacted): look again.
        gone = w->canceled ||
               std::any_of(w->events.begin(), w->events.end(), [](const etcd::WatchEvent& e) { return e.deleted; });
        return gone;
    };
    auto wr = http_->post("/v3/watch", etcd::watch_request(first.key, t->reply.header.revision + 1), left(), &sink);
    if (bad) return server_error(std::string(), bad);
    if (gone) return false;
    if (!wr) return wr.error();
    return make_error_code(Errc::timeout);
}

Result<LeaderInfo> EtcdElector::campaign(Ms timeout) {
    const auto deadline = Clock::now() + timeout;
    const std::function<Ms()> left = [&] { return std::chrono::duration_cast<Ms>(deadline - Clock::now()); };
    if (lease_ == 0) {
        if (auto g = grant_lease(timeout); !g) return g.error();
    }
    // etcd's own election, client side (its concurrency package): the
    // candidate key <election>/<lease in hex> on our lease; the leader is
    // the key created first. Not /v3/election/campaign: when a call to it
    // is cut at its bound, etcd deletes the candidate's key, so a candidate
    // whose calls are bounded below etcd's answer time never gets to the
    // front (seen in the lab: nobody led for minutes with TTL 2 s).
    const std::string prefix = opts_.election + "/";
    char hex[24];
    std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(lease_));
    const std::string key = prefix + hex;
    if (!candidate_) {
        if (left() < kMinCallMs) return make_error_code(Errc::timeout);
        if (auto q = queue_candidacy(key, left()); !q) return q.error();
    }
    // Until our key is the first created, wait for the leader key's deletion.
    for (int round = 0; round < kCampaignRounds; ++round) {
        if (left() < kMinCallMs) return make_error_code(Errc::timeout);
        auto led = lead_or_wait(prefix, key, left);
        if (!led) return led.error();
        if (*led) return *won_;
    }
    return make_error_code(Errc::timeout);
}

Result<EtcdElector::CounterRead> EtcdElector::read_counter(const std::string& counter_key, Ms timeout) {
    auto rr = http_->post("/v3/kv/range", etcd::range_request(counter_key), timeout);
    if (!rr) return rr.error();
    auto range = etcd::parse_range(rr->body);
    if (!range) return range.error();
    if (range->reply.header.cluster_id) cluster_id_ = range->reply.header.cluster_id;
    CounterRead c;
    if (!range->kvs.empty()) {
        c.present = true;
        c.text = range->kvs.front().value;
        c.mod_rev = range->kvs.front().mod_revision;
    }
    return c;
}

Result<std::optional<uint32_t>> EtcdElector::issue_token(const std::string& counter_key, uint32_t base,
                                                         uint32_t seen, int64_t mod_rev, const TokenStore* store,
                                                         Clock::time_point deadline) {
    NVF_INVARIANT(won_.has_value());  // term() issues only to a won leadership
    if (!usable_epoch(base + 1)) {
        // A token above the key's epochs could never be used; one write
        // to the counter must not make this host store it (it would
        // never take over again). Refused, nothing stored.
        last_error_ = "no token above " + std::to_string(base) + ": the key's epochs end at " +
                      std::to_string(kEpochCeiling - 1) + " (counter " + counter_key +
                      "; docs/ETCD.md \"A counter at the ceiling\")";
        return make_error_code(Errc::epoch_out_of_range);
    }
    if (seen > 0 && base - std::min(base, seen) > kMaxEpochJump) {
        // The device path's bound (EpochStore): one stray write far above
        // every epoch seen would otherwise burn the epochs in a few terms.
        last_error_ = "counter " + counter_key + " holds epoch " + std::to_string(base) + ", more than " +
                      std::to_string(kMaxEpochJump) + " above every epoch this host has seen (" + std::to_string(seen) +
                      "): implausible, no token issued; repair it to the highest epoch really used: etcdctl put " +
                      counter_key + " \"<epoch> 1\" (docs/ETCD.md \"A counter at the ceiling\")";
        return make_error_code(Errc::epoch_out_of_range);
    }
    const etcd::CounterValue next{base + 1, won_->revision};
    // Persisted before etcd hears of it: a crash in between leaves a gap,
    // never a reuse.
    if (store) {
        if (auto s = store->raise_to(cluster_id_, next.epoch); !s) return s.error();
    }
    const auto left = std::chrono::duration_cast<Ms>(deadline - Clock::now());
    if (left < kMinCallMs) return make_error_code(Errc::timeout);
    auto tr = http_->post("/v3/kv/txn", etcd::token_txn_request(counter_key, *won_, mod_rev, next), left);
    if (!tr) return tr.error();
    auto txn = etcd::parse_txn(tr->body);
    if (!txn) return txn.error();
    if (txn->succeeded) return std::optional<uint32_t>(next.epoch);
    // Failed compare: the leadership is gone, or the counter moved (a
    // concurrent writer; only an operator could): read again.
    const bool leader_alive = !txn->ranges.empty() && !txn->ranges[0].kvs.empty() &&
                              txn->ranges[0].kvs[0].create_revision == won_->revision;
    if (!leader_alive) {
        won_.reset();
        return make_error_code(ElectorErrc::not_leader);
    }
    return std::optional<uint32_t>();
}

Result<Term> EtcdElector::term(uint32_t at_least, Ms timeout) {
    if (!won_) return make_error_code(ElectorErrc::not_campaigning);
    const auto deadline = Clock::now() + timeout;
    std::optional<TokenStore> store;
    TokenRecord floor;
    if (!opts_.state_dir.empty()) {
        store.emplace(opts_.state_dir, opts_.volume.empty() ? opts_.election : opts_.volume);
        auto rec = store->load();
        if (!rec) return rec.error();
        floor = *rec;
    }
    const std::string counter_key = etcd_counter_key(opts_.election);
    // The counter as the winning campaign call read it, for the first
    // attempt only: if it moved since, the txn's compare fails and the
    // loop reads it again.
    std::optional<SeenCounter> seen = std::exchange(seen_counter_, std::nullopt);
    if (seen && seen->leader_rev != won_->revision) seen.reset();
    for (int attempt = 0; attempt < kTokenAttempts; ++attempt) {
        const auto left = std::chrono::duration_cast<Ms>(deadline - Clock::now());
        if (left < kMinCallMs) return make_error_code(Errc::timeout);
        CounterRead c;
        if (attempt == 0 && seen) {
            c = CounterRead{seen->present, seen->value, seen->mod_revision};
        } else {
            auto rc = read_counter(counter_key, left);
            if (!rc) return rc.error();
            c = std::move(*rc);
        }
        std::optional<etcd::CounterValue> cur;
        if (c.present) {
            cur = etcd::parse_counter(c.text);
            if (!cur) {
                last_error_ = "counter " + counter_key + " holds no `<epoch> <revision>`";
                return make_error_code(Errc::malformed_data);
            }
        }
        Term t;
        t.leader = *won_;
        t.cluster_id = std::to_string(cluster_id_);
        t.rollback_seen = floor.epoch > 0 && (!cur || cur->epoch < floor.epoch);
        if (cur && cur->leader_rev == won_->revision && cur->epoch >= floor.epoch && cur->epoch > at_least &&
            usable_epoch(cur->epoch)) {
            // Issued to this very leadership already (a retry): the same token.
            t.epoch = cur->epoch;
            if (store) {
                if (auto s = store->raise_to(cluster_id_, t.epoch); !s) return s.error();
            }
            return t;
        }
        const uint32_t base = std::max({cur ? cur->epoch : 0u, floor.epoch, at_least});
        auto issued = issue_token(counter_key, base, std::max(floor.epoch, at_least), c.mod_rev,
                                  store ? &*store : nullptr, deadline);
        if (!issued) return issued.error();
        if (*issued) {
            t.epoch = **issued;
            // Elector::term()'s promise: above at_least and this host's floor, usable in a key.
            NVF_INVARIANT(t.epoch > base && t.epoch > at_least && t.epoch > floor.epoch && usable_epoch(t.epoch));
            return t;
        }
    }
    return make_error_code(Errc::timeout);
}

Result<LeaseStatus> EtcdElector::keepalive(Ms timeout) {
    if (lease_ == 0) return make_error_code(ElectorErrc::not_campaigning);
    std::string first;
    Http::LineSink sink = [&](std::string_view line) {
        first.assign(line);
        return true;
    };
    auto r = http_->post("/v3/lease/keepalive", etcd::lease_request(lease_), timeout, &sink);
    if (!r) return r.error();
    if (first.empty()) first = r->body;  // a reply without a final newline
    auto k = etcd::parse_keepalive(first);
    if (!k) {
        if (auto e = etcd::parse_error(first)) last_error_ = e->message;
        if (k.error() == make_error_code(ElectorErrc::lease_expired)) {
            lease_ = 0;
            won_.reset();
        }
        return k.error();
    }
    if (k->reply.header.cluster_id) cluster_id_ = k->reply.header.cluster_id;
    if (k->ttl_s <= 0) {
        lease_ = 0;
        won_.reset();
        return make_error_code(ElectorErrc::lease_expired);
    }
    return LeaseStatus{k->ttl_s * 1000};
}

Result<LeaderInfo> EtcdElector::leader(Ms timeout) {
    // The first candidacy under the prefix, as a campaign decides it (not
    // /v3/election/leader, which takes any key created first there).
    const std::string prefix = opts_.election + "/";
    auto r = http_->post("/v3/kv/range", etcd::first_created_request(prefix), timeout);
    if (!r) return r.error();
    auto range = etcd::parse_range(r->body);
    if (!range) return server_error(r->body, range.error());
    if (range->reply.header.cluster_id) cluster_id_ = range->reply.header.cluster_id;
    const etcd::Kv* first = etcd::first_candidacy(prefix, *range);
    if (!first) return make_error_code(ElectorErrc::no_leader);
    LeaderInfo l;
    l.key = first->key;
    l.value = first->value;
    l.revision = first->create_revision;
    l.lease = first->lease;
    return l;
}

Result<LeaderInfo> EtcdElector::observe(const std::optional<LeaderInfo>& known, Ms timeout) {
    std::optional<LeaderInfo> seen;
    std::error_code bad;
    Http::LineSink sink = [&](std::string_view line) {
        auto l = etcd::parse_observe(line);
        if (!l) {
            bad = l.error();
            return true;
        }
        seen = *l;
        return !known || !l->same_leadership(*known);
    };
    const auto deadline = Clock::now() + timeout;
    auto r = http_->post("/v3/election/observe", etcd::name_request(opts_.election), timeout, &sink);
    if (bad) return bad;
    if (seen && !candidacy(*seen)) return observe_by_range(known, deadline);
    if (seen && (!known || !seen->same_leadership(*known))) return *seen;
    if (!r && r.error() != make_error_code(Errc::timeout)) return r.error();
    if (r && !r->body.empty()) {
        // The stream ended with a line and no newline: an error, usually.
        auto l = etcd::parse_observe(r->body);
        if (!l) return l.error();
        if (!candidacy(*l)) return observe_by_range(known, deadline);
        if (!known || !l->same_leadership(*known)) return *l;
    }
    if (known) return *known;
    return make_error_code(ElectorErrc::no_leader);
}

bool EtcdElector::candidacy(const LeaderInfo& l) const {
    etcd::Kv kv;
    kv.key = l.key;
    kv.lease = l.lease;
    return etcd::is_candidacy(opts_.election + "/", kv);
}

// etcd's observe names the first key created under <election>/, which can
// be no candidacy (another election <election>/x, a key without a lease):
// then leader()'s range scan decides, polled every kObservePoll until it
// differs from known or the deadline passes (a wait, as observe is, not a
// spin). At most timeout / kObservePoll + 1 scans.
Result<LeaderInfo> EtcdElector::observe_by_range(const std::optional<LeaderInfo>& known,
                                                 Clock::time_point deadline) {
    constexpr Ms kObservePoll{250};
    for (;;) {
        const auto left = std::chrono::duration_cast<Ms>(deadline - Clock::now());
        if (left < kMinCallMs) break;
        auto l = leader(left);
        if (!l && l.error() != make_error_code(ElectorErrc::no_leader)) return l.error();
        if (l && (!known || !l->same_leadership(*known))) return *l;
        if (!l && known) return l.error();  // the known leadership ended
        const auto rest = std::chrono::duration_cast<Ms>(deadline - Clock::now());
        std::this_thread::sleep_for(std::min(kObservePoll, std::max(rest, Ms{0})));
    }
    if (known) return *known;
    return make_error_code(ElectorErrc::no_leader);
}

Status EtcdElector::resign(Ms timeout) {
    const auto deadline = Clock::now() + timeout;
    // The candidacy ends here whatever etcd answers: a lease we failed to
    // revoke is never renewed again and expires within its TTL. Keeping it
    // would keep a leadership we gave up alive (and the next campaign would
    // win on it again).
    const std::optional<LeaderInfo> won = std::exchange(won_, std::nullopt);
    const int64_t lease = std::exchange(lease_, 0);
    candidate_.reset();
    if (won) {
        auto r = http_->post("/v3/election/resign", etcd::resign_request(opts_.election, *won), timeout);
        if (!r) return r.error();
        auto h = etcd::parse_header_only(r->body);
        if (!h && h.error() != make_error_code(ElectorErrc::not_leader)) return h.error();
    }
    if (lease != 0) {
        const auto left = std::chrono::duration_cast<Ms>(deadline - Clock::now());
        if (left < kMinCallMs) return make_error_code(Errc::timeout);
        auto r = http_->post("/v3/lease/revoke", etcd::lease_request(lease), left);
        if (!r) return r.error();
        auto h = etcd::parse_header_only(r->body);
        if (!h && h.error() != make_error_code(ElectorErrc::lease_expired)) return h.error();
    }
    return Ok{};
}

}  // namespace nvfence
