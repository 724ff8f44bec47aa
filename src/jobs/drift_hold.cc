#include "jobs/drift_hold.h"

#include <optional>

namespace joaderfs {

namespace {

// A leader is held only for a peer whose pace is within this factor of its
// own; a job this much faster is meant to run ahead.
constexpr double kSimilarPace = 1.5;

}  // namespace

bool DriftHold::Holds(Lane* lane, const PlanningLanes& planning,
                      std::chrono::steady_clock::time_point now) {
  if (!enabled_ || lane->peer_key == 0 || !lane->group) return false;
  // Past the planner's coupling horizon jobs share no picks (independent
  // shuffles share none at any distance). The horizon follows what RAM
  // holds (sampling/plan_group.h), and a leader waits at a quarter of it:
  // that leaves the laggards' read-ahead (a DataLoader holds several
  // batches) room: half still cost 1.43 decodes per distinct at RAM 5%
  // (docs/planner.md "Drift").
  const uint64_t horizon = lane->group->coupling_horizon();
  if (horizon == 0) return false;
  const uint64_t limit = horizon / 4;
  const uint64_t progress = lane->progress();
  const std::optional<double> pace = lane->drift.FreePace(now, progress);
  if (!pace) return false;  // too early to tell a faster job from drift
  bool ahead = false;
  for (auto it = planning.lower_bound({lane->group, 0});
       it != planning.end() && it->first.first == lane->group && !ahead; ++it) {
    Lane* peer = it->second;
    if (peer == lane || peer->peer_key != lane->peer_key || peer->released) continue;
    if (peer->waiting.empty() && !peer->drift.Active(now)) continue;  // stopped
    const uint64_t behind = peer->progress();
    // Past the horizon they share nothing anyway: a late or slower job.
    if (progress <= behind + limit || progress > behind + horizon) continue;
    const std::optional<double> peer_pace = peer->drift.FreePace(now, behind);
    ahead = peer_pace && *pace <= kSimilarPace * *peer_pace;
  }
  if (!ahead || !lane->drift.Hold(now)) return false;
  held_.insert(lane);
  return true;
}

void DriftHold::End(Lane* lane, std::chrono::steady_clock::time_point now) {
  held_.erase(lane);
  lane->drift.EndHold(now);
}

}  // namespace joaderfs
