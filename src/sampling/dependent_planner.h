// Dependent sampling (DSA of the JOADER paper) for jobs whose subsets overlap
// in any way, not only nested ones.
//
// State. For every job j the planner keeps R_j, the ids j still needs in its
// current epoch, as a roaring bitmap, plus |R_j ∩ R_k| for every pair of
// jobs. This is the partition of docs/design.md 3.1 seen column-wise: the mask of
// an id is {j : id ∈ R_j}, its RefCnt is the mask's popcount, and "job j
// takes e" (mask M -> M \ {j}) is "remove e from R_j". The parts are not
// materialised because jobs with random subsets make up to min(2^n, N) of
// them, one bitmap each; per-job bitmaps cost one bit per id however the
// subsets overlap.
//
// One round. Participants that couple to an earlier pick (below) draw
// first; the others with ids left are taken in ascending order of
// |R| (ties: ascending handle). Participant i draws e_i as follows:
//   - its parent p is the earlier participant maximising |R_i ∩ R_p|
//     (ties: the later one); with no overlapping earlier participant, e_i is
//     uniform on R_i (see Cost);
//   - otherwise, if e_p ∈ R_i, e_i = e_p with probability |R_p| / |R_i|
//     (|R_p| <= |R_i| by the order); in every other case e_i is uniform on
//     R_i \ R_p.
// This is the maximal coupling of Unif(R_p) and Unif(R_i), i.e. the paper's
// dependent selecting + shared sampling, applied along a tree of parents.
// All draws use the state at the start of the round; the picks are applied
// afterwards, and jobs that drew the same id take it together.
//
// Why each marginal is uniform. By induction along the order, assume e_p is
// uniform on R_p given the past. For y ∈ R_i ∩ R_p:
//   P(e_i = y) = P(e_p = y) * |R_p|/|R_i| = 1/|R_i|.
// The residual branch is taken with probability
//   P(e_p ∉ R_i) + P(e_p ∈ R_i) (1 - |R_p|/|R_i|)
//   = 1 - |R_i ∩ R_p|/|R_p| + |R_i ∩ R_p|/|R_p| - |R_i ∩ R_p|/|R_i|
//   = |R_i \ R_p| / |R_i|,
// so for y ∈ R_i \ R_p, P(e_i = y) = (|R_i \ R_p|/|R_i|) / |R_i \ R_p| =
// 1/|R_i|. Roots are uniform by construction. The construction depends only
// on the state, which is a function of the past, and every round uses fresh
// randomness, so each job draws uniformly from its remaining set at every
// step: its order is a uniform permutation, whatever the other jobs do.
//
// Sharing. Two participants pick the same id with probability
// |R_1 ∩ R_2| / max(|R_1|, |R_2|), the optimum (Theorem 1 of the paper);
// identical remaining sets always pick the same id; nested sets
// R_1 ⊆ ... ⊆ R_n form a chain of parents and all pick the same id with
// probability |R_1| / |R_n|, again the optimum. With arbitrary overlaps each
// participant matches its best-overlapping predecessor optimally.
//
// Coupling across rounds (docs/design.md 3.1). Rounds alone make sharing depend
// on timing: a job that plans a pick alone (its reader was a moment faster)
// takes an id its twin draws at some random later time, long after
// eviction, and their remaining sets drift apart. So a participant may
// instead couple its draw to a pick another job made in an earlier round:
//   - position-aligned: job a's pick at the index this job is about to
//     fill (a is ahead by at most `coupling_horizon` picks), so equal-pace
//     jobs with equal subsets make the same sequence whatever their
//     readers' jitter;
//   - newest: when a participant plans alone and has no position source,
//     the newest pick of another job (round-aligned across rounds).
// A source is chosen by the largest subset overlap (ties: the smaller lag,
// then the lower slot), which, like the schedule, does not depend on the
// ids drawn. The draw is the maximal coupling of Unif(S) and Unif(T), S the
// source job's remaining set just before its pick (= its remaining set now
// plus its picks since, all in its current epoch), T this job's remaining
// set: the source's id x is kept with probability min(1, |S|/|T|) when
// x ∈ T, otherwise the draw comes from the residual (uniform on T \ S when
// |S| <= |T|; weights 1/|T| - 1/|S| on T ∩ S and 1/|T| on T \ S when not).
//
// Why that stays uniform: labels. Every pick carries a label: the round's
// tick for a draw of the round, the source's label for a coupled draw. A
// job's labels strictly increase (a source is eligible only if its label
// exceeds the label of the job's previous pick), and a pick of label l
// depends only on picks of labels < l (its job's earlier picks, hence its
// remaining set), on its source (label l) and on fresh randomness. By
// induction over the coupling forest of label l, every pick of label l is
// uniform on its job's remaining set given all picks of labels < l; the
// job's history lies among those, so each draw is uniform on the job's
// remaining set given its past, and its order is a uniform permutation.
// Using a pick that is not fresh (an index at or below one already used,
// i.e. a label not above the job's last) would break this; the chi-square
// tests of randomness_test.cc catch such a bias. docs/planner.md has the
// proof in full.
//
// Cost. A root draw is one roaring select (or a few contains() tests while
// the set is dense in its span: rejection, exact too); a child keeps its
// parent's id after one contains() test, or draws from R_i \ R_p by rejection
// from R_i (the residual is entered with probability |R_i \ R_p|/|R_i| and then
// needs |R_i|/|R_i \ R_p| tries on average: one try per round in expectation;
// after kMaxRejections tries it computes R_i \ R_p, which keeps the result
// exact). A coupled draw is the same, with membership of S tested against the
// source's remaining set and its last picks (at most the horizon). Finding a
// source scans the present jobs once per participant. Applying a pick costs
// O(number of jobs) contains() tests to maintain the overlap table.
// AddJob/StartEpoch cost one and_cardinality per other job.
//
// Thread-safety: none; the owner serialises all calls.

