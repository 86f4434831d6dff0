// SPDX-License-Identifier: MIT
#include "agent/following_device.hpp"

#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "internal/invariant.hpp"
#include "nvfence/error.hpp"

namespace nvfence {

namespace {

// Namespace block devices only: nvmeXnY, not partitions (nvmeXnYpZ) and not
// the hidden per-path nodes of native multipath (nvmeXcYnZ).
bool namespace_disk_name(const std::string& n) {
    if (n.rfind("nvme", 0) != 0) return false;
    size_t i = 4;
    auto digits = [&] {
        const size_t b = i;
        while (i < n.size() && n[i] >= '0' && n[i] <= '9') ++i;
        return i > b;
    };
    if (!digits() || i >= n.size() || n[i] != 'n') return false;
    ++i;
    return digits() && i == n.size();
}

std::optional<uint64_t> read_u64(const std::filesystem::path& p) {
    std::ifstream f(p);
    uint64_t v = 0;
    if (!(f >> v)) return std::nullopt;
    return v;
}

// A Namespace opened by the daemon; gone() compares its device number
// and diskseq with what sysfs shows now.
class OpenedNamespace final : public FollowedNamespace {
public:
    OpenedNamespace(std::unique_ptr<Namespace> ns, std::string sys_root)
        : ns_(std::move(ns)), sys_root_(std::move(sys_root)) {}
    Passthru& passthru() override { return ns_->passthru(); }
    const NamespaceInfo& info() const override { return ns_->info(); }
    bool gone() const override {
        struct stat st {};
        if (::fstat(ns_->fd(), &st) != 0 || !S_ISBLK(st.st_mode)) return false;
        namespace fs = std::filesystem;
        const fs::path sysdev = fs::path(sys_root_) / "dev" / "block" /
                                (std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev)));
        std::error_code ec;
        if (!fs::exists(sysdev, ec)) return true;
        uint64_t seq = 0;
        if (::ioctl(ns_->fd(), BLKGETDISKSEQ, &seq) != 0) return false;  // old kernel: cannot tell
        const auto now = read_u64(sysdev / "diskseq");
        return now && *now != seq;
    }

private:
    std::unique_ptr<Namespace> ns_;
    std::string sys_root_;
};

// Bounded: a host has a handful of namespaces, and every open carries the
// device timeout.
constexpr size_t kMaxCandidates = 256;

}  // namespace

std::vector<std::string> SysfsNamespaceOpener::list() {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(sys_root_) / "block", ec))
        names.push_back(e.path().filename().string());
    return names;
}

Result<std::unique_ptr<FollowedNamespace>> SysfsNamespaceOpener::open(const std::string& name) {
    auto ns = Namespace::open(dev_root_ + "/" + name, opts_);
    if (!ns) return ns.error();
    return wrap(std::move(*ns), sys_root_);
}

std::unique_ptr<FollowedNamespace> SysfsNamespaceOpener::wrap(std::unique_ptr<Namespace> ns, std::string sys_root) {
    return std::make_unique<OpenedNamespace>(std::move(ns), std::move(sys_root));
}

FollowingDevice::FollowingDevice(std::unique_ptr<Namespace> ns, OpenOptions open_opts,
                                 uint32_t min_search_interval_ms, LogFn log, std::string sys_root,
                                 std::string dev_root)
    : owned_clock_(std::make_unique<SystemClock>()),
      ns_(SysfsNamespaceOpener::wrap(std::move(ns), sys_root)),
      clock_(owned_clock_.get()),
      min_interval_(min_search_interval_ms),
      log_(std::move(log)),
      volume_(ns_->info().volume),
      nsid_(ns_->info().nsid),
      host_id_(ns_->info().host_id) {
    open_opts.read_host_id = true;
    owned_opener_ = std::make_unique<SysfsNamespaceOpener>(open_opts, std::move(sys_root), std::move(dev_root));
    opener_ = owned_opener_.get();
}

FollowingDevice::FollowingDevice(std::unique_ptr<FollowedNamespace> ns, NamespaceOpener& opener, Clock& clock,
                                 uint32_t min_search_interval_ms, LogFn log)
    : ns_(std::move(ns)),
      opener_(&opener),
      clock_(&clock),
      min_interval_(min_search_interval_ms),
      log_(std::move(log)),
      volume_(ns_->info().volume),
      nsid_(ns_->info().nsid),
      host_id_(ns_->info().host_id) {}

Result<uint32_t> FollowingDevice::submit(const Command& cmd, std::span<uint8_t> data) {
    // The namespace's passthru, kept alive by the command's worker.
    auto r = bounded_.submit_to(std::shared_ptr<Passthru>(ns_, &ns_->passthru()), cmd, data);
    // A reservation conflict or any other answer from the device means the
    // namespace is there; only failures without an answer are worth a look.
    if (!r && r.error().category() != nvme_category()) maybe_follow();
    else if (!r && (r.error().value() & 0x700) == 0x300) maybe_follow();  // path-related status
    return r;
}

std::vector<std::string> FollowingDevice::candidates() {
    std::vector<std::string> names;
    for (auto& n : opener_->list())
        if (namespace_disk_name(n)) names.push_back(std::move(n));
    std::sort(names.begin(), names.end());
    if (names.size() > kMaxCandidates) names.resize(kMaxCandidates);
    return names;
}

void FollowingDevice::maybe_follow() {
    const auto now = clock_->now();
    if (searched_ && now - last_search_ < min_interval_) return;
    searched_ = true;
    last_search_ = now;
    if (!ns_->gone()) return;
    const std::string old = ns_->info().paths.block;
    for (const auto& n : candidates()) {
        auto cand = opener_->open(n);
        if (!cand) continue;
        const auto& ci = (*cand)->info();
        if (ci.volume != volume_ || ci.nsid != nsid_) continue;
        if (host_id_ && ci.host_id && *ci.host_id != *host_id_) continue;
        ns_ = std::move(*cand);
        // Followed only to the same volume and namespace: the reservation
        // commands that follow go to the device this agent was started on.
        NVF_INVARIANT(ns_ && ns_->info().volume == volume_ && ns_->info().nsid == nsid_);
        ++switches_;
        reported_missing_ = false;
        if (log_) log_(false, "namespace " + old + " disappeared; volume " + volume_ + " is back as " +
                                  ns_->info().paths.block + ": using it from now on");
        return;
    }
    if (!reported_missing_ && log_)
        log_(true, "namespace " + old + " disappeared and volume " + volume_ + " (nsid " + std::to_string(nsid_) +
                       ") is not present; looking for it again at most every " +
                       std::to_string(min_interval_.count()) + " ms");
    reported_missing_ = true;
}

}  // namespace nvfence
