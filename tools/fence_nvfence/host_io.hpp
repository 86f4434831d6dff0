// SPDX-License-Identifier: MIT
#pragma once
/// @file host_io.hpp
/// What fence_nvfence does to the machine itself, apart from the devices:
/// running corosync-cmapctl within a bound, and its debug file.

#include <string>
#include <vector>

#include "nvfence/fd.hpp"
#include "nvfence/result.hpp"

namespace nvfence::fence_agent {

/// How long corosync-cmapctl may take, in all (reading its output and
/// waiting for it to exit).
inline constexpr int kCmapTimeoutMs = 10000;

/// Runs @p prog with @p args (no shell), stdout captured (at most 1 MiB
/// kept), stderr to /dev/null. Returns within @p timeout_ms whatever the
/// child does: past it the child is killed (SIGKILL), reaped, and the
/// result is Errc::timeout. A program that cannot be started is its errno
/// (ENOENT: not installed); a non-zero exit is EIO.
Result<std::string> run_bounded(const std::string& prog, const std::vector<std::string>& args,
                                int timeout_ms = kCmapTimeoutMs);

/// Opens the debug file @p path for appending: created with mode 0600,
/// O_CLOEXEC (no program fence_nvfence starts inherits it), O_NOFOLLOW (a
/// symbolic link put in its place is refused, ELOOP). The errno otherwise.
Result<Fd> open_debug_file(const std::string& path);

}  // namespace nvfence::fence_agent
