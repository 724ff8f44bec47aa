#include "pacing/drift.h"

#include <algorithm>

namespace joaderfs {

void DriftState::NoteServed(Clock::time_point now, uint64_t progress) {
  last_served_ = now;
  // A resume starts the lane's count again: so does its pace.
  if (!marks_.empty() && progress < marks_.back().progress) {
    marks_.clear();
    first_served_.reset();
  }
  if (!first_served_) first_served_ = now;
  if (marks_.empty() || now - marks_.back().at >= std::chrono::seconds(1)) {
    marks_.push_back({now, progress, HeldTotal(now)});
  }
  while (marks_.size() > 1 && now - marks_[1].at >= kPaceWindow) marks_.pop_front();
}

std::optional<double> DriftState::FreePace(Clock::time_point now, uint64_t progress) const {
  if (marks_.empty()) return std::nullopt;
  const Mark& from = marks_.front();
  const Clock::duration span = now - from.at;
  if (span < kPaceMinSpan || progress < from.progress) return std::nullopt;
  const Clock::duration free = span - (HeldTotal(now) - from.held_total);
  // Held nearly all along: no pace of its own to tell.
  if (free < kPaceMinSpan / 2) return std::nullopt;
  return static_cast<double>(progress - from.progress) /
         std::chrono::duration<double>(free).count();
}

bool DriftState::Hold(Clock::time_point now) {
  const auto accrued = std::chrono::duration_cast<Clock::duration>((now - budget_at_) * kHoldShare);
  budget_ = std::min<Clock::duration>(budget_ + accrued, kHoldBurst);
  budget_at_ = now;
  if (!held_since_) {
    if (budget_ <= Clock::duration::zero()) return false;
    held_since_ = now;
    return true;
  }
  return now - *held_since_ < budget_;
}

void DriftState::EndHold(Clock::time_point now) {
  if (!held_since_) return;
  const Clock::duration held = now - *held_since_;
  held_total_ += held;
  budget_ = std::max<Clock::duration>(budget_ - held, Clock::duration::zero());
  held_since_.reset();
}

DriftState::Clock::duration DriftState::HeldTotal(Clock::time_point now) const {
  return held_total_ + (held_since_ ? now - *held_since_ : Clock::duration::zero());
}

}  // namespace joaderfs
