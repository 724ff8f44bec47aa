// RateWindow (jobs/stream_figures.h) and /metrics rendering (fs/render.h).
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "common/latency_histogram.h"
#include "fs/render.h"
#include "jobs/stream_figures.h"

namespace joaderfs {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(RateWindow, RecentDeliveriesPerSecond) {
  RateWindow rate;
  const auto t0 = RateWindow::Clock::time_point(seconds(1000));
  EXPECT_EQ(rate.Rate(t0), 0);
  // 20 deliveries over the first 2 s: per second since the first (>= 1 s).
  for (int i = 0; i < 20; ++i) rate.Add(t0 + milliseconds(100 * i));
  EXPECT_DOUBLE_EQ(rate.Rate(t0 + seconds(2)), 10);
  EXPECT_DOUBLE_EQ(rate.Rate(t0 + seconds(9)), 20.0 / 9);
  // The window is the current second and the 9 before: per 10 s, and
  // older seconds drop out.
  EXPECT_DOUBLE_EQ(rate.Rate(t0 + seconds(10)), 1);  // second 1000 left
  EXPECT_DOUBLE_EQ(rate.Rate(t0 + seconds(11)), 0);
  // A slot reused for a later second starts from 0.
  rate.Add(t0 + seconds(30), 5);
  EXPECT_DOUBLE_EQ(rate.Rate(t0 + seconds(30)), 0.5);
}

TEST(RenderMetrics, EscapesLabelsAndListsRanks) {
  MountStats stats;
  stats.delivered = 7;
  stats.stall_seconds = 1.5;
  JobStatus plain;
  plain.total.stall_seconds = 0.25;
  plain.total.delivered = 3;
  JobStatus ranked;
  ranked.ranks.resize(2);
  ranked.ranks[1].total.decodes = 4;
  stats.jobs.emplace_back("a\"b\\c\nd", plain);
  stats.jobs.emplace_back("r", ranked);
  const std::string text = RenderMetrics(stats, "/mnt/x\"y");
  EXPECT_NE(text.find("# TYPE joaderfs_delivered_total counter\n"
                      "joaderfs_delivered_total{mount=\"/mnt/x\\\"y\"} 7\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("joaderfs_stall_seconds_total{mount=\"/mnt/x\\\"y\"} 1.5\n"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find("joaderfs_job_stall_seconds_total{mount=\"/mnt/x\\\"y\",job=\"a\\\"b\\\\c\\nd\"}"
                " 0.25\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("joaderfs_job_decodes_total{mount=\"/mnt/x\\\"y\",job=\"r\",rank=\"1\"} 4\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("job=\"r\"}"), std::string::npos) << text;
}

// Every number of /stats, mount-wide and per job, has its /metrics series
// (the one whose HELP names its key) with the same value, and no series
// names a key /stats lacks.
TEST(RenderMetrics, HasASeriesForEveryStatsFigure) {
  MountStats stats;
  // Distinct values, so that a series showing another figure is caught.
  stats.cache.decoded = 11;
  stats.cache.hits = 12;
  stats.cache.misses = 13;
  stats.cache.failed = 14;
  stats.cache.retries = 15;
  stats.cache.healed = 16;
  stats.disk.hits = 17;
  stats.decode_busy_seconds = 2.5;
  stats.decode_busy_fraction = 0.75;
  stats.scan_skips.revisits = 18;
  stats.shard_skips.damaged = 19;
  stats.planner.coupled_picks = 20;
  JobStatus job;
  job.epoch = 2;
  job.this_epoch.delivered = 21;
  job.this_epoch.ram_hits = 22;
  job.total.delivered = 23;
  job.total.decodes = 24;
  job.total.stall_seconds = 0.5;
  stats.jobs.emplace_back("j", job);
  const nlohmann::json json = nlohmann::json::parse(RenderStats(stats));
  std::map<std::string, std::string> figures;  // /stats key -> its value as written
  const nlohmann::json flat = json.flatten();
  for (const auto& [key, value] : flat.items()) {
    if (value.is_number()) figures[key] = value.dump();
  }
  const std::string text = RenderMetrics(stats, "/m");
  std::map<std::string, std::string> series;  // metric name -> /stats keys it shows
  std::map<std::string, std::string> values;  // metric name -> the value of its series
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("# HELP ")) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      // The process's figures and the latency histograms are not /stats
      // ones (RenderMetricsProcess, RenderMetricsLatency).
      if (name == "joaderfs_build_info" || name.starts_with("process_") ||
          text.find("# TYPE " + name + " histogram") != std::string::npos) {
        continue;
      }
      const size_t at = line.find("(/stats ");
      ASSERT_NE(at, std::string::npos) << line;
      series[name] = line.substr(at + 8, line.find_first_of(";)", at) - at - 8);
    } else if (!line.starts_with("#")) {
      values[line.substr(0, line.find('{'))] = line.substr(line.rfind(' ') + 1);
    }
  }
  std::set<std::string> shown;
  for (const auto& [name, keys] : series) {
    std::istringstream names(keys);
    for (std::string key; names >> key;) {
      if (key == "=") continue;
      const std::string path =
          "/" + std::regex_replace(std::regex_replace(key, std::regex("ID"), "j"),
                                   std::regex("\\."), "/");
      ASSERT_TRUE(figures.count(path)) << name << " names " << key << ", which /stats lacks";
      EXPECT_EQ(values[name], figures[path]) << name << " vs /stats " << key;
      shown.insert(path);
    }
  }
  for (const auto& [key, value] : figures) EXPECT_TRUE(shown.count(key)) << key << " has no series";
  EXPECT_EQ(figures["/decode_busy_seconds"], "2.5");
  EXPECT_EQ(figures["/jobs/j/total/decodes"], "24");
  EXPECT_EQ(figures["/jobs/j/decodes"], "24");    // the older name of total.decodes
  EXPECT_EQ(figures["/jobs/j/delivered"], "21");  // of this_epoch.delivered
}

TEST(RenderMetricsProcess, BuildInfoMemoryAndStartTime) {
  const std::string text = RenderMetrics(MountStats{}, "/m");
  EXPECT_NE(text.find("joaderfs_build_info{mount=\"/m\",version=\"" JOADERFS_VERSION "\"} 1\n"),
            std::string::npos)
      << text;
  const auto value = [&](const std::string& name) {
    const size_t at = text.find("\n" + name + "{");
    return at == std::string::npos ? -1.0 : std::stod(text.substr(text.find("} ", at) + 2));
  };
  EXPECT_GT(value("process_resident_memory_bytes"), 1 << 20);
  const double start = value("process_start_time_seconds");
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_GT(start, now - 3600) << "started within the hour";
  EXPECT_LE(start, now + 1);
}

TEST(RenderMetricsLatency, HistogramsAreCumulativeWithTheirCountAndSum) {
  LatencyHistogram h;
  for (const double seconds : {0.00005, 0.002, 0.002, 0.3, 20.0}) h.Observe(seconds);
  MountStats stats;
  stats.cache.decode_latency = h.Take();
  const std::string text = RenderMetrics(stats, "/m");
  const auto series = [&](const std::string& line_start) {
    const size_t at = text.find("\n" + line_start);
    EXPECT_NE(at, std::string::npos) << line_start;
    return at == std::string::npos ? -1.0 : std::stod(text.substr(text.find("} ", at) + 2));
  };
  EXPECT_NE(text.find("# TYPE joaderfs_decode_latency_seconds histogram"), std::string::npos);
  EXPECT_EQ(series("joaderfs_decode_latency_seconds_bucket{mount=\"/m\",le=\"0.0001\"}"), 1);
  EXPECT_EQ(series("joaderfs_decode_latency_seconds_bucket{mount=\"/m\",le=\"0.0025\"}"), 3);
  EXPECT_EQ(series("joaderfs_decode_latency_seconds_bucket{mount=\"/m\",le=\"0.5\"}"), 4);
  EXPECT_EQ(series("joaderfs_decode_latency_seconds_bucket{mount=\"/m\",le=\"10\"}"), 4);
  EXPECT_EQ(series("joaderfs_decode_latency_seconds_bucket{mount=\"/m\",le=\"+Inf\"}"), 5);
  EXPECT_EQ(series("joaderfs_decode_latency_seconds_count{mount=\"/m\"}"), 5);
  EXPECT_NEAR(series("joaderfs_decode_latency_seconds_sum{mount=\"/m\"}"), 20.30405, 1e-6);
  EXPECT_EQ(series("joaderfs_stream_read_wait_seconds_count{mount=\"/m\"}"), 0);
}

}  // namespace
}  // namespace joaderfs
