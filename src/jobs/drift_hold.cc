#include "jobs/drift_hold.h"

#include <algorithm>
#include <optional>

namespace joaderfs {

namespace {

// A leader is held only for a peer whose pace is within this factor of its
// own; a job this much faster is meant to run ahead.
constexpr double kSimilarPace = 1.5;

}  // namespace

bool DriftHold::Holds(Lane* lane, const PlanningLanes& planning, const std::set<Lane*>& starting,
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
  bool ahead = false;
  for (auto it = planning.lower_bound({lane->group, 0});
       it != planning.end() && it->first.first == lane->group && !ahead; ++it) {
    Lane* peer = it->second;
    if (peer == lane || peer->released) continue;
    if (peer->waiting.empty() && !peer->drift.Active(now)) continue;  // stopped
    const uint64_t behind = peer->progress();
    // Most hand-outs are within the limit of every lane: the subsets are
    // compared only for a lane this one is ahead of.
    if (progress <= behind + limit || !Peers(*lane, *peer)) continue;
    // Past the horizon they share nothing now. A peer whose reads began
    // within kLateStart of this lane's is a twin whose reader was still
    // starting (a process launched beside busy ones: tens of ms, hundreds
    // of picks of a small set), and catches up while this one waits, as
    // far as its hold budget lasts; one that began at another time is a
    // late (or resumed) job, left alone.
    if (progress > behind + horizon && !StartedTogether(*lane, *peer, now)) continue;
    // Until both paces are known (a lane's first half second, pacing/drift.h
    // kPaceMinSpan), peers count as alike: jobs that start together drift
    // apart fastest then on a busy machine. The hold budget, empty when a
    // lane is made, bounds what a truly faster job loses meanwhile: a
    // quarter second.
    const std::optional<double> peer_pace = peer->drift.FreePace(now, behind);
    ahead = !pace || !peer_pace || *pace <= kSimilarPace * *peer_pace;
  }
  // A twin whose reader is open but has not read yet: the planner has not
  // drawn for it, so every pick this lane takes meanwhile is one the twin
  // draws alone later (4 jobs over 5 % RAM beside busy loops: 1.15 decodes
  // per distinct). Held past the limit while the twin may be starting.
  // Most hand-outs find none, and the subsets are compared only past it.
  const auto began = lane->drift.first_served();
  if (!ahead && progress > limit && !starting.empty() && began && now - *began <= kLateStart) {
    for (const Lane* twin : starting) {
      if (twin->job != lane->job && !twin->job->ranked() && twin->job->spec.group.empty() &&
          Overlap(lane->job->subset, twin->job->subset)) {
        ahead = true;
        break;
      }
    }
  }
  if (!ahead || !lane->drift.Hold(now)) return false;
  held_.insert(lane);
  return true;
}

bool DriftHold::StartedTogether(const Lane& lane, const Lane& peer,
                                std::chrono::steady_clock::time_point now) {
  const auto began = lane.drift.first_served();
  // A peer whose first read waits begins now.
  const auto peer_began = peer.drift.first_served().value_or(now);
  return began && peer_began - *began <= kLateStart && *began - peer_began <= kLateStart;
}

bool DriftHold::Peers(const Lane& a, const Lane& b) {
  if (b.peer_key == 0) return false;  // ranked
  if (a.peer_key == b.peer_key) return true;
  // Overlapping jobs share the picks of their common part as identical
  // ones share all of theirs, and drift apart as easily on a busy machine
  // (docs/benchmarks.md "Sharing on a busy machine": 4 jobs over windows
  // of 3/4 of the set went from 1.17 to 1.53 decodes per distinct beside 4
  // busy loops). A small overlap is not worth holding anyone for.
  const auto key = std::minmax(a.peer_key, b.peer_key);
  auto it = overlaps_.find(key);
  if (it == overlaps_.end()) {
    if (overlaps_.size() >= kMaxOverlaps) overlaps_.clear();
    it = overlaps_.emplace(key, Overlap(a.job->subset, b.job->subset)).first;
  }
  return it->second;
}

bool DriftHold::Overlap(const Roaring& x, const Roaring& y) {
  const uint64_t smaller = std::min(x.cardinality(), y.cardinality());
  return 2 * x.and_cardinality(y) >= smaller && smaller > 0;
}

void DriftHold::End(Lane* lane, std::chrono::steady_clock::time_point now) {
  held_.erase(lane);
  lane->drift.EndHold(now);
}

}  // namespace joaderfs
