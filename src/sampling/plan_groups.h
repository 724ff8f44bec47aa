// PlanGroups: the planning group of every output size of the mount, and the
// RefCounts the cache tiers evict by.
//
// Owns its groups; a group lives until the mount ends (jobs come and go,
// sizes seldom change), so the pointers Get() returns stay valid.
//
// Thread-safe: a registry mutex ranked above the cache tiers' (they call
// Counts() under their locks) and below each group's.

#ifndef JOADERFS_SAMPLING_PLAN_GROUPS_H_
#define JOADERFS_SAMPLING_PLAN_GROUPS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "cache/ref_counts.h"
#include "common/ranked_mutex.h"
#include "sampling/plan_group.h"

namespace joaderfs {

struct PlanGroupsOptions {
  CadenceOptions cadence;
  bool dependent_sampling = true;  // false: independent shuffles (baseline)
  uint64_t seed = 0;
  // Copying horizon of the dependent planner (dependent_planner.h); 0 asks
  // Get() to derive it from the RAM budget.
  uint64_t coupling_horizon = 0;
};

class PlanGroups final : public RefCounts {
 public:
  explicit PlanGroups(PlanGroupsOptions options);

  // The group of `size`, made on first use. `ram_samples`: how many samples
  // of that size the RAM budget holds (sets a derived coupling horizon).
  PlanGroup* Get(uint32_t size, uint64_t ram_samples);

  void Counts(uint32_t size, std::span<const SampleId> ids,
              std::span<uint32_t> counts) const override;

  // Calls `fn` for every group, in ascending size.
  void ForEach(const std::function<void(const PlanGroup&)>& fn) const;

 private:
  const PlanGroupsOptions options_;
  mutable RankedMutex<LockRank::kPlanGroups> mu_;
  std::map<uint32_t, std::unique_ptr<PlanGroup>> groups_ GUARDED_BY(mu_);
};

}  // namespace joaderfs

#endif  // JOADERFS_SAMPLING_PLAN_GROUPS_H_
