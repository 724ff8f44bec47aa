#include "jobs/rank_split.h"

#include <gtest/gtest.h>

#include <map>

#include "common/random.h"

namespace joaderfs {
namespace {

Roaring Ids(uint32_t first, uint32_t count) {
  Roaring ids;
  ids.addRange(first, uint64_t{first} + count);
  return ids;
}

TEST(RankSplit, EqualCountsPaddedOrDroppedAsDistributedSampler) {
  for (uint32_t size : {1u, 2u, 7u, 10u, 97u, 100u}) {
    for (uint32_t ranks = 1; ranks <= 8; ++ranks) {
      for (bool drop_last : {false, true}) {
        SCOPED_TRACE(testing::Message()
                     << "S=" << size << " W=" << ranks << " drop_last=" << drop_last);
        const Roaring subset = Ids(1000, size);
        const uint64_t expected = drop_last ? size / ranks : (size + ranks - 1) / ranks;
        ASSERT_EQ(RankShardSize(size, ranks, drop_last), expected);
        if (expected == 0) continue;
        const std::vector<Roaring> shards = SplitEpoch(subset, 3, ranks, drop_last);
        ASSERT_EQ(shards.size(), ranks);
        std::map<SampleId, int> times;
        for (const Roaring& shard : shards) {
          // A shard is a set of the subset's ids: no id twice within a rank.
          EXPECT_EQ(shard.cardinality(), expected);
          EXPECT_TRUE(shard.isSubset(subset));
          for (SampleId id : shard) ++times[id];
        }
        // Disjoint apart from padding; together the subset (or all but the
        // dropped tail).
        const uint64_t total = expected * ranks;
        const uint64_t distinct = std::min<uint64_t>(total, size);
        EXPECT_EQ(times.size(), distinct);
        uint64_t repeated = 0;
        for (const auto& [id, n] : times) repeated += n - 1;
        EXPECT_EQ(repeated, total - distinct);
      }
    }
  }
}

TEST(RankSplit, DependsOnEpochSubsetAndRanksOnly) {
  const Roaring subset = Ids(0, 1000);
  const auto a = SplitEpoch(subset, 5, 4, false);
  const auto b = SplitEpoch(subset, 5, 4, false);
  EXPECT_EQ(a, b);  // the same on every mount and for every job
  const auto next = SplitEpoch(subset, 6, 4, false);
  EXPECT_NE(a[0], next[0]);  // the shards change every epoch
  // Rank 0 keeps about a quarter of its ids from one epoch to the next, as
  // an independent split would.
  const uint64_t kept = (a[0] & next[0]).cardinality();
  EXPECT_GT(kept, 30u);
  EXPECT_LT(kept, 100u);
}

TEST(RankSplit, IsTheSameOnEveryVersion) {
  // The split is part of the format: ranks on two machines must agree even
  // if their daemons differ in version. These fingerprints of the shards
  // (each id in order, mixed) are those of the first version's split, over
  // ImageNet's 1.28M ids with one in 97 left out (ties of the hash's high
  // 32 bits occur, broken by id), padded and dropped.
  Roaring subset = Ids(0, 1281167);
  for (uint32_t id = 0; id < 1281167; id += 97) subset.remove(id);
  const std::map<bool, uint64_t> expected = {{false, 14415226406552678557ULL},
                                             {true, 18109721071974004738ULL}};
  for (const auto& [drop_last, want] : expected) {
    uint64_t fingerprint = 0;
    for (const Roaring& shard : SplitEpoch(subset, 7, 8, drop_last)) {
      for (SampleId id : shard) fingerprint = MixSeed(fingerprint, id);
    }
    EXPECT_EQ(fingerprint, want) << "drop_last=" << drop_last;
  }
}

TEST(RankSplit, EveryIdEquallyLikelyOnEveryRank) {
  // Over 400 epochs each id lands on each of 4 ranks about 100 times.
  const Roaring subset = Ids(0, 64);
  std::vector<std::array<int, 4>> counts(64, std::array<int, 4>{});
  for (uint64_t epoch = 0; epoch < 400; ++epoch) {
    const auto shards = SplitEpoch(subset, epoch, 4, false);
    for (int r = 0; r < 4; ++r) {
      for (SampleId id : shards[r]) ++counts[id][r];
    }
  }
  for (const auto& c : counts) {
    for (int n : c) {
      EXPECT_GT(n, 55);  // mean 100, sd 8.7: six sd either side
      EXPECT_LT(n, 145);
    }
  }
}

}  // namespace
}  // namespace joaderfs
