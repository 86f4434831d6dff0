// SPDX-License-Identifier: MIT
#pragma once
/// @file cluster_tag.hpp
/// The cluster tag of a key (`nf:TAG:NODE:EPOCH`) when none is configured:
/// derived from corosync's cluster name (totem.cluster_name), the same on
/// every node of one cluster and different, as a rule, between clusters, so
/// that two clusters with default settings on one namespace do not share a
/// key space (fence_scsi derives its key prefix from the same name).
///
/// The function, stable across versions (tests pin it with test vectors):
///   tag = 1 + (FNV-1a-32(name) mod 255)
/// FNV-1a-32 over the name's bytes (offset basis 2166136261, prime
/// 16777619). It is never 0: tag 0 is what clusters used before the tag was
/// derived, and they keep it with an explicit `cluster_tag = 0`.
/// fence_nvfence reads the name with `corosync-cmapctl -g
/// totem.cluster_name`; the check-only watcher (nvfenced, role = watch)
/// reads it from corosync.conf (it starts at boot, before corosync may run),
/// the file corosync itself loads it from.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "nvfence/result.hpp"

namespace nvfence {

/// corosync's configuration file, where the watcher reads the cluster name.
inline constexpr const char* kCorosyncConf = "/etc/corosync/corosync.conf";

/// The tag derived from cluster name @p name (1..255), by the function above.
uint8_t cluster_tag_for_name(std::string_view name);

/// The value of @p key in `corosync-cmapctl -g KEY` output
/// (`totem.cluster_name (str) = nvlab`); nullopt when absent or empty.
std::optional<std::string> cmap_string_value(std::string_view output, std::string_view key);

/// `cluster_name` of the `totem { }` section of corosync.conf text @p text
/// (comments and nested sections skipped); nullopt when absent or empty.
std::optional<std::string> corosync_conf_cluster_name(std::string_view text);

/// The watcher's tag from corosync.conf at @p path: the derived tag; 0 when
/// the file does not exist (no corosync on this host, as fence_nvfence
/// without corosync-cmapctl); Errc::invalid_argument with @p why when the
/// file cannot be read or names no cluster.
Result<uint8_t> tag_from_corosync_conf(const std::string& path, std::string& why);

}  // namespace nvfence
