#include "loader/loader_pool.h"

namespace joaderfs {

void LoaderPool::Start() {
  workers_.reserve(threads_);
  for (unsigned i = 0; i < threads_; ++i) workers_.emplace_back([this] { Work(); });
}

LoaderPool::~LoaderPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    queue_.clear();
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void LoaderPool::Submit(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
}

size_t LoaderPool::queue_depth() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void LoaderPool::Work() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    const auto start = std::chrono::steady_clock::now();
    task();
    busy_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now() - start)
                    .count();
  }
}

}  // namespace joaderfs
