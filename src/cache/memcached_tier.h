// MemcachedTier: the remote tier (cache/remote_tier.h) over memcached:
// decoded base images shared by the daemons of a cluster (docs/design.md
// 3.2), behind the RAM and disk tiers and in front of the decoder, over
// MemcachedClient (cache/memcached_client.h: rendezvous hashing over the
// servers, a failed server ejected and probed again a second later, every
// call bounded by `timeout`, every declared size checked before anything is
// allocated). A build without the remote tier (JOADERFS_REMOTE=OFF) has
// none of it.
//
// Trust: a value is sealed with the cluster key (cache/cluster_key.h) and
// the sample's key material as associated data: the base, and what
// identifies the source file's content in the dataset, its relative path,
// size and modification time (and, in a shard, the member's offset and
// length), i.e. the disk tier's key less the inode, so that nodes holding
// copies of one dataset (rsync -a keeps sizes and mtimes) share. A value
// that does not open (forged, moved, damaged, sealed by another cluster)
// is a miss, counted as rejected, and never enters RAM or the disk tier.
// With an old key (rotation) values sealed by it are read, never written.
//
// A lookup that misses takes a lease (an add of a companion key, which only
// one daemon can create, expiring after kLeaseSeconds, and whose value is
// its expiry authenticated by the key): the holder decodes and publishes;
// the others poll the value until the lease's expiry or `lease_wait`,
// whichever is first, then decode themselves. A lease that is not
// authentic is not waited on. The polls run on a thread of the tier's own
// (AwaitLeased), one multi-get a round for every value awaited, not on the
// decode thread that asked: that one goes on to other samples meanwhile.
//
// Publishing is asynchronous: one thread sets the values of a queue of at
// most kMaxQueuedBytes (a full queue drops the write, counted), and a daemon
// publishes at most `publish_limit` bytes per mount. The value of a sample
// whose lease this daemon holds is set at once by the decode thread instead:
// other daemons are polling for it.
//
// Owns its client, the publisher thread and the lease-wait thread.
// Thread-safe: every public member may be called from any thread; its
// mutex is a leaf, never held during a server call.

#ifndef JOADERFS_CACHE_MEMCACHED_TIER_H_
#define JOADERFS_CACHE_MEMCACHED_TIER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cache/cluster_key.h"
#include "cache/memcached_client.h"
#include "cache/remote_tier.h"
#include "catalog/catalog.h"
#include "common/latency_histogram.h"
#include "common/ranked_mutex.h"
#include "common/status.h"
#include "loader/decoded_sample.h"

namespace joaderfs {

struct RemoteTierOptions {
  std::vector<std::string> servers;           // host:port
  uint64_t publish_limit = UINT64_MAX;        // bytes one daemon publishes per mount
  std::chrono::milliseconds timeout{100};     // one server call, whole
  std::chrono::milliseconds lease_wait{500};  // how long a lookup polls a leased value
  ClusterKey key;                             // seals what is written, opens what is read
  std::optional<ClusterKey> old_key;          // key rotation: opens what is read, seals nothing
  MemcachedTls tls;
  size_t max_value = 64 << 20;  // the largest value read or written
};

class MemcachedTier final : public RemoteTier {
 public:
  // Fails only on a malformed server list or TLS files that do not load;
  // servers that do not answer yet are warned about, and used once they do.
  static Status Open(const RemoteTierOptions& options, const Catalog* catalog, uint32_t base,
                     std::unique_ptr<RemoteTier>* out);
  ~MemcachedTier() override;  // drops queued writes, waits for the one in progress

  Status Fetch(SampleId id, DecodedSample* out) override;
  void AwaitLeased(SampleId id, LeaseDone done) override;
  void StopWaits() override;
  void PublishAsync(SampleId id, SamplePtr sample) override;
  void Abandon(SampleId id) override;
  RemoteTierStats Stats() const override;
  // Waits until the publishing queue is empty (tests, benchmarks).
  void Flush();

 private:
  // A sample's key material (base size, file identity, relpath) and the
  // memcached keys made from it.
  struct ValueKey {
    std::string material;
    std::string name;
    std::string old_name;  // under the old key; empty without one
    std::string lease;
  };
  struct Write {
    SampleId id;
    SamplePtr sample;
  };
  struct LeaseWait {
    ValueKey key;
    std::chrono::steady_clock::time_point until;
    LeaseDone done;
  };
  using Clock = std::chrono::steady_clock;
  MemcachedTier() = default;
  ValueKey KeyOf(SampleId id) const;
  // Gets and opens a value: Ok and the sample; NotFound; Corruption
  // (counted, logged); IOError (counted, logged).
  Status GetValue(const std::string& name, const ClusterKey& key, const ValueKey& k,
                  DecodedSample* out);
  // Opens a value fetched from `server`: Ok, or Corruption (counted, logged).
  Status OpenValue(const ClusterKey& key, const ValueKey& k, std::string_view value,
                   const std::string& server, DecodedSample* out);
  // Takes the lease of a value not found: Ok (this daemon holds it), Busy
  // and until when another holds it, or NotFound (no lease to wait on).
  Status TakeLease(SampleId id, const ValueKey& k, Clock::time_point* until);
  void PublishLoop();
  void LeaseWaitLoop();
  // Counts a failed call and warns (rate-limited) with its server and reason.
  void CountError(const MemcachedClient::Result& r);
  // Sets the sample's value; counts it.
  void Set(SampleId id, const DecodedSample& sample);

  RemoteTierOptions options_;
  const Catalog* catalog_ = nullptr;
  uint32_t base_ = 0;
  std::unique_ptr<MemcachedClient> client_;

  mutable Mutex mu_;
  std::condition_variable_any wake_;
  std::condition_variable_any drained_;
  std::deque<Write> queue_ GUARDED_BY(mu_);
  uint64_t queued_bytes_ GUARDED_BY(mu_) = 0;
  bool writing_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  RemoteTierStats stats_ GUARDED_BY(mu_);
  LatencyHistogram get_latency_;
  LatencyHistogram set_latency_;
  // Samples whose lease this daemon holds: their value is set at once.
  std::unordered_set<SampleId> leased_ GUARDED_BY(mu_);
  // Samples another daemon holds the lease of: until when (Fetch sets it,
  // AwaitLeased takes it).
  std::unordered_map<SampleId, Clock::time_point> leased_elsewhere_ GUARDED_BY(mu_);
  std::vector<LeaseWait> lease_waits_ GUARDED_BY(mu_);  // not being polled now
  bool waits_stopped_ GUARDED_BY(mu_) = false;
  std::condition_variable_any lease_wake_;
  std::thread publisher_;
  std::thread lease_waiter_;
};

}  // namespace joaderfs

#endif  // JOADERFS_CACHE_MEMCACHED_TIER_H_
