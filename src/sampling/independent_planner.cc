// The independent sampling algorithm: each job shuffles its own subset at the
// start of every epoch, ignoring the others. Kept as the baseline that the
// simulator and the benchmarks compare dependent sampling against, and the
// order of a `group=` job (jobs/lane.h Lane::own_group): a job's order in an
// epoch depends on (seed, handle, epoch, ids) alone, so a resumed job goes on
// where it was.

#include <unordered_map>
#include <vector>

#include "common/random.h"
#include "sampling/planner.h"

namespace joaderfs {
namespace {

class IndependentPlanner final : public Planner {
 public:
  explicit IndependentPlanner(uint64_t seed) : seed_(seed) {}

  void AddJob(JobHandle job, const Roaring& subset) override {
    Job& j = jobs_[job];
    j.subset = subset;
    j.epoch = 0;
    Refill(job, j);
  }

  void ResumeJob(JobHandle job, const Roaring& subset, uint64_t epoch,
                 const Roaring& done) override {
    Job& j = jobs_[job];
    j.subset = subset | done;  // the epoch's order is drawn over all of it
    j.epoch = epoch;
    Refill(job, j, done);
  }

  void RemoveJob(JobHandle job) override {
    Job& j = jobs_.at(job);
    for (size_t i = j.next; i < j.order.size(); ++i) Unref(j.order[i]);
    jobs_.erase(job);
  }

  void StartEpoch(JobHandle job) override {
    Job& j = jobs_.at(job);
    ++j.epoch;
    Refill(job, j);
  }

  void StartEpoch(JobHandle job, const Roaring& subset) override {
    jobs_.at(job).subset = subset;
    StartEpoch(job);
  }

  void Round(std::span<const JobHandle> participants, std::vector<Pick>* out) override {
    bool picked = false;
    for (JobHandle job : participants) {
      Job& j = jobs_.at(job);
      if (j.next == j.order.size()) continue;
      const SampleId id = j.order[j.next++];
      Unref(id);
      out->push_back({job, id});
      ++stats_.picks;
      picked = true;
    }
    if (picked) ++stats_.rounds;
  }

  uint64_t Remaining(JobHandle job) const override {
    const Job& j = jobs_.at(job);
    return j.order.size() - j.next;
  }

  uint32_t RefCount(SampleId id) const override {
    auto it = refs_.find(id);
    return it == refs_.end() ? 0 : it->second;
  }

  uint64_t SharedPicks(JobHandle) const override { return 0; }
  PlannerStats Stats() const override { return stats_; }

 private:
  struct Job {
    Roaring subset;
    uint64_t epoch = 0;
    std::vector<SampleId> order;
    size_t next = 0;
  };

  // The epoch's order over the job's subset, less `done`.
  void Refill(JobHandle job, Job& j, const Roaring& done = Roaring()) {
    j.order.resize(j.subset.cardinality());
    j.subset.toUint32Array(j.order.data());
    Rng rng(MixSeed(MixSeed(seed_, job), j.epoch));
    rng.Shuffle(j.order);
    if (!done.isEmpty()) {
      std::erase_if(j.order, [&](SampleId id) { return done.contains(id); });
    }
    j.next = 0;
    for (SampleId id : j.order) ++refs_[id];
  }

  void Unref(SampleId id) {
    auto it = refs_.find(id);
    if (--it->second == 0) refs_.erase(it);
  }

  uint64_t seed_;
  std::unordered_map<JobHandle, Job> jobs_;
  std::unordered_map<SampleId, uint32_t> refs_;
  PlannerStats stats_;
};

}  // namespace

std::unique_ptr<Planner> NewIndependentPlanner(uint64_t seed) {
  return std::make_unique<IndependentPlanner>(seed);
}

}  // namespace joaderfs
