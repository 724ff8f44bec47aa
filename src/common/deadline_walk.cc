#include "common/deadline_walk.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace joaderfs {

struct WalkPublisher::Shared {
  std::mutex mu;
  std::condition_variable progressed;
  bool abandoned = false;  // given up: publish nothing more
  bool done = false;
  size_t current = 0;  // the entry being worked on
  size_t end = 0;      // ParallelWalkWithDeadline: where the batch of `current` ends
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

namespace {

// The batches not yet taken, and the threads still working.
struct ParallelWork {
  std::mutex mu;
  std::condition_variable finished;  // a thread found no batch left
  std::deque<std::pair<size_t, size_t>> batches;
  unsigned running = 0;
};

// One thread of the walk: it takes batches under its own lock (so that
// being given up and taking a batch never cross), then the work's.
void StartThread(const std::shared_ptr<ParallelWork>& work,
                 const std::shared_ptr<WalkPublisher::Shared>& shared,
                 const std::function<WalkStep()>& make_step) {
  {
    std::lock_guard lock(work->mu);
    ++work->running;
  }
  std::thread([work, shared, make_step] {
    const WalkPublisher publisher(shared);
    const WalkStep step = make_step();
    for (;;) {
      size_t from = 0, end = 0;
      {
        std::lock_guard own(shared->mu);
        if (shared->abandoned) return;
        std::lock_guard lock(work->mu);
        if (work->batches.empty()) {
          shared->done = true;
          --work->running;
          work->finished.notify_all();
          return;
        }
        std::tie(from, end) = work->batches.front();
        work->batches.pop_front();
        shared->current = from;
        shared->end = end;
      }
      for (size_t i = from; i < end; ++i) {
        if (!publisher.Publish([&] { shared->current = i; })) return;
        step(i, publisher);
      }
    }
  }).detach();
}

}  // namespace

std::vector<size_t> ParallelWalkWithDeadline(size_t n, const std::vector<size_t>& batches,
                                             unsigned threads, std::chrono::milliseconds timeout,
                                             const std::function<WalkStep()>& make_step,
                                             const std::atomic<bool>* cancel) {
  using Clock = std::chrono::steady_clock;
  auto work = std::make_shared<ParallelWork>();
  threads = std::max(1u, threads);
  for (size_t b = 0; b < batches.size() && batches[b] < n; ++b) {
    work->batches.emplace_back(batches[b],
                               b + 1 < batches.size() ? std::min(n, batches[b + 1]) : n);
  }
  struct Lane {
    std::shared_ptr<WalkPublisher::Shared> shared;
    uint64_t seen = 0;
    Clock::time_point since;
  };
  std::vector<Lane> lanes;
  const auto start = [&] {
    lanes.push_back({std::make_shared<WalkPublisher::Shared>(), 0, Clock::now()});
    StartThread(work, lanes.back().shared, make_step);
  };
  // Counted before any starts: a first thread may take every batch before
  // the next is started.
  const size_t first_lanes = std::min<size_t>(threads, work->batches.size());
  for (size_t t = 0; t < first_lanes; ++t) start();
  std::vector<size_t> given_up;
  const auto poll = std::clamp<std::chrono::milliseconds>(timeout / 4, std::chrono::milliseconds(1),
                                                          std::chrono::milliseconds(100));
  for (;;) {
    {
      std::unique_lock lock(work->mu);
      if (work->running == 0) break;
      work->finished.wait_for(lock, poll);
      if (work->running == 0) break;
    }
    if (cancel && cancel->load()) {
      for (Lane& lane : lanes) {
        std::lock_guard own(lane.shared->mu);
        lane.shared->abandoned = true;
      }
      break;
    }
    const Clock::time_point now = Clock::now();
    unsigned replace = 0;
    for (Lane& lane : lanes) {
      std::lock_guard own(lane.shared->mu);
      if (lane.shared->done || lane.shared->abandoned) continue;
      if (lane.shared->progress != lane.seen) {
        lane.seen = lane.shared->progress;
        lane.since = now;
        continue;
      }
      if (now - lane.since < timeout) continue;
      lane.shared->abandoned = true;
      given_up.push_back(lane.shared->current);
      {
        std::lock_guard lock(work->mu);
        --work->running;
        if (lane.shared->current + 1 < lane.shared->end) {
          work->batches.emplace_front(lane.shared->current + 1, lane.shared->end);
        }
      }
      ++replace;
    }
    std::erase_if(lanes, [](const Lane& lane) {
      std::lock_guard own(lane.shared->mu);
      return lane.shared->done || lane.shared->abandoned;
    });
    while (replace-- > 0) start();
  }
  std::sort(given_up.begin(), given_up.end());
  return given_up;
}

}  // namespace joaderfs
