// Which ids a lane reads in an epoch: the job's subset, a rank's shard of
// it (pacing/rank_split.h SplitEpoch), or a rank's share of an elastic
// resume's rest (SplitRest). Shards and shares cost a sort of the subset,
// which the manager runs off its lock where it can: the functions below
// hand that work out as a task or an ElasticSplit.
//
// Functions of a Job: the caller holds the manager's lock that guards it
// (jobs/lane.h), except ElasticSplit::Split(), which touches no job.

#ifndef JOADERFS_JOBS_EPOCH_SHARDS_H_
#define JOADERFS_JOBS_EPOCH_SHARDS_H_

#include <cstdint>
#include <future>
#include <vector>

#include "catalog/catalog.h"
#include "jobs/lane.h"

namespace joaderfs {

// An elastic resume's split: its inputs, taken under the manager's lock
// (PrepareElastic), and its shares, made by Split() without it.
struct ElasticSplit {
  Roaring subset;
  uint32_t ranks = 0;
  bool drop_last = false;
  uint64_t epoch = 0;
  Roaring consumed;  // ElasticConsumed
  std::vector<Roaring> shares;

  // A sort of the rest of the epoch.
  void Split();
  bool SameInputs(const ElasticSplit& other) const;
};

// The shards of a ranked job's `epoch`, made or being made; else sets
// `split` to the task that makes them (a sort of the subset), for the
// caller to run, after dropping the lock where it can.
std::shared_future<std::vector<Roaring>> ShardsOf(
    Job* job, uint64_t epoch, std::packaged_task<std::vector<Roaring>()>* split);
// The ids the lane reads in `epoch`: the job's subset, its share of an
// elastic resume's rest, or its shard (made here if no one made it yet).
Roaring EpochSubset(Job* job, const Lane& lane, uint64_t epoch);
// The ids of `epoch` an elastic resume of the job with `consumed` counts
// as consumed: with those of an earlier resume of the epoch that no rank
// has read yet (several writes add up), within the subset.
Roaring ElasticConsumed(const Job& job, uint64_t epoch, const Roaring& consumed);
// The lane's share of the job's elastic resume of `epoch`; null if none.
const Roaring* ElasticShare(const Job& job, const Lane& lane, uint64_t epoch);
// The inputs of an elastic resume of the ranked job that adds `consumed`
// to `epoch`, for ElasticSplit::Split() to split without the lock.
ElasticSplit PrepareElastic(const Job& job, uint64_t epoch, const Roaring& consumed);
// The ids a lane of the job reads in a full epoch: the subset, or a rank's
// shard of it.
uint64_t FullEpochSize(const Job& job);

}  // namespace joaderfs

#endif  // JOADERFS_JOBS_EPOCH_SHARDS_H_