#ifndef JOADERFS_SAMPLING_DEPENDENT_PLANNER_H_
#define JOADERFS_SAMPLING_DEPENDENT_PLANNER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include <roaring/roaring.hh>

#include "common/random.h"
#include "sampling/planner.h"

namespace joaderfs {

class DependentPlanner final : public Planner {
 public:
  explicit DependentPlanner(uint64_t seed, uint64_t coupling_horizon = kDefaultCouplingHorizon);

  void AddJob(JobHandle job, const Roaring& subset) override;
  void RemoveJob(JobHandle job) override;
  void StartEpoch(JobHandle job) override;
  void StartEpoch(JobHandle job, const Roaring& subset) override;
  void Round(std::span<const JobHandle> participants, std::vector<Pick>* out) override;
  uint64_t Remaining(JobHandle job) const override;
  uint32_t RefCount(SampleId id) const override;
  uint64_t SharedPicks(JobHandle job) const override;
  PlannerStats Stats() const override;
  void SetCouplingHorizon(uint64_t picks) override { coupling_horizon_ = picks; }

  // Bytes held by the planner: every job's subset and remaining bitmaps
  // (estimated from roaring's container statistics) and the overlap table.
  size_t MemoryBytes() const;

 private:
  // One of a job's latest picks, kept while others may couple to it.
  struct PastPick {
    SampleId id = 0;
    uint64_t label = 0;
    uint64_t remaining_before = 0;  // |R| just before the pick: |S|
    uint64_t index = 0;             // in its epoch
  };

  struct Job {
    JobHandle handle = 0;
    Roaring subset;  // run-optimised
    // |subset|, the epoch's length: a run container's cardinality is a walk
    // over its runs, and FindSource needs it for every candidate source.
    uint64_t subset_size = 0;
    bool subset_has_runs = false;
    SampleId first = 0;  // the subset's smallest and largest ids
    SampleId last = 0;
    Roaring remaining;  // never holds run containers
    uint64_t remaining_count = 0;
    uint64_t shared_picks = 0;
    uint64_t epoch_picks = 0;  // picks made in the current epoch
    uint64_t last_label = 0;   // of the job's latest pick, any epoch
    // The job's last `coupling_horizon` picks, oldest first, across epochs
    // (a twin a few picks behind may still be finishing the last one).
    std::deque<PastPick> history;
  };

  // A pick of another job that a participant couples its draw to.
  struct Source {
    uint32_t slot = 0;
    size_t at = 0;  // in the source job's history
  };

