#include "common/rate_limited_log.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

namespace joaderfs {
namespace {

using std::chrono::seconds;

TEST(RateLimitedLogTest, OneLinePerCausePerInterval) {
  RateLimitedLog log(seconds(10));
  const auto t0 = RateLimitedLog::Clock::time_point();
  uint64_t suppressed = 99;
  EXPECT_TRUE(log.Admit("enospc", t0, &suppressed));
  EXPECT_EQ(suppressed, 0u);
  for (int i = 1; i <= 694; ++i) {
    EXPECT_FALSE(log.Admit("enospc", t0 + seconds(i % 10), &suppressed));
  }
  // Another cause is not held back by the first.
  EXPECT_TRUE(log.Admit("corrupt", t0 + seconds(5), &suppressed));
  EXPECT_EQ(suppressed, 0u);
  EXPECT_TRUE(log.Admit("enospc", t0 + seconds(10), &suppressed));
  EXPECT_EQ(suppressed, 694u);
  // The count starts again after a report.
  EXPECT_FALSE(log.Admit("enospc", t0 + seconds(11), &suppressed));
  EXPECT_TRUE(log.Admit("enospc", t0 + seconds(25), &suppressed));
  EXPECT_EQ(suppressed, 1u);
}

TEST(RateLimitedLogTest, WarnLogsTheFirstLineAndTheCountWithTheNext) {
  std::ostringstream out;
  auto logger = std::make_shared<spdlog::logger>(
      "test", std::make_shared<spdlog::sinks::ostream_sink_st>(out));
  logger->set_pattern("%v");
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  RateLimitedLog log(std::chrono::milliseconds(200));
  for (int i = 0; i < 100; ++i) log.Warn("disk", "write {} failed", i);
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  log.Warn("disk", "write {} failed", 100);
  spdlog::set_default_logger(previous);
  EXPECT_EQ(out.str(),
            "write 0 failed\nwrite 100 failed (99 more like this since the last report)\n");
}

}  // namespace
}  // namespace joaderfs
