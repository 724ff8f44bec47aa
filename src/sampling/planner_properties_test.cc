// Properties every Planner keeps (planner.h), checked on the dependent and the
// independent planner: P1 "exactly once" under random schedules of arrivals,
// departures, epoch starts and speeds; Remaining and RefCount against a
// model; reproducibility from the seed.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "common/random.h"
#include "sampling/planner.h"

namespace joaderfs {
namespace {

struct PlannerKind {
  const char* name;
  std::unique_ptr<Planner> (*make)(uint64_t seed);
};

class PlannerPropertyTest : public ::testing::TestWithParam<PlannerKind> {};

// What a job must still receive, kept independently of the planner.
struct ModelJob {
  std::vector<SampleId> subset;
  std::vector<uint8_t> needed;  // by id
  uint64_t remaining = 0;
  double speed = 1;      // probability of taking part in a round
  int restart_wait = 0;  // rounds to idle between epochs
  int waited = 0;
};

Roaring RandomSubset(Rng& rng, SampleId universe) {
  Roaring ids;
  switch (rng.Below(5)) {
    case 0: ids.addRange(0, universe); break;
    case 1: {
      const SampleId a = static_cast<SampleId>(rng.Below(universe));
      const SampleId b = static_cast<SampleId>(rng.Below(universe));
      ids.addRange(std::min(a, b), std::max(a, b) + 1ULL);
      break;
    }
    case 2:
    case 3: {
      const double fraction = 0.05 + 0.9 * rng.Unit();
      for (SampleId id = 0; id < universe; ++id) {
        if (rng.Unit() < fraction) ids.add(id);
      }
      break;
    }
    default:
      for (uint64_t n = 1 + rng.Below(3); n > 0; --n) {
        ids.add(static_cast<SampleId>(rng.Below(universe)));
      }
  }
  if (ids.isEmpty()) ids.add(static_cast<SampleId>(rng.Below(universe)));
  return ids;
}

// Plays one random schedule against `planner`, checking every answer
// against the model; appends every pick to `log`. With `new_subsets`, half
// the epochs a job starts are over a new random subset (as a data-parallel
// rank's shard changes every epoch).
void PlaySchedule(Planner& planner, uint64_t seed, std::vector<Pick>* log,
                  bool new_subsets = false) {
  constexpr JobHandle kHandles = 12;
  constexpr int kSteps = 1500;
  Rng rng(seed);
  const SampleId universe = static_cast<SampleId>(16 + rng.Below(240));
  std::map<JobHandle, ModelJob> jobs;
  auto add = [&](JobHandle handle) {
    const Roaring subset = RandomSubset(rng, universe);
    ModelJob& job = jobs[handle];
    job.subset.resize(subset.cardinality());
    subset.toUint32Array(job.subset.data());
    job.needed.assign(universe, 0);
    for (SampleId id : job.subset) job.needed[id] = 1;
    job.remaining = job.subset.size();
    job.speed = 0.1 + 0.9 * rng.Unit();
    job.restart_wait = static_cast<int>(rng.Below(4));
    planner.AddJob(handle, subset);
  };
  auto check_counts = [&](SampleId id) {
    uint32_t expected = 0;
    for (const auto& [handle, job] : jobs) expected += job.needed[id];
    ASSERT_EQ(planner.RefCount(id), expected) << "id " << id;
  };

  for (JobHandle h = 0; h < 8; ++h) add(h);
  std::vector<JobHandle> participants;
  std::vector<Pick> picks;
  for (int step = 0; step < kSteps; ++step) {
    const uint64_t action = rng.Below(100);
    if (action < 3 && jobs.size() < kHandles) {
      JobHandle handle;
      do {
        handle = static_cast<JobHandle>(rng.Below(kHandles));
      } while (jobs.contains(handle));
      add(handle);
      continue;
    }
    if (action < 5 && jobs.size() > 1) {
      auto it = jobs.begin();
      std::advance(it, rng.Below(jobs.size()));
      planner.RemoveJob(it->first);
      jobs.erase(it);
      continue;
    }
    // Jobs whose epoch ended start the next one after their idle time.
    for (auto& [handle, job] : jobs) {
      if (job.remaining == 0 && job.waited++ >= job.restart_wait) {
        if (new_subsets && rng.Below(2) == 0) {
          const Roaring subset = RandomSubset(rng, universe);
          job.subset.resize(subset.cardinality());
          subset.toUint32Array(job.subset.data());
          planner.StartEpoch(handle, subset);
        } else {
          planner.StartEpoch(handle);
        }
        for (SampleId id : job.subset) job.needed[id] = 1;
        job.remaining = job.subset.size();
        job.waited = 0;
      }
    }
    participants.clear();
    for (const auto& [handle, job] : jobs) {
      if (rng.Unit() < job.speed) participants.push_back(handle);
    }
    rng.Shuffle(participants);
    picks.clear();
    planner.Round(participants, &picks);
    size_t expected_picks = 0;
    for (JobHandle handle : participants) {
      expected_picks += jobs.at(handle).remaining > 0;
    }
    ASSERT_EQ(picks.size(), expected_picks);
    std::vector<JobHandle> served;
    for (const Pick& pick : picks) {
      ASSERT_TRUE(std::find(participants.begin(), participants.end(), pick.job) !=
                  participants.end());
      served.push_back(pick.job);
      ModelJob& job = jobs.at(pick.job);
      ASSERT_LT(pick.id, universe);
      ASSERT_TRUE(job.needed[pick.id])
          << "job " << pick.job << " got id " << pick.id << " outside what it still needs";
      job.needed[pick.id] = 0;
      --job.remaining;
      log->push_back(pick);
    }
    std::sort(served.begin(), served.end());
    ASSERT_TRUE(std::adjacent_find(served.begin(), served.end()) == served.end())
        << "a job got two ids in one round";
    for (const auto& [handle, job] : jobs) {
      ASSERT_EQ(planner.Remaining(handle), job.remaining);
    }
    check_counts(static_cast<SampleId>(rng.Below(universe)));
    if (step % 100 == 0) {
      for (SampleId id = 0; id < universe; ++id) check_counts(id);
    }
  }
}

TEST_P(PlannerPropertyTest, EachIdExactlyOncePerEpochUnderRandomSchedules) {
  constexpr int kSchedules = 300;
  for (int s = 0; s < kSchedules; ++s) {
    SCOPED_TRACE(testing::Message() << "schedule " << s);
    auto planner = GetParam().make(1000 + s);
    std::vector<Pick> log;
    PlaySchedule(*planner, s, &log);
    if (HasFatalFailure()) return;
    EXPECT_EQ(planner->Stats().picks, log.size());
  }
}

TEST_P(PlannerPropertyTest, EachIdExactlyOncePerEpochWhenSubsetsChangeBetweenEpochs) {
  constexpr int kSchedules = 150;
  for (int s = 0; s < kSchedules; ++s) {
    SCOPED_TRACE(testing::Message() << "schedule " << s);
    auto planner = GetParam().make(5000 + s);
    std::vector<Pick> log;
    PlaySchedule(*planner, 7000 + s, &log, /*new_subsets=*/true);
    if (HasFatalFailure()) return;
    EXPECT_EQ(planner->Stats().picks, log.size());
  }
}

TEST_P(PlannerPropertyTest, SameSeedSameCallsSamePicks) {
  for (uint64_t s = 0; s < 5; ++s) {
    auto first = GetParam().make(77);
    auto second = GetParam().make(77);
    std::vector<Pick> a, b;
    PlaySchedule(*first, s, &a);
    PlaySchedule(*second, s, &b);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].job, b[i].job);
      ASSERT_EQ(a[i].id, b[i].id);
    }
  }
}

