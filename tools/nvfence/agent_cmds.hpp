// SPDX-License-Identifier: MIT
#pragma once
/// @file agent_cmds.hpp
/// The `nvfence` subcommands that talk to the host agent (nvfenced) over
/// its control socket: status, takeover, handoff (the agent releases the
/// reservation and stays registered), rejoin (operator: leave FENCED).
///
/// Wiring in main.cpp:
/// @code
///   nvfence::cli::AgentCli agent;
///   nvfence::cli::add_agent_commands(app, agent);   // before app.parse()
///   ...
///   if (auto rc = nvfence::cli::run_agent_commands(agent)) return *rc;  // after parse
/// @endcode

#include <cstdint>
#include <string_view>
#include "nvfence/result.hpp"
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

namespace nvfence::cli {

/// What the agent subcommands parsed; filled by CLI11.
struct AgentCli {
    CLI::App* status = nullptr;    ///< `nvfence status`.
    CLI::App* takeover = nullptr;  ///< `nvfence takeover`.
    CLI::App* handoff = nullptr;   ///< `nvfence handoff`.
    CLI::App* rejoin = nullptr;    ///< `nvfence rejoin`.
    std::string volume;            ///< VOLUME: the socket is /run/nvfence/VOLUME.sock.
    std::string socket;            ///< --socket PATH.
    bool json = false;             ///< --json.
    uint32_t timeout_ms = 0;       ///< --timeout-ms (0: 5 s for status, 60 s otherwise).
    std::string victim;            ///< takeover --victim KEY (default: the holder).
    bool all = false;              ///< status --all: every agent of this host.
    std::string config_dir = "/etc/nvfence";  ///< status --config-dir: <dir>/<volume>.conf.
    std::string run_dir = "/run/nvfence";     ///< status --run-dir: the agents' sockets.
    CLI::Option* config_dir_opt = nullptr;    ///< --config-dir (given only with --all).
    CLI::Option* run_dir_opt = nullptr;       ///< --run-dir (given only with --all).
};

/// Adds `status`, `takeover`, `handoff` and `rejoin` to @p app, each with
/// an optional VOLUME positional, `--socket PATH`, `--json` and
/// `--timeout-ms MS`. @p st must outlive parsing and run_agent_commands().
void add_agent_commands(CLI::App& app, AgentCli& st);

/// Runs the agent subcommand that was parsed and returns its exit code
/// (docs/CONTRACTS.md: 0 ok, 1 other, 2 usage, 3 conflict / not holder,
/// 4 unsupported, 5 permission, 6 lost race), or std::nullopt when none of
/// them was given on the command line.
std::optional<int> run_agent_commands(const AgentCli& st);

/// A key as the CLI takes it: nf:TAG:NODE:EPOCH, 0x and 1-16 hex digits,
/// or a plain decimal number 1..2^64-1 as nvme-cli's --crkey/--prkey take
/// it (Errc::invalid_key otherwise).
Result<uint64_t> parse_cli_key(std::string_view text);

}  // namespace nvfence::cli
