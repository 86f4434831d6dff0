// SPDX-License-Identifier: MIT
#pragma once
/// @file status_all.hpp
/// What the agent commands print (agent_cmds.cpp) and `nvfence status
/// --all`: every nvfenced of this host at once, one line per volume. The
/// volumes are found on disk (find_volumes), asked in parallel
/// (ask_all), and printed by pure functions the unit tests check
/// (tests/status_all_test.cpp).

#include <cstdint>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "json.hpp"
#include "nvfence/control.hpp"

namespace nvfence::cli {

/// Where nvfenced@<volume>.service reads its configuration: <dir>/<volume>.conf.
inline constexpr const char* kConfigDir = "/etc/nvfence";
/// Where the agents' control sockets are: <dir>/<name>.sock.
inline constexpr const char* kRunDir = "/run/nvfence";

/// `nf:0:1:41 (node 1, epoch 41)`, `0x... (foreign)`, or `none`.
std::string key_words(uint64_t key);
/// `350 ms`, `12s`, `3m 4s`, `1d 0h 0m 2s`.
std::string duration_words(uint64_t ms);
/// @p unix_ms as `2026-01-02T03:04:05Z`.
std::string utc(uint64_t unix_ms);
/// The members of a status snapshot (nvfence(8) --json), into the open object.
void json_reply(Json& j, const ControlReply& r);

/// A request the agent did not answer, in words.
struct TransportFailure {
    std::string what;   ///< e.g. `no nvfenced listening at /run/nvfence/v.sock`.
    std::string hint;   ///< What to do ("" none).
    int exit_code = 1;  ///< ExitCode: 1 (no agent, stale socket, timeout, protocol), 5 (permission), ...
};
/// The words and exit code for @p ec from control_request(@p path) with @p timeout_ms.
TransportFailure transport_failure(const std::string& path, std::error_code ec, uint32_t timeout_ms);

/// One volume of `nvfence status --all`.
struct VolumeStatus {
    std::string volume;                 ///< The instance name (config file or socket name).
    std::string socket;                 ///< Its control socket.
    bool configured = false;            ///< <config dir>/<volume>.conf exists.
    std::optional<ControlReply> reply;  ///< The agent's answer (none: not answering).
    std::error_code error;              ///< Not answering: why (control_request's error).
    TransportFailure failure;           ///< Not answering: in words.
    /// Answered: the reply's exit code is 0.
    bool answered() const { return reply && reply->exit_code == 0; }
};

/// Every volume of this host, sorted by name, each once: each
/// `<config_dir>/<name>.conf` (a valid instance name; its socket is the
/// file's control_socket, else `<run_dir>/<name>.sock`, as
/// nvfenced@<name>.service runs it) and each socket `<run_dir>/*.sock`
/// that no configuration names (an agent started by hand). At most 1024.
std::vector<VolumeStatus> find_volumes(const std::string& config_dir, const std::string& run_dir);

/// The control_socket a configuration file sets ("" none or unreadable):
/// its last `control_socket = value` line, quotes and a `#` comment removed.
std::string configured_socket(const std::string& conf_path);

/// Asks every volume's agent for its status, all at once, each bounded by
/// @p timeout_ms; fills reply or error and failure.
void ask_all(std::vector<VolumeStatus>& volumes, uint32_t timeout_ms);

/// The exit code of `status --all`: 0 when every agent answered; 5 when
/// the only failures are permission denied; 1 when any agent is not
/// answering (or no volume was found).
int status_all_exit_code(const std::vector<VolumeStatus>& volumes);

/// The table: a header and one line per volume, columns VOLUME, STATE,
/// KEY, HOLDER, LAST CHECK (`12s ago`, `never`), padded to the widest
/// value; an agent that did not answer shows `-` and, as its LAST CHECK,
/// `not answering: <what>`. Keys as `nf:T:N:E`; the holder marked `(this
/// host)` when it is.
std::string format_status_table(const std::vector<VolumeStatus>& volumes);

/// The --json document: {"command":"status","exit_code":N, ["error",
/// "cause" when N != 0,] "volumes":[{"name","socket","configured",
/// "answering", then json_reply's members (its "volume" the agent's), or
/// "volume" (the name), "error" and "cause"}]}.
std::string status_all_json(const std::vector<VolumeStatus>& volumes, int exit_code, const std::string& error);

/// The line on stderr of a failed `status --all` (exit code != 0), e.g.
/// `2 of 3 agents not answering: db2, db3`; "" when all answered.
std::string status_all_error(const std::vector<VolumeStatus>& volumes, const std::string& config_dir,
                             const std::string& run_dir);

}  // namespace nvfence::cli
