// The planner decides which sample id each job of a group receives next.
//
// A group is every job of the mount (they all share the decoded base
// images, sampling/plan_group.h). Jobs are identified by small dense handles
// that the caller chooses (JobHandle); ids are catalog sample ids.
//
// The caller drives planning in rounds: it passes the jobs whose planned
// queue runs short, and every participant with ids left in its epoch gets
// exactly one more id. Jobs not in the round lose nothing (partial sampling).
//
// Guarantees every implementation keeps:
//   - within one epoch a job receives each id of its subset exactly once and
//     nothing else, whatever other jobs join, leave or do meanwhile;
//   - each job's order, looked at alone, is a uniformly random permutation;
//   - the same seed and the same sequence of calls give the same picks.
//
// Thread-safety: none; the owner serialises all calls.

#ifndef JOADERFS_SAMPLING_PLANNER_H_
#define JOADERFS_SAMPLING_PLANNER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <roaring/roaring.hh>

#include "common/types.h"

namespace joaderfs {

struct Pick {
  JobHandle job;
  SampleId id;
};

struct PlannerStats {
  uint64_t rounds = 0;         // calls of Round() that picked at least one id
  uint64_t picks = 0;          // ids handed to jobs
  uint64_t shared_picks = 0;   // picks whose id went to more than one job in the same round
  uint64_t coupled_picks = 0;  // picks that took the id of another job's earlier pick

  PlannerStats& operator+=(const PlannerStats& o) {
    rounds += o.rounds;
    picks += o.picks;
    shared_picks += o.shared_picks;
    coupled_picks += o.coupled_picks;
    return *this;
  }
};

class Planner {
 public:
  virtual ~Planner() = default;

  // Adds a job needing every id of `subset` in its epoch 0.
  // REQUIRES: `job` is not present; `subset` is not empty.
  virtual void AddJob(JobHandle job, const Roaring& subset) = 0;

  // Adds a job resumed inside its run: in its epoch `epoch`, of which the
  // ids of `done` (none of them in `subset`) were delivered before. It needs
  // every id of `subset`, in the order epoch `epoch` of a job added with
  // AddJob() over `subset` and `done` would give them, less `done`: a
  // planner whose orders depend on nothing but (seed, handle, epoch, ids)
  // resumes exactly where the job was (the independent one). The default,
  // for planners whose orders depend on the other jobs (dependent sampling),
  // adds it as a job in epoch 0 over `subset`.
  // REQUIRES: as AddJob().
  virtual void ResumeJob(JobHandle job, const Roaring& subset, uint64_t /*epoch*/,
                         const Roaring& /*done*/) {
    AddJob(job, subset);
  }

  // Removes a job and whatever it still needed. REQUIRES: `job` is present.
  virtual void RemoveJob(JobHandle job) = 0;

  // Starts the job's next epoch: every id of its subset is needed again.
  // REQUIRES: Remaining(job) == 0.
  virtual void StartEpoch(JobHandle job) = 0;

  // Starts the job's next epoch over a new subset (a data-parallel rank's
  // shard changes every epoch). The same guarantees hold within the epoch.
  // REQUIRES: Remaining(job) == 0; `subset` is not empty.
  virtual void StartEpoch(JobHandle job, const Roaring& subset) = 0;

  // One planning round over `participants` (distinct, present). Appends one
  // Pick for every participant with ids left in its current epoch; a
  // participant whose epoch is exhausted gets none.
  virtual void Round(std::span<const JobHandle> participants, std::vector<Pick>* out) = 0;

  // Ids the job still has to receive in its current epoch.
  virtual uint64_t Remaining(JobHandle job) const = 0;

  // Number of present jobs that still need `id` in their current epoch (the
  // RefCnt of the JOADER paper).
  virtual uint32_t RefCount(SampleId id) const = 0;

  // Picks this job received that went to another job in the same round too,
  // or that repeated another job's earlier pick.
  virtual uint64_t SharedPicks(JobHandle job) const = 0;

  virtual PlannerStats Stats() const = 0;

  // How many picks ahead another job may be for this job to copy its picks
  // (dependent_planner.h); a planner that never copies ignores it.
  virtual void SetCouplingHorizon(uint64_t /*picks*/) {}
};

// Every job draws its own uniform shuffle, independently of the others: the
// independent sampling algorithm (ISA) of the JOADER paper. The baseline.
std::unique_ptr<Planner> NewIndependentPlanner(uint64_t seed);

// Dependent sampling (DSA) over arbitrary overlaps: the same guarantees, and
// the participants of a round pick the same id as often as uniform orders
// allow for two jobs or nested subsets; a job a little behind another copies
// its picks index by index (see dependent_planner.h). `coupling_horizon`:
// how many picks ahead another job may be for that.
inline constexpr uint64_t kDefaultCouplingHorizon = 256;
std::unique_ptr<Planner> NewDependentPlanner(uint64_t seed,
                                             uint64_t coupling_horizon = kDefaultCouplingHorizon);

}  // namespace joaderfs

#endif  // JOADERFS_SAMPLING_PLANNER_H_
