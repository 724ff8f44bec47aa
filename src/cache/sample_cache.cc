#include "cache/sample_cache.h"

#include <spdlog/spdlog.h>

#include <array>

#include "loader/decoder.h"

namespace joaderfs {
namespace {

// Random unpinned entries compared per eviction: enough that the victim is
// almost always among the lowest counts, few enough to stay cheap.
constexpr int kEvictionSamples = 8;

}  // namespace

SampleCache::SampleCache(const Catalog* catalog, LoaderPool* pool, DiskCache* disk,
                         uint64_t budget_bytes)
    : catalog_(catalog), pool_(pool), disk_(disk), budget_(budget_bytes) {
  stats_.budget = budget_bytes;
}

void SampleCache::SetNeedCounts(NeedCounts need_counts) {
  std::lock_guard lock(mu_);
  need_counts_ = std::move(need_counts);
}

void SampleCache::Acquire(SampleKey key, Callback done) {
  SamplePtr ready;
  {
    std::lock_guard lock(mu_);
    if (bad_.count(key)) {
      ++stats_.hits;
    } else if (auto it = entries_.find(key); it != entries_.end()) {
      ++stats_.hits;
      Entry& e = it->second;
      if (e.pins++ == 0 && e.sample) {
        RemoveEvictable(e);
        stats_.pinned_bytes += e.sample->bytes();
      }
      e.last_use = ++clock_;
      UpdateCommitted();
      if (!e.sample) {
        e.waiters.push_back(std::move(done));
        return;
      }
      ready = e.sample;
    } else {
      ++stats_.misses;
      ++stats_.loading;
      Entry& e = entries_[key];
      e.pins = 1;
      e.last_use = ++clock_;
      e.waiters.push_back(std::move(done));
      UpdateCommitted();
      pool_->Submit([this, key] { Load(key); });
      return;
    }
  }
  done(ready);
}

void SampleCache::Release(SampleKey key) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.pins == 0) return;  // a bad sample
  Entry& e = it->second;
  if (--e.pins == 0 && e.sample) {
    AddEvictable(key, e);
    stats_.pinned_bytes -= e.sample->bytes();
    EvictLocked();
    UpdateCommitted();
  }
}

void SampleCache::RemoveEvictable(Entry& e) {
  const size_t slot = e.slot;
  if (slot + 1 != evictable_.size()) {
    evictable_[slot] = evictable_.back();
    entries_[evictable_[slot]].slot = slot;
  }
  evictable_.pop_back();
  e.slot = SIZE_MAX;
}

void SampleCache::AddEvictable(const SampleKey& key, Entry& e) {
  e.slot = evictable_.size();
  evictable_.push_back(key);
}

void SampleCache::UpdateCommitted() {
  committed_ = stats_.pinned_bytes + stats_.loading * average_bytes_;
}

void SampleCache::Load(SampleKey key) {
  auto loaded = std::make_shared<DecodedSample>();
  bool from_disk = false;
  Status s = Status::NotFound("no disk tier");
  if (disk_) {
    s = disk_->Get(key.size, key.id, loaded.get());
    from_disk = s.ok();
  }
  if (!from_disk) s = DecodeImage(catalog_->path(key.id), key.size, loaded.get());
  SamplePtr sample;
  if (s.ok()) sample = std::move(loaded);
  if (sample && !from_disk && disk_) disk_->PutAsync(key.size, key.id, sample);

  std::vector<Callback> waiters;
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(key);
    Entry& e = it->second;
    waiters = std::move(e.waiters);
    --stats_.loading;
    if (sample) {
      if (!from_disk) ++stats_.decoded;
      e.sample = sample;
      stats_.bytes += sample->bytes();
      ++stats_.entries;
      average_bytes_ = (average_bytes_ * 15 + sample->bytes()) / 16;
      if (e.pins > 0) {
        stats_.pinned_bytes += sample->bytes();
      } else {
        AddEvictable(key, e);  // every job that wanted it has gone
      }
      EvictLocked();
    } else {
      ++stats_.failed;
      entries_.erase(it);
      bad_.insert(key);
    }
    UpdateCommitted();
  }
  if (!sample) {
    spdlog::warn("skipping sample {} ({}): {}", key.id, catalog_->relpath(key.id), s.message());
  }
  for (auto& w : waiters) w(sample);
}

void SampleCache::EvictLocked() {
  while (stats_.bytes > stats_.budget && !evictable_.empty()) {
    std::array<size_t, kEvictionSamples> slots;
    std::array<uint32_t, kEvictionSamples> counts{};
    for (int i = 0; i < kEvictionSamples; ++i) slots[i] = rng_.Below(evictable_.size());
    if (need_counts_) {
      for (int i = 0; i < kEvictionSamples; ++i) {
        const SampleKey& k = evictable_[slots[i]];
        need_counts_(k.size, std::span(&k.id, 1), std::span(&counts[i], 1));
      }
    }
    int victim = 0;
    for (int i = 1; i < kEvictionSamples; ++i) {
      const uint64_t use_i = entries_[evictable_[slots[i]]].last_use;
      const uint64_t use_v = entries_[evictable_[slots[victim]]].last_use;
      if (counts[i] < counts[victim] || (counts[i] == counts[victim] && use_i < use_v)) victim = i;
    }
    const SampleKey key = evictable_[slots[victim]];
    Entry& e = entries_[key];
    RemoveEvictable(e);
    stats_.bytes -= e.sample->bytes();
    --stats_.entries;
    ++stats_.evictions;
    entries_.erase(key);
  }
}

CacheStats SampleCache::Stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace joaderfs
