#include "jobs/epoch_shards.h"

#include "pacing/rank_split.h"

namespace joaderfs {

void ElasticSplit::Split() { shares = SplitRest(subset, consumed, epoch, ranks, drop_last); }

bool ElasticSplit::SameInputs(const ElasticSplit& other) const {
  return ranks == other.ranks && drop_last == other.drop_last && epoch == other.epoch &&
         subset == other.subset && consumed == other.consumed;
}

std::shared_future<std::vector<Roaring>> ShardsOf(
    Job* job, uint64_t epoch, std::packaged_task<std::vector<Roaring>()>* split) {
  auto it = job->splits.find(epoch);
  if (it != job->splits.end()) return it->second;
  *split = std::packaged_task<std::vector<Roaring>()>(
      [subset = job->subset, epoch, ranks = job->spec.ranks, drop_last = job->spec.drop_last] {
        return SplitEpoch(subset, epoch, ranks, drop_last);
      });
  auto shards = job->splits.emplace(epoch, split->get_future().share()).first->second;
  // Ranks run epochs near each other: two epochs' shards are plenty (the
  // one just asked for is kept, even if older: a resume).
  while (job->splits.size() > 2) {
    auto oldest = job->splits.begin();
    if (oldest->first == epoch) ++oldest;
    job->splits.erase(oldest);
  }
  return shards;
}

const Roaring* ElasticShare(const Job& job, const Lane& lane, uint64_t epoch) {
  if (!job.elastic || job.elastic->epoch != epoch) return nullptr;
  return &job.elastic->shares[lane.index];
}

Roaring EpochSubset(Job* job, const Lane& lane, uint64_t epoch) {
  if (!job->ranked()) return job->subset;
  if (const Roaring* share = ElasticShare(*job, lane, epoch)) return *share;
  std::packaged_task<std::vector<Roaring>()> split;
  std::shared_future<std::vector<Roaring>> shards = ShardsOf(job, epoch, &split);
  // Not made at open: a resume or a restart, or the subset changed since.
  if (split.valid()) split();
  return shards.get()[lane.index];
}

ElasticSplit PrepareElastic(const Job& job, uint64_t epoch, const Roaring& consumed) {
  ElasticSplit split;
  split.subset = job.subset;
  split.ranks = job.spec.ranks;
  split.drop_last = job.spec.drop_last;
  split.epoch = epoch;
  split.consumed = ElasticConsumed(job, epoch, consumed);
  return split;
}

Roaring ElasticConsumed(const Job& job, uint64_t epoch, const Roaring& consumed) {
  Roaring all = consumed & job.subset;
  if (job.elastic && job.elastic->epoch == epoch && !job.elastic->read) {
    all |= job.elastic->consumed;
  }
  return all;
}

uint64_t FullEpochSize(const Job& job) {
  return job.ranked() ? RankShardSize(job.subset.cardinality(), job.spec.ranks, job.spec.drop_last)
                      : job.subset.cardinality();
}

}  // namespace joaderfs
