// The RAM budget's arithmetic that the mount's options, the planners and the
// jobs share: how many samples the RAM tier holds, how far planning may run
// past the budget, and the largest delivery a job may ask for. Pure
// functions; thread-safe.

#ifndef JOADERFS_CACHE_BUDGET_H_
#define JOADERFS_CACHE_BUDGET_H_

#include <cstdint>

#include "common/status.h"
#include "loader/decoded_sample.h"  // SquareSampleBytes

namespace joaderfs {

// How many samples of `sample_bytes` (the mean base image, SampleCache's
// AverageSampleBytes) a RAM budget of `budget` bytes holds.
inline uint64_t SamplesHeld(uint64_t budget, uint64_t sample_bytes) {
  return budget / (sample_bytes > 0 ? sample_bytes : 1);
}

// What the RAM tier says about its budget when jobs plan.
struct BudgetView {
  uint64_t committed = 0;   // bytes that planned samples pin
  uint64_t budget = 0;      // the RAM tier's budget
  uint64_t per_sample = 0;  // bytes of one base image (the tier's current mean)

  // The base images the tier holds.
  uint64_t SamplesHeld() const { return joaderfs::SamplesHeld(budget, per_sample); }
};

// What all jobs together may plan past a full budget, shared among them,
// though each job may always plan one pick. It is also the largest sample a
// job may ask for (the job manager refuses larger sizes with EINVAL), so the
// one pick stays a bounded part of the budget.
inline uint64_t PlanOverdraft(uint64_t budget) { return budget / 4; }

// InvalidArgument, saying why, when one delivery of `size` exceeds
// PlanOverdraft(budget): the mount's size= and every job's spec obey it.
Status CheckSizeFitsBudget(uint32_t size, uint64_t budget);

}  // namespace joaderfs

#endif  // JOADERFS_CACHE_BUDGET_H_
