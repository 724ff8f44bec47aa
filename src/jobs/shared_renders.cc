#include "jobs/shared_renders.h"

#include <algorithm>

namespace joaderfs {

void SharedRenders::Hold(uint64_t id, uint32_t key) {
  std::vector<Variant> gone;  // freed after the lock is dropped
  MutexLock lock(mu_);
  Held& held = held_[id];
  ++held.holders;
  if (key == kSharesNothing) return;
  auto size = std::find_if(held.by_size.begin(), held.by_size.end(),
                           [&](const auto& entry) { return entry.first == key; });
  if (size != held.by_size.end()) {
    ++size->second;
    return;
  }
  held.by_size.emplace_back(key, 1);
  // The first holder of its size takes back that size's kept renders.
  auto it = kept_.find(id);
  if (it == kept_.end()) return;
  Kept& kept = it->second;
  for (auto v = kept.variants.begin(); v != kept.variants.end();) {
    if (v->size != key) {
      ++v;
      continue;
    }
    kept.bytes -= v->render->bytes();
    kept_bytes_ -= v->render->bytes();
    held.variants.push_back(std::move(*v));
    v = kept.variants.erase(v);
  }
  if (kept.variants.empty()) Forget(it, &gone);
}

void SharedRenders::Drop(uint64_t id, uint32_t key) {
  std::vector<Variant> released;  // kept or freed after the lock is dropped
  {
    MutexLock lock(mu_);
    auto it = held_.find(id);
    if (it == held_.end()) return;
    Held& held = it->second;
    auto size = std::find_if(held.by_size.begin(), held.by_size.end(),
                             [&](const auto& entry) { return entry.first == key; });
    if (size != held.by_size.end() && --size->second == 0) {
      // No holder left could take renders of this size.
      held.by_size.erase(size);
      for (auto v = held.variants.begin(); v != held.variants.end();) {
        if (v->size == key) {
          released.push_back(std::move(*v));
          v = held.variants.erase(v);
        } else {
          ++v;
        }
      }
    }
    if (--held.holders == 0) held_.erase(it);
  }
  // A picture still being cut is not kept, and neither is one of a base
  // evicted since (a reload is another object, never matched).
  std::erase_if(released, [](const Variant& v) { return !v.render || v.base.expired(); });
  if (released.empty() || !needs_ || keep_bytes_ == 0) return;
  const auto sample = static_cast<SampleId>(id);
  uint32_t needed = 0;
  needs_->Counts({&sample, 1}, {&needed, 1});
  if (needed == 0) return;
  std::vector<Variant> pushed_out;  // freed after the lock is dropped
  MutexLock lock(mu_);
  Keep(id, std::move(released), &pushed_out);
}

void SharedRenders::Trim() {
  if (!needs_) return;
  std::vector<SampleId> ids;
  {
    MutexLock lock(mu_);
    ids.assign(kept_order_.begin(), kept_order_.end());
  }
  if (ids.empty()) return;
  std::vector<uint32_t> needed(ids.size());
  needs_->Counts(ids, needed);
  std::vector<Variant> gone;  // freed after the lock is dropped
  MutexLock lock(mu_);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (needed[i] > 0) continue;
    if (auto it = kept_.find(ids[i]); it != kept_.end()) Forget(it, &gone);
  }
}

void SharedRenders::Keep(uint64_t id, std::vector<Variant> variants, std::vector<Variant>* gone) {
  auto [it, fresh] = kept_.try_emplace(id);
  Kept& kept = it->second;
  if (!fresh) kept_order_.erase(kept.age);
  for (Variant& v : variants) {
    kept.bytes += v.render->bytes();
    kept_bytes_ += v.render->bytes();
    kept.variants.push_back(std::move(v));
  }
  kept_order_.push_back(id);
  kept.age = std::prev(kept_order_.end());
  while (kept_bytes_ > keep_bytes_) Forget(kept_.find(kept_order_.front()), gone);
}

void SharedRenders::Forget(std::unordered_map<uint64_t, Kept>::iterator it,
                           std::vector<Variant>* gone) {
  for (Variant& v : it->second.variants) gone->push_back(std::move(v));
  kept_bytes_ -= it->second.bytes;
  kept_order_.erase(it->second.age);
  kept_.erase(it);
}

size_t SharedRenders::held_ids() const {
  MutexLock lock(mu_);
  return held_.size();
}

uint64_t SharedRenders::kept_bytes() const {
  MutexLock lock(mu_);
  return kept_bytes_;
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
  const auto holds_size = [&](const Held& held) {
    return std::any_of(held.by_size.begin(), held.by_size.end(),
                       [&](const auto& entry) { return entry.first == size; });
  };
  // Claim it, where a holder could take it; a variant of an older base
  // gives way.
  if (it != held_.end() && holds_size(it->second)) {
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