TEST_P(PlannerPropertyTest, NonParticipantsAreUntouched) {
  auto planner = GetParam().make(5);
  Roaring all;
  all.addRange(0, 100);
  planner->AddJob(1, all);
  planner->AddJob(2, all);
  const JobHandle only[] = {1};
  std::vector<Pick> picks;
  for (int r = 0; r < 40; ++r) planner->Round(only, &picks);
  ASSERT_EQ(picks.size(), 40u);
  EXPECT_EQ(planner->Remaining(1), 60u);
  EXPECT_EQ(planner->Remaining(2), 100u);
  for (const Pick& p : picks) {
    EXPECT_EQ(p.job, 1u);
    EXPECT_EQ(planner->RefCount(p.id), 1u);
  }
  // Job 2 still receives all 100 ids.
  const JobHandle other[] = {2};
  picks.clear();
  for (int r = 0; r < 101; ++r) planner->Round(other, &picks);
  ASSERT_EQ(picks.size(), 100u);
  Roaring got;
  for (const Pick& p : picks) got.add(p.id);
  EXPECT_EQ(got, all);
}

TEST_P(PlannerPropertyTest, RemoveJobReleasesItsReferences) {
  auto planner = GetParam().make(9);
  Roaring a, b;
  a.addRange(0, 50);
  b.addRange(25, 75);
  planner->AddJob(3, a);
  planner->AddJob(4, b);
  EXPECT_EQ(planner->RefCount(30), 2u);
  EXPECT_EQ(planner->RefCount(10), 1u);
  EXPECT_EQ(planner->RefCount(80), 0u);
  planner->RemoveJob(3);
  EXPECT_EQ(planner->RefCount(30), 1u);
  EXPECT_EQ(planner->RefCount(10), 0u);
  // The handle can be reused, with a new subset.
  planner->AddJob(3, b);
  EXPECT_EQ(planner->RefCount(30), 2u);
  EXPECT_EQ(planner->Remaining(3), 50u);
}

