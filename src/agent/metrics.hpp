// SPDX-License-Identifier: MIT
#pragma once
/// @file metrics.hpp
/// nvfenced's metrics in the Prometheus text exposition format (version
/// 0.0.4), for node_exporter's textfile collector: one file per volume,
/// `<dir>/nvfence_<volume>.prom`, replaced atomically (written beside it,
/// then renamed) so the collector never reads half a file. Not yet written
/// by nvfenced: Agent::metrics() gives the sample, nvfenced does not call it.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nvfence/control.hpp"
#include "nvfence/result.hpp"

namespace nvfence {

/// Upper bounds (seconds) of the device command latency histogram's
/// buckets; +Inf is implied.
inline constexpr std::array<double, 12> kLatencyBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                           0.05,   0.1,   0.25,   0.5,   1.0,  5.0};

/// Device command latencies, Prometheus histogram style (counts per
/// bucket, not yet cumulative; the sum and the count).
struct LatencyHistogram {
    std::array<uint64_t, kLatencyBuckets.size() + 1> counts{};  ///< Per bucket; the last is +Inf.
    double sum_s = 0;     ///< Sum of every observation (seconds).
    uint64_t count = 0;   ///< Observations.
    /// Adds one command that took @p seconds.
    void observe(double seconds);
};

/// One volume's sample.
struct VolumeMetrics {
    std::string volume;                        ///< The volume name (label `volume`).
    AgentState state = AgentState::starting;   ///< The agent's state.
    uint32_t epoch = 0;                        ///< This host's key's epoch (0: no key).
    uint8_t node = 0;                          ///< This host's node id.
    std::optional<double> last_ok_age_s;       ///< Seconds since the last good check (none yet: absent).
    uint64_t fences = 0;                       ///< Entries to FENCED since the agent started.
    uint64_t checks = 0;                       ///< Checks completed.
    uint32_t check_failures = 0;               ///< Consecutive failed checks now.
    LatencyHistogram latency;                  ///< Device commands.
    std::optional<uint32_t> elector_term;      ///< The elector's term this host holds or last saw (no elector: absent).
};

/// The samples in the text format: every family once (HELP, TYPE), one
/// series per volume, label values escaped.
std::string format_metrics(const std::vector<VolumeMetrics>& volumes);

/// Writes @p text to `<dir>/nvfence_<volume>.prom` atomically (a
/// temporary file in @p dir, fsync, rename). Errc::state_io on failure.
Status write_metrics_file(const std::string& dir, const std::string& volume, const std::string& text);

}  // namespace nvfence
