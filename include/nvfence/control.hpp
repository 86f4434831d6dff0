// SPDX-License-Identifier: MIT
#pragma once
/// @file control.hpp
/// The host agent's control protocol: one request, one reply, over a unix
/// SOCK_SEQPACKET socket (one message per packet, one exchange per
/// connection). Used by `nvfence status|takeover|handoff|rejoin` and by
/// anything else that talks to nvfenced.
///
/// Wire format, all integers little-endian, every message at most
/// kControlMaxMessage bytes:
///
///     header (16 bytes)
///       0  magic   "NVFC"
///       4  u16     version (kControlVersion)
///       6  u8      kind: 1 request, 2 reply
///       7  u8      op (ControlOp)
///       8  u32     id: chosen by the client, echoed in the reply
///      12  u32     body length in bytes (the rest of the message)
///     request body (16 bytes)
///       u64 victim (takeover: key to preempt, 0 = the current holder)
///       u32 flags (0), u32 reserved (0)
///     reply body (kReplyFixedBytes, then five strings)
///       u8 exit_code, u8 changed, u8 state, u8 mode, u8 resv_type,
///       u8 holder_self, u8 node, u8 tag,
///       u64 key, u64 holder, u64 previous_holder,
///       u32 generation, u16 registrants, u16 flags (bit 0: check_only;
///       every other bit 0),
///       u32 check_failures, u32 pid,
///       u64 checks, u64 notifications, u64 last_check_age_ms,
///       u64 last_check_unix_ms, u64 fenced_for_ms, u64 uptime_ms,
///       strings volume, device, message, fence_reason, last_error:
///       each u16 length + bytes (no byte below 0x20, none 0x7f,
///       at most kControlMaxText bytes)
///
/// Decoding is strict: wrong magic, kind, version, op, length, trailing
/// bytes, non-zero reserved fields, booleans other than 0/1 or values out
/// of range are Errc::protocol. Encoding never fails: over-long strings are
/// truncated and control characters replaced, so decode(encode(x)) always
/// succeeds. A peer speaking another version gets a reply in this version
/// whose message names both versions.
///
/// Extensions within version 1 (an older peer is unchanged): the reply's
/// u16 after registrants, once reserved (0), is a set of flags, bit 0 set
/// by a check-only watcher (role = watch), and the states WAITING and
/// WATCHING are a watcher's. A normal agent sends neither, so its replies
/// are byte for byte what they were; an older client that gets a watcher's
/// reply rejects it as malformed (Errc::protocol) rather than treating the
/// watcher as an agent that registers.
///
/// The server side (the agent's listening socket) is not part of this API:
/// it is nvfenced's own (src/agent/control_server.hpp).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "nvfence/export.h"
#include "nvfence/command.hpp"
#include "nvfence/result.hpp"

