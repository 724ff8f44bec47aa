// Dependent sampling (DSA of the JOADER paper) for jobs whose subsets overlap
// in any way, not only nested ones.
//
// State. For every job j the planner keeps R_j, the ids j still needs in its
// current epoch, as a roaring bitmap, plus |R_j ∩ R_k| for every pair of
// jobs. This is the partition of DESIGN.md 3.1 seen column-wise: the mask of
// an id is {j : id ∈ R_j}, its RefCnt is the mask's popcount, and "job j
// takes e" (mask M -> M \ {j}) is "remove e from R_j". The parts are not
// materialised because jobs with random subsets make up to min(2^n, N) of
// them, one bitmap each; per-job bitmaps cost one bit per id however the
// subsets overlap.
//
// One round. Participants with ids left are taken in ascending order of
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
// Cost. A root draw is one roaring select (or a few contains() tests while
// the set is dense in its span: rejection, exact too); a child keeps its
// parent's id after one contains() test, or draws from R_i \ R_p by rejection
// from R_i (the residual is entered with probability |R_i \ R_p|/|R_i| and then
// needs |R_i|/|R_i \ R_p| tries on average: one try per round in expectation;
// after kMaxRejections tries it computes R_i \ R_p, which keeps the result
// exact). Applying a pick costs O(number of jobs) contains() tests to maintain
// the overlap table. AddJob/StartEpoch cost one and_cardinality per other job.
//
// Thread-safety: none; the owner serialises all calls.

#ifndef JOADERFS_SAMPLING_DEPENDENT_PLANNER_H_
#define JOADERFS_SAMPLING_DEPENDENT_PLANNER_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include <roaring/roaring.hh>

#include "common/random.h"
#include "sampling/planner.h"

namespace joaderfs {

class DependentPlanner final : public Planner {
 public:
  explicit DependentPlanner(uint64_t seed);

  void AddJob(JobHandle job, const Roaring& subset) override;
  void RemoveJob(JobHandle job) override;
  void StartEpoch(JobHandle job) override;
  void Round(std::span<const JobHandle> participants,
             std::vector<Pick>* out) override;
  uint64_t Remaining(JobHandle job) const override;
  uint32_t RefCount(SampleId id) const override;
  uint64_t SharedPicks(JobHandle job) const override;
  PlannerStats Stats() const override;

  // Bytes held by the planner: every job's subset and remaining bitmaps
  // (estimated from roaring's container statistics) and the overlap table.
  size_t MemoryBytes() const;

 private:
  struct Job {
    JobHandle handle = 0;
    Roaring subset;  // run-optimised
    bool subset_has_runs = false;
    SampleId first = 0;  // the subset's smallest and largest ids
    SampleId last = 0;
    Roaring remaining;  // never holds run containers
    uint64_t remaining_count = 0;
    uint64_t shared_picks = 0;
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
  void GrowOverlapTable(size_t slots);
  // Sets R = subset for `slot` and recomputes its row of the overlap table.
  void Refill(uint32_t slot);
  SampleId DrawUniform(const Job& job);
  SampleId DrawOutside(const Job& job, const Job& parent, uint64_t count);
  // Removes `id` from the remaining set of every slot in `takers`.
  void Take(SampleId id, std::span<const uint32_t> takers);

  Rng rng_;
  std::vector<Job> slots_;
  std::vector<uint32_t> free_slots_;
  std::vector<uint32_t> present_;  // present slots, ascending
  std::unordered_map<JobHandle, uint32_t> slot_of_;
  // |R_a ∩ R_b| at overlap_[a * stride_ + b] for present a != b.
  std::vector<uint64_t> overlap_;
  size_t stride_ = 0;
  PlannerStats stats_;

  // Scratch space of Round(), kept between calls to avoid allocations.
  std::vector<uint32_t> order_;
  std::vector<SampleId> draw_;     // by position in order_
  std::vector<uint32_t> by_id_;    // positions in order_, sorted by draw
  std::vector<uint32_t> takers_;   // slots taking one id
  std::vector<uint32_t> holders_;  // slots needing that id
  std::vector<uint8_t> taking_;    // by slot
  std::vector<uint8_t> in_round_;  // by slot
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
