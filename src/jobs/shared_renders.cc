#include "jobs/shared_renders.h"

#include <algorithm>

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
  const auto same_picture = [&](const Variant& v) {
    return v.size == size && v.flipped == flipped && v.base.lock() == base;
  };
  MutexLock lock(mu_);
  auto it = held_.find(id);
  if (it == held_.end()) {  // nobody holds the id: nothing to share it with
    lock.unlock();
    renders_.fetch_add(1, std::memory_order_relaxed);
    return RenderDelivery(base, spec, size, epoch, id, live_bytes);
  }
  for (;;) {
    auto& variants = it->second.variants;
    auto v = std::find_if(variants.begin(), variants.end(), same_picture);
    if (v == variants.end()) break;
    if (v->render) {
      reused_.fetch_add(1, std::memory_order_relaxed);
      return v->render;
    }
    // Another loader thread is cutting this very picture (two jobs' hits
    // at once): wait for it rather than cut it twice.
    rendered_.wait(lock);
    it = held_.find(id);
    if (it == held_.end()) break;
  }
  if (it != held_.end()) {  // claim it; a variant of an older base gives way
    auto& variants = it->second.variants;
    std::erase_if(variants,
                  [&](const Variant& v) { return v.size == size && v.flipped == flipped; });
    variants.push_back(Variant{size, flipped, base, nullptr});
  }
  lock.unlock();
  renders_.fetch_add(1, std::memory_order_relaxed);
  SamplePtr render = RenderDelivery(base, spec, size, epoch, id, live_bytes);
  lock.lock();
  it = held_.find(id);
  if (it != held_.end()) {
    auto& variants = it->second.variants;
    auto v = std::find_if(variants.begin(), variants.end(),
                          [&](const Variant& w) { return same_picture(w) && !w.render; });
    if (v != variants.end()) {
      // Size 0 without a flip makes nothing new, and a failed render has
      // nothing to share: the waiters cut their own.
      if (render && render != base) {
        v->render = render;
      } else {
        variants.erase(v);
      }
    }
  }
  rendered_.notify_all();
  return render;
}

}  // namespace joaderfs
