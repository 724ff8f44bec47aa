#include "jobs/shared_renders.h"

namespace joaderfs {

void SharedRenders::Hold(uint64_t id) {
  MutexLock lock(mu_);
  ++held_[id].holders;
}

void SharedRenders::Drop(uint64_t id) {
  std::vector<Variant> gone;  // freed after the lock is dropped
  MutexLock lock(mu_);
  auto it = held_.find(id);
  if (it == held_.end() || --it->second.holders > 0) return;
  gone = std::move(it->second.variants);
  held_.erase(it);
}

size_t SharedRenders::held_ids() const {
  MutexLock lock(mu_);
  return held_.size();
}

SamplePtr SharedRenders::Render(const SamplePtr& base, const AugmentSpec& spec, uint32_t size,
                                uint64_t epoch, uint64_t id,
                                const std::shared_ptr<std::atomic<uint64_t>>& live_bytes) {
  if (spec.crop == AugmentSpec::Crop::kRandom) {
    renders_.fetch_add(1, std::memory_order_relaxed);
    return RenderDelivery(base, spec, size, epoch, id, live_bytes);
  }
  const bool flipped = ChooseAugmentation(spec, epoch, id, base->width, base->height).flipped;
  const auto matches = [&](const Variant& v) { return v.size == size && v.flipped == flipped; };
  {
    MutexLock lock(mu_);
    auto it = held_.find(id);
    if (it != held_.end()) {
      for (const Variant& v : it->second.variants) {
        if (matches(v) && v.base.lock() == base) {
          reused_.fetch_add(1, std::memory_order_relaxed);
          return v.render;
        }
      }
    }
  }
  renders_.fetch_add(1, std::memory_order_relaxed);
  SamplePtr render = RenderDelivery(base, spec, size, epoch, id, live_bytes);
  if (render == base) return render;  // size 0, no flip: nothing was made
  MutexLock lock(mu_);
  auto it = held_.find(id);
  if (it == held_.end()) return render;  // every job is done with it
  for (Variant& v : it->second.variants) {
    if (matches(v)) {  // another thread's, or one of an older base
      v = Variant{size, flipped, base, render};
      return render;
    }
  }
  it->second.variants.push_back(Variant{size, flipped, base, render});
  return render;
}

}  // namespace joaderfs