TEST_P(PlannerPropertyTest, ExhaustedParticipantGetsNothingUntilNextEpoch) {
  auto planner = GetParam().make(11);
  Roaring two;
  two.add(7);
  two.add(9);
  planner->AddJob(0, two);
  const JobHandle job[] = {0};
  std::vector<Pick> picks;
  for (int r = 0; r < 4; ++r) planner->Round(job, &picks);
  ASSERT_EQ(picks.size(), 2u);
  EXPECT_EQ(planner->Stats().rounds, 2u);
  EXPECT_EQ(planner->RefCount(7), 0u);
  planner->StartEpoch(0);
  EXPECT_EQ(planner->RefCount(7), 1u);
  EXPECT_EQ(planner->Remaining(0), 2u);
}

// All of one job's picks over its epoch (one job per round).
std::vector<SampleId> EpochOrder(Planner& planner, JobHandle job) {
  const JobHandle jobs[] = {job};
  std::vector<Pick> picks;
  while (planner.Remaining(job) > 0) planner.Round(jobs, &picks);
  std::vector<SampleId> order;
  for (const Pick& p : picks) order.push_back(p.id);
  return order;
}

// A group= job's order after a restart or resume (jobs/lane.h own_group):
// the independent planner resumed at epoch 2 less the ids handed out goes
// on with the rest of epoch 2's order, then epoch 3's, as the job that was
// never stopped does.
TEST(IndependentPlanner, ResumedJobGoesOnWhereItWas) {
  Roaring subset;
  for (SampleId id = 3; id < 200; id += 2) subset.add(id);
  auto running = NewIndependentPlanner(42);
  running->AddJob(0, subset);
  std::vector<std::vector<SampleId>> orders;
  for (int epoch = 0; epoch < 4; ++epoch) {
    if (epoch > 0) running->StartEpoch(0);
    orders.push_back(EpochOrder(*running, 0));
  }
  ASSERT_NE(orders[2], orders[0]);
  Roaring done;
  for (size_t i = 0; i < 17; ++i) done.add(orders[2][i]);
  auto resumed = NewIndependentPlanner(42);
  resumed->ResumeJob(0, subset - done, 2, done);
  EXPECT_EQ(resumed->Remaining(0), subset.cardinality() - 17);
  EXPECT_EQ(resumed->RefCount(orders[2][0]), 0u);
  EXPECT_EQ(resumed->RefCount(orders[2][17]), 1u);
  EXPECT_EQ(EpochOrder(*resumed, 0),
            std::vector<SampleId>(orders[2].begin() + 17, orders[2].end()));
  resumed->StartEpoch(0);
  EXPECT_EQ(resumed->Remaining(0), subset.cardinality());
  EXPECT_EQ(EpochOrder(*resumed, 0), orders[3]);
}

INSTANTIATE_TEST_SUITE_P(
    Planners, PlannerPropertyTest,
    ::testing::Values(PlannerKind{"Dependent",
                                  [](uint64_t seed) { return NewDependentPlanner(seed); }},
                      PlannerKind{"Independent", &NewIndependentPlanner}),
    [](const ::testing::TestParamInfo<PlannerKind>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace joaderfs
