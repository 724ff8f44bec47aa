#include "common/deadline_walk.h"

#include <condition_variable>
#include <mutex>
#include <thread>

namespace joaderfs {

struct WalkPublisher::Shared {
  std::mutex mu;
  std::condition_variable progressed;
  bool abandoned = false;  // given up: publish nothing more
  bool done = false;
  size_t current = 0;  // the entry being worked on
  uint64_t progress = 0;
};

bool WalkPublisher::Publish(const std::function<void()>& fn) const {
  std::lock_guard lock(shared_->mu);
  if (shared_->abandoned) return false;
  fn();
  ++shared_->progress;
  shared_->progressed.notify_all();
  return true;
}

std::vector<size_t> WalkWithDeadline(size_t n, std::chrono::milliseconds timeout,
                                     const WalkStep& step) {
  std::vector<size_t> given_up;
  size_t from = 0;
  while (from < n) {
    auto shared = std::make_shared<WalkPublisher::Shared>();
    shared->current = from;
    std::thread([shared, step, from, n] {
      const WalkPublisher publisher(shared);
      for (size_t i = from; i < n; ++i) {
        if (!publisher.Publish([&] { shared->current = i; })) return;
        step(i, publisher);
      }
      std::lock_guard lock(shared->mu);
      shared->done = true;
      shared->progressed.notify_all();
    }).detach();
    std::unique_lock lock(shared->mu);
    uint64_t seen = shared->progress;
    while (!shared->done) {
      if (shared->progressed.wait_for(lock, timeout,
                                      [&] { return shared->done || shared->progress != seen; })) {
        seen = shared->progress;
        continue;
      }
      shared->abandoned = true;
      given_up.push_back(shared->current);
      break;
    }
    if (shared->done) break;
    from = given_up.back() + 1;
  }
  return given_up;
}

}  // namespace joaderfs
