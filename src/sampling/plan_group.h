// PlanGroup: the mount's jobs (they all share the decoded base images of the
// cache tiers, whatever their output sizes), the planner that orders them,
// the cadence that decides when they plan, and the RefCounts the tiers
// evict by.
//
// Cadence. Each job keeps up to `lookahead` picks planned ahead of its
// readers (at least its window, so completion-order delivery has a whole
// window in flight, plus `read_ahead` on a far SOURCE). A round runs once
// some job has fallen an eighth of its lookahead behind, and then every job
// below its lookahead takes part: jobs at the same pace plan in the same
// rounds, and the planner copies picks across rounds for the jitter that
// remains (dependent_planner.h); a slow job with a full queue stays out
// (partial sampling) and holds nobody back. How far ahead a job plans
// starts small each epoch and doubles with what it has read (like TCP's
// slow start): a job that starts a moment before another would otherwise
// plan a whole lookahead alone. Planned samples are pinned in the RAM tier
// until done, so once pinned bytes reach the budget jobs plan only a floor
// ahead: `min_lookahead`, enough to keep the decode threads busy, fewer for
// jobs whose own samples are large (see FloorPicks()).
//
// A job's picks also cost the bytes of what it makes of each (its rendered
// crop, `pick_bytes`): from the pick until it lands (Landed()) the group
// counts them itself, since the cache sees them only once they exist. On a
// far SOURCE up to `transit_bytes` of them go uncounted: picks in their read
// hold no RAM for a round trip (see CadenceOptions).
//
// The same class drives the daemon (jobs/job_manager.h) and the simulator
// (tools/sim), so the simulator replays the daemon's real cadence.
//
// Thread-safe: one mutex of its own, a leaf of the lock order (it calls
// nothing outside while holding it), so the cache tiers may ask Counts()
// under their own locks.

#ifndef JOADERFS_SAMPLING_PLAN_GROUP_H_
#define JOADERFS_SAMPLING_PLAN_GROUP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include <roaring/roaring.hh>

#include "cache/budget.h"
#include "cache/ref_counts.h"
#include "common/ranked_mutex.h"
#include "common/status.h"
#include "sampling/planner.h"

namespace joaderfs {

struct CadenceOptions {
  // At least the job's window plus `read_ahead`.
  uint64_t lookahead = 128;
  // Picks beyond its window that a job plans for a far SOURCE: twice the
  // reads in flight beyond one per decode thread (for picks in their read,
  // and as many read and waiting for decode and their reader). 0 for local
  // files.
  uint64_t read_ahead = 0;
  // What a job may always plan ahead, even when planned samples fill the
  // RAM budget.
  uint64_t min_lookahead = 8;
  // The bytes of unlanded picks' renders, all jobs' together, that do not
  // count against the RAM budget: on a far SOURCE, the picks in their read,
  // which hold nothing for a round trip. Counting them from the pick capped
  // the reads in flight at what the budget holds of renders (4 jobs at 224
  // with a 56 MB budget: 72 samples, under what a 160 ms round trip needs
  // on 2 cores). The RAM may exceed its budget by this much when every
  // reader stops while its picks are in transit. The daemon sets it where
  // `read_ahead` is above 0; 0 (local files by default) counts every pick.
  uint64_t transit_bytes = 0;
};

struct PlanGroupOptions {
  CadenceOptions cadence;
  bool dependent_sampling = true;  // false: independent shuffles (baseline)
  uint64_t seed = 0;               // the planner's
  // Copying horizon of the dependent planner (dependent_planner.h); 0
  // derives it from the RAM budget at each Plan() (CouplingHorizonFor), so
  // that it follows the real base-image bytes as the cache's estimate
  // settles.
  uint64_t coupling_horizon = 0;
};

// The derived coupling horizon: copied picks must still be cached when the
// follower wants them, so half of the base images the RAM tier holds,
// within [16, 4096].
uint64_t CouplingHorizonFor(const BudgetView& budget);

class PlanGroup final : public RefCounts {
 public:
  // The mount's group: the planner `options` ask for.
  explicit PlanGroup(const PlanGroupOptions& options);
  // A group over `planner`. `coupling_horizon`: the planner's
  // (dependent_planner.h), 0 for one that never copies picks between jobs
  // (independent shuffles).
  PlanGroup(std::unique_ptr<Planner> planner, CadenceOptions options,
            uint64_t coupling_horizon = 0);
  PlanGroup(const PlanGroup&) = delete;
  PlanGroup& operator=(const PlanGroup&) = delete;

