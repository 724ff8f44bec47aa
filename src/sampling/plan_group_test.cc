// The planning cadence (plan_group.h): when rounds run and who takes part,
// slow start, the budget floor, and the need counts the cache tiers read.

#include "sampling/plan_group.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "sampling/id_sets.h"

namespace joaderfs {
namespace {

constexpr BudgetView kRoomy{0, 1000, 1};

PlanGroup MakeGroup(uint64_t lookahead, uint64_t min_lookahead, uint64_t transit_bytes = 0) {
  CadenceOptions cadence;
  cadence.lookahead = lookahead;
  cadence.min_lookahead = min_lookahead;
  cadence.transit_bytes = transit_bytes;
  return PlanGroup(NewDependentPlanner(1), cadence);
}

std::map<JobHandle, int> CountByJob(const std::vector<Pick>& picks) {
  std::map<JobHandle, int> n;
  for (const Pick& p : picks) ++n[p.job];
  return n;
}

TEST(PlanGroup, SlowStartThenFullLookahead) {
  PlanGroup group = MakeGroup(16, 2);
  const JobHandle a = group.AddJob(IdRange(0, 999), 1);
  std::vector<Pick> picks;
  group.Plan(kRoomy, &picks);
  EXPECT_EQ(picks.size(), 2u) << "a fresh epoch plans only the floor";
  for (const Pick& p : picks) group.Done(a, p.id);
  picks.clear();
  group.Plan(kRoomy, &picks);
  EXPECT_EQ(picks.size(), 4u) << "then twice what it has read";
  for (int i = 0; i < 10; ++i) {
    for (const Pick& p : picks) group.Done(a, p.id);
    picks.clear();
    group.Plan(kRoomy, &picks);
  }
  EXPECT_EQ(picks.size(), 16u) << "and at most the lookahead";
  // A window wider than the lookahead raises it: a whole window in flight.
  const JobHandle wide = group.AddJob(IdRange(0, 999), 40);
  for (int i = 0; i < 10; ++i) {
    for (const Pick& p : picks) group.Done(p.job, p.id);
    picks.clear();
    group.Plan(kRoomy, &picks);
  }
  EXPECT_EQ(CountByJob(picks)[wide], 40);
}

TEST(PlanGroup, AFarSourceAddsItsReadAheadToTheWindow) {
  CadenceOptions cadence;
  cadence.lookahead = 16;
  cadence.min_lookahead = 2;
  cadence.read_ahead = 30;
  PlanGroup group(NewDependentPlanner(1), cadence);
  const JobHandle a = group.AddJob(IdRange(0, 999), 4);
  std::vector<Pick> picks;
  uint64_t planned = 0, done = 0;
  for (int i = 0; i < 10; ++i) {
    group.Plan(kRoomy, &picks);
    planned = picks.size();
    for (; done < planned; ++done) group.Done(a, picks[done].id);
  }
  picks.clear();
  group.Plan(kRoomy, &picks);
  EXPECT_EQ(picks.size(), 34u) << "window 4 + read_ahead 30, past the lookahead of 16";
}

TEST(PlanGroup, FullBudgetPlansOnlyTheFloor) {
  PlanGroup group = MakeGroup(16, 3);
  const JobHandle a = group.AddJob(IdRange(0, 99), 1);
  std::vector<Pick> picks;
  for (int i = 0; i < 5; ++i) {  // past slow start
    for (const Pick& p : picks) group.Done(a, p.id);
    picks.clear();
    group.Plan(kRoomy, &picks);
  }
  for (const Pick& p : picks) group.Done(a, p.id);
  picks.clear();
  group.Plan({1000, 1000, 1}, &picks);
  EXPECT_EQ(picks.size(), 3u);
}

// A job of 200-byte picks against kRoomy's 1000 bytes, each round landed
// and done before the next (the cache never sees a rendered pick): a round
// plans `fill` picks, or one more that crosses the budget. Then, its last
// round done without ever landing, the next plans only the floor.
void ExpectRoundsOfLargePicks(PlanGroup* group, size_t fill) {
  const JobHandle a = group->AddJob(IdRange(0, 999), 1, 200);
  std::vector<Pick> picks;
  size_t most = 0;
  for (int i = 0; i < 20; ++i) {
    for (const Pick& p : picks) {
      group->Landed(a);
      group->Done(a, p.id);
    }
    picks.clear();
    group->Plan(kRoomy, &picks);
    most = std::max(most, picks.size());
  }
  EXPECT_LE(most, fill + 1);
  EXPECT_GE(most, fill);
  ASSERT_GE(picks.size(), fill);
  for (const Pick& p : picks) group->Done(a, p.id);
  picks.clear();
  group->Plan(kRoomy, &picks);
  EXPECT_EQ(picks.size(), 1u) << "only the floor while unlanded picks fill the budget";
}

// A job whose picks are large (a huge size= rendered from small shared
// samples) counts them from the pick, not from when the cache sees them:
// however fast it reads, it never has more in flight than the budget holds.
TEST(PlanGroup, LargePicksCountFromThePick) {
  PlanGroup group = MakeGroup(64, 8);
  ExpectRoundsOfLargePicks(&group, 4);  // 4 of 201 bytes fill 1000
}

// On a far SOURCE the picks in their read hold no RAM yet: up to
// transit_bytes of unlanded renders do not count, so the reads in flight are
// not capped at what the budget holds of renders.
TEST(PlanGroup, PicksInTransitDoNotCountAgainstTheBudget) {
  PlanGroup group = MakeGroup(64, 8, 2000);  // 10 picks of 200 bytes in transit
  ExpectRoundsOfLargePicks(&group, 14);      // then 4 fill 1000
}

// Past a full budget the floor is shared: jobs of large picks get their part
// of PlanOverdraft() each, one pick at least, so none is starved however
// many hold theirs unread; jobs of small picks keep min_lookahead.
TEST(PlanGroup, FullBudgetFloorIsSharedBySampleSize) {
  PlanGroup group = MakeGroup(64, 8);
  std::vector<JobHandle> huge;
  for (int j = 0; j < 4; ++j) huge.push_back(group.AddJob(IdRange(0, 999), 1, 100));
  const JobHandle small = group.AddJob(IdRange(0, 999), 1, 1);
  const BudgetView full{1000, 1000, 1};
  std::vector<Pick> picks;
  group.Plan(full, &picks);
  std::map<JobHandle, int> n = CountByJob(picks);
  for (JobHandle j : huge) EXPECT_EQ(n[j], 1) << "a fifth of 250 bytes is below one pick";
  EXPECT_EQ(n[small], 8);
  // A fifth huge job comes while the others hold theirs: it still plans one.
  const JobHandle late = group.AddJob(IdRange(0, 999), 1, 100);
  picks.clear();
  group.Plan(full, &picks);
  EXPECT_EQ(CountByJob(picks)[late], 1);
  // With the overdraft to itself, a job plans as many as fit in it.
  PlanGroup alone = MakeGroup(64, 8);
  const JobHandle b = alone.AddJob(IdRange(0, 999), 1, 49);
  picks.clear();
  alone.Plan({4000, 4000, 1}, &picks);
  EXPECT_EQ(CountByJob(picks)[b], 8) << "min_lookahead caps it";
  PlanGroup alone2 = MakeGroup(64, 8);
  const JobHandle c = alone2.AddJob(IdRange(0, 999), 1, 199);
  picks.clear();
  alone2.Plan({4000, 4000, 1}, &picks);
  EXPECT_EQ(CountByJob(picks)[c], 5) << "1000 bytes of overdraft / 200 a pick";
}

TEST(PlanGroup, RoundsWaitForAnEighthOfTheLookaheadAndTakeEveryoneBelowIt) {
  PlanGroup group = MakeGroup(16, 16);
  const JobHandle a = group.AddJob(IdRange(0, 99), 1);
  const JobHandle b = group.AddJob(IdRange(0, 99), 1);
  std::vector<Pick> picks;
  group.Plan(kRoomy, &picks);
  EXPECT_EQ(CountByJob(picks), (std::map<JobHandle, int>{{a, 16}, {b, 16}}));
  // a reads 1: less than an eighth behind, no round.
  std::vector<SampleId> a_ids, b_ids;
  for (const Pick& p : picks) (p.job == a ? a_ids : b_ids).push_back(p.id);
  group.Done(a, a_ids[0]);
  picks.clear();
  group.Plan(kRoomy, &picks);
  EXPECT_TRUE(picks.empty());
  // a reads 1 more (an eighth behind): a round, which b (full) stays out
  // of, then b one behind and a full: no round.
  group.Done(a, a_ids[1]);
  picks.clear();
  group.Plan(kRoomy, &picks);
  EXPECT_EQ(CountByJob(picks), (std::map<JobHandle, int>{{a, 2}}));
  group.Done(b, b_ids[0]);
  picks.clear();
  group.Plan(kRoomy, &picks);
  EXPECT_TRUE(picks.empty());
  // Then both are behind, a by an eighth: both take part.
  group.Done(a, a_ids[2]);
  group.Done(a, a_ids[3]);
  picks.clear();
  group.Plan(kRoomy, &picks);
  EXPECT_EQ(CountByJob(picks), (std::map<JobHandle, int>{{a, 2}, {b, 1}}));
}

TEST(PlanGroup, PausedJobsDoNotPlan) {
  PlanGroup group = MakeGroup(8, 8);
  const JobHandle a = group.AddJob(IdRange(0, 99), 1);
  group.SetPaused(a, true);
  std::vector<Pick> picks;
  group.Plan(kRoomy, &picks);
  EXPECT_TRUE(picks.empty());
  group.SetPaused(a, false);
  group.Plan(kRoomy, &picks);
  EXPECT_EQ(picks.size(), 8u);
}

TEST(PlanGroup, NeedCountsIncludePlannedSamplesUntilDone) {
  PlanGroup group = MakeGroup(4, 4);
  const JobHandle a = group.AddJob(IdRange(0, 9), 1);
  group.AddJob(IdRange(0, 9), 1);
  std::vector<Pick> picks;
  group.Plan(kRoomy, &picks);
  const SampleId id = picks[0].id;
  uint32_t count = 0;
  group.Counts(std::span(&id, 1), std::span(&count, 1));
  EXPECT_EQ(count, 2u) << "picked by both, delivered to neither";
  group.Done(a, id);
  group.Counts(std::span(&id, 1), std::span(&count, 1));
  EXPECT_EQ(count, 1u);
  const SampleId unknown = 77;
  group.Counts(std::span(&unknown, 1), std::span(&count, 1));
  EXPECT_EQ(count, 0u);
}

TEST(PlanGroup, EpochsEndAndRestart) {
  PlanGroup group = MakeGroup(64, 64);
  const JobHandle a = group.AddJob(IdRange(0, 9), 1);
  std::vector<Pick> picks;
  group.Plan(kRoomy, &picks);
  ASSERT_EQ(picks.size(), 10u);
  std::vector<Pick> more;
  group.Plan(kRoomy, &more);
  EXPECT_TRUE(more.empty()) << "the epoch is planned";
  for (const Pick& p : picks) group.Done(a, p.id);
  group.StartEpoch(a);
  group.Plan(kRoomy, &more);
  EXPECT_EQ(more.size(), 10u);
}

// The mount's group derives its coupling horizon from the base images the
// RAM tier holds at each Plan(), so it follows the cache's estimate of
// their bytes as it settles; a given horizon, or none, stays.
TEST(PlanGroup, DerivedHorizonFollowsTheBudget) {
  PlanGroupOptions options;
  PlanGroup group(options);
  group.AddJob(IdRange(0, 9999), 1);
  std::vector<Pick> picks;
  group.Plan({0, 100000, 100}, &picks);  // holds 1000
  EXPECT_EQ(group.coupling_horizon(), 500u);
  group.Plan({0, 100000, 250}, &picks);  // the estimate grew: holds 400
  EXPECT_EQ(group.coupling_horizon(), 200u);
  group.Plan({0, 100000, 100000}, &picks);  // holds 1: the floor
  EXPECT_EQ(group.coupling_horizon(), 16u);
  group.Plan({0, 100000, 1}, &picks);  // the ceiling
  EXPECT_EQ(group.coupling_horizon(), 4096u);

  options.coupling_horizon = 64;
  PlanGroup fixed(options);
  fixed.AddJob(IdRange(0, 9), 1);
  fixed.Plan({0, 100000, 100}, &picks);
  EXPECT_EQ(fixed.coupling_horizon(), 64u);

  options.dependent_sampling = false;
  PlanGroup independent(options);
  independent.AddJob(IdRange(0, 9), 1);
  independent.Plan({0, 100000, 100}, &picks);
  EXPECT_EQ(independent.coupling_horizon(), 0u);
}

}  // namespace
}  // namespace joaderfs
