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
  return sizeof(Roaring) + stats.n_containers * kPerContainer +
         stats.n_bytes_array_containers + stats.n_bytes_run_containers +
         stats.n_bytes_bitset_containers;
}

Roaring CopyWithoutRuns(const Roaring& ids) {
  // Value by value: roaring_bitmap_remove_run_compression of CRoaring
  // 0.2.66 crashes on a short run that ends a 64Ki chunk.
  Roaring out;
  std::vector<uint32_t> buffer(1 << 16);
  roaring_uint32_iterator_t* it = roaring_create_iterator(&ids.roaring);
  while (const uint32_t n = roaring_read_uint32_iterator(
             it, buffer.data(), static_cast<uint32_t>(buffer.size()))) {
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

DependentPlanner::DependentPlanner(uint64_t seed) : rng_(seed) {}

uint32_t DependentPlanner::SlotOf(JobHandle job) const {
  return slot_of_.at(job);
}

void DependentPlanner::GrowOverlapTable(size_t slots) {
  if (slots <= stride_) return;
  const size_t stride = std::max<size_t>(slots, 2 * stride_);
  std::vector<uint64_t> grown(stride * stride, 0);
  for (size_t a = 0; a < stride_; ++a) {
    std::copy_n(&overlap_[a * stride_], stride_, &grown[a * stride]);
  }
  overlap_.swap(grown);
  stride_ = stride;
  taking_.resize(stride, 0);
  in_round_.resize(stride, 0);
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
  j.subset = subset;
  j.subset.runOptimize();
  j.subset.shrinkToFit();
  j.subset_has_runs = HasRuns(j.subset);
  j.first = j.subset.minimum();
  j.last = j.subset.maximum();
  j.shared_picks = 0;
  slot_of_[job] = slot;
  present_.insert(std::lower_bound(present_.begin(), present_.end(), slot),
                  slot);
  Refill(slot);
}

void DependentPlanner::RemoveJob(JobHandle job) {
  const uint32_t slot = SlotOf(job);
  for (uint32_t other : present_) {
    Overlap(slot, other) = 0;
    Overlap(other, slot) = 0;
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

void DependentPlanner::Refill(uint32_t slot) {
  Job& j = slots_[slot];
  j.remaining = j.subset_has_runs ? CopyWithoutRuns(j.subset) : j.subset;
  j.remaining_count = j.remaining.cardinality();
  for (uint32_t other : present_) {
    if (other == slot) continue;
    const uint64_t common =
        j.remaining.and_cardinality(slots_[other].remaining);
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
  const bool found = job.remaining.select(
      static_cast<uint32_t>(rng_.Below(job.remaining_count)), &id);
  assert(found);
  (void)found;
  return id;
}

SampleId DependentPlanner::DrawOutside(const Job& job, const Job& parent,
                                       uint64_t count) {
  assert(count > 0);
  for (int attempt = 0; attempt < kMaxRejections; ++attempt) {
    const SampleId id = DrawUniform(job);
    if (!parent.remaining.contains(id)) return id;
  }
  // Rare (the residual is small and was entered anyway): draw exactly.
  const Roaring outside = job.remaining - parent.remaining;
  SampleId id = 0;
  const bool found =
      outside.select(static_cast<uint32_t>(rng_.Below(count)), &id);
  assert(found);
  (void)found;
  return id;
}

void DependentPlanner::Round(std::span<const JobHandle> participants,
                             std::vector<Pick>* out) {
  order_.clear();
  for (JobHandle job : participants) {
    const uint32_t slot = SlotOf(job);
    if (slots_[slot].remaining_count > 0) {
      order_.push_back(slot);
      in_round_[slot] = 1;
    }
  }
  if (order_.empty()) return;
  std::sort(order_.begin(), order_.end(), [this](uint32_t a, uint32_t b) {
    const Job& x = slots_[a];
    const Job& y = slots_[b];
    if (x.remaining_count != y.remaining_count) {
      return x.remaining_count < y.remaining_count;
    }
    return x.handle < y.handle;
  });

  // Draw every participant's id from the state at the start of the round.
  draw_.resize(order_.size());
  for (size_t i = 0; i < order_.size(); ++i) {
    const uint32_t slot = order_[i];
    const Job& job = slots_[slot];
    size_t parent = i;
    uint64_t best = 0;
    for (size_t k = 0; k < i; ++k) {
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
    if (job.remaining.contains(shared) &&
        rng_.Below(job.remaining_count) < p.remaining_count) {
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
    if (shared) ++job.shared_picks;
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
                 slot_of_.size() *
                     (sizeof(JobHandle) + sizeof(uint32_t) + 2 * sizeof(void*));
  for (uint32_t slot : present_) {
    bytes += ApproximateRoaringBytes(slots_[slot].subset) +
             ApproximateRoaringBytes(slots_[slot].remaining);
  }
  return bytes;
}

std::unique_ptr<Planner> NewDependentPlanner(uint64_t seed) {
  return std::make_unique<DependentPlanner>(seed);
}

}  // namespace joaderfs
