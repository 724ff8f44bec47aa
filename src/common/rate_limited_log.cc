#include "common/rate_limited_log.h"

namespace joaderfs {

bool RateLimitedLog::Admit(std::string_view cause, Clock::time_point now, uint64_t* suppressed) {
  MutexLock lock(mu_);
  auto it = causes_.find(cause);
  if (it == causes_.end()) {
    causes_.emplace(std::string(cause), Cause{now, 0});
    *suppressed = 0;
    return true;
  }
  Cause& c = it->second;
  if (now - c.last < interval_) {
    ++c.suppressed;
    return false;
  }
  *suppressed = std::exchange(c.suppressed, 0);
  c.last = now;
  return true;
}

RateLimitedLog& Warnings() {
  static RateLimitedLog* const log = new RateLimitedLog();
  return *log;
}

}  // namespace joaderfs
