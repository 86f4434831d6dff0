// SPDX-License-Identifier: MIT
#pragma once
/// @file namespace.hpp
/// Opening and identifying one NVMe namespace.
///
/// A Namespace is opened read-only: reservation commands need no write
/// access, and closing a block device opened for writing makes udev emit a
/// change event on every command. Reservation commands go to the namespace
/// node, never to the controller node.
///
/// Device-level fencing covers every write path of a preempted host: page
/// cache writeback, filesystems, other processes. The device refuses the
/// host, not one file descriptor.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "nvfence/export.h"
#include "nvfence/fd.hpp"
#include "nvfence/passthru.hpp"
#include "nvfence/report.hpp"
#include "nvfence/result.hpp"

namespace nvfence {

/// Where one namespace lives in /dev and /sys.
struct NVFENCE_API NamespacePaths {
    std::string name;        ///< Kernel name, e.g. "nvme1n1".
    std::string block;       ///< Block device, e.g. "/dev/nvme1n1".
    std::string generic;     ///< Generic char device "/dev/ng1n1" ("" if none).
    std::string controller;  ///< Controller name, e.g. "nvme1".
    std::string transport;   ///< "pcie", "tcp", "loop", "rdma", "fc" or "".
};

/// Resolves @p path (a namespace block device, its generic char device, or
/// a symlink to either such as /dev/disk/by-id/...) to its paths. Fails with
/// Errc::not_found, Errc::not_nvme (anything else, including partitions,
/// regular files, directories and /dev/null) or Errc::controller_node.
NVFENCE_API Result<NamespacePaths> resolve_namespace(std::string_view path);

/// Identity and capabilities of an opened namespace.
struct NVFENCE_API NamespaceInfo {
    NamespacePaths paths;              ///< Where it lives.
    uint32_t nsid = 0;                 ///< Namespace id.
    ControllerIdentity ctrl;           ///< Identify Controller.
    NamespaceIdentity ns;              ///< Identify Namespace.
    std::optional<std::string> ebs_volume;  ///< "vol-..." for EBS volumes.
    std::optional<HostId> host_id;     ///< This host's id, if readable.
    std::string volume;                ///< Stable volume name (see volume_id()).
    /// True when the controller and the namespace support reservations.
    bool reservations() const { return ctrl.reservations && ns.rescap.any(); }
    /// True when the volume looks shared (multi-controller, fabrics, EBS).
    bool looks_shared() const;
};

/// How Namespace::open identifies a namespace.
struct NVFENCE_API OpenOptions {
    uint32_t timeout_ms = 0;    ///< Per-command bound (0: the kernel's default).
    bool read_host_id = true;   ///< Also read this host's identifier.
};

/// An open NVMe namespace: its identity and a passthrough to it.
class NVFENCE_API Namespace {
public:
    /// Opens and identifies @p path. Errors: see resolve_namespace, plus
    /// EACCES/EPERM (system_category) without privileges.
    static Result<std::unique_ptr<Namespace>> open(std::string_view path, const OpenOptions& opts = {});
    /// The identity read at open.
    const NamespaceInfo& info() const { return info_; }
    /// The passthrough to this namespace.
    Passthru& passthru() { return pt_; }
    /// The open block device (read-only), owned by this object.
    int fd() const { return fd_.get(); }
    /// Ok when reservations are supported; otherwise Errc::no_reservations
    /// and @p why (if given) receives a sentence for people, naming EBS io1
    /// volumes when the model is EBS.
    Status require_reservations(std::string* why = nullptr) const;

private:
    Namespace(Fd fd, NamespaceInfo info) : fd_(std::move(fd)), pt_(fd_.get()), info_(std::move(info)) {}
    Fd fd_;
    IoctlPassthru pt_;
    NamespaceInfo info_;
};

/// Reads this host's identifier: Get Features Host Identifier first, then the
/// controller's sysfs hostid (fabrics), else Errc::host_id_unknown.
NVFENCE_API Result<HostId> read_host_id(Passthru& pt, const NamespacePaths& paths);

/// Parses a host id written as 32 hex digits, optionally with UUID dashes.
NVFENCE_API Result<HostId> parse_host_id(std::string_view text);

}  // namespace nvfence
