#include "sampling/id_sets.h"

#include <gtest/gtest.h>

#include <vector>

namespace joaderfs {
namespace {

TEST(IdSets, Range) {
  const Roaring ids = IdRange(5, 9);
  EXPECT_EQ(ids.cardinality(), 5u);
  EXPECT_EQ(ids.minimum(), 5u);
  EXPECT_EQ(ids.maximum(), 9u);
  EXPECT_EQ(IdRange(0xFFFFFFFFu, 0xFFFFFFFFu).cardinality(), 1u);
}

TEST(IdSets, SampleIsDeterministicAndUniform) {
  EXPECT_EQ(IdSample(100, 199, 30, 7), IdSample(100, 199, 30, 7));
  EXPECT_NE(IdSample(100, 199, 30, 7), IdSample(100, 199, 30, 8));
  EXPECT_EQ(IdSample(0, 9, 10, 1), IdRange(0, 9));
  // Each of 10 ids is drawn with probability 3/10: 20000 samples, expected
  // 6000 per id (sd 65).
  std::vector<int> hits(10, 0);
  for (uint64_t seed = 0; seed < 20000; ++seed) {
    const Roaring ids = IdSample(10, 19, 3, seed);
    ASSERT_EQ(ids.cardinality(), 3u);
    for (SampleId id : ids) ++hits[id - 10];
  }
  for (int h : hits) EXPECT_NEAR(h, 6000, 400);
}

}  // namespace
}  // namespace joaderfs
