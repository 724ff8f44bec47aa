#include "jobs/shared_renders.h"

#include <algorithm>

namespace joaderfs {

void SharedRenders::Hold(uint64_t id) {
  std::vector<Variant> gone;  // freed after the lock is dropped
  MutexLock lock(mu_);
  Held& held = held_[id];
  if (++held.holders > 1) return;
  auto it = kept_.find(id);
  if (it == kept_.end()) return;
  held.variants = std::move(it->second.variants);  // a peer's renders, kept for it
  Forget(it, &gone);
}

void SharedRenders::Drop(uint64_t id) {
  std::vector<Variant> gone;  // freed after the lock is dropped
  {
    MutexLock lock(mu_);
    auto it = held_.find(id);
    if (it == held_.end() || --it->second.holders > 0) return;
    gone = std::move(it->second.variants);
    held_.erase(it);
  }
  std::erase_if(gone, [](const Variant& v) { return !v.render || v.base.expired(); });
  if (gone.empty() || !needs_ || keep_bytes_ == 0) return;
  const auto sample = static_cast<SampleId>(id);
  uint32_t needed = 0;
  needs_->Counts({&sample, 1}, {&needed, 1});
  if (needed == 0) return;
  std::vector<Variant> pushed_out;  // freed after the lock is dropped
  MutexLock lock(mu_);
  // Held again meanwhile: that holder makes its own (rare).
  if (held_.contains(id)) return;
  Keep(id, std::move(gone), &pushed_out);
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
  // Two last drops of one id in a row (a Hold between them) both keep.
  if (auto it = kept_.find(id); it != kept_.end()) Forget(it, gone);
  uint64_t bytes = 0;
  for (const Variant& v : variants) bytes += v.render->bytes();
  kept_order_.push_back(id);
  kept_bytes_ += bytes;
  kept_[id] = Kept{std::move(variants), bytes, std::prev(kept_order_.end())};
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
