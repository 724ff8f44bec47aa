// The remote tier as the RAM tier (cache/sample_cache.h) uses it: decoded
// base images that other daemons of a cluster decoded, behind the disk tier
// and in front of the decoder, with a lease so that one daemon decodes a
// sample the others are about to want. MemcachedTier (cache/memcached_tier.h)
// is the one implementation; a build may leave it out (CMake
// JOADERFS_REMOTE=OFF: no OpenSSL, no memcached client), and then code that
// holds a RemoteTier* finds none.
//
// Thread-safe: every member may be called from any thread.

#ifndef JOADERFS_CACHE_REMOTE_TIER_H_
#define JOADERFS_CACHE_REMOTE_TIER_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "common/latency_histogram.h"
#include "common/status.h"
#include "common/types.h"
#include "loader/decoded_sample.h"

namespace joaderfs {

struct RemoteTierStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t rejected = 0;                   // values that did not open with the cluster key: misses
  uint64_t errors = 0;                     // server calls that failed or timed out
  uint64_t lease_waits = 0;                // lookups that found another daemon's lease
  uint64_t lease_hits = 0;                 // ... and got its value in time
  uint64_t published = 0;                  // values set
  uint64_t publish_drops = 0;              // writes dropped: queue full, or publish_limit reached
  uint64_t bytes_in = 0;                   // value bytes fetched
  uint64_t bytes_out = 0;                  // value bytes published
  LatencyHistogram::Snapshot get_latency;  // each get of a value (hit or miss) or lease
  LatencyHistogram::Snapshot set_latency;  // each value set
};

class RemoteTier {
 public:
  virtual ~RemoteTier() = default;

  // Ok and the sample; Busy: another daemon holds its lease (it is decoding
  // it), so AwaitLeased() it; NotFound: the caller decodes and publishes, or
  // calls Abandon().
  virtual Status Fetch(SampleId id, DecodedSample* out) = 0;
  // Called once per AwaitLeased(), on the tier's lease-wait thread: Ok and
  // the sample, or NotFound (the wait ran out, or the value was damaged):
  // the caller decodes. It must be short and must not block.
  using LeaseDone = std::function<void(Status, std::shared_ptr<DecodedSample>)>;
  // After Fetch() said Busy: polls the value until the lease's expiry or
  // the tier's longest wait, and calls `done`. Dropped, never called, after
  // StopWaits().
  virtual void AwaitLeased(SampleId id, LeaseDone done) = 0;
  // Drops the waits not answered (their `done` is never called) and returns
  // once no `done` is running. Idempotent; the destructor calls it.
  virtual void StopWaits() = 0;
  // Queues the sample for publishing.
  virtual void PublishAsync(SampleId id, SamplePtr sample) = 0;
  // The caller's decode failed: gives its lease up, so no one waits on it.
  virtual void Abandon(SampleId id) = 0;
  virtual RemoteTierStats Stats() const = 0;
};

}  // namespace joaderfs

#endif  // JOADERFS_CACHE_REMOTE_TIER_H_
