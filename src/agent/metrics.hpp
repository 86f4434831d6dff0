// SPDX-License-Identifier: MIT
#pragma once
/// @file metrics.hpp
/// nvfenced's metrics in the Prometheus text exposition format (version
/// 0.0.4), for node_exporter's textfile collector: one file per volume,
/// `<dir>/nvfence_<volume>.prom`, replaced atomically (written beside it,
/// then renamed) so the collector never reads half a file. nvfenced writes
/// it with `metrics_dir` set (nvfenced.conf(5)) through a MetricsPublisher:
/// Agent::metrics() gives the sample, nvfenced adds the elector's term.

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "internal/clock.hpp"
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
    /// The term (token) of this host's leadership under an elector, 0 while
    /// it does not lead (no elector: absent).
    std::optional<uint32_t> elector_term;
};

/// The samples in the text format: every family once (HELP, TYPE), one
/// series per volume, label values escaped.
std::string format_metrics(const std::vector<VolumeMetrics>& volumes);

/// Writes @p text to `<dir>/nvfence_<volume>.prom` atomically (a
/// temporary file in @p dir, mode 0644 whatever the umask so the collector's
/// user reads it, then renamed over the file: a reader sees the old text or
/// the new one). No fsync: nvfenced writes from its checking loop, which a
/// local disk's flush must not hold up; after a crash the file may hold an
/// older sample. Errc::state_io on failure.
Status write_metrics_file(const std::string& dir, const std::string& volume, const std::string& text);

/// Writes one volume's metrics after the checks, at most once per period:
/// a sample is written when something changed since the last write (a
/// check completed, the state changed: the caller's change mark moved) and
/// the period has passed since the last attempt; a change inside the period
/// is written once it has (until_due() tells the caller's loop when). A
/// failed write is logged once, not per check, until a write works again
/// (logged too); it never stops anything else.
class MetricsPublisher {
public:
    /// Writes the text (write_metrics_file in nvfenced).
    using Writer = std::function<Status(const std::string& text)>;
    /// Logs one line (false: a failure).
    using Log = std::function<void(bool ok, const std::string& line)>;
    /// The least time between two writes.
    static constexpr Clock::Ms kDefaultPeriod{1000};

    /// @p where names the file in the log lines.
    MetricsPublisher(std::string where, Writer write, Log log, Clock::Ms period = kDefaultPeriod);
    /// After every check or state change: writes @p sample() when due.
    /// @p mark: any number that changes whenever there is something new to
    /// write (nvfenced: checks + state changes).
    void publish(Clock::TimePoint now, uint64_t mark, const std::function<VolumeMetrics()>& sample);
    /// Writes @p m now, whatever the period (the last sample, at stop).
    void write_now(const VolumeMetrics& m);
    /// Until a change held back by the period is due (0: now; max: none).
    Clock::Ms until_due(Clock::TimePoint now) const;
    /// Writes attempted.
    uint64_t writes() const { return writes_; }

private:
    std::string where_;
    Writer write_;
    Log log_;
    Clock::Ms period_;
    std::optional<Clock::TimePoint> last_attempt_;
    std::optional<uint64_t> written_mark_;
    uint64_t mark_ = 0;
    uint64_t writes_ = 0;
    bool failing_ = false;
};

}  // namespace nvfence