  // How far apart two jobs' positions may be for the planner to copy picks
  // between them; 0 when it never does. A derived one follows the budget
  // seen by the latest Plan() (the drift bound reads it too). Lock-free.
  uint64_t coupling_horizon() const { return coupling_horizon_.load(std::memory_order_relaxed); }
  const CadenceOptions& cadence() const { return options_; }

  // Adds a job needing every id of `subset` (not empty), in its epoch 0;
  // each of its picks will hold `pick_bytes` of its own besides the shared
  // sample (0: it delivers the shared sample as it is).
  JobHandle AddJob(const Roaring& subset, uint64_t window, uint64_t pick_bytes = 0);
  // The same for a job resumed in its epoch `epoch`, the ids of `done`
  // delivered already (Planner::ResumeJob): with the independent planner
  // its order goes on where it was.
  JobHandle ResumeJob(const Roaring& subset, uint64_t window, uint64_t pick_bytes, uint64_t epoch,
                      const Roaring& done);
  // Removes the job: what it planned and what it still needed.
  void RemoveJob(JobHandle job);
  // Starts the job's next epoch. REQUIRES: its epoch is done.
  void StartEpoch(JobHandle job);
  // The same over a new subset (not empty): a rank's shard of its new epoch.
  void StartEpoch(JobHandle job, const Roaring& subset);
  // A paused job (no reader for a long time) takes part in no round.
  void SetPaused(JobHandle job, bool paused);
  // What the job made of one of its picks exists (or the pick was skipped):
  // the cache's figures count it from now on.
  void Landed(JobHandle job);
  // One planned sample of the job's epoch was delivered or skipped.
  void Done(JobHandle job, SampleId id);

  // Runs rounds while some job has fallen an eighth of its lookahead behind
  // (at least one pick) and appends every pick, in order; each job's picks
  // are its next positions. (Rounds at half the lookahead fetched each
  // round's picks together: on a far store the decode threads then idled
  // while the next round's reads ran; docs/benchmarks.md, "Datasets in
  // object storage".) A job for which `may_plan` (if given) says false sits
  // out that round; it is asked once per round the job would take part in,
  // and a job it lets in gets one pick unless its epoch has no id left. It
  // runs under this group's lock: it must not call the group.
  void Plan(const BudgetView& budget, std::vector<Pick>* picks,
            const std::function<bool(JobHandle)>& may_plan = {});

  // How many jobs still need each id in their current epoch, counting picks
  // planned and not yet done.
  void Counts(std::span<const SampleId> ids, std::span<uint32_t> counts) const override;

  uint64_t SharedPicks(JobHandle job) const;
  PlannerStats Stats() const;
  size_t jobs() const;

 private:
  struct Member {
    uint64_t subset_size = 0;
    uint64_t window = 0;
    uint64_t planned = 0;  // picks this epoch
    uint64_t done = 0;     // delivered or skipped this epoch
    bool paused = false;
    uint64_t pick_bytes = 0;  // what the job makes of each pick
    uint64_t unlanded = 0;    // picks whose pick_bytes do not exist yet
    // Picked and not yet done, by id (an id is picked once per epoch, but a
    // new epoch may begin before the last one's samples are all done).
    std::unordered_map<SampleId, uint32_t> outstanding;
  };

  // How many picks the job may have in flight past a full budget: its share
  // of PlanOverdraft(), at least one, at most `min_lookahead` (which jobs of
  // samples no bigger than the shared ones always get).
  uint64_t FloorPicks(const Member& m, const BudgetView& budget, uint64_t sharers) const;
  uint64_t LookaheadLimit(const Member& m, uint64_t floor, bool budget_full) const;
  static bool Wants(const Member& m, uint64_t below);

  const CadenceOptions options_;
  // Whether Plan() derives the horizon from its BudgetView.
  const bool derive_horizon_;
  std::atomic<uint64_t> coupling_horizon_;  // written under mu_

  mutable RankedMutex<LockRank::kPlanGroup> mu_;
  std::unique_ptr<Planner> planner_ GUARDED_BY(mu_);
  std::map<JobHandle, Member> members_ GUARDED_BY(mu_);
  JobHandle next_handle_ GUARDED_BY(mu_) = 0;
};

}  // namespace joaderfs

#endif  // JOADERFS_SAMPLING_PLAN_GROUP_H_
