#include "sampling/dependent_planner.h"

#include <algorithm>
#include <cassert>
#include <memory>

namespace joaderfs {

size_t ApproximateRoaringBytes(const Roaring& bitmap) {
  roaring_statistics_t stats;
  roaring_bitmap_statistics(&bitmap.roaring, &stats);
  // Per container: a 16-bit key, a typecode, a pointer and the container
  // header (cardinality and capacity or a data pointer).
  constexpr size_t kPerContainer = 2 + 1 + sizeof(void*) + 16;
  return sizeof(Roaring) + stats.n_containers * kPerContainer + stats.n_bytes_array_containers +
         stats.n_bytes_run_containers + stats.n_bytes_bitset_containers;
}

Roaring CopyWithoutRuns(const Roaring& ids) {
  // Value by value: roaring_bitmap_remove_run_compression of CRoaring
  // 0.2.66 crashes on a short run that ends a 64Ki chunk.
  Roaring out;
  std::vector<uint32_t> buffer(1 << 16);
  roaring_uint32_iterator_t* it = roaring_create_iterator(&ids.roaring);
  while (const uint32_t n = roaring_read_uint32_iterator(it, buffer.data(),
                                                         static_cast<uint32_t>(buffer.size()))) {
    out.addMany(n, buffer.data());
  }
  roaring_free_uint32_iterator(it);
  return out;
}

namespace {

bool HasRuns(const Roaring& ids) {
  roaring_statistics_t stats;
  roaring_bitmap_statistics(&ids.roaring, &stats);
  return stats.n_run_containers > 0;
}

}  // namespace

DependentPlanner::DependentPlanner(uint64_t seed, uint64_t coupling_horizon)
    : rng_(seed), coupling_horizon_(coupling_horizon) {}

uint32_t DependentPlanner::SlotOf(JobHandle job) const { return slot_of_.at(job); }

void DependentPlanner::GrowOverlapTable(size_t slots) {
  if (slots <= stride_) return;
  const size_t stride = std::max<size_t>(slots, 2 * stride_);
  for (std::vector<uint64_t>* table : {&overlap_, &subset_overlap_}) {
    std::vector<uint64_t> grown(stride * stride, 0);
    for (size_t a = 0; a < stride_; ++a) {
      std::copy_n(&(*table)[a * stride_], stride_, &grown[a * stride]);
    }
    table->swap(grown);
  }
  stride_ = stride;
  taking_.resize(stride, 0);
  in_round_.resize(stride, 0);
  shared_.resize(stride, 0);
  pick_of_.resize(stride, 0);
}

void DependentPlanner::AddJob(JobHandle job, const Roaring& subset) {
  assert(!slot_of_.contains(job));
  assert(!subset.isEmpty());
  uint32_t slot;
  if (free_slots_.empty()) {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
    GrowOverlapTable(slots_.size());
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  Job& j = slots_[slot];
  j.handle = job;
  j.shared_picks = 0;
  j.last_label = 0;
  j.history.clear();
  SetSubset(slot, subset);
  slot_of_[job] = slot;
  present_.insert(std::lower_bound(present_.begin(), present_.end(), slot), slot);
  Refill(slot);
}

void DependentPlanner::RemoveJob(JobHandle job) {
  const uint32_t slot = SlotOf(job);
  for (uint32_t other : present_) {
    Overlap(slot, other) = 0;
    Overlap(other, slot) = 0;
    SubsetOverlap(slot, other) = 0;
    SubsetOverlap(other, slot) = 0;
  }
  slots_[slot] = Job();
  slot_of_.erase(job);
  present_.erase(std::lower_bound(present_.begin(), present_.end(), slot));
  free_slots_.push_back(slot);
}

void DependentPlanner::StartEpoch(JobHandle job) {
  const uint32_t slot = SlotOf(job);
  assert(slots_[slot].remaining_count == 0);
  Refill(slot);
}

void DependentPlanner::StartEpoch(JobHandle job, const Roaring& subset) {
  assert(!subset.isEmpty());
  const uint32_t slot = SlotOf(job);
  Job& j = slots_[slot];
  assert(j.remaining_count == 0);
  // FindSource reads a job's earlier epochs in its history as runs of
  // |subset| picks; a new length would misplace them, so they are dropped
  // (other jobs then couple to this one from its new epoch on). Its labels
  // stay: they only ever increase.
  if (subset.cardinality() != j.subset_size) j.history.clear();
  SetSubset(slot, subset);
  Refill(slot);
}

void DependentPlanner::SetSubset(uint32_t slot, const Roaring& subset) {
  Job& j = slots_[slot];
  j.subset = subset;
  j.subset.runOptimize();
  j.subset.shrinkToFit();
  j.subset_size = j.subset.cardinality();
  j.subset_has_runs = HasRuns(j.subset);
  j.first = j.subset.minimum();
  j.last = j.subset.maximum();
  for (uint32_t other : present_) {
    if (other == slot) continue;
    const uint64_t common = j.subset.and_cardinality(slots_[other].subset);
    SubsetOverlap(slot, other) = common;
    SubsetOverlap(other, slot) = common;
  }
}

void DependentPlanner::Refill(uint32_t slot) {
  Job& j = slots_[slot];
  j.remaining = j.subset_has_runs ? CopyWithoutRuns(j.subset) : j.subset;
  j.remaining_count = j.remaining.cardinality();
  j.epoch_picks = 0;
  for (uint32_t other : present_) {
    if (other == slot) continue;
    const uint64_t common = j.remaining.and_cardinality(slots_[other].remaining);
    Overlap(slot, other) = common;
    Overlap(other, slot) = common;
  }
}

SampleId DependentPlanner::DrawUniform(const Job& job) {
  // roaring select walks the containers and then the words of one: slow.
  // While the set is dense in its subset's span, rejection from the span
  // is exact and needs under kDenseSpan contains() tests on average.
  const uint64_t span = static_cast<uint64_t>(job.last) - job.first + 1;
  if (job.remaining_count * kDenseSpan >= span) {
    for (uint64_t attempt = 0; attempt < 4 * kDenseSpan; ++attempt) {
      const SampleId id = job.first + static_cast<SampleId>(rng_.Below(span));
      if (job.remaining.contains(id)) return id;
    }
  }
  SampleId id = 0;
  const bool found =
      job.remaining.select(static_cast<uint32_t>(rng_.Below(job.remaining_count)), &id);
  assert(found);
  (void)found;
  return id;
}

SampleId DependentPlanner::DrawOutside(const Job& job, const Job& parent, uint64_t count) {
  assert(count > 0);
  for (int attempt = 0; attempt < kMaxRejections; ++attempt) {
    const SampleId id = DrawUniform(job);
    if (!parent.remaining.contains(id)) return id;
  }
  // Rare (the residual is small and was entered anyway): draw exactly.
  const Roaring outside = job.remaining - parent.remaining;
  SampleId id = 0;
  const bool found = outside.select(static_cast<uint32_t>(rng_.Below(count)), &id);
  assert(found);
  (void)found;
  return id;
}

bool DependentPlanner::FindSource(uint32_t slot, bool newest, Source* source) const {
  const Job& job = slots_[slot];
  bool found = false;
  uint64_t best_overlap = 0, best_rank = 0;
  for (uint32_t other : present_) {
    const Job& a = slots_[other];
    const uint64_t overlap = other == slot ? 0 : subset_overlap_[slot * stride_ + other];
    if (overlap == 0 || a.history.empty()) continue;
    // The candidate entry: a's newest pick, or a's pick at this job's next
    // index, in a's current epoch or an earlier one still in its history
    // (the oldest that is fresh for this job).
    const size_t size = a.history.size();
    size_t at = size;
    if (newest) {
      if (a.history.back().label > job.last_label) at = size - 1;
    } else {
      const uint64_t index = job.epoch_picks;
      const uint64_t epoch_length = a.subset_size;
      if (index >= epoch_length) continue;
      // Entries of a's current epoch are the last epoch_picks of history;
      // each earlier epoch has epoch_length entries.
      const uint64_t nearest =
          a.epoch_picks > index ? a.epoch_picks - index : a.epoch_picks + epoch_length - index;
      if (nearest > size) continue;
      // From the oldest epoch still in the history to the newest.
      for (uint64_t m = (size - nearest) / epoch_length + 1; m-- > 0;) {
        const size_t candidate = size - (nearest + m * epoch_length);
        if (a.history[candidate].label > job.last_label) {
          at = candidate;
          break;
        }
      }
    }
    if (at == size) continue;
    // Position sources: the smaller lag ranks higher; newest: the later label.
    const uint64_t rank = newest ? a.history[at].label : ~(size - at);
    if (!found || overlap > best_overlap || (overlap == best_overlap && rank > best_rank)) {
      found = true;
      best_overlap = overlap;
      best_rank = rank;
      *source = {other, at};
    }
  }
  return found;
}

bool DependentPlanner::InCurrentEpoch(const Job& source, size_t at) const {
  return source.history.size() - at <= source.epoch_picks;
}

size_t DependentPlanner::EpochEndInHistory(const Job& source, size_t at) const {
  if (InCurrentEpoch(source, at)) return source.history.size();
  return at + (source.subset_size - source.history[at].index);
}

bool DependentPlanner::InSourceSet(const Job& source, size_t at, SampleId id) const {
  if (InCurrentEpoch(source, at) && source.remaining.contains(id)) return true;
  const size_t end = EpochEndInHistory(source, at);
  for (size_t k = at; k < end; ++k) {
    if (source.history[k].id == id) return true;
  }
  return false;
}

SampleId DependentPlanner::DrawCoupled(uint32_t slot, const Source& source) {
  const Job& job = slots_[slot];
  const Job& a = slots_[source.slot];
  const PastPick& pick = a.history[source.at];
  const uint64_t s = pick.remaining_before;  // |S|
  const uint64_t t = job.remaining_count;    // |T|
  if (job.remaining.contains(pick.id) && (s >= t || rng_.Below(t) < s)) {
    return pick.id;
  }
  // The residual: uniform on T \ S when |S| <= |T|; else weight 1 on
  // T \ S and 1 - |T|/|S| on T ∩ S (both over |T|). Rejection from T has
  // acceptance 1 - |S ∩ T| / max(|S|, |T|), the probability of landing here.
  for (int attempt = 0; attempt < kMaxRejections; ++attempt) {
    const SampleId id = DrawUniform(job);
    if (!InSourceSet(a, source.at, id)) return id;
    if (s > t && rng_.Below(s) >= t) return id;
  }
  // Rare: draw exactly from the two parts.
  Roaring in_s = InCurrentEpoch(a, source.at) ? a.remaining : Roaring();
  const size_t end = EpochEndInHistory(a, source.at);
  for (size_t k = source.at; k < end; ++k) in_s.add(a.history[k].id);
  const Roaring outside = job.remaining - in_s;
  const Roaring inside = job.remaining & in_s;
  const uint64_t outside_weight = outside.cardinality() * s;
  const uint64_t inside_weight = s > t ? inside.cardinality() * (s - t) : 0;
  const bool pick_outside = rng_.Below(outside_weight + inside_weight) < outside_weight;
  const Roaring& part = pick_outside ? outside : inside;
  SampleId id = 0;
  const bool found = part.select(static_cast<uint32_t>(rng_.Below(part.cardinality())), &id);
  assert(found);
  (void)found;
  return id;
}

void DependentPlanner::Round(std::span<const JobHandle> participants, std::vector<Pick>* out) {
  ++tick_;
  order_.clear();
  draw_.clear();
  label_.clear();
  size_t coupled = 0;
  size_t with_ids = 0;
  for (JobHandle job : participants) {
    with_ids += slots_[SlotOf(job)].remaining_count > 0;
  }
  // Participants that couple to another job's earlier pick draw first; the
  // schedule alone (who takes part, labels, lags, subsets) decides who does.
  for (JobHandle job : participants) {
    const uint32_t slot = SlotOf(job);
    if (slots_[slot].remaining_count == 0) continue;
    in_round_[slot] = kInTree;
    Source source;
    if (FindSource(slot, /*newest=*/false, &source) ||
        (with_ids == 1 && FindSource(slot, /*newest=*/true, &source))) {
      in_round_[slot] = kCoupled;
      const PastPick& pick = slots_[source.slot].history[source.at];
      order_.push_back(slot);
      draw_.push_back(DrawCoupled(slot, source));
      label_.push_back(pick.label);
      if (draw_.back() == pick.id) {
        shared_[slot] = 1;
        ++stats_.coupled_picks;
      }
      ++coupled;
    }
  }
  for (JobHandle job : participants) {
    const uint32_t slot = SlotOf(job);
    if (in_round_[slot] == kInTree) order_.push_back(slot);
  }
  if (order_.empty()) return;
  // The round's own draws, a tree of parents in ascending order of |R|
  // (ties: ascending handle), all from the state at the start of the round.
  std::sort(order_.begin() + coupled, order_.end(), [this](uint32_t a, uint32_t b) {
    const Job& x = slots_[a];
    const Job& y = slots_[b];
    if (x.remaining_count != y.remaining_count) {
      return x.remaining_count < y.remaining_count;
    }
    return x.handle < y.handle;
  });
  draw_.resize(order_.size());
  label_.resize(order_.size(), tick_);
  for (size_t i = coupled; i < order_.size(); ++i) {
    const uint32_t slot = order_[i];
    const Job& job = slots_[slot];
    size_t parent = i;
    uint64_t best = 0;
    for (size_t k = coupled; k < i; ++k) {
      const uint64_t common = Overlap(slot, order_[k]);
      if (common > 0 && common >= best) {
        parent = k;
        best = common;
      }
    }
    if (parent == i) {
      draw_[i] = DrawUniform(job);
      continue;
    }
    const Job& p = slots_[order_[parent]];
    const SampleId shared = draw_[parent];
    // Keep the parent's id with probability |R_p| / |R_i| (exact integer
    // comparison), which is the most that keeps this job's draw uniform.
    if (job.remaining.contains(shared) && rng_.Below(job.remaining_count) < p.remaining_count) {
      draw_[i] = shared;
    } else {
      draw_[i] = DrawOutside(job, p, job.remaining_count - best);
    }
  }

  // Apply the picks: the jobs that drew the same id take it together.
  by_id_.resize(order_.size());
  for (uint32_t i = 0; i < by_id_.size(); ++i) by_id_[i] = i;
  std::sort(by_id_.begin(), by_id_.end(), [this](uint32_t a, uint32_t b) {
    return draw_[a] != draw_[b] ? draw_[a] < draw_[b] : a < b;
  });
  for (size_t begin = 0; begin < by_id_.size();) {
    const SampleId id = draw_[by_id_[begin]];
    size_t end = begin;
    takers_.clear();
    while (end < by_id_.size() && draw_[by_id_[end]] == id) {
      takers_.push_back(order_[by_id_[end]]);
      ++end;
    }
    Take(id, takers_);
    begin = end;
  }
  // Remember each pick, with its label and |R| before it, for the jobs that
  // may couple to it later.
  for (size_t i = 0; i < order_.size(); ++i) {
    Job& job = slots_[order_[i]];
    job.shared_picks += shared_[order_[i]];
    shared_[order_[i]] = 0;
    job.history.push_back({draw_[i], label_[i], job.remaining_count + 1, job.epoch_picks});
    job.last_label = label_[i];
    ++job.epoch_picks;
    while (job.history.size() > std::max<uint64_t>(coupling_horizon_, 1)) {
      job.history.pop_front();  // more than one when the horizon shrank
    }
  }

  for (JobHandle job : participants) {
    const uint32_t slot = SlotOf(job);
    if (in_round_[slot]) {
      in_round_[slot] = 0;
      out->push_back({job, pick_of_[slot]});
    }
  }
  stats_.picks += order_.size();
  ++stats_.rounds;
}

void DependentPlanner::Take(SampleId id, std::span<const uint32_t> takers) {
  holders_.clear();
  for (uint32_t slot : present_) {
    if (slots_[slot].remaining.contains(id)) holders_.push_back(slot);
  }
  for (uint32_t slot : takers) taking_[slot] = 1;
  // The id leaves R_a ∩ R_b for every pair of holders with a taker in it;
  // count each pair once.
  for (uint32_t a : takers) {
    for (uint32_t b : holders_) {
      if (b == a || (taking_[b] && b < a)) continue;
      --Overlap(a, b);
      --Overlap(b, a);
    }
  }
  const bool shared = takers.size() > 1;
  for (uint32_t slot : takers) {
    taking_[slot] = 0;
    Job& job = slots_[slot];
    job.remaining.remove(id);
    --job.remaining_count;
    pick_of_[slot] = id;
    if (shared) shared_[slot] = 1;
  }
  if (shared) stats_.shared_picks += takers.size();
}

uint64_t DependentPlanner::Remaining(JobHandle job) const {
  return slots_[SlotOf(job)].remaining_count;
}

uint32_t DependentPlanner::RefCount(SampleId id) const {
  uint32_t count = 0;
  for (uint32_t slot : present_) {
    if (slots_[slot].remaining.contains(id)) ++count;
  }
  return count;
}

uint64_t DependentPlanner::SharedPicks(JobHandle job) const {
  return slots_[SlotOf(job)].shared_picks;
}

PlannerStats DependentPlanner::Stats() const { return stats_; }

size_t DependentPlanner::MemoryBytes() const {
  size_t bytes = sizeof(*this) + overlap_.capacity() * sizeof(uint64_t) +
                 slots_.capacity() * sizeof(Job) +
                 slot_of_.size() * (sizeof(JobHandle) + sizeof(uint32_t) + 2 * sizeof(void*));
  for (uint32_t slot : present_) {
    bytes += ApproximateRoaringBytes(slots_[slot].subset) +
             ApproximateRoaringBytes(slots_[slot].remaining);
  }
  return bytes;
}

std::unique_ptr<Planner> NewDependentPlanner(uint64_t seed, uint64_t coupling_horizon) {
  return std::make_unique<DependentPlanner>(seed, coupling_horizon);
}

}  // namespace joaderfs
