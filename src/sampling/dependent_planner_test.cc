// Locality of dependent sampling (property P3 of docs/design.md 3.1): how often
// jobs pick the same id in a round, against the paper's optimum.

#include "sampling/dependent_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "sampling/planner_testing.h"

namespace joaderfs {
namespace {

// Plays `subsets` for `epochs` epochs that all jobs start together, every
// job with ids left taking part in every round, and compares, over the rounds
// in which all jobs took part, the rate of rounds where all picked the same
// id with the optimum's mean per-round probability
// |R_1 ∩ ... ∩ R_n| / max |R_i| computed from the sets before each round
// (for nested sets it equals |R_1| / |R_n|). Returns {observed, predicted}.
std::pair<double, double> AllSameRate(std::span<const Roaring> subsets, uint32_t epochs,
                                      uint64_t seed) {
  DependentPlanner planner(seed);
  std::vector<JobHandle> all;
  for (size_t j = 0; j < subsets.size(); ++j) {
    all.push_back(static_cast<JobHandle>(j));
    planner.AddJob(all.back(), subsets[j]);
  }
  double predicted = 0;
  uint64_t observed = 0;
  uint64_t rounds = 0;
  std::vector<Pick> picks;
  for (uint32_t epoch = 0; epoch < epochs; ++epoch) {
    std::vector<Roaring> remaining(subsets.begin(), subsets.end());
    for (;;) {
      Roaring common = remaining[0];
      uint64_t largest = 0;
      for (const Roaring& r : remaining) {
        common &= r;
        largest = std::max(largest, r.cardinality());
      }
      picks.clear();
      planner.Round(all, &picks);
      if (picks.empty()) break;
      if (picks.size() == all.size()) {
        ++rounds;
        predicted += static_cast<double>(common.cardinality()) / static_cast<double>(largest);
        observed += std::all_of(picks.begin(), picks.end(),
                                [&](const Pick& p) { return p.id == picks[0].id; });
      }
      for (const Pick& p : picks) remaining[p.job].remove(p.id);
    }
    for (JobHandle j : all) planner.StartEpoch(j);
  }
  return {static_cast<double>(observed) / static_cast<double>(rounds),
          predicted / static_cast<double>(rounds)};
}

// 10 epochs of 10000 ids: the rate over ~1e5 rounds has a standard error
// below 0.002, so 0.02 is a ten-sigma tolerance for the exact optimum.
constexpr double kTolerance = 0.02;
constexpr uint32_t kEpochs = 10;

TEST(DependentPlannerLocality, TwoNestedJobsReachTheOptimum) {
  const Roaring subsets[] = {IdRange(0, 9999), IdRange(0, 4999)};
  const auto [observed, predicted] = AllSameRate(subsets, kEpochs, 1);
  EXPECT_NEAR(observed, predicted, kTolerance);
  EXPECT_GT(observed, 0.3);  // the independent planner: ~0.0002
}

TEST(DependentPlannerLocality, TwoPartiallyOverlappingJobsReachTheOptimum) {
  for (SampleId shift : {2500u, 5000u, 7500u}) {
    SCOPED_TRACE(shift);
    const Roaring subsets[] = {IdRange(0, 9999), IdRange(shift, shift + 9999)};
    const auto [observed, predicted] = AllSameRate(subsets, kEpochs, 2);
    EXPECT_NEAR(observed, predicted, kTolerance);
  }
}

TEST(DependentPlannerLocality, TwoRandomOverlappingJobsReachTheOptimum) {
  const Roaring subsets[] = {IdSample(0, 13332, 10000, 1), IdSample(0, 13332, 8000, 2)};
  const auto [observed, predicted] = AllSameRate(subsets, kEpochs, 3);
  EXPECT_NEAR(observed, predicted, kTolerance);
}

TEST(DependentPlannerLocality, FourNestedJobsAllShareWithOptimalProbability) {
  const Roaring subsets[] = {IdRange(0, 9999), IdRange(0, 7499), IdRange(0, 4999),
                             IdRange(0, 2499)};
  const auto [observed, predicted] = AllSameRate(subsets, kEpochs, 4);
  EXPECT_NEAR(observed, predicted, kTolerance);
}

TEST(DependentPlannerLocality, FirstRoundMatchesTheFormulaExactly) {
  // Fresh planners, first round only: P(same) = |I| / max(|D1|, |D2|).
  // 40000 trials: standard error <= 0.0025.
  struct Case {
    Roaring a, b;
    double expected;
  };
  const Case cases[] = {
      {IdRange(0, 99), IdRange(50, 149), 0.5},
      {IdRange(0, 99), IdRange(0, 39), 0.4},
      {IdRange(0, 39), IdRange(10, 109), 0.3},
  };
  for (const Case& c : cases) {
    int same = 0;
    constexpr int kTrials = 40000;
    for (int t = 0; t < kTrials; ++t) {
      DependentPlanner planner(t);
      planner.AddJob(0, c.a);
      planner.AddJob(1, c.b);
      std::vector<Pick> picks;
      const JobHandle both[] = {0, 1};
      planner.Round(both, &picks);
      same += picks[0].id == picks[1].id;
    }
    EXPECT_NEAR(static_cast<double>(same) / kTrials, c.expected, 0.01);
  }
}

TEST(DependentPlannerLocality, IdenticalSubsetsAlwaysPickTheSameId) {
  DependentPlanner planner(6);
  const Roaring subset = IdSample(0, 4999, 3000, 8);
  for (JobHandle j = 0; j < 5; ++j) planner.AddJob(j, subset);
  const JobHandle all[] = {0, 1, 2, 3, 4};
  std::vector<Pick> picks;
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (int r = 0; r < 3000; ++r) {
      picks.clear();
      planner.Round(all, &picks);
      ASSERT_EQ(picks.size(), 5u);
      for (const Pick& p : picks) ASSERT_EQ(p.id, picks[0].id);
    }
    for (JobHandle j : all) planner.StartEpoch(j);
  }
  const PlannerStats stats = planner.Stats();
  EXPECT_EQ(stats.shared_picks, stats.picks);
  EXPECT_EQ(planner.SharedPicks(3), 9000u);
}

TEST(DependentPlannerLocality, IdenticalJobsStaySyncedBesideOthers) {
  // Two identical jobs share every round even when a smaller overlapping job
  // comes first in the order and becomes a parent.
  DependentPlanner planner(7);
  planner.AddJob(0, IdRange(0, 999));
  planner.AddJob(1, IdRange(0, 999));
  planner.AddJob(2, IdRange(500, 1099));
  const JobHandle all[] = {0, 1, 2};
  std::vector<Pick> picks;
  for (int r = 0; r < 600; ++r) {
    picks.clear();
    planner.Round(all, &picks);
    ASSERT_EQ(picks[0].id, picks[1].id);
  }
}

TEST(DependentPlannerLocality, DisjointGroupsShareWithinEachGroup) {
  // {0,1} share [0,1000), {2,3} share [5000,6000): each job must choose the
  // overlapping one as its parent, not its neighbour in size.
  DependentPlanner planner(8);
  planner.AddJob(0, IdRange(0, 999));
  planner.AddJob(2, IdRange(5000, 5999));
  planner.AddJob(1, IdRange(0, 999));
  planner.AddJob(3, IdRange(5000, 5999));
  const JobHandle all[] = {0, 1, 2, 3};
  std::vector<Pick> picks;
  for (int r = 0; r < 1000; ++r) {
    picks.clear();
    planner.Round(all, &picks);
    ASSERT_EQ(picks[0].id, picks[1].id);
    ASSERT_EQ(picks[2].id, picks[3].id);
  }
}

// Jobs reading at the same pace, whose readers jitter: every job's k-th pick
// is its twins' k-th pick, so their orders are identical (rounds alone let
// them drift apart: a job that plans alone takes an id the others draw at a
// random later time).
TEST(DependentPlannerLocality, JitteredIdenticalJobsMakeTheSameOrders) {
  const Roaring subset = IdSample(0, 2999, 2000, 5);
  for (size_t n : {2u, 4u}) {
    SCOPED_TRACE(n);
    std::vector<SpeedJob> jobs(n, SpeedJob{subset, 1, 3});
    std::vector<std::vector<std::vector<SampleId>>> orders(n,
                                                           std::vector<std::vector<SampleId>>(3));
    DependentPlanner planner(11);
    RunJittered(planner, jobs, 8, 12,
                [&](size_t job, uint32_t epoch, SampleId id) { orders[job][epoch].push_back(id); });
    // The first job to finish its last epoch leaves the planner, and the
    // others finish theirs alone: compare the epochs before.
    for (size_t j = 1; j < n; ++j) {
      EXPECT_EQ(orders[j][0], orders[0][0]);
      EXPECT_EQ(orders[j][1], orders[0][1]);
    }
    EXPECT_GT(planner.Stats().coupled_picks, 0u);
  }
}

TEST(DependentPlannerLocality, NestedJobsWithJitterShareAsInLockstep) {
  // A job on half of another's ids: in lockstep rounds they share a pick
  // with probability |R_small| / |R_big|. With jitter, coupling across
  // rounds keeps 75% of that rate here; rounds alone kept 49%.
  const Roaring big = IdRange(0, 1999);
  const Roaring small = IdRange(0, 999);
  auto shared_fraction = [&](bool jitter) {
    DependentPlanner planner(13);
    const SpeedJob jobs[] = {{big, 1, 4}, {small, 1, 4}};
    const PickObserver ignore = [](size_t, uint32_t, SampleId) {};
    if (jitter) {
      RunJittered(planner, jobs, 8, 14, ignore);
    } else {
      RunAtSpeeds(planner, jobs, ignore);
    }
    // Picks of the small job that repeat the big one's, in the same round
    // (counted for both jobs) or copied from an earlier round.
    const PlannerStats stats = planner.Stats();
    return (stats.shared_picks / 2.0 + stats.coupled_picks) / 4000.0;
  };
  const double lockstep = shared_fraction(false);
  EXPECT_GT(lockstep, 0.3);
  EXPECT_GT(shared_fraction(true), 0.65 * lockstep);
}

TEST(DependentPlanner, SharedPicksAddUp) {
  DependentPlanner planner(10);
  const SpeedJob jobs[] = {{IdSample(0, 1332, 1000, 1), 1, 1},
                           {IdSample(0, 1332, 1000, 2), 2, 2},
                           {IdSample(0, 1332, 1000, 3), 3, 3}};
  uint64_t shared_in_rounds = 0;
  RunAtSpeeds(
      planner, jobs, [](size_t, uint32_t, SampleId) {},
      [&](const std::vector<Pick>& picks) {
        for (const Pick& p : picks) {
          shared_in_rounds += std::count_if(picks.begin(), picks.end(),
                                            [&](const Pick& q) { return q.id == p.id; }) > 1;
        }
      });
  EXPECT_EQ(planner.Stats().shared_picks, shared_in_rounds);
  EXPECT_EQ(planner.Stats().picks, 6000u);
  EXPECT_GT(shared_in_rounds, 0u);
}

TEST(DependentPlanner, ManyJobs) {
  // 100 jobs (any number works: per-job bitmaps, no mask width limit),
  // random overlapping subsets, speeds 1 to 3, two epochs each.
  DependentPlanner planner(13);
  std::vector<SpeedJob> jobs;
  for (uint64_t j = 0; j < 100; ++j) {
    jobs.push_back({IdSample(0, 499, 50 + j * 4, j), 1 + static_cast<int>(j % 3), 2});
  }
  std::vector<std::vector<Roaring>> got(jobs.size(), std::vector<Roaring>(2));
  std::vector<uint64_t> picks(jobs.size(), 0);
  RunAtSpeeds(planner, jobs, [&](size_t job, uint32_t epoch, SampleId id) {
    ASSERT_FALSE(got[job][epoch].contains(id));
    got[job][epoch].add(id);
    ++picks[job];
  });
  for (size_t j = 0; j < jobs.size(); ++j) {
    EXPECT_EQ(got[j][0], jobs[j].subset);
    EXPECT_EQ(got[j][1], jobs[j].subset);
    EXPECT_EQ(picks[j], 2 * jobs[j].subset.cardinality());
  }
  EXPECT_GT(planner.Stats().shared_picks, planner.Stats().picks / 2);
}

TEST(DependentPlanner, HandlesNeedNotBeDense) {
  DependentPlanner planner(14);
  planner.AddJob(4000000000u, IdRange(0, 9));
  planner.AddJob(7, IdRange(0, 9));
  const JobHandle both[] = {7, 4000000000u};
  std::vector<Pick> picks;
  planner.Round(both, &picks);
  ASSERT_EQ(picks.size(), 2u);
  EXPECT_EQ(picks[0].job, 7u);
  EXPECT_EQ(picks[1].job, 4000000000u);
  EXPECT_EQ(picks[0].id, picks[1].id);
  EXPECT_EQ(planner.SharedPicks(4000000000u), 1u);
  planner.RemoveJob(4000000000u);
  EXPECT_EQ(planner.RefCount(picks[0].id), 0u);
  EXPECT_EQ(planner.Remaining(7), 9u);
}

TEST(DependentPlanner, RunContainersAcrossChunkEnds) {
  // Ranges become run containers; a short run ending a 64Ki chunk crashed
  // CRoaring 0.2.66's remove_run_compression.
  DependentPlanner planner(11);
  const Roaring subset = IdRange(65021, 70000);
  planner.AddJob(0, subset);
  const JobHandle job[] = {0};
  std::vector<Pick> picks;
  for (int epoch = 0; epoch < 2; ++epoch) {
    picks.clear();
    while (planner.Remaining(0) > 0) planner.Round(job, &picks);
    Roaring got;
    for (const Pick& p : picks) got.add(p.id);
    EXPECT_EQ(got, subset);
    EXPECT_EQ(picks.size(), subset.cardinality());
    planner.StartEpoch(0);
  }
}

TEST(DependentPlanner, MemoryStaysWithinThreeTimesTheSubsets) {
  DependentPlanner planner(12);
  size_t subsets = 0;
  for (JobHandle j = 0; j < 8; ++j) {
    const Roaring subset = IdSample(0, 1333332, 1000000, j);
    subsets += ApproximateRoaringBytes(subset);
    planner.AddJob(j, subset);
  }
  EXPECT_LE(planner.MemoryBytes(), 3 * subsets);
}

}  // namespace
}  // namespace joaderfs
