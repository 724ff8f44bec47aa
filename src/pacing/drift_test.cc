#include "pacing/drift.h"

#include <gtest/gtest.h>

namespace joaderfs {
namespace {

using Clock = DriftState::Clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

const Clock::time_point kStart = Clock::time_point() + std::chrono::hours(1);

// Serves a lane at `per_second` picks a second from `from` to `to`, one
// hand-out every 100 ms; returns its progress.
uint64_t ServeSteadily(DriftState* d, Clock::time_point from, Clock::time_point to,
                       uint64_t progress, uint64_t per_second) {
  for (Clock::time_point t = from; t <= to; t += milliseconds(100)) {
    d->NoteServed(t, progress);
    progress += per_second / 10;
  }
  return progress;
}

TEST(DriftState, PaceIsKnownAfterItsMinimumSpan) {
  DriftState d(kStart);
  const uint64_t p = ServeSteadily(&d, kStart, kStart + milliseconds(400), 0, 20);
  EXPECT_FALSE(d.FreePace(kStart + milliseconds(400), p)) << "0.4 s of history";
  const uint64_t q = ServeSteadily(&d, kStart + milliseconds(500), kStart + seconds(2), p, 20);
  const std::optional<double> pace = d.FreePace(kStart + seconds(2), q);
  ASSERT_TRUE(pace);
  EXPECT_NEAR(*pace, 20.0, 1.5) << "one hand-out of 2 picks past the 2 s";
}

TEST(DriftState, PaceLeavesOutTheTimeHeld) {
  DriftState d(kStart);
  // Served for 4 s, idle for 4 s (its own pace), held for 3 s, served 2 s.
  uint64_t p = ServeSteadily(&d, kStart, kStart + seconds(4), 0, 20);
  const Clock::time_point hold = kStart + seconds(8);
  ASSERT_TRUE(d.Hold(hold));
  EXPECT_TRUE(d.held());
  ASSERT_TRUE(d.Hold(hold + seconds(3))) << "5.5 s of budget accrued by then";
  d.EndHold(hold + seconds(3));
  EXPECT_FALSE(d.held());
  p = ServeSteadily(&d, hold + seconds(3), hold + seconds(5), p, 20);
  // 13 s since the first mark, of which 10 s not held.
  const std::optional<double> pace = d.FreePace(hold + seconds(5), p);
  ASSERT_TRUE(pace);
  EXPECT_NEAR(*pace, static_cast<double>(p) / 10.0, 0.01);
}

TEST(DriftState, BudgetStartsEmptyAndGrowsAtHalfTheWallTime) {
  DriftState d(kStart);
  EXPECT_FALSE(d.Hold(kStart)) << "no budget at the start";
  EXPECT_FALSE(d.held());
  // 2 s later: 1 s of budget, which grows by half of the time held, so it
  // lasts 2 s.
  const Clock::time_point t = kStart + seconds(2);
  ASSERT_TRUE(d.Hold(t));
  EXPECT_TRUE(d.Hold(t + milliseconds(1900)));
  EXPECT_FALSE(d.Hold(t + milliseconds(2100))) << "spent";
  d.EndHold(t + milliseconds(2100));
  EXPECT_FALSE(d.Hold(t + milliseconds(2100))) << "nothing left";
  EXPECT_TRUE(d.Hold(t + milliseconds(2300))) << "0.1 s accrued since";
}

TEST(DriftState, BudgetIsCappedAtTheBurst) {
  DriftState d(kStart);
  const Clock::time_point t = kStart + std::chrono::hours(1);
  ASSERT_TRUE(d.Hold(t));
  EXPECT_TRUE(d.Hold(t + DriftState::kHoldBurst - milliseconds(1)));
  // The budget also grew during the hold, but never past the burst.
  EXPECT_FALSE(d.Hold(t + DriftState::kHoldBurst + milliseconds(1)));
}

TEST(DriftState, ActiveForTwoSecondsAfterAHandOut) {
  DriftState d(kStart);
  EXPECT_FALSE(d.Active(kStart)) << "never served";
  d.NoteServed(kStart + seconds(1), 1);
  EXPECT_TRUE(d.Active(kStart + seconds(2)));
  EXPECT_FALSE(d.Active(kStart + seconds(3)));
}

TEST(DriftState, AResumeStartsThePaceAgain) {
  DriftState d(kStart);
  const uint64_t p = ServeSteadily(&d, kStart, kStart + seconds(6), 1000, 20);
  ASSERT_TRUE(d.FreePace(kStart + seconds(6), p));
  // Progress counts again from 0 after a resume.
  d.NoteServed(kStart + milliseconds(6100), 2);
  EXPECT_FALSE(d.FreePace(kStart + milliseconds(6100), 2));
}

}  // namespace
}  // namespace joaderfs
