// SPDX-License-Identifier: MIT
#pragma once
/// @file etcd.hpp
/// The etcd backend of Elector, over etcd's v3 JSON gateway (libcurl), and
/// the local record of the highest token this host used.
///
/// etcd keys used, for an election name N (default `nvfence/<volume>`):
///  - `N/<lease id in hex>`: the candidates (etcd's own election recipe);
///    the oldest one leads;
///  - `N.epoch`: the per-volume token counter, `<epoch> <leader revision>`.
///    It is advanced by one transaction guarded by the leader key's creation
///    revision, so only the current leader can advance it, once per
///    leadership (a retry returns the same token).
/// The token is the counter, not a revision: revisions grow with every
/// write in the cluster and would overflow the key's 32-bit epoch.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "elector/elector.hpp"
#include "nvfence/result.hpp"

namespace nvfence {

struct CurlApi;

/// How to reach etcd and what to campaign for.
struct EtcdOptions {
    std::vector<std::string> endpoints;  ///< `http(s)://host:port`, tried in turn.
    std::string ca_file;                 ///< PEM CA bundle for https ("": system CAs).
    std::string cert_file;               ///< Client certificate (mutual TLS), PEM.
    std::string key_file;                ///< Client key, PEM.
    std::string user;                    ///< etcd user ("": no authentication).
    std::string password_file;           ///< The user's password (read_etcd_password), read at each authentication.
    std::string election;                ///< Election name, e.g. `nvfence/vol-0123`.
    std::string value;                   ///< This host's identity in the election.
    int64_t ttl_s = 5;                   ///< Lease TTL in seconds (>= 2).
    std::string state_dir;               ///< Where the token record lives ("": none).
    std::string volume;                  ///< Volume name of the token record file.
};

/// The highest token this host used per volume and the etcd cluster that
/// issued it: `<state_dir>/<volume>.etcd-token`, two lines
/// `cluster_id <decimal>` and `epoch <decimal>`, written atomically.
/// A token at or below the recorded epoch is never used again, whatever
/// etcd says (a snapshot restore rolls etcd's counter back).
struct TokenRecord {
    uint64_t cluster_id = 0;  ///< etcd cluster id of the last token (0: none).
    uint32_t epoch = 0;       ///< Highest token used (0: none).
    friend bool operator==(const TokenRecord&, const TokenRecord&) = default;
};

/// Loads and raises a TokenRecord file.
class TokenStore {
public:
    /// The record of @p volume (sanitised to [A-Za-z0-9._-]) under @p dir.
    TokenStore(std::string dir, const std::string& volume);
    /// The record; zeros when none. Errc::state_io when unreadable or malformed.
    Result<TokenRecord> load() const;
    /// Records @p epoch from @p cluster_id if above the recorded epoch
    /// (never lowers it; the cluster id follows the highest epoch).
    Status raise_to(uint64_t cluster_id, uint32_t epoch) const;
    /// The file's path.
    const std::string& path() const { return path_; }

private:
    std::string dir_;
    std::string path_;
};

/// Parses a TokenRecord file's text (nullopt when malformed).
std::optional<TokenRecord> parse_token_record(std::string_view text);
/// Prints a TokenRecord as the file holds it.
std::string format_token_record(const TokenRecord& r);

/// The etcd counter key of election @p election.
std::string etcd_counter_key(const std::string& election);

/// Elector over etcd's v3 JSON gateway. One lease per candidacy; campaign
/// blocks at most its timeout, so a caller alternates campaign() and
/// keepalive() (timeouts below a third of the TTL) while it waits.
class EtcdElector final : public Elector {
public:
    /// Validates @p opts (Errc::invalid_argument) and loads libcurl, once
    /// per process (curl_api.hpp): ElectorErrc::library_missing when it
    /// does not load, with @p why (when given) naming the library and the
    /// loader's words.
    static Result<std::unique_ptr<EtcdElector>> create(EtcdOptions opts, std::string* why = nullptr);
    /// Loads libcurl now as create() does (a configuration check);
    /// ElectorErrc::library_missing with @p why when it does not load.
    static Status load_library(std::string& why);
    ~EtcdElector() override;
    EtcdElector(const EtcdElector&) = delete;
    EtcdElector& operator=(const EtcdElector&) = delete;

    Result<LeaderInfo> campaign(Ms timeout) override;
    Result<Term> term(uint32_t at_least, Ms timeout) override;
    Result<LeaseStatus> keepalive(Ms timeout) override;
    Result<LeaderInfo> leader(Ms timeout) override;
    Result<LeaderInfo> observe(const std::optional<LeaderInfo>& known, Ms timeout) override;
    Status resign(Ms timeout) override;

    /// The lease of the current candidacy (0: none).
    int64_t lease_id() const { return lease_; }
    /// The etcd cluster id last seen (0: none yet).
    uint64_t cluster_id() const { return cluster_id_; }
    /// etcd's words for the last server error, or curl's for the last
    /// transfer that failed (a TLS handshake, a refused connection).
    const std::string& last_error() const { return last_error_; }
    std::string failure_detail() const override { return last_error_; }

private:
    EtcdElector(EtcdOptions opts, const CurlApi& curl);
    struct Http;
    EtcdOptions opts_;
    std::unique_ptr<Http> http_;
    int64_t lease_ = 0;
    std::optional<LeaderInfo> won_;
    std::optional<LeaderInfo> candidate_;  ///< Our queued key and its create revision.
    /// The counter key as the winning campaign call read it.
    struct SeenCounter {
        int64_t leader_rev = 0;    ///< The leadership it was read for.
        bool present = false;      ///< The key existed.
        std::string value;         ///< Its value.
        int64_t mod_revision = 0;  ///< Its mod revision.
    };
    std::optional<SeenCounter> seen_counter_;
    uint64_t cluster_id_ = 0;
    // observe(): whether etcd's observed key is a candidacy of this
    // election; when it is not, the range scan decides (bounded by deadline).
    bool candidacy(const LeaderInfo& l) const;
    Result<LeaderInfo> observe_by_range(const std::optional<LeaderInfo>& known,
                                        std::chrono::steady_clock::time_point deadline);
    // campaign(): a server's error reply (a lost lease forgets the candidacy).
    std::error_code server_error(const std::string& body, std::error_code ec);
    // campaign()'s steps: the lease, the candidate key on it, and one look
    // at who leads (waiting for the leader key's deletion; false: look again).
    Status grant_lease(Ms timeout);
    Status queue_candidacy(const std::string& key, Ms timeout);
    Result<bool> lead_or_wait(const std::string& prefix, const std::string& key,
                              const std::function<Ms()>& left);
    // term()'s steps: the counter key read (or as the campaign saw it), and
    // the compare-and-swap that issues the next token.
    struct CounterRead {
        bool present = false;
        std::string text;
        int64_t mod_rev = 0;
    };
    Result<CounterRead> read_counter(const std::string& counter_key, Ms timeout);
    // The next token above @p base, persisted first, then the counter's
    // compare-and-swap; std::nullopt: the counter moved (read it again).
    // @p seen is the highest epoch this host knows besides the counter (its
    // token floor, the caller's at_least): a base more than kMaxEpochJump
    // above a known one is implausible and refused.
    Result<std::optional<uint32_t>> issue_token(const std::string& counter_key, uint32_t base, uint32_t seen,
                                                 int64_t mod_rev, const TokenStore* store,
                                                 std::chrono::steady_clock::time_point deadline);
    std::string last_error_;
};

}  // namespace nvfence
