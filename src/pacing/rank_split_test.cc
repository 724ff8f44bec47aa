#include "pacing/rank_split.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// What a job of 4 ranks consumed of epoch `epoch` before it stopped: a
// prefix of each rank's shard, of a different length per rank (as ranks
// whose checkpoints saw different counts), ids in a scrambled order.
Roaring ConsumedByFourRanks(const Roaring& subset, uint64_t epoch, bool drop_last) {
  const std::vector<Roaring> shards = SplitEpoch(subset, epoch, 4, drop_last);
  Roaring consumed;
  for (uint32_t r = 0; r < 4; ++r) {
    std::vector<SampleId> ids(shards[r].begin(), shards[r].end());
    std::sort(ids.begin(), ids.end(),
              [r](SampleId a, SampleId b) { return MixSeed(r, a) < MixSeed(r, b); });
    ids.resize(ids.size() * (r + 1) / 7);  // 1/7, 2/7, 3/7, 4/7 of the shard
    consumed.addMany(ids.size(), ids.data());
  }
  return consumed;
}

// Elastic resume: 4 ranks stopped mid-epoch; the union of what they
// consumed, and the rest split among W' = 1..5 ranks. Before padding the
// shares are disjoint, within one of each other in size and together the
// rest; after it each rank has ceil(M/W') (padding repeats the fewest ids
// it can), or floor(M/W') with drop_last, which leaves out M mod W'.
TEST(RankSplit, RestOfAnEpochInEqualSharesForAnyRanks) {
  Roaring subset = Ids(0, 203);
  for (uint32_t id = 5; id < 203; id += 11) subset.remove(id);  // 185 ids
  for (bool drop_last : {false, true}) {
    const uint64_t epoch = 9;
    const Roaring consumed = ConsumedByFourRanks(subset, epoch, drop_last);
    ASSERT_GT(consumed.cardinality(), 0u);
    const Roaring rest = subset - consumed;
    const uint64_t left = rest.cardinality();
    for (uint32_t ranks = 1; ranks <= 5; ++ranks) {
      SCOPED_TRACE(testing::Message()
                   << "W'=" << ranks << " drop_last=" << drop_last << " rest=" << left);
      const std::vector<Roaring> shares = SplitRest(subset, consumed, epoch, ranks, drop_last);
      ASSERT_EQ(shares.size(), ranks);
      const uint64_t each = drop_last ? left / ranks : (left + ranks - 1) / ranks;
      std::map<SampleId, int> times;
      for (const Roaring& share : shares) {
        EXPECT_EQ(share.cardinality(), each) << "equal shares";
        EXPECT_TRUE(share.isSubset(rest)) << "a consumed id delivered again";
        for (SampleId id : share) ++times[id];
      }
      uint64_t repeated = 0;
      for (const auto& [id, n] : times) repeated += n - 1;
      if (drop_last) {
        EXPECT_EQ(repeated, 0u) << "no padding with drop_last";
        EXPECT_EQ(times.size(), left - left % ranks) << "only the last M mod W' left out";
      } else {
        EXPECT_EQ(times.size(), left) << "every id of the rest, none missing";
        EXPECT_EQ(repeated, each * ranks - left) << "padding repeats as few as it must";
      }
      // A function of its inputs only: again, from a consumed set built
      // otherwise (with ids outside the subset, which do not count), and
      // not the split of the whole epoch.
      Roaring noisy = consumed;
      noisy.add(5);
      noisy.add(100000);
      EXPECT_EQ(SplitRest(subset, noisy, epoch, ranks, drop_last), shares);
      if (ranks > 1) {
        EXPECT_NE(SplitRest(subset, consumed, epoch + 1, ranks, drop_last), shares);
      }
    }
  }
}

TEST(RankSplit, RestAfterNothingConsumedIsTheEpochsSplit) {
  const Roaring subset = Ids(100, 97);
  for (bool drop_last : {false, true}) {
    for (uint32_t ranks = 1; ranks <= 5; ++ranks) {
      EXPECT_EQ(SplitRest(subset, Roaring(), 4, ranks, drop_last),
                SplitEpoch(subset, 4, ranks, drop_last));
    }
  }
}

TEST(RankSplit, RestSmallerThanTheRanks) {
  const Roaring subset = Ids(0, 10);
  Roaring consumed = Ids(0, 8);  // ids 8 and 9 left
  // Padded: 3 ranks of one id each, one of the two ids twice.
  const auto padded = SplitRest(subset, consumed, 0, 3, false);
  Roaring seen;
  for (const Roaring& share : padded) {
    EXPECT_EQ(share.cardinality(), 1u);
    seen |= share;
  }
  EXPECT_EQ(seen, Roaring::bitmapOf(2, 8, 9));
  // drop_last: nothing for anyone (as DistributedSampler drops the tail).
  for (const Roaring& share : SplitRest(subset, consumed, 0, 3, true)) {
    EXPECT_TRUE(share.isEmpty());
  }
  // Nothing left at all.
  for (bool drop_last : {false, true}) {
    for (const Roaring& share : SplitRest(subset, Ids(0, 10), 0, 2, drop_last)) {
      EXPECT_TRUE(share.isEmpty());
    }
  }
}

}  // namespace
}  // namespace joaderfs
