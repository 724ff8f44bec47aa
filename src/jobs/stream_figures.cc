#include "jobs/stream_figures.h"

#include <algorithm>

namespace joaderfs {

StreamCounts& StreamCounts::operator+=(const StreamCounts& other) {
  delivered += other.delivered;
  skipped += other.skipped;
  ram_hits += other.ram_hits;
  disk_hits += other.disk_hits;
  remote_hits += other.remote_hits;
  decodes += other.decodes;
  stall_seconds += other.stall_seconds;
  return *this;
}

void RateWindow::Add(Clock::time_point now, uint64_t n) {
  const int64_t second = Second(now);
  const size_t slot = static_cast<size_t>(second % kSeconds);
  if (seconds_[slot] != second) {
    seconds_[slot] = second;
    counts_[slot] = 0;
  }
  counts_[slot] += n;
  if (!first_) first_ = now;
}

double RateWindow::Rate(Clock::time_point now) const {
  if (!first_) return 0;
  const int64_t second = Second(now);
  uint64_t sum = 0;
  for (int i = 0; i < kSeconds; ++i) {
    if (seconds_[i] > second - kSeconds && seconds_[i] <= second) sum += counts_[i];
  }
  const double span = std::clamp(Seconds(now - *first_), 1.0, double{kSeconds});
  return static_cast<double>(sum) / span;
}

int64_t RateWindow::Second(Clock::time_point t) {
  // Shifted so that no real second is 0, the slots' initial value.
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count() + 1;
}

}  // namespace joaderfs
