#include "jobs/rank_split.h"

#include <algorithm>
#include <utility>

#include "common/random.h"

namespace joaderfs {
namespace {

// Part of the record format's contract: changing it changes every split.
constexpr uint64_t kSplitKey = 0x6a6f61646572726bULL;  // "joaderrk"

}  // namespace

uint64_t RankShardSize(uint64_t subset_size, uint32_t ranks, bool drop_last) {
  return drop_last ? subset_size / ranks : (subset_size + ranks - 1) / ranks;
}

std::vector<Roaring> SplitEpoch(const Roaring& subset, uint64_t epoch, uint32_t ranks,
                                bool drop_last) {
  std::vector<std::pair<uint64_t, SampleId>> order;
  order.reserve(subset.cardinality());
  const uint64_t epoch_key = MixSeed(kSplitKey, epoch);
  for (SampleId id : subset) order.emplace_back(MixSeed(epoch_key, id), id);
  std::sort(order.begin(), order.end());
  const uint64_t shard = RankShardSize(order.size(), ranks, drop_last);
  std::vector<Roaring> shards(ranks);
  for (uint64_t position = 0; position < shard * ranks; ++position) {
    // Past the end the order wraps around: DistributedSampler's padding.
    shards[position % ranks].add(order[position % order.size()].second);
  }
  for (Roaring& s : shards) s.runOptimize();
  return shards;
}

}  // namespace joaderfs
