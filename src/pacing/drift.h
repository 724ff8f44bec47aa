// The drift bound's state of one lane (docs/planner.md "Drift").
//
// Jobs with the same or overlapping subsets share decodes only while they
// stay within the coupling horizon of each other. Lanes (jobs/drift_hold.h)
// hold the reads of a lane that runs too far ahead of an active peer of
// similar pace; this class keeps what that decision needs per lane: when
// it was first and last served, its pace while free to read, and its hold
// budget.
//
// Not thread-safe: each Lane owns one, guarded by the job
// manager's lock (JobManager::mu_).

#ifndef JOADERFS_PACING_DRIFT_H_
#define JOADERFS_PACING_DRIFT_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>

namespace joaderfs {

class DriftState {
 public:
  using Clock = std::chrono::steady_clock;

  // A peer with no read answered for this long has stopped: it holds nobody.
  static constexpr std::chrono::seconds kActiveWindow{2};
  // The hold budget grows by this share of wall time, up to kHoldBurst, from
  // empty when the lane is made: a lane held longer runs free.
  static constexpr double kHoldShare = 0.5;
  static constexpr std::chrono::seconds kHoldBurst{10};
  // Pace is measured over about kPaceWindow, and known once kPaceMinSpan of
  // history is there. Jobs started together drift apart fastest in their
  // first seconds on a busy machine, and twins that pass the coupling
  // horizon never share again, so a pace is told early: half a second
  // tells a twin (within kSimilarPace, jobs/drift_hold.cc) from a job at
  // half its speed even when a reader is descheduled now and then; 4 s
  // held nobody in the first 4 s (docs/benchmarks.md "Sharing on a busy
  // machine").
  static constexpr std::chrono::seconds kPaceWindow{32};
  static constexpr std::chrono::milliseconds kPaceMinSpan{500};

  explicit DriftState(Clock::time_point created) : budget_at_(created) {}

  // A read of the lane got data; `progress`: its picks done over its life.
  void NoteServed(Clock::time_point now, uint64_t progress);
  // When its first read got data (again after a resume); nullopt before.
  std::optional<Clock::time_point> first_served() const { return first_served_; }
  // Whether a read was answered within kActiveWindow.
  bool Active(Clock::time_point now) const { return now - last_served_ < kActiveWindow; }

  // Picks per second of the time the lane was not held, over the last
  // kPaceWindow; nullopt under kPaceMinSpan of history. `progress` as above.
  std::optional<double> FreePace(Clock::time_point now, uint64_t progress) const;

  // Starts or goes on holding; false once the budget is spent (the lane
  // runs free) or when there is none.
  bool Hold(Clock::time_point now);
  // Ends a hold, if one runs: its length comes out of the budget.
  void EndHold(Clock::time_point now);
  bool held() const { return held_since_.has_value(); }

 private:
  struct Mark {
    Clock::time_point at;
    uint64_t progress;
    Clock::duration held_total;  // held_total_ then
  };
  Clock::duration HeldTotal(Clock::time_point now) const;

  Clock::time_point last_served_{};
  std::optional<Clock::time_point> first_served_;
  std::deque<Mark> marks_;  // about one a second, oldest first
  Clock::duration held_total_{};
  std::optional<Clock::time_point> held_since_;
  Clock::duration budget_{};
  Clock::time_point budget_at_;  // the budget is accrued up to here
};

}  // namespace joaderfs

#endif  // JOADERFS_PACING_DRIFT_H_
