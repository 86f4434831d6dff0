// SPDX-License-Identifier: MIT
#pragma once
/// @file elector_config.hpp
/// nvfenced's elector keys (config file `key = value` and flags `--key`),
/// validated with the offending key named. They sit beside the agent's
/// own keys (agent_config.hpp); parse_elector_settings() reads only the
/// keys of elector_setting_keys() and ignores the rest.
///
/// | key             | values                                        | default |
/// |-----------------|-----------------------------------------------|---------|
/// | elector         | none \| etcd                                  | none    |
/// | etcd_endpoints  | http(s)://host:port, separated by , or space  | required with etcd |
/// | etcd_ca_file    | absolute path, PEM (https only)               | system CAs |
/// | etcd_cert_file  | absolute path, PEM client cert (with key)     | (none)  |
/// | etcd_key_file   | absolute path, PEM client key (with cert)     | (none)  |
/// | etcd_user       | 1..128 printable characters, no space (with password file) | (none) |
/// | etcd_password_file | absolute path, the user's password (with user) | (none) |
/// | election_name   | 1..200 printable characters, no space         | nvfence/VOLUME |
/// | lease_ttl_s     | 2..3600                                       | 5       |
/// | lease_margin_ms | 100 .. half the TTL                           | min(1000, TTL/4) |
/// | etcd_timeout_ms | 100 .. a third of the TTL                     | min(1000, TTL/3) |
/// | lease_loss      | fence \| hold                                 | fence   |
///
/// etcd_timeout_ms bounds the calls made outside a live lease (resign,
/// lookups while standing by) and is the least any call gets; calls for a
/// live lease may run until the step-down deadline (ElectorDriver).
/// With `elector = etcd` the agent's `role = acquire` is refused: only a
/// won election makes a host acquire.
/// With `elector = none` (today's behaviour: takeover on request) any other
/// elector key is refused, so a half-written configuration never runs
/// without the elector the operator meant to have.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "elector/elector_policy.hpp"
#include "elector/etcd.hpp"
#include "nvfence/result.hpp"

namespace nvfence {

/// Which elector decides who holds.
enum class ElectorKind : uint8_t {
    none,  ///< Nobody: takeover on request (nvfence takeover), the default.
    etcd,  ///< etcd's election, token = reservation key epoch.
};

/// The validated elector keys.
struct ElectorSettings {
    ElectorKind kind = ElectorKind::none;   ///< elector.
    std::vector<std::string> endpoints;     ///< etcd_endpoints.
    std::string ca_file;                    ///< etcd_ca_file.
    std::string cert_file;                  ///< etcd_cert_file.
    std::string key_file;                   ///< etcd_key_file.
    std::string user;                       ///< etcd_user ("": no authentication).
    std::string password_file;              ///< etcd_password_file.
    std::string election_name;              ///< election_name (default filled in).
    uint32_t lease_ttl_s = 5;               ///< lease_ttl_s.
    uint32_t lease_margin_ms = 1000;        ///< lease_margin_ms.
    uint32_t etcd_timeout_ms = 1000;        ///< etcd_timeout_ms.
    LeaseLossAction lease_loss = LeaseLossAction::fence;  ///< lease_loss.
};

/// Every key parse_elector_settings() reads.
const std::vector<std::string>& elector_setting_keys();

/// Validates the elector keys of @p kv for volume @p volume (the default
/// election name is `nvfence/<volume>`). On failure returns
/// Errc::invalid_argument and @p why names the key and what is wrong, e.g.
/// `lease_ttl_s = "1": must be a whole number from 2 to 3600`.
Result<ElectorSettings> parse_elector_settings(const std::map<std::string, std::string>& kv,
                                               const std::string& volume, std::string& why);

/// The EtcdElector options for @p s; @p value is this host's identity in
/// the election (e.g. `node=2 host=db-b`).
EtcdOptions etcd_options(const ElectorSettings& s, const std::string& value, const std::string& state_dir,
                         const std::string& volume);

/// The largest password file read_etcd_password accepts.
inline constexpr size_t kMaxPasswordFileBytes = 1024;

/// Reads etcd_password_file @p path: a regular file of at most
/// kMaxPasswordFileBytes, not accessible by others (mode o-rwx), holding
/// the password on one line (one final newline is not part of it): not
/// empty, valid UTF-8, no control characters. On failure returns
/// ElectorErrc::auth_failed and @p why names the key, the file and what is
/// wrong. EtcdElector reads it at every authentication, so a new password
/// takes effect at the next one.
Result<std::string> read_etcd_password(const std::string& path, std::string& why);

/// The files @p s names, checked as the elector will use them: the TLS
/// files readable, the password file as read_etcd_password reads it.
/// nvfenced and `--check-config` refuse a configuration that fails this
/// (Errc::invalid_argument, @p why names the key and the file).
Status check_elector_files(const ElectorSettings& s, std::string& why);

/// The LeaseGuard timing for @p s (renewal every TTL / 3).
LeaseGuardOptions lease_guard_options(const ElectorSettings& s);

}  // namespace nvfence
