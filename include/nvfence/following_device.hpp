// SPDX-License-Identifier: MIT
#pragma once
/// @file following_device.hpp
/// The agent's device: a Passthru that follows its volume when the
/// namespace it opened disappears and comes back (a target restart, a
/// namespace disabled and re-enabled, a detach and re-attach), possibly
/// under another name (/dev/nvme0n1 becomes /dev/nvme0n2).
///
/// Without it the agent would keep a file descriptor to a dead namespace
/// forever: every Report fails, the state is kept ("unknown is not
/// fenced"), and a holder whose keys were lost with the namespace would
/// never notice. With it, the next check reads the new namespace and the
/// agent core sees what the device now says (keys gone: FENCED).

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "nvfence/namespace.hpp"
#include "nvfence/passthru.hpp"

namespace nvfence {

/// A Passthru over an open Namespace that, when a command fails and the
/// opened namespace instance is gone, looks for the same volume (same
/// volume name, nsid and host id) among the namespaces present and
/// switches to it. The command that failed is not retried: the caller
/// sees its error and the next command goes to the new namespace.
class FollowingDevice final : public Passthru {
public:
    /// Called with one line for the log on every switch or failed search.
    using LogFn = std::function<void(bool warning, const std::string& line)>;

    /// Follows @p ns. Searches at most once per @p min_search_interval_ms;
    /// opens candidates with @p open_opts (their timeouts bound a search).
    FollowingDevice(std::unique_ptr<Namespace> ns, OpenOptions open_opts,
                    uint32_t min_search_interval_ms, LogFn log, std::string sys_root = "/sys",
                    std::string dev_root = "/dev");

    /// See Passthru::submit.
    Result<uint32_t> submit(const Command& cmd, std::span<uint8_t> data) override;

    /// The namespace in use now.
    const NamespaceInfo& info() const { return ns_->info(); }

    /// True when the namespace instance this object has open no longer
    /// exists (its block device was deleted, or its name and number now
    /// belong to a newer disk: the kernel's diskseq differs).
    bool instance_gone() const;

    /// How many times it switched to a reappeared namespace.
    uint64_t switches() const { return switches_; }

private:
    void maybe_follow();

    std::unique_ptr<Namespace> ns_;
    OpenOptions open_opts_;
    std::chrono::milliseconds min_interval_;
    LogFn log_;
    std::string sys_root_, dev_root_;
    std::string volume_;
    uint32_t nsid_;
    std::optional<HostId> host_id_;
    std::chrono::steady_clock::time_point last_search_{};
    bool searched_ = false;
    bool reported_missing_ = false;
    uint64_t switches_ = 0;
};

}  // namespace nvfence