  // A child's residual draw tries this many rejections from R_i before
  // computing R_i \ R_p exactly.
  static constexpr int kMaxRejections = 64;
  // Uniform draws sample the subset's span by rejection while the remaining
  // set fills at least 1/kDenseSpan of it, else use roaring select.
  static constexpr uint64_t kDenseSpan = 4;

  uint32_t SlotOf(JobHandle job) const;
  uint64_t& Overlap(uint32_t a, uint32_t b) {
    return overlap_[static_cast<size_t>(a) * stride_ + b];
  }
  uint64_t& SubsetOverlap(uint32_t a, uint32_t b) {
    return subset_overlap_[static_cast<size_t>(a) * stride_ + b];
  }
  void GrowOverlapTable(size_t slots);
  // Sets the slot's subset and its row of the subset overlap table.
  void SetSubset(uint32_t slot, const Roaring& subset);
  // Sets R = subset for `slot` and recomputes its row of the overlap table.
  void Refill(uint32_t slot);
  SampleId DrawUniform(const Job& job);
  SampleId DrawOutside(const Job& job, const Job& parent, uint64_t count);
  // The participant's source among the other jobs' past picks, if any: at
  // its own next index (position-aligned), or with `newest`, the latest.
  bool FindSource(uint32_t slot, bool newest, Source* source) const;
  // The maximal coupling of the source pick and a uniform draw on R_slot.
  SampleId DrawCoupled(uint32_t slot, const Source& source);
  // Whether `id` was in the source job's remaining set S just before its
  // pick at history[at]: the picks of that epoch from `at` on, and the
  // remaining set if it is the current epoch.
  bool InSourceSet(const Job& source, size_t at, SampleId id) const;
  // Whether history[at] is a pick of the source job's current epoch.
  bool InCurrentEpoch(const Job& source, size_t at) const;
  // One past the last history entry of the epoch of history[at].
  size_t EpochEndInHistory(const Job& source, size_t at) const;
  // Removes `id` from the remaining set of every slot in `takers`.
  void Take(SampleId id, std::span<const uint32_t> takers);

  Rng rng_;
  uint64_t coupling_horizon_;
  uint64_t tick_ = 0;  // label of the latest round's draws
  std::vector<Job> slots_;
  std::vector<uint32_t> free_slots_;
  std::vector<uint32_t> present_;  // present slots, ascending
  std::unordered_map<JobHandle, uint32_t> slot_of_;
  // |R_a ∩ R_b| at overlap_[a * stride_ + b] for present a != b.
  std::vector<uint64_t> overlap_;
  // |subset_a ∩ subset_b|, fixed while both are present: ranks sources.
  std::vector<uint64_t> subset_overlap_;
  size_t stride_ = 0;
  PlannerStats stats_;

  // Scratch space of Round(), kept between calls to avoid allocations.
  std::vector<uint32_t> order_;    // the round's draws: coupled, then tree
  std::vector<SampleId> draw_;     // by position in order_
  std::vector<uint64_t> label_;    // by position in order_
  std::vector<uint32_t> by_id_;    // positions in order_, sorted by draw
  std::vector<uint32_t> takers_;   // slots taking one id
  std::vector<uint32_t> holders_;  // slots needing that id
  std::vector<uint8_t> taking_;    // by slot
  // By slot: kInTree or kCoupled for a participant of the current round.
  static constexpr uint8_t kInTree = 1;
  static constexpr uint8_t kCoupled = 2;
  std::vector<uint8_t> in_round_;
  std::vector<uint8_t> shared_;    // by slot: this round's pick is shared
  std::vector<SampleId> pick_of_;  // by slot
};

// Heap bytes of a roaring bitmap (containers and their index), from its
// container statistics; roaring's own size functions give serialized sizes.
size_t ApproximateRoaringBytes(const Roaring& bitmap);

// A copy of `ids` without run containers. A remaining set is kept so:
// picks punch random holes into it, which bitset and array containers
// absorb in place while a run container splits its runs (up to 8x the
// memory of a bitset, and a memmove per pick).
Roaring CopyWithoutRuns(const Roaring& ids);

}  // namespace joaderfs

#endif  // JOADERFS_SAMPLING_DEPENDENT_PLANNER_H_
