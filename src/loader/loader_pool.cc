#include "loader/loader_pool.h"

namespace joaderfs {

void LoaderPool::Start() {
  workers_.reserve(threads_);
  for (unsigned i = 0; i < threads_; ++i) workers_.emplace_back([this] { Work(); });
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

void LoaderPool::Work() {
  on_worker = true;
  for (;;) {
    std::function<void()> task;
    {
      MutexLock lock(mu_);
      wake_.wait(lock, [this]() REQUIRES(mu_) {
        return stopping_ || !urgent_.empty() || !queue_.empty();
      });
      if (stopping_) return;
      auto& from = urgent_.empty() ? queue_ : urgent_;
      task = std::move(from.front());
      from.pop_front();
    }
    const auto start = std::chrono::steady_clock::now();
    task();
    busy_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now() - start)
                    .count();
  }
}

}  // namespace joaderfs
