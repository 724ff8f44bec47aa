// The figures a stream's `status` shows (docs/design.md 2.5): its counts,
// its recent rate, and the status record itself. Plain values: not
// thread-safe; a Lane's are guarded by the manager's lock (jobs/lanes.h).

#ifndef JOADERFS_JOBS_STREAM_FIGURES_H_
#define JOADERFS_JOBS_STREAM_FIGURES_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace joaderfs {

// A stream's figures over one scope: the epoch a status names
// (`this_epoch`), or the stream's life in this daemon, across epochs and
// resumes (`total`).
struct StreamCounts {
  uint64_t delivered = 0;
  uint64_t skipped = 0;  // picks of samples that failed
  // The delivered samples by where their base image came from: the RAM
  // tier (ready, or already loading for another pick), or a load their
  // pick started that read the disk tier, read the remote tier or decoded.
  // They add up to `delivered`: a pick never delivered (its reader gone)
  // counts in none.
  uint64_t ram_hits = 0;
  uint64_t disk_hits = 0;
  uint64_t remote_hits = 0;
  uint64_t decodes = 0;
  // How long its readers' reads waited for data, reads still waiting
  // included.
  double stall_seconds = 0;

  StreamCounts& operator+=(const StreamCounts& other);
};

// A job's `status` file. Between epochs it describes the epoch that ended.
struct JobStatus {
  uint64_t epoch = 0;
  uint64_t remaining = 0;  // this epoch
  uint64_t subset_size = 0;
  uint64_t readers = 0;
  bool running = false;
  uint64_t epochs_completed = 0;
  uint32_t size = 0;
  uint32_t window = 0;
  uint64_t shared_picks = 0;
  uint32_t owner = 0;
  StreamCounts this_epoch;
  StreamCounts total;
  // RateWindow::Rate of its deliveries.
  double samples_per_s = 0;
  // "<file>: <reason>" of the latest rejected write to spec, ids or resume,
  // until a good write to that file; empty when none.
  std::string error;
  // With ranks=W: each rank's figures (the fields above add them up; epoch
  // and epochs_completed are the least of the ranks').
  std::vector<JobStatus> ranks;
};

// Deliveries over the last kSeconds, for a recent rate. Not thread-safe
// (its lane's lock guards it).
class RateWindow {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kSeconds = 10;
  void Add(Clock::time_point now, uint64_t n = 1);
  // Deliveries in the last kSeconds (the current second included) per
  // second of that window; while the first delivery is more recent than
  // that, per second since it (at least 1 s). 0 before any.
  double Rate(Clock::time_point now) const;

 private:
  static int64_t Second(Clock::time_point t);
  std::array<uint64_t, kSeconds> counts_{};
  std::array<int64_t, kSeconds> seconds_{};  // the second each count is for
  std::optional<Clock::time_point> first_;
};

inline double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace joaderfs

#endif  // JOADERFS_JOBS_STREAM_FIGURES_H_
