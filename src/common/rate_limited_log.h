// Warnings that may repeat thousands of times (a full disk, a folder of bad
// images) as at most one log line per cause per interval. The first line of
// a cause is logged at once; later ones within the interval are counted, and
// the next line logged for that cause says how many were left out.
//
// Thread-safe. Causes are short strings chosen by the caller ("disk write:
// no space", or per user "job created, uid 1000"), never user text: each
// distinct cause holds a map entry for the life of the object.

#ifndef JOADERFS_COMMON_RATE_LIMITED_LOG_H_
#define JOADERFS_COMMON_RATE_LIMITED_LOG_H_

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "common/ranked_mutex.h"

namespace joaderfs {

class RateLimitedLog {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RateLimitedLog(Clock::duration interval = std::chrono::seconds(10))
      : interval_(interval) {}
  RateLimitedLog(const RateLimitedLog&) = delete;
  RateLimitedLog& operator=(const RateLimitedLog&) = delete;

  // Whether a line for `cause` may be logged at `now`; if so, *suppressed
  // gets the number of lines for that cause left out since the last one.
  bool Admit(std::string_view cause, Clock::time_point now, uint64_t* suppressed);

  // spdlog::log(level, format, args...) if `cause` is admitted now, with
  // the count of lines left out before it appended.
  template <typename... Args>
  void Log(spdlog::level::level_enum level, std::string_view cause,
           spdlog::format_string_t<Args...> format, Args&&... args) {
    uint64_t suppressed = 0;
    if (!Admit(cause, Clock::now(), &suppressed)) return;
    const std::string line = fmt::format(format, std::forward<Args>(args)...);
    if (suppressed == 0) {
      spdlog::log(level, "{}", line);
    } else {
      spdlog::log(level, "{} ({} more like this since the last report)", line, suppressed);
    }
  }

  template <typename... Args>
  void Warn(std::string_view cause, spdlog::format_string_t<Args...> format, Args&&... args) {
    Log(spdlog::level::warn, cause, format, std::forward<Args>(args)...);
  }

 private:
  struct Cause {
    Clock::time_point last;
    uint64_t suppressed = 0;
  };

  const Clock::duration interval_;
  Mutex mu_;
  std::map<std::string, Cause, std::less<>> causes_ GUARDED_BY(mu_);
};

// The process's instance, for warnings from any part of the daemon. Never
// destroyed, so that threads still running at exit may log.
RateLimitedLog& Warnings();

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_RATE_LIMITED_LOG_H_
