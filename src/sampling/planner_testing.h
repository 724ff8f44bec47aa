// Driving jobs at fixed speeds through many epochs, for the planner tests.
// Test support only.

#ifndef JOADERFS_SAMPLING_PLANNER_TESTING_H_
#define JOADERFS_SAMPLING_PLANNER_TESTING_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include <roaring/roaring.hh>

#include "sampling/id_sets.h"
#include "sampling/planner.h"

namespace joaderfs {

struct SpeedJob {
  Roaring subset;
  int speed = 1;        // rounds per tick
  uint32_t epochs = 1;  // epochs before the job leaves
};

// Called for every job round: the job's index in the jobs span, its epoch
// and the id it received.
using PickObserver = std::function<void(size_t job, uint32_t epoch, SampleId)>;

// Adds `jobs` (handles 0..n-1) to `planner` and plays ticks: in each tick
// round r (1-based) takes every job with speed >= r. A job starts its next
// epoch as soon as its epoch ends, and leaves after its `epochs`. Returns
// when every job has left. `after_round`, if set, sees the picks of each
// round after `on_pick` has seen them one by one.
void RunAtSpeeds(Planner& planner, std::span<const SpeedJob> jobs, const PickObserver& on_pick,
                 const std::function<void(const std::vector<Pick>&)>& after_round = nullptr);

// Plays `jobs` the way the daemon's readers drive planning, with jitter:
// each job keeps up to `lookahead` picks planned ahead of its reader; in
// each step every reader with a planned pick consumes one with probability
// speed / max speed * 0.6 (so equal-speed jobs drift apart and back like
// real readers), and a round runs over every job below its lookahead. The
// schedule depends only on `schedule_seed`, never on the ids. Epochs and
// departures as in RunAtSpeeds.
void RunJittered(Planner& planner, std::span<const SpeedJob> jobs, uint32_t lookahead,
                 uint64_t schedule_seed, const PickObserver& on_pick);

}  // namespace joaderfs

#endif  // JOADERFS_SAMPLING_PLANNER_TESTING_H_
