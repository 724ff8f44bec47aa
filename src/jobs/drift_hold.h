// The drift bound (docs/planner.md "Drift"): which lanes have their reads
// held because they run too far ahead of an active peer of similar pace in
// their planning group, within each lane's hold budget (pacing/drift.h
// DriftState). Peers: lanes whose jobs have the same subset, or subsets
// that share at least half of the smaller one.
//
// Not thread-safe: Lanes owns one, guarded by the manager's lock
// (jobs/lanes.h), and serves the held lanes' readers again (RetryHeld).

#ifndef JOADERFS_JOBS_DRIFT_HOLD_H_
#define JOADERFS_JOBS_DRIFT_HOLD_H_

#include <chrono>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "jobs/lane.h"

namespace joaderfs {

class DriftHold {
 public:
  // Peers whose reads began at most this far apart started together: a
  // leader past the horizon of such a peer waits for it to catch up.
  static constexpr std::chrono::seconds kLateStart{1};

  explicit DriftHold(bool enabled) : enabled_(enabled) {}

  // Whether the lane's next hand-out is held back now; `planning` names
  // its peers (the lanes of its group), `starting` lanes whose reader is
  // open but has not begun their first epoch (a twin whose process was
  // descheduled between its open and its first read: at progress 0, its
  // reads beginning now). A lane held is remembered until End() or Forget().
  bool Holds(Lane* lane, const PlanningLanes& planning, const std::set<Lane*>& starting,
             std::chrono::steady_clock::time_point now);
  // The lane's reads are answered: what it waited while held comes out of
  // its hold budget.
  void End(Lane* lane, std::chrono::steady_clock::time_point now);
  // The lane is gone.
  void Forget(Lane* lane) { held_.erase(lane); }

  bool empty() const { return held_.empty(); }
  std::vector<Lane*> held() const { return {held_.begin(), held_.end()}; }

 private:
  // Whether lanes of two jobs' subsets are peers, by their peer keys.
  bool Peers(const Lane& a, const Lane& b);
  // Whether two subsets share at least half of the smaller.
  static bool Overlap(const Roaring& x, const Roaring& y);
  // Whether the two lanes' reads began at most kLateStart apart.
  static bool StartedTogether(const Lane& lane, const Lane& peer,
                              std::chrono::steady_clock::time_point now);

  const bool enabled_;
  std::set<Lane*> held_;
  // Peers() of two different subsets, by their keys (lower first): the
  // overlap is counted once per pair, not per hand-out. Bounded: cleared
  // past kMaxOverlaps pairs.
  static constexpr size_t kMaxOverlaps = 4096;
  std::map<std::pair<uint64_t, uint64_t>, bool> overlaps_;
};

}  // namespace joaderfs

#endif  // JOADERFS_JOBS_DRIFT_HOLD_H_