namespace nvfence {

/// Protocol version spoken by this build.
inline constexpr uint16_t kControlVersion = 1;
/// Largest message, request or reply, in bytes.
inline constexpr size_t kControlMaxMessage = 4096;
/// Largest string field in a reply, in bytes.
inline constexpr size_t kControlMaxText = 512;
/// Bytes of the header.
inline constexpr size_t kControlHeaderBytes = 16;
/// Bytes of a request body.
inline constexpr size_t kRequestBodyBytes = 16;
/// Bytes of the fixed part of a reply body.
inline constexpr size_t kReplyFixedBytes = 96;
/// "Never" / "not applicable" for the *_ms fields of a reply.
inline constexpr uint64_t kControlNever = UINT64_MAX;

/// What a request asks for.
enum class ControlOp : uint8_t {
    status = 1,    ///< Report the agent's state; changes nothing.
    takeover = 2,  ///< Verified preempt-and-abort of the holder (Fence::takeover).
    handoff = 3,   ///< Stop the writers, release the reservation, stay registered (Fence::release).
    rejoin = 4,    ///< Operator: leave FENCED, register as standby with a new epoch.
};

/// Words for an op: "status", "takeover", "handoff", "rejoin" (the CLI's commands).
NVFENCE_API const char* control_op_name(ControlOp op);
/// True for the values of ControlOp.
NVFENCE_API bool control_op_valid(uint8_t raw);

/// The host agent's state, as reported on the wire.
enum class AgentState : uint8_t {
    starting = 0,  ///< Not yet registered or resumed.
    standby = 1,   ///< Registered, not holding.
    holder = 2,    ///< Registered and holding the reservation.
    fenced = 3,    ///< Preempted or lost: writers stopped; waits for rejoin.
    stopping = 4,  ///< Clean stop in progress.
    waiting = 5,   ///< Check-only watcher: this node's key never seen yet; waits for it.
    watching = 6,  ///< Check-only watcher: this node's key is registered.
};

/// Upper-case name: "STARTING", "STANDBY", "HOLDER", "FENCED", "STOPPING",
/// "WAITING", "WATCHING".
NVFENCE_API const char* agent_state_name(AgentState s);
/// True for the values of AgentState.
NVFENCE_API bool agent_state_valid(uint8_t raw);

/// The fixed header of every message.
struct NVFENCE_API ControlHeader {
    uint16_t version = kControlVersion;  ///< Protocol version.
    uint8_t kind = 0;                    ///< 1 request, 2 reply.
    ControlOp op = ControlOp::status;    ///< The operation.
    uint32_t id = 0;                     ///< Request id, echoed.
    uint32_t body_len = 0;               ///< Bytes after the header.
    friend bool operator==(const ControlHeader&, const ControlHeader&) = default;
};

/// A request to the agent.
struct NVFENCE_API ControlRequest {
    ControlOp op = ControlOp::status;  ///< What to do.
    uint32_t id = 0;                   ///< Echoed in the reply.
    uint64_t victim = 0;               ///< Takeover only: key to preempt (0: the holder).
    friend bool operator==(const ControlRequest&, const ControlRequest&) = default;
};

/// The agent's answer: the outcome of the request and a status snapshot.
struct NVFENCE_API ControlReply {
    ControlOp op = ControlOp::status;     ///< The request's op.
    uint32_t id = 0;                      ///< The request's id.
    uint8_t exit_code = 0;                ///< ExitCode for the CLI (0 = ok).
    bool changed = false;                 ///< The request changed the device.
    AgentState state = AgentState::starting;  ///< State after the request.
    ResvType mode = ResvType::none;       ///< Configured reservation type.
    ResvType resv_type = ResvType::none;  ///< Reservation type last reported.
    bool holder_self = false;             ///< The holder is this host.
    uint8_t node = 0;                     ///< This host's node id.
    uint8_t tag = 0;                      ///< Cluster tag.
    uint64_t key = 0;                     ///< This host's key (0: none).
    uint64_t holder = 0;                  ///< Holder key last reported (0: none).
    uint64_t previous_holder = 0;         ///< Takeover: holder before (0: none).
    uint32_t generation = 0;              ///< Generation last reported.
    uint16_t registrants = 0;             ///< Registrants last reported.
    /// The agent is a check-only watcher (role = watch): it never registers,
    /// acquires, releases or unregisters; fence_nvfence acts on the device
    /// directly (wire: flags bit 0).
    bool check_only = false;
    uint32_t check_failures = 0;          ///< Consecutive failed checks.
    uint32_t pid = 0;                     ///< The agent's process id.
    uint64_t checks = 0;                  ///< Checks completed.
    uint64_t notifications = 0;           ///< Reservation notifications read.
    uint64_t last_check_age_ms = kControlNever;   ///< Since the last good check.
    uint64_t last_check_unix_ms = 0;      ///< Wall time of the last good check.
    uint64_t fenced_for_ms = kControlNever;       ///< Time in FENCED (Never: not fenced).
    uint64_t uptime_ms = 0;               ///< Since the agent started.
    std::string volume;                   ///< Volume name.
    std::string device;                   ///< Device path.
    std::string message;                  ///< What happened, for people.
    std::string fence_reason;             ///< Why FENCED ("" otherwise).
    std::string last_error;               ///< Last failed check ("" if none).
    friend bool operator==(const ControlReply&, const ControlReply&) = default;
};

/// Encodes @p r (kControlHeaderBytes + kRequestBodyBytes bytes).
NVFENCE_API std::vector<uint8_t> encode_request(const ControlRequest& r);
/// Encodes @p r; strings are truncated to kControlMaxText bytes and control
/// characters replaced by '?', so the result always decodes.
NVFENCE_API std::vector<uint8_t> encode_reply(const ControlReply& r);
/// Decodes and checks the header only (any version): lets a server answer
/// a peer that speaks another version. Errc::protocol when malformed.
NVFENCE_API Result<ControlHeader> decode_control_header(std::span<const uint8_t> msg);
/// Decodes a whole request of this version; Errc::protocol otherwise.
NVFENCE_API Result<ControlRequest> decode_request(std::span<const uint8_t> msg);
/// Decodes a whole reply of this version; Errc::protocol otherwise.
NVFENCE_API Result<ControlReply> decode_reply(std::span<const uint8_t> msg);

/// A reply to @p req reporting failure @p ec (exit_code from exit_code_for)
/// with @p message; the status snapshot fields are left empty.
NVFENCE_API ControlReply control_error_reply(const ControlRequest& req, std::error_code ec,
                                             const std::string& message);

/// The agent's control socket for volume @p volume: `/run/nvfence/<volume>.sock`
/// (nvfenced's default; `control_socket` in nvfenced.conf overrides it).
NVFENCE_API std::string control_socket_path(const std::string& volume);

/// Sends @p req to the agent listening at @p socket_path and waits for the
/// reply, everything bounded by @p timeout_ms (1..600000). Errors: the
/// connect errno (ENOENT: no agent; ECONNREFUSED: stale socket; EACCES),
/// Errc::timeout, Errc::protocol (malformed reply, other version, wrong id),
/// Errc::invalid_argument (path too long, bad timeout).
NVFENCE_API Result<ControlReply> control_request(const std::string& socket_path, const ControlRequest& req,
                                                 uint32_t timeout_ms);

}  // namespace nvfence
