// The independent sampling algorithm: each job shuffles its own subset at the
// start of every epoch, ignoring the others. Kept as the baseline that the
// simulator and the benchmarks compare dependent sampling against.

#include <unordered_map>

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
    uint32_t epoch = 0;
    std::vector<SampleId> order;
    size_t next = 0;
  };

  void Refill(JobHandle job, Job& j) {
    j.order.resize(j.subset.cardinality());
    j.subset.toUint32Array(j.order.data());
    Rng rng(MixSeed(MixSeed(seed_, job), j.epoch));
    rng.Shuffle(j.order);
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
