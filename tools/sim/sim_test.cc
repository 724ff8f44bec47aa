#include "sim/sim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "sampling/id_sets.h"

namespace joaderfs {
namespace {

TEST(SimParseJobs, RangesAndSamples) {
  std::vector<SimJob> jobs;
  ASSERT_TRUE(ParseJobs("0-9;5-5;sample:100-199:10:7", &jobs).ok());
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].subset, IdRange(0, 9));
  EXPECT_EQ(jobs[1].subset.cardinality(), 1u);
  EXPECT_EQ(jobs[2].subset, IdSample(100, 199, 10, 7));
  EXPECT_GE(jobs[2].subset.minimum(), 100u);
  EXPECT_LE(jobs[2].subset.maximum(), 199u);
}

TEST(SimParseJobs, RejectsBadSpecs) {
  std::vector<SimJob> jobs;
  for (const char* bad : {"", "0-9;", "9-0", "a-b", "5", "-5", "0-9x", "sample:0-9:11:1",
                          "sample:0-9:0:1", "sample:0-9:5", "sample:0-9:5:1:2", "0-4294967296"}) {
    EXPECT_FALSE(ParseJobs(bad, &jobs).ok()) << bad;
  }
}

std::vector<SimJob> Jobs(const char* spec) {
  std::vector<SimJob> jobs;
  EXPECT_TRUE(ParseJobs(spec, &jobs).ok());
  return jobs;
}

TEST(SimMisses, IdenticalJobsUnderDsaMissOncePerId) {
  const auto jobs = Jobs("0-999;0-999");
  for (EvictionKind policy :
       {EvictionKind::kRefCnt, EvictionKind::kLru, EvictionKind::kFifo, EvictionKind::kRandom}) {
    for (size_t cache : {1, 10, 1000}) {
      const MissCount c = SimulateMisses(jobs, Sampler::kDependent, policy, cache, 1);
      EXPECT_EQ(c.misses, 1000u);
      EXPECT_EQ(c.requests, 2000u);
      EXPECT_EQ(c.union_size, 1000u);
    }
  }
}

TEST(SimMisses, IndependentJobsMissAlmostAlwaysWithOneSlot) {
  const MissCount c =
      SimulateMisses(Jobs("0-999;0-999"), Sampler::kIndependent, EvictionKind::kLru, 1, 1);
  EXPECT_GE(c.misses, 1980u);
  EXPECT_LE(c.misses, 2000u);
}

TEST(SimMisses, BoundedByUnionAndRequests) {
  const auto jobs = Jobs("sample:0-1332:1000:1;sample:0-1332:1000:2;0-499");
  for (Sampler sampler : {Sampler::kDependent, Sampler::kIndependent}) {
    for (size_t cache : {1, 50, 2000}) {
      const MissCount c = SimulateMisses(jobs, sampler, EvictionKind::kRefCnt, cache, 3);
      EXPECT_EQ(c.requests, 2500u);
      EXPECT_GE(c.misses, c.union_size);
      EXPECT_LE(c.misses, c.requests);
      if (cache >= c.union_size) {
        EXPECT_EQ(c.misses, c.union_size);
      }
    }
  }
}

TEST(SimOrders, EveryEpochIsAPermutationOfTheSubset) {
  auto jobs = Jobs("0-99;50-149;sample:0-199:60:4");
  jobs[1].speed = 2.5;
  jobs[2].start = 7;
  const auto orders = SimulateOrders(jobs, Sampler::kDependent, 3, 5);
  ASSERT_EQ(orders.size(), 3u);
  for (size_t j = 0; j < jobs.size(); ++j) {
    ASSERT_EQ(orders[j].size(), 3u);
    for (const auto& order : orders[j]) {
      std::vector<uint32_t> expected(jobs[j].subset.cardinality());
      jobs[j].subset.toUint32Array(expected.data());
      std::vector<SampleId> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      EXPECT_EQ(sorted, expected);
    }
  }
}

TEST(SimOrders, SameSeedSameOrders) {
  const auto jobs = Jobs("0-99;20-119");
  EXPECT_EQ(SimulateOrders(jobs, Sampler::kDependent, 2, 9),
            SimulateOrders(jobs, Sampler::kDependent, 2, 9));
  EXPECT_NE(SimulateOrders(jobs, Sampler::kDependent, 2, 9),
            SimulateOrders(jobs, Sampler::kDependent, 2, 10));
}

// The daemon's cadence with jittered readers and a RAM tier of 5% of the
// ids: identical jobs decode each id once (rounds alone, without copying
// picks across rounds, decoded each about twice here as in the daemon).
TEST(SimCadence, IdenticalJobsDecodeOnceAtFivePercent) {
  const auto jobs = Jobs("0-1999;0-1999;0-1999;0-1999");
  CadenceSim sim;
  sim.ram = 100;
  const MissCount dsa = SimulateCadence(jobs, Sampler::kDependent, sim, 1);
  EXPECT_EQ(dsa.requests, 8000u);
  EXPECT_EQ(dsa.union_size, 2000u);
  EXPECT_LE(dsa.misses, 2040u);
  const MissCount isa = SimulateCadence(jobs, Sampler::kIndependent, sim, 1);
  EXPECT_GT(isa.misses, 3 * dsa.misses);
}

TEST(SimCadence, StaggeredJobsMissBetweenUnionAndRequests) {
  auto jobs = Jobs("0-999;0-999;0-999");
  jobs[1].start = 300;
  jobs[2].start = 600;
  CadenceSim sim;
  sim.ram = 50;
  const MissCount count = SimulateCadence(jobs, Sampler::kDependent, sim, 2);
  EXPECT_EQ(count.requests, 3000u);
  EXPECT_GE(count.misses, count.union_size);
  EXPECT_LT(count.misses, count.requests);
}

TEST(SimCadence, SameSeedSameMisses) {
  auto jobs = Jobs("0-999;sample:0-1332:800:3");
  jobs[1].speed = 2;
  CadenceSim sim;
  sim.ram = 40;
  EXPECT_EQ(SimulateCadence(jobs, Sampler::kDependent, sim, 5).misses,
            SimulateCadence(jobs, Sampler::kDependent, sim, 5).misses);
}

}  // namespace
}  // namespace joaderfs
