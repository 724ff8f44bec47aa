#include "sampling/plan_groups.h"

#include <algorithm>

#include "common/random.h"

namespace joaderfs {

PlanGroups::PlanGroups(PlanGroupsOptions options) : options_(options) {}

PlanGroup* PlanGroups::Get(uint32_t size, uint64_t ram_samples) {
  MutexLock lock(mu_);
  auto& group = groups_[size];
  if (!group) {
    const uint64_t seed = MixSeed(options_.seed, size);
    // Copied picks must still be cached when the follower wants them: half
    // of what the budget holds, within [16, 4096].
    const uint64_t horizon = options_.coupling_horizon
                                 ? options_.coupling_horizon
                                 : std::clamp<uint64_t>(ram_samples / 2, 16, 4096);
    group = options_.dependent_sampling
                ? std::make_unique<PlanGroup>(size, NewDependentPlanner(seed, horizon),
                                              options_.cadence, horizon)
                : std::make_unique<PlanGroup>(size, NewIndependentPlanner(seed), options_.cadence);
  }
  return group.get();
}

void PlanGroups::Counts(uint32_t size, std::span<const SampleId> ids,
                        std::span<uint32_t> counts) const {
  MutexLock lock(mu_);
  auto it = groups_.find(size);
  if (it == groups_.end()) {
    std::fill(counts.begin(), counts.end(), 0);
    return;
  }
  it->second->NeedCounts(ids, counts);
}

void PlanGroups::ForEach(const std::function<void(const PlanGroup&)>& fn) const {
  MutexLock lock(mu_);
  for (const auto& [size, group] : groups_) fn(*group);
}

}  // namespace joaderfs
