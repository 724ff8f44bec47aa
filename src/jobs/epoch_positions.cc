#include "jobs/epoch_positions.h"

#include <algorithm>
#include <cassert>

namespace joaderfs {

EpochPositions::EpochPositions(uint64_t epoch_size, uint64_t window, uint64_t first_epoch)
    : epoch_size_(epoch_size), window_(std::max<uint64_t>(window, 1)), epoch_(first_epoch) {}

uint64_t EpochPositions::window_end() const {
  return std::min(window_start_ + window_, epoch_size_);
}

void EpochPositions::StartEpoch() { StartEpoch(epoch_size_); }

void EpochPositions::StartEpoch(uint64_t epoch_size) {
  assert(!running_ && epoch_size > 0);
  epoch_size_ = epoch_size;
  running_ = true;
  slots_.clear();
  ready_.clear();
  window_start_ = planned_ = done_ = done_in_window_ = unrequested_ = 0;
  delivered_ = skipped_ = 0;
}

uint64_t EpochPositions::Plan(SampleId id) {
  assert(running_ && planned_ < epoch_size_);
  slots_.push_back({id, State::kPlanned, nullptr});
  ++unrequested_;
  return planned_++;
}

void EpochPositions::MarkRequested(uint64_t position) {
  Slot& slot = At(position);
  assert(slot.state == State::kPlanned);
  slot.state = State::kRequested;
  --unrequested_;
}

bool EpochPositions::OnLoaded(uint64_t epoch, uint64_t position, const SamplePtr& sample,
                              Tier tier) {
  if (!running_ || epoch != epoch_ || position < window_start_ ||
      position >= window_start_ + slots_.size()) {
    return false;
  }
  Slot& slot = At(position);
  if (slot.state != State::kRequested) return false;
  if (!sample) {
    ++skipped_;
    MarkDone(position);
  } else {
    slot.state = State::kReady;
    slot.sample = sample;
    slot.tier = tier;
    if (position < window_end()) ready_.push_back(position);
  }
  return true;
}

std::optional<EpochPositions::Ready> EpochPositions::PeekReady() const {
  if (ready_.empty()) return std::nullopt;
  const Slot& slot = slots_[ready_.front() - window_start_];
  return Ready{ready_.front(), slot.id, slot.sample, slot.tier};
}

std::optional<EpochPositions::Ready> EpochPositions::TakeReady() {
  if (ready_.empty()) return std::nullopt;
  const uint64_t position = ready_.front();
  ready_.pop_front();
  Slot& slot = At(position);
  Ready ready{position, slot.id, std::move(slot.sample), slot.tier};
  ++delivered_;
  ++delivered_total_;
  MarkDone(position);
  return ready;
}

// A position skipped early may lie beyond the current window.
void EpochPositions::MarkDone(uint64_t position) {
  Slot& slot = At(position);
  slot.state = State::kDone;
  slot.sample.reset();
  done_ids_.push_back(slot.id);
  ++done_;
  if (position < window_end()) ++done_in_window_;
  if (done_ == epoch_size_) {
    EndEpoch();
    return;
  }
  while (done_in_window_ == window_end() - window_start_) AdvanceWindow();
}

// REQUIRES: every position of the window is done and the epoch is not.
void EpochPositions::AdvanceWindow() {
  const uint64_t width = window_end() - window_start_;
  slots_.erase(slots_.begin(), slots_.begin() + static_cast<ptrdiff_t>(width));
  window_start_ += width;
  done_in_window_ = 0;
  // Samples of the new window that finished early are ready in position
  // order; those skipped early count as done.
  const uint64_t planned_end = window_start_ + slots_.size();
  for (uint64_t p = window_start_; p < std::min(window_end(), planned_end); ++p) {
    const State state = At(p).state;
    if (state == State::kReady) ready_.push_back(p);
    if (state == State::kDone) ++done_in_window_;
  }
}

void EpochPositions::EndEpoch() {
  running_ = false;
  slots_.clear();
  ready_.clear();
  ++epochs_completed_;
  ++epoch_;
}

std::vector<SampleId> EpochPositions::ReleasePins() {
  std::vector<SampleId> ids;
  for (Slot& slot : slots_) {
    if (slot.state == State::kRequested || slot.state == State::kReady) {
      ids.push_back(slot.id);
      ++unrequested_;
      slot.state = State::kPlanned;
      slot.sample.reset();
    }
  }
  ready_.clear();
  return ids;
}

std::vector<uint64_t> EpochPositions::Unrequested() const {
  std::vector<uint64_t> positions;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].state == State::kPlanned) positions.push_back(window_start_ + i);
  }
  return positions;
}

SampleId EpochPositions::IdAt(uint64_t position) const {
  return slots_[position - window_start_].id;
}

std::vector<SampleId> EpochPositions::TakeDoneIds() {
  std::vector<SampleId> ids;
  ids.swap(done_ids_);
  return ids;
}

}  // namespace joaderfs
