// SPDX-License-Identifier: MIT
#pragma once
/// @file journal.hpp
/// The agent's state changes as structured journal records: the fields of
/// one record (a pure function of the AgentEvent, so what an operator
/// filters on with `journalctl NVFENCE_VOLUME=...` is tested bit for bit),
/// and journald's native protocol (one datagram to
/// /run/systemd/journal/socket, as sd_journal_send() sends it) without
/// libsystemd, as sd_notify is implemented (tools/nvfenced/sd_notify.hpp).
/// The stderr line of every event stays: the record is one more, whose
/// fields carry what the line says in words.

#include <string>
#include <utility>
#include <vector>

#include "agent/agent_event.hpp"

namespace nvfence {

/// journald's socket for the native protocol.
inline constexpr const char* kJournalSocket = "/run/systemd/journal/socket";

/// MESSAGE_ID of every state-change record (`journalctl
/// MESSAGE_ID=141b46bd04fc49cbb86407733568ca59`): one id for the kind of
/// message, as systemd's catalog uses them.
inline constexpr const char* kStateChangeMessageId = "141b46bd04fc49cbb86407733568ca59";

/// One journal field: NAME (A-Z, 0-9, _; not starting with _) and value.
using JournalField = std::pair<std::string, std::string>;

/// The record of a state change @p e (kind state_changed), in this order:
///
///     MESSAGE=<FROM> -> <TO> (volume <volume>, key <key>): <text>
///     MESSAGE_ID=kStateChangeMessageId
///     PRIORITY=<7 debug, 6 info, 4 warning, 3 error>
///     SYSLOG_IDENTIFIER=nvfenced
///     NVFENCE_VOLUME=<volume>
///     NVFENCE_STATE=<TO>
///     NVFENCE_PREVIOUS_STATE=<FROM>
///     NVFENCE_KEY=<nf:TAG:NODE:EPOCH, 0x... when foreign, none when 0>
///     NVFENCE_EPOCH=<the key's epoch, the elector's term under one; 0: no key>
///     NVFENCE_NODE=<node id>
///     NVFENCE_REASON=<text>
///     NVFENCE_GENERATION=<the report's generation>     (with a report)
///     NVFENCE_HOLDER=<the report's holder key, or none> (with a report)
std::vector<JournalField> state_change_fields(const AgentEvent& e);

/// @p fields in journald's native protocol: `NAME=value\n`, or for a value
/// holding a newline `NAME\n`, its length (64 bits, little-endian), the
/// value and `\n`. A name outside [A-Z0-9_] or starting with `_` is a broken
/// invariant.
std::string journal_datagram(const std::vector<JournalField>& fields);

/// Sends @p datagram to journald's socket @p socket; never blocks. False
/// when it could not (no journald, socket full, too large).
bool journal_send(const std::string& datagram, const std::string& socket = kJournalSocket);

/// True when this process logs to journald: $JOURNAL_STREAM is set (stderr
/// is connected to the journal) or journald's socket exists.
bool journald_present(const std::string& socket = kJournalSocket);

}  // namespace nvfence
