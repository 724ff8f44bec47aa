#include "pacing/rank_split.h"

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
  std::vector<SampleId> ids(subset.cardinality());
  subset.toUint32Array(ids.data());  // ascending
  // The order: the high 32 bits of the keyed hash, ties by id, packed into
  // one integer per id (hash above, id below) and sorted by LSD radix, 16
  // bits a pass. The ids come in ascending order and the passes are stable,
  // so sorting the hash's bits alone leaves ties in id order: two passes.
  const uint64_t epoch_key = MixSeed(kSplitKey, epoch);
  std::vector<uint64_t> order(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    order[i] = (MixSeed(epoch_key, ids[i]) & ~0xffffffffULL) | ids[i];
  }
  std::vector<uint64_t> scratch(order.size());
  std::vector<size_t> count(1 << 16);
  for (int shift = 32; shift < 64; shift += 16) {
    std::fill(count.begin(), count.end(), 0);
    for (uint64_t v : order) ++count[(v >> shift) & 0xffff];
    size_t sum = 0;
    for (size_t& c : count) sum += std::exchange(c, sum);
    for (uint64_t v : order) scratch[count[(v >> shift) & 0xffff]++] = v;
    order.swap(scratch);
  }
  // Rank r takes positions r, r + W, ...: each id's rank, by id, so that
  // walking the ids in ascending order fills every rank's list in order
  // (roaring takes sorted ids at once; an add() per id costs far more).
  const uint64_t shard = RankShardSize(order.size(), ranks, drop_last);
  const uint64_t dealt = std::min<uint64_t>(shard * ranks, order.size());
  constexpr uint32_t kDropped = ~uint32_t{0};
  std::vector<uint32_t> rank_of(static_cast<size_t>(subset.maximum()) + 1, kDropped);
  for (uint64_t position = 0; position < dealt; ++position) {
    rank_of[static_cast<SampleId>(order[position])] = static_cast<uint32_t>(position % ranks);
  }
  std::vector<std::vector<SampleId>> lists(ranks);
  for (auto& list : lists) list.reserve(shard);
  for (SampleId id : ids) {
    if (rank_of[id] != kDropped) lists[rank_of[id]].push_back(id);
  }
  std::vector<Roaring> shards(ranks);
  for (uint32_t r = 0; r < ranks; ++r) shards[r].addMany(lists[r].size(), lists[r].data());
  // DistributedSampler's padding: past the end the order wraps around
  // (fewer than W positions, so no rank gets an id twice).
  for (uint64_t position = dealt; position < shard * ranks; ++position) {
    shards[position % ranks].add(static_cast<SampleId>(order[position % order.size()]));
  }
  for (Roaring& s : shards) s.runOptimize();
  return shards;
}

std::vector<Roaring> SplitRest(const Roaring& subset, const Roaring& consumed, uint64_t epoch,
                               uint32_t ranks, bool drop_last) {
  const Roaring rest = subset - consumed;
  if (RankShardSize(rest.cardinality(), ranks, drop_last) == 0) return std::vector<Roaring>(ranks);
  return SplitEpoch(rest, epoch, ranks, drop_last);
}

}  // namespace joaderfs
