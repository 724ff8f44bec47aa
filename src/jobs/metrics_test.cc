// RateWindow (jobs/lane.h) and /metrics rendering (fs/render.h).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "fs/render.h"
#include "jobs/lane.h"

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
  plain.stall_seconds = 0.25;
  plain.delivered_total = 3;
  JobStatus ranked;
  ranked.ranks.resize(2);
  ranked.ranks[1].decodes = 4;
  stats.jobs.emplace_back("a\"b\\c\nd", plain);
  stats.jobs.emplace_back("r", ranked);
  const std::string text = RenderMetrics(stats);
  EXPECT_NE(text.find("# TYPE joaderfs_delivered_total counter\njoaderfs_delivered_total 7\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("joaderfs_stall_seconds_total 1.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("joaderfs_job_stall_seconds_total{job=\"a\\\"b\\\\c\\nd\"} 0.25\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("joaderfs_job_decodes_total{job=\"r\",rank=\"1\"} 4\n"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("{job=\"r\"}"), std::string::npos) << text;
}

}  // namespace
}  // namespace joaderfs
