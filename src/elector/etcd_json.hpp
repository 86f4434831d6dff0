// SPDX-License-Identifier: MIT
#pragma once
/// @file etcd_json.hpp
/// Pure encoders and parsers of etcd's v3 JSON gateway messages (checked on
/// etcd 3.4.23 and 3.5.16), used by EtcdElector and fuzzed on their own:
///  - bytes fields (keys, values, election names) are base64;
///  - int64/uint64 fields come as JSON strings (a number is accepted too);
///  - zero values are omitted: a missing field is 0, false or empty;
///  - errors are HTTP 500 with `{"error","message","code"}` (3.4) or
///    `{"code","message"}` (3.5); a stream reports them as
///    `{"error":{...}}`;
///  - streams (keepalive, observe, watch) are newline-delimited `{"result":...}`.
/// No parser throws or reads past its input; malformed input is
/// Errc::malformed_data.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "elector/elector.hpp"
#include "nvfence/result.hpp"

namespace nvfence::etcd {

/// Largest reply body parsed (and read from the network): 1 MiB.
inline constexpr size_t kMaxReplyBytes = 1 << 20;
/// Deepest nesting of arrays and objects accepted in a reply (etcd's own
/// replies nest 5 deep); deeper input is malformed data, found by a linear
/// scan before anything is parsed, so no parser recursion depends on it.
inline constexpr size_t kMaxJsonDepth = 32;
/// Longest lease TTL believed from etcd: its own maximum (9,000,000,000 s);
/// a larger one is malformed data. The elector further trusts no TTL above
/// the one it asked for.
inline constexpr int64_t kMaxLeaseTtlS = 9'000'000'000;
/// The longest auth token accepted from /v3/auth/authenticate (etcd's simple
/// tokens are ~22 bytes, its JWTs a few hundred).
inline constexpr size_t kMaxAuthTokenBytes = 4096;

/// Standard base64 with padding.
std::string base64_encode(std::string_view bytes);
/// Decodes standard base64 (padding optional, no whitespace); nullopt when
/// invalid.
std::optional<std::string> base64_decode(std::string_view text);

/// The response header every reply carries.
struct Header {
    uint64_t cluster_id = 0;  ///< Cluster identity (changes with a restore into a new cluster).
    uint64_t member_id = 0;   ///< The member that answered.
    int64_t revision = 0;     ///< Store revision when the reply was made.
    uint64_t raft_term = 0;   ///< Raft term of that member.
};

/// An error reply of etcd.
struct ServerError {
    int code = 0;          ///< gRPC status code (2 unknown, 3 invalid argument, 5 not found...).
    std::string message;   ///< etcd's words, e.g. "etcdserver: requested lease not found".
};

/// A key-value pair as etcd returns it (key and value decoded).
struct Kv {
    std::string key;           ///< The key.
    std::string value;         ///< The value.
    int64_t create_revision = 0; ///< Revision that created the key.
    int64_t mod_revision = 0;  ///< Revision of the last change.
    int64_t version = 0;       ///< Number of changes since creation.
    int64_t lease = 0;         ///< Attached lease (0: none).
};

/// A parsed reply: header, and the error when etcd reported one.
struct Reply {
    Header header;                       ///< Zero when absent (error replies).
    std::optional<ServerError> error;    ///< Set for an error reply.
};

/// Reply of /v3/lease/grant.
struct LeaseGrant {
    Reply reply;          ///< Header.
    int64_t id = 0;       ///< Lease id.
    int64_t ttl_s = 0;    ///< Granted TTL in seconds.
};

/// One reply of /v3/lease/keepalive (ttl_s 0: the lease is gone).
struct KeepaliveReply {
    Reply reply;          ///< Header.
    int64_t id = 0;       ///< Lease id.
    int64_t ttl_s = 0;    ///< TTL now; 0 (omitted) when the lease expired.
};

/// Reply of /v3/kv/range, or one response_range inside a txn.
struct RangeReply {
    Reply reply;          ///< Header.
    std::vector<Kv> kvs;  ///< The keys found (at most 64 kept).
};

/// How many keys under `<election>/` a leader lookup reads, oldest first,
/// to find the first candidacy among keys that are not candidacies.
inline constexpr int kCandidacyScan = 64;

/// True when @p kv is a candidacy of the election whose prefix is
/// @p prefix (`<election>/`): its key is the prefix and a lease id in
/// lowercase hex, as a campaign writes it, and it is on a lease. Another
/// election named `<election>/x` (its candidacies and its counter), or any
/// key without a lease, is not: it never leads, so it never blocks.
bool is_candidacy(std::string_view prefix, const Kv& kv);

/// The candidacy of @p range created first (range sorted by create
/// revision, as first_created_request asks); nullptr when it has none.
const Kv* first_candidacy(std::string_view prefix, const RangeReply& range);

/// Reply of /v3/kv/txn.
struct TxnReply {
    Reply reply;                 ///< Header.
    bool succeeded = false;      ///< The compare held (omitted: false).
    std::vector<RangeReply> ranges; ///< Every response_range, in order.
};

/// One event of a watch (a PUT, or a DELETE of the key).
struct WatchEvent {
    bool deleted = false; ///< DELETE (type omitted: PUT).
    Kv kv;                ///< The key (for a DELETE: key and mod_revision only).
};

/// One reply of /v3/watch's stream.
struct WatchReply {
    Reply reply;                     ///< Header.
    bool created = false;            ///< The watch was set up (first reply).
    bool canceled = false;           ///< etcd ended the watch (e.g. compacted).
    int64_t compact_revision = 0;    ///< Set with canceled: the start revision was compacted.
    std::vector<WatchEvent> events;  ///< The changes (at most 64 kept).
};

/// The per-volume epoch counter's value: `<epoch> <leader revision>`.
struct CounterValue {
    uint32_t epoch = 0;        ///< Highest token issued.
    int64_t leader_rev = 0;    ///< Creation revision of the leadership it was issued to.
    friend bool operator==(const CounterValue&, const CounterValue&) = default;
};

/// Parses an error body (HTTP 500 or a stream's `{"error":...}`); nullopt
/// when @p body is not an error.
std::optional<ServerError> parse_error(std::string_view body);
/// Maps an etcd error to an ElectorErrc: lease not found -> lease_expired,
/// "election: no leader" -> no_leader, "election: not leader" ->
/// not_leader, anything else -> server_error.
std::error_code classify_error(const ServerError& e);

/// The start of @p body for a message: at most 120 characters, control
/// characters and runs of white space as one space, non-ASCII as '?',
/// quoted; "(empty)" for an empty body.
std::string printable_excerpt(std::string_view body);

/// Parses /v3/lease/grant's reply.
Result<LeaseGrant> parse_lease_grant(std::string_view body);
/// Parses one line of /v3/lease/keepalive's stream.
Result<KeepaliveReply> parse_keepalive(std::string_view line);
/// Parses /v3/election/leader's reply into the leader (no_leader: error).
Result<LeaderInfo> parse_leader(std::string_view body, Header* header = nullptr);
/// Parses one line of /v3/election/observe's stream.
Result<LeaderInfo> parse_observe(std::string_view line, Header* header = nullptr);
/// Parses /v3/kv/range's reply.
Result<RangeReply> parse_range(std::string_view body);
/// Parses /v3/kv/txn's reply.
Result<TxnReply> parse_txn(std::string_view body);
/// Parses one line of /v3/watch's stream.
Result<WatchReply> parse_watch(std::string_view line);
/// Parses a reply that carries only a header (resign, lease revoke).
Result<Reply> parse_header_only(std::string_view body);

/// Parses the counter value `<epoch> <leader rev>` (epoch 1..2^32-1, rev
/// >= 1, one space, nothing else).
std::optional<CounterValue> parse_counter(std::string_view text);
/// Prints the counter value.
std::string format_counter(const CounterValue& c);

/// Parses /v3/auth/authenticate's reply: the token (1 to kMaxAuthTokenBytes
/// printable ASCII characters, what goes into the Authorization header).
/// An error reply: ElectorErrc::auth_failed.
Result<std::string> parse_auth_token(std::string_view body);
/// Whether @p body, a reply of HTTP status @p status, says the request's
/// auth token was missing, expired or outdated (authenticate again and
/// retry once): 401, or etcd's "invalid auth token", "user name is empty"
/// or "revision of auth store is old" (the election API answers them as 500).
bool auth_token_rejected(long status, std::string_view body);

/// Body of /v3/auth/authenticate. @p user and @p password must be valid
/// UTF-8 (read_etcd_password and the configuration check them).
std::string auth_request(std::string_view user, std::string_view password);
/// Body of /v3/lease/grant.
std::string grant_request(int64_t ttl_s);
/// Body of /v3/lease/keepalive and /v3/lease/revoke.
std::string lease_request(int64_t id);
/// Body of /v3/election/leader and /v3/election/observe.
std::string name_request(std::string_view name);
/// Body of /v3/election/resign.
std::string resign_request(std::string_view name, const LeaderInfo& leader);
/// Body of /v3/kv/range for one key.
std::string range_request(std::string_view key);
/// Body of a candidacy's txn (what etcd's own election does): if @p key
/// does not exist, put @p value on @p lease; else read it.
std::string candidacy_txn_request(std::string_view key, int64_t lease, std::string_view value);
/// Body of /v3/kv/range for the kCandidacyScan keys with the lowest create
/// revisions under @p prefix, oldest first: the election's leader is the
/// first candidacy among them (first_candidacy).
std::string first_created_request(std::string_view prefix);
/// Body of a /v3/kv/txn without compares reading, at one revision, the
/// election's leader (as first_created_request) and the counter key.
std::string leader_and_counter_request(std::string_view prefix, std::string_view counter_key);
/// Body of /v3/watch creating a watch on @p key from @p start_revision.
std::string watch_request(std::string_view key, int64_t start_revision);
/// Body of the token txn: if the leader key still has create revision
/// @p leader.revision and the counter key's mod revision is
/// @p counter_mod_rev (0: absent), put @p next; else read the leader key.
std::string token_txn_request(std::string_view counter_key, const LeaderInfo& leader,
                              int64_t counter_mod_rev, const CounterValue& next);

}  // namespace nvfence::etcd
