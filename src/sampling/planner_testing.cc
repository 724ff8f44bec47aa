#include "sampling/planner_testing.h"

#include <algorithm>

#include "common/random.h"

namespace joaderfs {
namespace {

// After a round: each participant whose epoch is exhausted starts its next
// one, or leaves after its last. Returns how many left.
size_t AdvanceEpochs(Planner& planner, std::span<const SpeedJob> jobs,
                     std::span<const JobHandle> participants, std::vector<uint32_t>& epoch) {
  size_t left = 0;
  for (JobHandle j : participants) {
    if (planner.Remaining(j) > 0) continue;
    if (++epoch[j] < jobs[j].epochs) {
      planner.StartEpoch(j);
    } else {
      planner.RemoveJob(j);
      ++left;
    }
  }
  return left;
}

}  // namespace

void RunAtSpeeds(Planner& planner, std::span<const SpeedJob> jobs, const PickObserver& on_pick,
                 const std::function<void(const std::vector<Pick>&)>& after_round) {
  std::vector<uint32_t> epoch(jobs.size(), 0);
  int max_speed = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    planner.AddJob(static_cast<JobHandle>(j), jobs[j].subset);
    max_speed = std::max(max_speed, jobs[j].speed);
  }
  size_t active = jobs.size();
  std::vector<JobHandle> participants;
  std::vector<Pick> picks;
  while (active > 0) {
    for (int r = 1; r <= max_speed; ++r) {
      participants.clear();
      for (size_t j = 0; j < jobs.size(); ++j) {
        if (epoch[j] < jobs[j].epochs && jobs[j].speed >= r) {
          participants.push_back(static_cast<JobHandle>(j));
        }
      }
      if (participants.empty()) continue;
      picks.clear();
      planner.Round(participants, &picks);
      for (const Pick& p : picks) on_pick(p.job, epoch[p.job], p.id);
      if (after_round) after_round(picks);
      active -= AdvanceEpochs(planner, jobs, participants, epoch);
    }
  }
}

void RunJittered(Planner& planner, std::span<const SpeedJob> jobs, uint32_t lookahead,
                 uint64_t schedule_seed, const PickObserver& on_pick) {
  Rng rng(schedule_seed);
  const size_t n = jobs.size();
  std::vector<uint32_t> epoch(n, 0);
  std::vector<uint64_t> planned(n, 0);  // picks ahead of the reader
  int max_speed = 0;
  for (size_t j = 0; j < n; ++j) {
    planner.AddJob(static_cast<JobHandle>(j), jobs[j].subset);
    max_speed = std::max(max_speed, jobs[j].speed);
  }
  size_t active = n;
  std::vector<JobHandle> participants;
  std::vector<Pick> picks;
  while (active > 0) {
    for (size_t j = 0; j < n; ++j) {
      const double p = 0.6 * jobs[j].speed / max_speed;
      if (planned[j] > 0 && rng.Unit() < p) --planned[j];
    }
    participants.clear();
    for (size_t j = 0; j < n; ++j) {
      if (epoch[j] < jobs[j].epochs && planned[j] < lookahead) {
        participants.push_back(static_cast<JobHandle>(j));
      }
    }
    if (participants.empty()) continue;
    picks.clear();
    planner.Round(participants, &picks);
    for (const Pick& p : picks) {
      on_pick(p.job, epoch[p.job], p.id);
      ++planned[p.job];
    }
    active -= AdvanceEpochs(planner, jobs, participants, epoch);
  }
}

}  // namespace joaderfs
