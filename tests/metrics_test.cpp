// SPDX-License-Identifier: MIT
// nvfenced's Prometheus metrics (src/agent/metrics.hpp): the text format
// and an agent's sample. tests/metrics/parse_metrics.py parses the output
// of a running agent with Debian's python3-prometheus-client.

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "agent/metrics.hpp"
#include "fake_passthru.hpp"

namespace nvfence {
namespace {

TEST(MetricsTest, HistogramBucketsAreUpperBoundsAndInfCatchesTheRest) {
    LatencyHistogram h;
    h.observe(0.0005);  // le 0.0005 (a bound is inclusive)
    h.observe(0.0006);  // le 0.001
    h.observe(7.0);     // +Inf
    EXPECT_EQ(h.counts[0], 1u);
    EXPECT_EQ(h.counts[1], 1u);
    EXPECT_EQ(h.counts.back(), 1u);
    EXPECT_EQ(h.count, 3u);
    EXPECT_DOUBLE_EQ(h.sum_s, 7.0011);
}

TEST(MetricsTest, FormatHasEveryFamilyOnceAndCumulativeBuckets) {
    VolumeMetrics v;
    v.volume = "vol-0123";
    v.state = AgentState::holder;
    v.epoch = 41;
    v.node = 2;
    v.last_ok_age_s = 0.25;
    v.fences = 1;
    v.checks = 9;
    v.latency.observe(0.002);
    v.latency.observe(0.002);
    v.elector_term = 41;
    VolumeMetrics w;
    w.volume = "we\"ird\\name";
    const std::string t = format_metrics({v, w});
    EXPECT_NE(t.find("nvfence_state{volume=\"vol-0123\",state=\"HOLDER\"} 1\n"), std::string::npos) << t;
    EXPECT_NE(t.find("nvfence_state{volume=\"vol-0123\",state=\"FENCED\"} 0\n"), std::string::npos);
    EXPECT_NE(t.find("nvfence_key_epoch{volume=\"vol-0123\"} 41\n"), std::string::npos);
    EXPECT_NE(t.find("nvfence_last_good_check_age_seconds{volume=\"vol-0123\"} 0.25\n"), std::string::npos);
    EXPECT_NE(t.find("nvfence_fences_total{volume=\"vol-0123\"} 1\n"), std::string::npos);
    EXPECT_NE(t.find("nvfence_device_command_seconds_bucket{volume=\"vol-0123\",le=\"0.001\"} 0\n"),
              std::string::npos);
    EXPECT_NE(t.find("nvfence_device_command_seconds_bucket{volume=\"vol-0123\",le=\"0.0025\"} 2\n"),
              std::string::npos);
    EXPECT_NE(t.find("nvfence_device_command_seconds_bucket{volume=\"vol-0123\",le=\"+Inf\"} 2\n"),
              std::string::npos);
    EXPECT_NE(t.find("nvfence_device_command_seconds_count{volume=\"vol-0123\"} 2\n"), std::string::npos);
    EXPECT_NE(t.find("nvfence_elector_term{volume=\"vol-0123\"} 41\n"), std::string::npos);
    EXPECT_NE(t.find("{volume=\"we\\\"ird\\\\name\"}"), std::string::npos) << "label values escaped";
    // A volume with no good check and no elector has no such series.
    EXPECT_EQ(t.find("nvfence_last_good_check_age_seconds{volume=\"we"), std::string::npos);
    EXPECT_EQ(t.find("nvfence_elector_term{volume=\"we"), std::string::npos);
    size_t types = 0;
    for (size_t p = t.find("# TYPE nvfence_state "); p != std::string::npos; p = t.find("# TYPE nvfence_state ", p + 1))
        ++types;
    EXPECT_EQ(types, 1u);
    // The text the parser test reads (tests/metrics/parse_metrics.py).
    if (const char* out = std::getenv("NVFENCE_METRICS_SAMPLE")) std::ofstream(out) << t;
}

TEST(MetricsTest, FileIsReplacedAtomicallyAndNamesAreRefused) {
    test::TempDir tmp;
    ASSERT_TRUE(write_metrics_file(tmp.path(), "vol-1", "a 1\n"));
    ASSERT_TRUE(write_metrics_file(tmp.path(), "vol-1", "a 2\n"));
    std::ifstream in(tmp.path() + "/nvfence_vol-1.prom");
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(ss.str(), "a 2\n");
    EXPECT_FALSE(std::ifstream(tmp.path() + "/nvfence_vol-1.prom.tmp").good());
    EXPECT_FALSE(write_metrics_file(tmp.path(), "../x", "a 1\n"));
    EXPECT_FALSE(write_metrics_file(tmp.path(), "", "a 1\n"));
    EXPECT_FALSE(write_metrics_file(tmp.path() + "/missing", "vol-1", "a 1\n"));
}

TEST(MetricsTest, FileIsReadableByOthersWhateverTheUmask) {
    test::TempDir tmp;
    const mode_t old = ::umask(0077);  // nvfenced@.service's UMask
    ASSERT_TRUE(write_metrics_file(tmp.path(), "vol-1", "a 1\n"));
    ::umask(old);
    struct stat st {};
    ASSERT_EQ(::stat((tmp.path() + "/nvfence_vol-1.prom").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0644u);
}

// The publisher's clock, writes and log lines.
struct PublisherRig {
    Clock::TimePoint t0 = std::chrono::steady_clock::now();
    std::vector<std::string> texts, lines;
    Status next = Ok{};
    MetricsPublisher pub{"/m/nvfence_v.prom", [this](const std::string& t) {
                             texts.push_back(t);
                             return next;
                         },
                         [this](bool ok, const std::string& l) { lines.push_back((ok ? "ok: " : "fail: ") + l); }};
    VolumeMetrics sample(uint64_t checks) {
        VolumeMetrics m;
        m.volume = "v";
        m.checks = checks;
        return m;
    }
    void at(int64_t ms, uint64_t mark) {
        pub.publish(t0 + std::chrono::milliseconds(ms), mark, [&] { return sample(mark); });
    }
};

TEST(MetricsTest, PublisherWritesAfterAChangeAtMostOncePerSecond) {
    PublisherRig r;
    r.at(0, 1);
    ASSERT_EQ(r.texts.size(), 1u) << "the first sample at once";
    r.at(100, 1);
    EXPECT_EQ(r.texts.size(), 1u) << "nothing new";
    EXPECT_EQ(r.pub.until_due(r.t0 + std::chrono::milliseconds(100)), Clock::Ms::max());
    r.at(200, 2);  // a check 200 ms later: held back
    r.at(400, 3);
    EXPECT_EQ(r.texts.size(), 1u);
    EXPECT_EQ(r.pub.until_due(r.t0 + std::chrono::milliseconds(400)), Clock::Ms(600));
    r.at(999, 3);
    EXPECT_EQ(r.texts.size(), 1u);
    r.at(1000, 3);  // due: the newest sample
    ASSERT_EQ(r.texts.size(), 2u);
    EXPECT_NE(r.texts[1].find("nvfence_checks_total{volume=\"v\"} 3\n"), std::string::npos) << r.texts[1];
    r.at(5000, 4);  // long after: at once
    EXPECT_EQ(r.texts.size(), 3u);
    EXPECT_TRUE(r.lines.empty());
}

TEST(MetricsTest, PublisherLogsAFailingWriteOnceAndTheRecovery) {
    PublisherRig r;
    r.next = make_error_code(Errc::state_io);
    for (int i = 0; i < 5; ++i) r.at(i * 1000, static_cast<uint64_t>(i + 1));
    EXPECT_EQ(r.texts.size(), 5u) << "it keeps trying";
    ASSERT_EQ(r.lines.size(), 1u) << "logged once";
    EXPECT_EQ(r.lines[0].rfind("fail: metrics: cannot write /m/nvfence_v.prom: ", 0), 0u) << r.lines[0];
    r.next = Ok{};
    r.at(6000, 7);
    r.at(7000, 8);
    ASSERT_EQ(r.lines.size(), 2u);
    EXPECT_EQ(r.lines[1], "ok: metrics: /m/nvfence_v.prom written again");
    r.next = make_error_code(Errc::state_io);
    r.at(8000, 9);
    EXPECT_EQ(r.lines.size(), 3u) << "a new failure after a recovery is logged again";
}

TEST(MetricsTest, PublisherWritesTheLastSampleAtStopWhateverThePeriod) {
    PublisherRig r;
    r.at(0, 1);
    VolumeMetrics m = r.sample(1);
    m.state = AgentState::stopping;
    r.pub.write_now(m);
    ASSERT_EQ(r.texts.size(), 2u);
    EXPECT_NE(r.texts[1].find("nvfence_state{volume=\"v\",state=\"STOPPING\"} 1\n"), std::string::npos);
}

}  // namespace
}  // namespace nvfence
