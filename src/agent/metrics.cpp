// SPDX-License-Identifier: MIT
#include "agent/metrics.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <utility>

#include "nvfence/error.hpp"

namespace nvfence {

namespace {

constexpr AgentState kStates[] = {AgentState::starting, AgentState::standby, AgentState::holder,
                                  AgentState::fenced,   AgentState::stopping, AgentState::waiting,
                                  AgentState::watching};

// A label value: backslash, double quote and newline escaped.
std::string label(const std::string& v) {
    std::string out;
    for (char c : v) {
        if (c == '\\') out += "\\\\";
        else if (c == '"') out += "\\\"";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
    return out;
}

std::string num(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
}

void family(std::string& out, const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void series(std::string& out, const char* name, const VolumeMetrics& v, const std::string& value,
            const std::string& extra = {}) {
    out += std::string(name) + "{volume=\"" + label(v.volume) + "\"" + extra + "} " + value + "\n";
}

void histogram(std::string& out, const std::vector<VolumeMetrics>& vols) {
    const char* n = "nvfence_device_command_seconds";
    family(out, n, "histogram", "Time each reservation or identify command took on the device.");
    for (const auto& v : vols) {
        uint64_t cum = 0;
        for (size_t i = 0; i < v.latency.counts.size(); ++i) {
            cum += v.latency.counts[i];
            const std::string le = i < kLatencyBuckets.size() ? num(kLatencyBuckets[i]) : "+Inf";
            series(out, "nvfence_device_command_seconds_bucket", v, std::to_string(cum), ",le=\"" + le + "\"");
        }
        series(out, "nvfence_device_command_seconds_sum", v, num(v.latency.sum_s));
        series(out, "nvfence_device_command_seconds_count", v, std::to_string(v.latency.count));
    }
}

}  // namespace

void LatencyHistogram::observe(double seconds) {
    size_t i = 0;
    while (i < kLatencyBuckets.size() && seconds > kLatencyBuckets[i]) ++i;
    ++counts[i];
    sum_s += seconds;
    ++count;
}

std::string format_metrics(const std::vector<VolumeMetrics>& vols) {
    std::string out;
    family(out, "nvfence_state", "gauge", "1 for the agent's current state, 0 for the others.");
    for (const auto& v : vols)
        for (auto s : kStates)
            series(out, "nvfence_state", v, v.state == s ? "1" : "0",
                   std::string(",state=\"") + agent_state_name(s) + "\"");
    family(out, "nvfence_key_epoch", "gauge", "Epoch of this host's reservation key (0: none).");
    for (const auto& v : vols) series(out, "nvfence_key_epoch", v, std::to_string(v.epoch));
    family(out, "nvfence_node_id", "gauge", "This host's node id.");
    for (const auto& v : vols) series(out, "nvfence_node_id", v, std::to_string(v.node));
    family(out, "nvfence_last_good_check_age_seconds", "gauge", "Seconds since the last check that read the device.");
    for (const auto& v : vols)
        if (v.last_ok_age_s) series(out, "nvfence_last_good_check_age_seconds", v, num(*v.last_ok_age_s));
    family(out, "nvfence_fences_total", "counter", "Times the agent went FENCED since it started.");
    for (const auto& v : vols) series(out, "nvfence_fences_total", v, std::to_string(v.fences));
    family(out, "nvfence_checks_total", "counter", "Checks completed since the agent started.");
    for (const auto& v : vols) series(out, "nvfence_checks_total", v, std::to_string(v.checks));
    family(out, "nvfence_check_failures", "gauge", "Consecutive checks that could not read the device.");
    for (const auto& v : vols) series(out, "nvfence_check_failures", v, std::to_string(v.check_failures));
    histogram(out, vols);
    family(out, "nvfence_elector_term", "gauge", "The elector's term (the key's epoch under an elector).");
    for (const auto& v : vols)
        if (v.elector_term) series(out, "nvfence_elector_term", v, std::to_string(*v.elector_term));
    return out;
}

Status write_metrics_file(const std::string& dir, const std::string& volume, const std::string& text) {
    if (volume.empty() || volume.front() == '.' || volume.find('/') != std::string::npos)
        return make_error_code(Errc::invalid_argument);
    const std::string path = dir + "/nvfence_" + volume + ".prom";
    const std::string tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return make_error_code(Errc::state_io);
    size_t off = 0;
    // nvfenced runs with UMask=0077; node_exporter is another user.
    bool ok = ::fchmod(fd, 0644) == 0;
    while (ok && off < text.size()) {
        const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
        if (n < 0 && errno == EINTR) continue;
        ok = n > 0;
        if (ok) off += static_cast<size_t>(n);
    }
    ok = (::close(fd) == 0) && ok;
    if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
        ::unlink(tmp.c_str());
        return make_error_code(Errc::state_io);
    }
    return Ok{};
}

MetricsPublisher::MetricsPublisher(std::string where, Writer write, Log log, Clock::Ms period)
    : where_(std::move(where)), write_(std::move(write)), log_(std::move(log)), period_(period) {}

void MetricsPublisher::publish(Clock::TimePoint now, uint64_t mark, const std::function<VolumeMetrics()>& sample) {
    mark_ = mark;
    if (written_mark_ == mark_ || until_due(now) > Clock::Ms(0)) return;
    last_attempt_ = now;
    written_mark_ = mark_;
    write_now(sample());
}

void MetricsPublisher::write_now(const VolumeMetrics& m) {
    ++writes_;
    const Status st = write_(format_metrics({m}));
    if (!st && !failing_)
        log_(false, "metrics: cannot write " + where_ + ": " + st.error().message() +
                        " (fencing goes on; logged once until a write works again)");
    else if (st && failing_)
        log_(true, "metrics: " + where_ + " written again");
    failing_ = !st;
}

Clock::Ms MetricsPublisher::until_due(Clock::TimePoint now) const {
    if (written_mark_ == mark_) return Clock::Ms::max();
    if (!last_attempt_) return Clock::Ms(0);
    const auto left = std::chrono::ceil<Clock::Ms>(*last_attempt_ + period_ - now);
    return left > Clock::Ms(0) ? left : Clock::Ms(0);
}

}  // namespace nvfence
