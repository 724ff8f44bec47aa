// A latency histogram for /metrics: counts of observations at or under each
// of a fixed set of bounds (100 us to 10 s, 1-2.5-5 a decade), their sum and
// their count, as Prometheus's histogram type wants them. Observing is a few
// relaxed atomic adds: any thread, no lock, on the data path.

#ifndef JOADERFS_COMMON_LATENCY_HISTOGRAM_H_
#define JOADERFS_COMMON_LATENCY_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace joaderfs {

class LatencyHistogram {
 public:
  static constexpr std::array<double, 16> kBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                     0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                                     1,      2.5,     5,      10};

  // Cumulative counts per bound (Prometheus's `le`), then +Inf's: `count`.
  struct Snapshot {
    std::array<uint64_t, kBounds.size()> at_or_under{};
    uint64_t count = 0;
    double sum_seconds = 0;
  };

  void Observe(double seconds) {
    size_t bucket = 0;
    while (bucket < kBounds.size() && seconds > kBounds[bucket]) ++bucket;
    counts_[bucket].fetch_add(1, std::memory_order_relaxed);
    sum_nanos_.fetch_add(static_cast<uint64_t>(seconds > 0 ? seconds * 1e9 : 0),
                         std::memory_order_relaxed);
  }
  void Observe(std::chrono::steady_clock::duration d) {
    Observe(std::chrono::duration<double>(d).count());
  }

  Snapshot Take() const {
    Snapshot s;
    uint64_t running = 0;
    for (size_t i = 0; i < kBounds.size(); ++i) {
      running += counts_[i].load(std::memory_order_relaxed);
      s.at_or_under[i] = running;
    }
    s.count = running + counts_[kBounds.size()].load(std::memory_order_relaxed);
    s.sum_seconds = static_cast<double>(sum_nanos_.load(std::memory_order_relaxed)) / 1e9;
    return s;
  }

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> counts_{};
  std::atomic<uint64_t> sum_nanos_{0};
};

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_LATENCY_HISTOGRAM_H_
