// The drift bound (docs/planner.md "Drift"): which lanes have their reads
// held because they run too far ahead of an active peer of similar pace in
// their planning group, within each lane's hold budget (pacing/drift.h
// DriftState).
//
// Not thread-safe: Lanes owns one, guarded by the manager's lock
// (jobs/lanes.h), and serves the held lanes' readers again (RetryHeld).

#ifndef JOADERFS_JOBS_DRIFT_HOLD_H_
#define JOADERFS_JOBS_DRIFT_HOLD_H_

#include <chrono>
#include <set>
#include <vector>

#include "jobs/lane.h"

namespace joaderfs {

class DriftHold {
 public:
  explicit DriftHold(bool enabled) : enabled_(enabled) {}

  // Whether the lane's next hand-out is held back now; `planning` names
  // its peers (the lanes of its group). A lane held is remembered until
  // End() or Forget().
  bool Holds(Lane* lane, const PlanningLanes& planning, std::chrono::steady_clock::time_point now);
  // The lane's reads are answered: what it waited while held comes out of
  // its hold budget.
  void End(Lane* lane, std::chrono::steady_clock::time_point now);
  // The lane is gone.
  void Forget(Lane* lane) { held_.erase(lane); }

  bool empty() const { return held_.empty(); }
  std::vector<Lane*> held() const { return {held_.begin(), held_.end()}; }

 private:
  const bool enabled_;
  std::set<Lane*> held_;
};

}  // namespace joaderfs

#endif  // JOADERFS_JOBS_DRIFT_HOLD_H_
