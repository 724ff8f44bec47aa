#include "cache/sample_cache.h"

#include <spdlog/spdlog.h>

#include "loader/decoder.h"

namespace joaderfs {

SampleCache::SampleCache(const Catalog* catalog, LoaderPool* pool, uint64_t budget_bytes)
    : catalog_(catalog), pool_(pool) {
  stats_.budget = budget_bytes;
}

void SampleCache::Get(SampleKey key, Callback done) {
  SamplePtr ready;
  {
    std::lock_guard lock(mu_);
    if (bad_.count(key)) {
      ++stats_.hits;
    } else if (auto it = entries_.find(key); it != entries_.end()) {
      ++stats_.hits;
      Entry& e = it->second;
      if (!e.sample) {
        e.waiters.push_back(std::move(done));
        return;
      }
      lru_.splice(lru_.end(), lru_, e.lru);
      ready = e.sample;
    } else {
      ++stats_.misses;
      entries_[key].waiters.push_back(std::move(done));
      pool_->Submit([this, key] { Load(key); });
      return;
    }
  }
  done(ready);
}

void SampleCache::Load(SampleKey key) {
  auto decoded = std::make_shared<DecodedSample>();
  const Status s = DecodeImage(catalog_->path(key.id), key.size, decoded.get());
  SamplePtr sample;
  if (s.ok()) sample = std::move(decoded);
  std::vector<Callback> waiters;
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(key);
    waiters = std::move(it->second.waiters);
    if (sample) {
      ++stats_.decoded;
      it->second.sample = sample;
      it->second.lru = lru_.insert(lru_.end(), key);
      stats_.bytes += sample->bytes();
      ++stats_.entries;
      EvictLocked();
    } else {
      ++stats_.failed;
      entries_.erase(it);
      bad_.insert(key);
    }
  }
  if (!s.ok()) spdlog::warn("skipping sample {} ({}): {}", key.id, catalog_->relpath(key.id), s.message());
  for (auto& w : waiters) w(sample);
}

void SampleCache::EvictLocked() {
  while (stats_.bytes > stats_.budget && !lru_.empty()) {
    auto it = entries_.find(lru_.front());
    stats_.bytes -= it->second.sample->bytes();
    --stats_.entries;
    ++stats_.evictions;
    lru_.pop_front();
    entries_.erase(it);
  }
}

CacheStats SampleCache::Stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace joaderfs
