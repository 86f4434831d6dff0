// SPDX-License-Identifier: MIT
#pragma once
/// @file elector.hpp
/// Leader election for nvfenced: an Elector decides who *should* hold the
/// reservation; the device decides who *can* write (safety rule 10 in
/// docs/CONTRACTS.md, "Safety rules").
///
/// The interface is backend-neutral so that a Kubernetes Lease backend can
/// follow the etcd one (etcd.hpp):
///  - campaign(): block (bounded) until this host leads;
///  - term(): the fencing token of the won leadership, strictly increasing
///    across leaders and kept by the coordination service; it becomes the
///    epoch of the NVMe reservation key;
///  - keepalive(): renew the lease that keeps the leadership alive;
///  - leader() / observe(): who leads now / wait for a change;
///  - resign(): give the leadership up.
/// Every call takes a timeout and returns within it (plus a small constant);
/// no call throws. Errors are std::error_code: elector_category() below for
/// election outcomes, nvfence_category() (Errc::timeout, malformed_data,
/// invalid_argument, state_io) for the rest.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>

#include "nvfence/result.hpp"

namespace nvfence {

/// Election outcomes and coordination-service failures.
enum class ElectorErrc : int {
    unreachable = 1,   ///< No endpoint answered (connect/transport failure).
    server_error,      ///< The service answered with an error (message logged).
    lease_expired,     ///< Our lease is gone: the leadership is lost.
    no_leader,         ///< Nobody leads the election.
    not_leader,        ///< This host does not lead (any more).
    not_campaigning,   ///< The call needs a campaign (a lease) first.
    auth_failed,       ///< The service refused our user name and password (or the password file).
    library_missing,   ///< A library the backend loads at run time (etcd: libcurl) did not load.
};

/// The category of ElectorErrc.
const std::error_category& elector_category() noexcept;

/// Makes an error_code in elector_category().
std::error_code make_error_code(ElectorErrc e) noexcept;

/// Who leads an election, as the backend reports it.
struct LeaderInfo {
    std::string key;       ///< Backend key of the leadership (etcd: `<name>/<lease hex>`).
    std::string value;     ///< The identity the leader campaigned with.
    int64_t revision = 0;  ///< Creation revision of that key: unique per leadership.
    int64_t lease = 0;     ///< The lease that keeps it alive.
    /// Same leadership (key and creation revision); value may differ.
    bool same_leadership(const LeaderInfo& o) const { return key == o.key && revision == o.revision; }
};

/// A won leadership and its fencing token.
struct Term {
    LeaderInfo leader;         ///< The leadership this token belongs to.
    uint32_t epoch = 0;        ///< The token: the reservation key's epoch.
    std::string cluster_id;    ///< Identity of the coordination service (etcd cluster id).
    bool rollback_seen = false;///< The service's counter was below our persisted one.
};

/// What a keepalive told.
struct LeaseStatus {
    int64_t ttl_ms = 0;  ///< Lease time left as the service reports it (> 0).
};

/// A leader election with a fencing token. Implementations are not
/// thread-safe: one owner drives them.
class Elector {
public:
    /// Milliseconds: every bound is in these.
    using Ms = std::chrono::milliseconds;

    virtual ~Elector() = default;
    /// Grants (or reuses) this host's lease and waits until this host leads
    /// the election, at most @p timeout. Errc::timeout when it did not win
    /// in time (the candidacy stays queued while the lease lives).
    virtual Result<LeaderInfo> campaign(Ms timeout) = 0;
    /// Issues the fencing token for the leadership won by campaign(): a
    /// value above every token issued before (by any host), above
    /// @p at_least and above this host's persisted highest. Guarded by the
    /// leadership itself: ElectorErrc::not_leader when it is gone.
    /// Idempotent for one leadership (a retry returns the same token).
    virtual Result<Term> term(uint32_t at_least, Ms timeout) = 0;
    /// Renews the lease once. ElectorErrc::lease_expired when it is gone.
    virtual Result<LeaseStatus> keepalive(Ms timeout) = 0;
    /// The current leader; ElectorErrc::no_leader when nobody leads.
    virtual Result<LeaderInfo> leader(Ms timeout) = 0;
    /// Waits at most @p timeout for a leader other than @p known (a
    /// different leadership, or any when @p known is empty) and returns it;
    /// returns @p known's value unchanged (or no_leader) when nothing
    /// changed in time.
    virtual Result<LeaderInfo> observe(const std::optional<LeaderInfo>& known, Ms timeout) = 0;
    /// Gives up the leadership (idempotent; not leading is success) and
    /// revokes the lease, so the next campaign starts a new candidacy. The
    /// candidacy ends even when this fails (the error says etcd was not
    /// told): its lease is never renewed again and expires within its TTL.
    virtual Status resign(Ms timeout) = 0;
    /// Words for the cause of the last failed call where the error code
    /// says less (curl's reason for a TLS or connection failure, the
    /// server's message), or empty. For logs and status only.
    virtual std::string failure_detail() const { return {}; }
};

}  // namespace nvfence

namespace std {
template <>
struct is_error_code_enum<nvfence::ElectorErrc> : true_type {};
}  // namespace std
