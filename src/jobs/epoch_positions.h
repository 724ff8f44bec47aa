// EpochPositions: a lane's epochs as a sequence of positions, from planned
// ids to samples handed to readers.
//
// Each position of an epoch holds a planned id; the owner requests its
// sample from the cache (which pins it), hears back (a sample, or null for
// an image that cannot be decoded), and hands ready samples to readers.
// Within each window of `window` consecutive positions samples are handed
// out in the order they became ready (RINAS), so one slow image does not
// stall the others; across windows the order is kept. An epoch ends when
// every position is done (handed out or skipped).
//
// Pure state: no locks, no I/O, no calls out. Each Lane owns one
// (jobs/lane.h); Lanes (jobs/lanes.h) serialises every call under the
// manager's lock and acts on what they return. Not thread-safe.

#ifndef JOADERFS_JOBS_EPOCH_POSITIONS_H_
#define JOADERFS_JOBS_EPOCH_POSITIONS_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "cache/sample_cache.h"
#include "catalog/catalog.h"
#include "loader/decoded_sample.h"

namespace joaderfs {

class EpochPositions {
 public:
  // `epoch_size`: positions per epoch (the subset's size, > 0); `window`:
  // the RINAS window (>= 1); `first_epoch`: the number of the first epoch
  // (a resumed job's, docs/design.md 2.7).
  EpochPositions(uint64_t epoch_size, uint64_t window, uint64_t first_epoch = 0);

  // A sample ready to hand to a reader.
  struct Ready {
    uint64_t position = 0;
    SampleId id = 0;
    SamplePtr sample;
    Tier tier = Tier::kRam;  // where its base image came from
  };

  // Starts the next epoch. REQUIRES: !running().
  void StartEpoch();
  // The same with `epoch_size` positions (> 0): a resumed epoch is shorter.
  void StartEpoch(uint64_t epoch_size);
  // Appends the next planned id; returns its position. REQUIRES: running()
  // and fewer than epoch_size() planned.
  uint64_t Plan(SampleId id);

  // The position's sample was requested (is pinned). REQUIRES: planned,
  // not requested.
  void MarkRequested(uint64_t position);
  // A load the owner requested for `epoch` finished. A stale answer (an
  // earlier epoch, a position already done or given back) returns false and
  // changes nothing. A null sample means the image is bad: the position is
  // skipped (done), and Skipped() counts it. `tier`: where the sample's base
  // image came from, handed on with it (Ready).
  bool OnLoaded(uint64_t epoch, uint64_t position, const SamplePtr& sample, Tier tier = Tier::kRam);

  // The next ready sample of the current window, if any.
  std::optional<Ready> PeekReady() const;
  // The same, marked done (delivered).
  std::optional<Ready> TakeReady();

  // Gives back every pin (requested or ready positions become planned
  // again); returns their ids, one per pin, for the owner to release.
  std::vector<SampleId> ReleasePins();
  // Positions planned and not requested (after ReleasePins), ascending.
  std::vector<uint64_t> Unrequested() const;
  // The id planned at a live position.
  SampleId IdAt(uint64_t position) const;

  bool running() const { return running_; }
  // The current epoch, or the next one while !running().
  uint64_t epoch() const { return epoch_; }
  uint64_t epochs_completed() const { return epochs_completed_; }
  uint64_t epoch_size() const { return epoch_size_; }
  uint64_t planned() const { return planned_; }
  uint64_t done() const { return done_; }
  // Positions planned and not requested (the pins given back, or not yet
  // asked for); planned() - done() - unrequested() are in flight.
  uint64_t unrequested() const { return unrequested_; }
  uint64_t delivered() const { return delivered_; }  // this epoch
  uint64_t skipped() const { return skipped_; }      // this epoch
  uint64_t delivered_total() const { return delivered_total_; }
  // Ids done since the last call (handed out or skipped), for the owner to
  // release and report to the planner.
  std::vector<SampleId> TakeDoneIds();

 private:
  enum class State : uint8_t { kPlanned, kRequested, kReady, kDone };
  struct Slot {
    SampleId id = 0;
    State state = State::kPlanned;
    SamplePtr sample;        // while kReady
    Tier tier = Tier::kRam;  // while kReady
  };

  uint64_t window_end() const;
  Slot& At(uint64_t position) { return slots_[position - window_start_]; }
  void MarkDone(uint64_t position);
  void AdvanceWindow();
  void EndEpoch();

  uint64_t epoch_size_;
  const uint64_t window_;
  uint64_t epoch_ = 0;
  bool running_ = false;
  uint64_t epochs_completed_ = 0;
  // Positions [window_start_, window_start_ + slots_.size()) of the epoch.
  std::deque<Slot> slots_;
  uint64_t window_start_ = 0;
  uint64_t planned_ = 0;
  uint64_t done_ = 0;
  uint64_t unrequested_ = 0;
  uint64_t done_in_window_ = 0;
  std::deque<uint64_t> ready_;  // ready positions of the window, in completion order
  uint64_t delivered_ = 0;
  uint64_t skipped_ = 0;
  uint64_t delivered_total_ = 0;
  std::vector<SampleId> done_ids_;
};

}  // namespace joaderfs

#endif  // JOADERFS_JOBS_EPOCH_POSITIONS_H_
