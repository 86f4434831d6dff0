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
#include <optional>
#include <string>
#include <vector>

#include "agent/bounded_passthru.hpp"
#include "internal/clock.hpp"
#include "nvfence/namespace.hpp"
#include "nvfence/passthru.hpp"

namespace nvfence {

/// One opened namespace as FollowingDevice uses it (the seam that unit
/// tests fill with a fake device).
class FollowedNamespace {
public:
    virtual ~FollowedNamespace() = default;
    /// The passthrough to it.
    virtual Passthru& passthru() = 0;
    /// Its identity, read when it was opened.
    virtual const NamespaceInfo& info() const = 0;
    /// True when this instance no longer exists (its block device was
    /// deleted, or its name and number now belong to a newer disk).
    virtual bool gone() const = 0;
};

/// Lists and opens the namespaces present (the seam in front of /sys and
/// /dev).
class NamespaceOpener {
public:
    virtual ~NamespaceOpener() = default;
    /// Kernel names of the block devices present now (any order; the caller
    /// keeps the namespace nodes nvmeXnY).
    virtual std::vector<std::string> list() = 0;
    /// Opens and identifies the block device @p name.
    virtual Result<std::unique_ptr<FollowedNamespace>> open(const std::string& name) = 0;
};

/// The real namespaces: /sys/block lists them, Namespace::open opens
/// `<dev_root>/<name>`, and the kernel's diskseq tells a gone instance.
class SysfsNamespaceOpener final : public NamespaceOpener {
public:
    /// Opens with @p opts (their timeouts bound a search).
    explicit SysfsNamespaceOpener(OpenOptions opts, std::string sys_root = "/sys", std::string dev_root = "/dev")
        : opts_(opts), sys_root_(std::move(sys_root)), dev_root_(std::move(dev_root)) {}
    /// Entries of `<sys_root>/block`.
    std::vector<std::string> list() override;
    /// Namespace::open of `<dev_root>/<name>`.
    Result<std::unique_ptr<FollowedNamespace>> open(const std::string& name) override;
    /// Wraps an already opened @p ns (its gone() looks under @p sys_root).
    static std::unique_ptr<FollowedNamespace> wrap(std::unique_ptr<Namespace> ns, std::string sys_root = "/sys");

private:
    OpenOptions opts_;
    std::string sys_root_, dev_root_;
};

/// A Passthru over an open namespace that never keeps its caller waiting
/// past a command's timeout (BoundedPassthru: a command the kernel has
/// not ended by then is given up, Errc::timeout) and that, when a command fails and the
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
    FollowingDevice(std::unique_ptr<Namespace> ns, OpenOptions open_opts, uint32_t min_search_interval_ms,
                    LogFn log, std::string sys_root = "/sys", std::string dev_root = "/dev");
    /// Follows @p ns, finding candidates with @p opener (borrowed) and
    /// timing searches on @p clock (borrowed).
    FollowingDevice(std::unique_ptr<FollowedNamespace> ns, NamespaceOpener& opener, Clock& clock,
                    uint32_t min_search_interval_ms, LogFn log);

    /// See Passthru::submit.
    Result<uint32_t> submit(const Command& cmd, std::span<uint8_t> data) override;

    /// The namespace in use now.
    const NamespaceInfo& info() const { return ns_->info(); }

    /// True when the namespace instance this object has open no longer
    /// exists (its block device was deleted, or its name and number now
    /// belong to a newer disk: the kernel's diskseq differs).
    bool instance_gone() const { return ns_->gone(); }

    /// How many times it switched to a reappeared namespace.
    uint64_t switches() const { return switches_; }

private:
    void maybe_follow();
    std::vector<std::string> candidates();

    std::unique_ptr<NamespaceOpener> owned_opener_;
    std::unique_ptr<Clock> owned_clock_;
    /// Shared with the worker of bounded_: a namespace followed away from
    /// while a command given up on it is still in the kernel stays open.
    std::shared_ptr<FollowedNamespace> ns_;
    NamespaceOpener* opener_;
    Clock* clock_;
    Clock::Ms min_interval_;
    LogFn log_;
    std::string volume_;
    uint32_t nsid_;
    std::optional<HostId> host_id_;
    Clock::TimePoint last_search_{};
    bool searched_ = false;
    bool reported_missing_ = false;
    uint64_t switches_ = 0;
    BoundedPassthru bounded_{nullptr, 30000, [this](const std::string& line) {
                                 if (log_) log_(true, line);
                             }};
};

}  // namespace nvfence
