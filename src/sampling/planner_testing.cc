#include "sampling/planner_testing.h"

#include <algorithm>

namespace joaderfs {

void RunAtSpeeds(
    Planner& planner, std::span<const SpeedJob> jobs,
    const PickObserver& on_pick,
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
      for (JobHandle j : participants) {
        if (planner.Remaining(j) > 0) continue;
        if (++epoch[j] < jobs[j].epochs) {
          planner.StartEpoch(j);
        } else {
          planner.RemoveJob(j);
          --active;
        }
      }
    }
  }
}

}  // namespace joaderfs
