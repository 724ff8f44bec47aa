// A walk over entries whose work may block for good in the kernel: a stat
// or a read on a hung network filesystem, which nothing can cancel.
// WalkWithDeadline runs step(i, publisher) for i in [0, n), in order, on a
// thread of its own, while the caller waits; where a step makes no progress
// for `timeout`, its entry is given up: the thread is left blocked and
// abandoned, and the walk goes on from the next entry on a new thread.
//
// A step touches the caller's state only inside publisher.Publish(fn),
// which runs fn under the walk's lock unless the step was given up; then it
// returns false and the step must return at once. So an abandoned thread
// that wakes later never touches what the caller has moved on with. Each
// Publish counts as progress: a long step (a shard read in many parts)
// publishes as it goes.
//
// Thread-safe; the walk's threads call nothing of the caller's outside
// Publish but `step` itself, which they copy.

#ifndef JOADERFS_COMMON_DEADLINE_WALK_H_
#define JOADERFS_COMMON_DEADLINE_WALK_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace joaderfs {

class WalkPublisher {
 public:
  struct Shared;
  explicit WalkPublisher(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
  // Runs `fn` under the walk's lock and counts progress; false, running
  // nothing, once the step has been given up.
  bool Publish(const std::function<void()>& fn) const;

 private:
  std::shared_ptr<Shared> shared_;
};

using WalkStep = std::function<void(size_t i, const WalkPublisher& publisher)>;

// Returns the entries given up, in order.
std::vector<size_t> WalkWithDeadline(size_t n, std::chrono::milliseconds timeout,
                                     const WalkStep& step);

// The same walk on up to `threads` threads at once, each taking one batch
// of consecutive entries at a time (in order within it) until none is left;
// `batches` holds the first entry of each, ascending from 0. Each thread
// runs a step of its own, made by `make_step` on that thread, which may keep
// state from one entry to the next (an open folder). A thread that makes no
// progress for `timeout` is given up at its entry, and the rest of its batch
// goes to a new thread. Publish() wakes no one here (the caller looks at
// each thread's progress a few times per `timeout`, and at `cancel`, when
// given, at least every 100 ms), so a step may publish once per entry at
// the cost of an uncontended lock. Once `*cancel` is true, every thread is
// given up at once and the walk returns what it had given up before.
std::vector<size_t> ParallelWalkWithDeadline(size_t n, const std::vector<size_t>& batches,
                                             unsigned threads, std::chrono::milliseconds timeout,
                                             const std::function<WalkStep()>& make_step,
                                             const std::atomic<bool>* cancel = nullptr);

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_DEADLINE_WALK_H_
