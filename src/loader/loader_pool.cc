#include "loader/loader_pool.h"

#include <algorithm>

namespace joaderfs {

void LoaderPool::Start() {
  {
    MutexLock lock(mu_);
    started_ = Clock::now();
    running_.assign(threads_, std::nullopt);
  }
  workers_.reserve(threads_);
  for (unsigned i = 0; i < threads_; ++i) workers_.emplace_back([this, i] { Work(i); });
}

LoaderPool::~LoaderPool() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    urgent_.clear();
    queue_.clear();
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void LoaderPool::Submit(std::function<void()> task) {
  {
    MutexLock lock(mu_);
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
}

void LoaderPool::SubmitUrgent(std::function<void()> task) {
  {
    MutexLock lock(mu_);
    urgent_.push_back(std::move(task));
  }
  wake_.notify_one();
}

namespace {
thread_local bool on_worker = false;
}  // namespace

bool LoaderPool::OnWorkerThread() { return on_worker; }

size_t LoaderPool::queue_depth() const {
  MutexLock lock(mu_);
  return urgent_.size() + queue_.size();
}

namespace {

int64_t SecondOf(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

}  // namespace

void LoaderPool::AddBusy(Clock::time_point start, Clock::time_point end) {
  // Split at second boundaries; only the last kBusyWindow seconds are kept.
  const int64_t last = SecondOf(end);
  for (int64_t second = std::max(SecondOf(start), last - kBusyWindow + 1); second <= last;
       ++second) {
    const Clock::time_point from = std::max(start, Clock::time_point(std::chrono::seconds(second)));
    const Clock::time_point to = std::min(end, Clock::time_point(std::chrono::seconds(second + 1)));
    const size_t slot = static_cast<size_t>(second % kBusyWindow);
    if (busy_second_[slot] != second) {
      busy_second_[slot] = second;
      busy_by_second_[slot] = {};
    }
    busy_by_second_[slot] += to - from;
  }
}

double LoaderPool::busy_fraction() const {
  const Clock::time_point now = Clock::now();
  MutexLock lock(mu_);
  if (threads_ == 0 || running_.empty()) return 0;
  const int64_t first = SecondOf(now) - kBusyWindow + 1;
  const Clock::time_point since =
      std::max(started_, Clock::time_point(std::chrono::seconds(first)));
  if (now <= since) return 0;
  Clock::duration busy{};
  for (size_t i = 0; i < busy_second_.size(); ++i) {
    if (busy_second_[i] >= first) busy += busy_by_second_[i];
  }
  for (const auto& start : running_) {
    if (start) busy += now - std::max(*start, since);
  }
  const double fraction = std::chrono::duration<double>(busy).count() /
                          (std::chrono::duration<double>(now - since).count() * threads_);
  return std::min(fraction, 1.0);
}

void LoaderPool::Work(size_t index) {
  on_worker = true;
  std::optional<Clock::time_point> ran;  // when the task just run began
  for (;;) {
    std::function<void()> task;
    Clock::time_point start;
    {
      MutexLock lock(mu_);
      if (ran) {
        const Clock::time_point end = Clock::now();
        AddBusy(*ran, end);
        busy_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(end - *ran).count();
        running_[index].reset();
      }
      wake_.wait(lock, [this]() REQUIRES(mu_) {
        return stopping_ || !urgent_.empty() || !queue_.empty();
      });
      if (stopping_) return;
      auto& from = urgent_.empty() ? queue_ : urgent_;
      task = std::move(from.front());
      from.pop_front();
      start = Clock::now();
      running_[index] = start;
    }
    task();
    ran = start;
  }
}

}  // namespace joaderfs
