// The per-job epoch and window state machine, without a cache or FUSE.

#include "jobs/epoch_positions.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace joaderfs {
namespace {

SamplePtr Sample() {
  auto s = std::make_shared<DecodedSample>();
  s->height = s->width = 1;
  s->channels = 3;
  return s;
}

// Plans ids 100, 101, ... for every position and marks them requested.
void PlanAll(EpochPositions& stream) {
  for (uint64_t p = 0; p < stream.epoch_size(); ++p) {
    stream.MarkRequested(stream.Plan(static_cast<SampleId>(100 + p)));
  }
}

std::vector<SampleId> Drain(EpochPositions& stream) {
  std::vector<SampleId> ids;
  while (auto ready = stream.TakeReady()) ids.push_back(ready->id);
  return ids;
}

TEST(EpochPositions, StrictOrderWithWindowOne) {
  EpochPositions stream(4, 1);
  stream.StartEpoch();
  PlanAll(stream);
  // Loads finish in reverse: nothing is ready until position 0 is.
  for (uint64_t p : {3, 2, 1}) ASSERT_TRUE(stream.OnLoaded(0, p, Sample()));
  EXPECT_FALSE(stream.PeekReady());
  ASSERT_TRUE(stream.OnLoaded(0, 0, Sample()));
  EXPECT_EQ(Drain(stream), (std::vector<SampleId>{100, 101, 102, 103}));
  EXPECT_FALSE(stream.running());
  EXPECT_EQ(stream.epoch(), 1u);
  EXPECT_EQ(stream.epochs_completed(), 1u);
  EXPECT_EQ(stream.delivered(), 4u);
}

TEST(EpochPositions, CompletionOrderWithinTheWindowOnly) {
  EpochPositions stream(6, 3);
  stream.StartEpoch();
  PlanAll(stream);
  for (uint64_t p : {4, 2, 0, 1}) ASSERT_TRUE(stream.OnLoaded(0, p, Sample()));
  // Window [0, 3): 2, 0, 1 in completion order; 4 waits for the next window.
  EXPECT_EQ(Drain(stream), (std::vector<SampleId>{102, 100, 101, 104}));
  ASSERT_TRUE(stream.OnLoaded(0, 5, Sample()));
  ASSERT_TRUE(stream.OnLoaded(0, 3, Sample()));
  EXPECT_EQ(Drain(stream), (std::vector<SampleId>{105, 103}));
  EXPECT_FALSE(stream.running());
}

TEST(EpochPositions, SkippedSamplesAreDoneAndCounted) {
  EpochPositions stream(3, 2);
  stream.StartEpoch();
  PlanAll(stream);
  ASSERT_TRUE(stream.OnLoaded(0, 2, nullptr));  // beyond the window
  ASSERT_TRUE(stream.OnLoaded(0, 0, nullptr));
  ASSERT_TRUE(stream.OnLoaded(0, 1, Sample()));
  EXPECT_EQ(Drain(stream), (std::vector<SampleId>{101}));
  EXPECT_FALSE(stream.running());
  EXPECT_EQ(stream.skipped(), 2u);
  EXPECT_EQ(stream.delivered(), 1u);
  EXPECT_EQ(stream.TakeDoneIds(), (std::vector<SampleId>{102, 100, 101}));
}

TEST(EpochPositions, StaleLoadsChangeNothing) {
  EpochPositions stream(2, 2);
  stream.StartEpoch();
  PlanAll(stream);
  EXPECT_FALSE(stream.OnLoaded(1, 0, Sample())) << "another epoch";
  ASSERT_TRUE(stream.OnLoaded(0, 0, Sample()));
  EXPECT_FALSE(stream.OnLoaded(0, 0, Sample())) << "already ready";
  EXPECT_FALSE(stream.OnLoaded(0, 9, Sample())) << "never planned";
  ASSERT_TRUE(stream.TakeReady());
  EXPECT_FALSE(stream.OnLoaded(0, 0, Sample())) << "already done";
}

TEST(EpochPositions, ReleasedPinsComeBackAsUnrequested) {
  EpochPositions stream(4, 4);
  stream.StartEpoch();
  PlanAll(stream);
  ASSERT_TRUE(stream.OnLoaded(0, 1, Sample()));
  ASSERT_TRUE(stream.TakeReady());  // position 1 done
  ASSERT_TRUE(stream.OnLoaded(0, 2, Sample()));
  EXPECT_EQ(stream.ReleasePins(), (std::vector<SampleId>{100, 102, 103}));
  EXPECT_FALSE(stream.PeekReady());
  EXPECT_FALSE(stream.OnLoaded(0, 0, Sample())) << "its pin was given back";
  EXPECT_EQ(stream.Unrequested(), (std::vector<uint64_t>{0, 2, 3}));
  EXPECT_EQ(stream.unrequested(), 3u) << "nothing in flight";
  for (uint64_t p : stream.Unrequested()) stream.MarkRequested(p);
  EXPECT_EQ(stream.unrequested(), 0u);
  for (uint64_t p : {0, 2, 3}) ASSERT_TRUE(stream.OnLoaded(0, p, Sample()));
  EXPECT_EQ(Drain(stream), (std::vector<SampleId>{100, 102, 103}));
  EXPECT_FALSE(stream.running());
}

TEST(EpochPositions, NextEpochStartsAfresh) {
  EpochPositions stream(2, 1);
  stream.StartEpoch();
  PlanAll(stream);
  for (uint64_t p : {0, 1}) ASSERT_TRUE(stream.OnLoaded(0, p, Sample()));
  Drain(stream);
  stream.StartEpoch();
  EXPECT_EQ(stream.epoch(), 1u);
  EXPECT_EQ(stream.planned(), 0u);
  EXPECT_EQ(stream.delivered(), 0u);
  EXPECT_EQ(stream.delivered_total(), 2u);
  stream.MarkRequested(stream.Plan(7));
  EXPECT_TRUE(stream.OnLoaded(1, 0, Sample()));
}

}  // namespace
}  // namespace joaderfs
