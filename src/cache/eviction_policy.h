// Which cached sample to drop next: the eviction policies compared in the
// JOADER appendix (RefCnt, LRU, FIFO, random replacement), over sample ids
// only. A policy knows nothing of bytes or of FUSE; its owner decides when
// to evict (count-bounded in the simulator, byte-bounded in the daemon) and
// asks the policy whom.
//
// A policy tracks the ids its owner tells it about. An entry that must not
// be evicted (planned and not yet delivered) is simply not tracked: the
// owner Erase()s it while it is pinned and Insert()s it again afterwards.
//
// Thread-safety: none; the owner serialises all calls (the daemon's cache
// calls it under its own lock). The RefCnt policy calls its callbacks from
// Insert/Refresh/RefreshAll only.

#ifndef JOADERFS_CACHE_EVICTION_POLICY_H_
#define JOADERFS_CACHE_EVICTION_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_set>

#include "common/types.h"

namespace joaderfs {

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  // `id` entered the cache. REQUIRES: not tracked.
  virtual void Insert(SampleId id) = 0;

  // `id` was read from the cache. REQUIRES: tracked.
  virtual void Touch(SampleId id) = 0;

  // The owner dropped (or pinned) `id`. REQUIRES: tracked.
  virtual void Erase(SampleId id) = 0;

  // The planner's view of `id` changed (a job took it): policies that rank
  // by it re-rank it. REQUIRES: tracked.
  virtual void Refresh(SampleId /*id*/) {}

  // Many counts changed at once (an epoch started, a job came or went).
  virtual void RefreshAll() {}

  // Forgets and returns the entry to evict. REQUIRES: size() > 0.
  virtual SampleId Evict() = 0;

  virtual size_t size() const = 0;
};

enum class EvictionKind { kRefCnt, kLru, kFifo, kRandom };

// "refcnt", "lru", "fifo", "random"; nullopt for anything else.
std::optional<EvictionKind> ParseEvictionKind(std::string_view name);

// Ids with no planned use, for NextUseFn.
inline constexpr uint64_t kNoPlannedUse = std::numeric_limits<uint64_t>::max();

// Number of jobs that still need an id this epoch (Planner::RefCount).
using RefCountFn = std::function<uint32_t(SampleId)>;
// When an id is next planned to be read (any increasing clock: a round
// number, a queue position), or kNoPlannedUse.
using NextUseFn = std::function<uint64_t(SampleId)>;

// RefCnt: evicts the entry that the fewest jobs still need; among equal
// counts the one whose next planned use is farthest (when `next_use` is
// given), then the one inserted first. Counts are read when an entry is
// inserted or refreshed, so the owner must Refresh() an id whenever the
// planner hands it to a job and RefreshAll() after epoch starts and job
// arrivals or departures. O(log n) per operation.
std::unique_ptr<EvictionPolicy> NewRefCntPolicy(RefCountFn ref_count, NextUseFn next_use = nullptr);

// Least recently inserted or touched first. O(1).
std::unique_ptr<EvictionPolicy> NewLruPolicy();

// First inserted first, touches ignored. O(1).
std::unique_ptr<EvictionPolicy> NewFifoPolicy();

// Uniformly random among tracked entries, from `seed`. O(1).
std::unique_ptr<EvictionPolicy> NewRandomPolicy(uint64_t seed);

std::unique_ptr<EvictionPolicy> NewEvictionPolicy(EvictionKind kind, RefCountFn ref_count,
                                                  uint64_t seed);

// A cache of at most `capacity` sample ids (no payload), as the simulator
// needs: Access() reports hit or miss and makes room through the policy.
class CountBoundedCache {
 public:
  // REQUIRES: capacity > 0.
  CountBoundedCache(size_t capacity, std::unique_ptr<EvictionPolicy> policy);

  // True if `id` was cached (a hit); otherwise caches it, evicting the
  // policy's choice first when full, and returns false.
  bool Access(SampleId id);

  bool Contains(SampleId id) const { return cached_.contains(id); }

  // Forwards to the policy for a cached id; no-op otherwise.
  void Refresh(SampleId id);
  void RefreshAll() { policy_->RefreshAll(); }

  size_t size() const { return policy_->size(); }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  size_t capacity_;
  std::unique_ptr<EvictionPolicy> policy_;
  std::unordered_set<SampleId> cached_;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

}  // namespace joaderfs

#endif  // JOADERFS_CACHE_EVICTION_POLICY_H_
