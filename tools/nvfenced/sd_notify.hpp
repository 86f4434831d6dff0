// SPDX-License-Identifier: MIT
#pragma once
/// @file sd_notify.hpp
/// The systemd notification protocol without libsystemd: one datagram to
/// the unix socket named by $NOTIFY_SOCKET (a path, or '@' for the abstract
/// namespace), and the watchdog period from $WATCHDOG_USEC.

#include <chrono>
#include <string>

namespace nvfenced {

/// Sends @p state (e.g. "READY=1", "WATCHDOG=1", "STATUS=...") to systemd.
/// Returns false when not started by systemd ($NOTIFY_SOCKET unset) or when
/// sending failed; never blocks.
bool sd_notify(const std::string& state);

/// The watchdog timeout systemd expects keep-alives within ($WATCHDOG_USEC,
/// honoured only when $WATCHDOG_PID is unset or this process), or zero when
/// the watchdog is off.
std::chrono::microseconds watchdog_timeout();

/// True when stderr goes to the journal ($JOURNAL_STREAM) or the process runs
/// as a systemd service ($INVOCATION_ID): logs then carry no timestamps.
bool under_systemd();

}  // namespace nvfenced
