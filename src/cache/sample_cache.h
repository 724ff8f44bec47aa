// The RAM cache of decoded samples, keyed by (output size, sample id).
//
// Get() is single-flight: however many callers ask for a sample while it is
// being decoded, it is decoded once and every caller is called back with the
// same immutable sample. Ready samples are kept within a byte budget; when
// it is exceeded the least recently used ones are dropped (callers that
// still hold a SamplePtr keep theirs alive). A sample that fails to decode
// is remembered as bad and never tried again.
//
// Thread-safe. Callbacks run without the cache's lock held: at once on the
// caller's thread when the sample is ready, else on a loader thread.

#ifndef JOADERFS_CACHE_SAMPLE_CACHE_H_
#define JOADERFS_CACHE_SAMPLE_CACHE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "catalog/catalog.h"
#include "loader/decoded_sample.h"
#include "loader/loader_pool.h"

namespace joaderfs {

struct SampleKey {
  uint32_t size;
  SampleId id;
  bool operator==(const SampleKey&) const = default;
};

struct CacheStats {
  uint64_t hits = 0;       // Get() found the sample ready or being decoded
  uint64_t misses = 0;     // Get() started a decode
  uint64_t decoded = 0;    // decodes that succeeded
  uint64_t failed = 0;     // distinct samples that could not be decoded
  uint64_t evictions = 0;
  uint64_t bytes = 0;      // pixels held by the cache
  uint64_t budget = 0;
  uint64_t entries = 0;
};

class SampleCache {
 public:
  // `sample` is null when the image could not be decoded.
  using Callback = std::function<void(const SamplePtr& sample)>;

  SampleCache(const Catalog* catalog, LoaderPool* pool, uint64_t budget_bytes);

  // Calls `done` exactly once with the sample for `key`.
  void Get(SampleKey key, Callback done);

  CacheStats Stats() const;

 private:
  struct KeyHash {
    size_t operator()(const SampleKey& k) const {
      return std::hash<uint64_t>()((uint64_t{k.size} << 32) | k.id);
    }
  };
  struct Entry {
    SamplePtr sample;                  // null while loading
    std::vector<Callback> waiters;     // while loading
    std::list<SampleKey>::iterator lru;  // valid once ready
  };

  void Load(SampleKey key);
  void EvictLocked();

  const Catalog* catalog_;
  LoaderPool* pool_;

  mutable std::mutex mu_;
  std::unordered_map<SampleKey, Entry, KeyHash> entries_;  // GUARDED_BY(mu_)
  std::list<SampleKey> lru_;                               // GUARDED_BY(mu_), oldest first
  std::unordered_set<SampleKey, KeyHash> bad_;             // GUARDED_BY(mu_)
  CacheStats stats_;                                       // GUARDED_BY(mu_)
};

}  // namespace joaderfs

#endif  // JOADERFS_CACHE_SAMPLE_CACHE_H_
