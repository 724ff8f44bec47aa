// A fixed pool of decode threads fed from two FIFO queues: urgent tasks
// (short ones a reader waits for: rendering a delivery from a cached image)
// run before the others (decodes, disk reads). Tasks are type-erased so the
// cache decides what a load means.
//
// Thread-safe. Threads start with Start(), so that a daemon can build the
// pool before it forks; tasks submitted earlier wait. The destructor drops
// the tasks not yet started and waits for the running ones.

#ifndef JOADERFS_LOADER_LOADER_POOL_H_
#define JOADERFS_LOADER_LOADER_POOL_H_

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/ranked_mutex.h"

namespace joaderfs {

class LoaderPool {
 public:
  explicit LoaderPool(unsigned threads) : threads_(threads) {}
  ~LoaderPool();
  LoaderPool(const LoaderPool&) = delete;
  LoaderPool& operator=(const LoaderPool&) = delete;

  void Start();
  void Submit(std::function<void()> task);
  // Runs `task` before every task of Submit() not yet started.
  void SubmitUrgent(std::function<void()> task);
  // True on the pool's threads (of any pool).
  static bool OnWorkerThread();

  unsigned threads() const { return threads_; }
  size_t queue_depth() const;
  // Seconds the threads spent running tasks, summed over threads.
  double busy_seconds() const { return busy_ns_.load() / 1e9; }
  // The share of the threads' time spent running tasks over the last
  // kBusyWindow seconds (the current second included; since Start() while
  // that is more recent), tasks still running included: 0 idle, 1 every
  // thread busy all along. Near 1 the decoder is the bound, whatever the
  // readers' stall.
  double busy_fraction() const;
  static constexpr int kBusyWindow = 10;

 private:
  using Clock = std::chrono::steady_clock;
  void Work(size_t index);
  // Adds [start, end) to the per-second busy time.
  void AddBusy(Clock::time_point start, Clock::time_point end) REQUIRES(mu_);

  const unsigned threads_;
  mutable Mutex mu_;
  std::condition_variable_any wake_;
  std::deque<std::function<void()>> urgent_ GUARDED_BY(mu_);
  std::deque<std::function<void()>> queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> busy_ns_{0};
  // Busy time of the last kBusyWindow seconds: slot i holds second
  // busy_second_[i] (seconds of Clock, modulo kBusyWindow).
  Clock::time_point started_ GUARDED_BY(mu_);
  std::array<Clock::duration, kBusyWindow> busy_by_second_ GUARDED_BY(mu_){};
  std::array<int64_t, kBusyWindow> busy_second_ GUARDED_BY(mu_){};
  // When each thread's running task began, if one runs.
  std::vector<std::optional<Clock::time_point>> running_ GUARDED_BY(mu_);
  std::vector<std::thread> workers_;
};

}  // namespace joaderfs

#endif  // JOADERFS_LOADER_LOADER_POOL_H_
