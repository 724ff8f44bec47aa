// The remote tier: decoded base images shared by the daemons of a cluster
// through memcached (docs/design.md 2.4), behind the RAM and disk tiers and
// in front of the decoder. No protocol or discovery of our own: libmemcached
// spreads keys over the servers of `remote_cache=` by consistent hashing
// (ketama), ejects a server that fails and tries it again a second later.
//
// Keys: a digest of the base and of what identifies the source file's
// content, its relative path, size and modification time (and, in a shard,
// the member's offset and length): what the disk tier's key names, less the
// inode, so that nodes holding copies of one dataset (rsync -a keeps sizes
// and mtimes) share. A value is a header (magic, dimensions, that digest
// and the full key material's length, the CRC32C of the pixels) then the
// pixels: a value whose header, length, key material or CRC does not match
// (damaged, truncated, written by something else) is a miss, never a sample.
//
// A lookup that misses takes a lease (memcached add of a companion key,
// which only one daemon can create, expiring after kLeaseSeconds): the
// holder decodes and publishes; the others poll the value for at most
// `lease_wait`, then decode themselves. The polls run on a thread of the
// tier's own (AwaitLeased), one multi-get a round for every value awaited,
// not on the decode thread that asked: that one goes on to other samples
// meanwhile. A holder that dies costs the others
// one lease_wait, never more.
//
// Publishing is asynchronous: one thread sets the values of a queue of at
// most kMaxQueuedBytes (a full queue drops the write, counted), and a daemon
// publishes at most `publish_limit` bytes per mount. The value of a sample
// whose lease this daemon holds is set at once by the decode thread instead:
// other daemons are polling for it. Every server call is
// bounded by the connect and poll timeouts (`timeout`): a dead or slow
// server costs misses and at most about that long per call, never a crash.
//
// Owns its libmemcached handles (one per concurrent caller, reused), the
// publisher thread and the lease-wait thread. Thread-safe: every public
// member may be called from any thread; handles are handed out under a
// leaf mutex and used without it.

#ifndef JOADERFS_CACHE_REMOTE_TIER_H_
#define JOADERFS_CACHE_REMOTE_TIER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

#include "catalog/catalog.h"
#include "common/ranked_mutex.h"
#include "common/status.h"
#include "loader/decoded_sample.h"

struct memcached_st;

namespace joaderfs {

struct RemoteTierOptions {
  std::vector<std::string> servers;           // host:port
  uint64_t publish_limit = UINT64_MAX;        // bytes one daemon publishes per mount
  std::chrono::milliseconds timeout{100};     // connect and poll, per server call
  std::chrono::milliseconds lease_wait{500};  // how long a lookup polls a leased value
};

// Parses `memcached://host:port+host:port...` into `servers`.
Status ParseRemoteCache(std::string_view uri, std::vector<std::string>* servers);

struct RemoteTierStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t corrupt = 0;        // values that failed their checks: misses
  uint64_t errors = 0;         // server calls that failed or timed out
  uint64_t lease_waits = 0;    // lookups that found another daemon's lease
  uint64_t lease_hits = 0;     // ... and got its value in time
  uint64_t published = 0;      // values set
  uint64_t publish_drops = 0;  // writes dropped: queue full, or publish_limit reached
  uint64_t bytes_in = 0;       // value bytes fetched
  uint64_t bytes_out = 0;      // value bytes published
};

class RemoteTier {
 public:
  // Fails only on a malformed server list; servers that do not answer yet
  // are warned about, and used once they do.
  static Status Open(const RemoteTierOptions& options, const Catalog* catalog, uint32_t base,
                     std::unique_ptr<RemoteTier>* out);
  ~RemoteTier();  // drops queued writes, waits for the one in progress

  // Ok and the sample; Busy: another daemon holds its lease (it is decoding
  // it), so AwaitLeased() it; NotFound: the caller decodes and publishes, or
  // calls Abandon().
  Status Fetch(SampleId id, DecodedSample* out);
  // Called once per AwaitLeased(), on the lease-wait thread: Ok and the
  // sample, or NotFound (the wait ran out, or the value was damaged): the
  // caller decodes. It must be short and must not block.
  using LeaseDone = std::function<void(Status, std::shared_ptr<DecodedSample>)>;
  // After Fetch() said Busy: polls the value every kLeasePoll for at most
  // `lease_wait`, and calls `done`. Dropped, never called, after StopWaits().
  void AwaitLeased(SampleId id, LeaseDone done);
  // Drops the waits not answered (their `done` is never called) and returns
  // once no `done` is running. Idempotent; the destructor calls it.
  void StopWaits();
  // Queues the sample for publishing.
  void PublishAsync(SampleId id, SamplePtr sample);
  // The caller's decode failed: gives its lease up, so no one waits on it.
  void Abandon(SampleId id);
  // Waits until the queue is empty (tests, benchmarks).
  void Flush();

  RemoteTierStats Stats() const;
  const std::vector<std::string>& servers() const { return options_.servers; }

 private:
  // A sample's value key: what it names (base size, file identity, relpath),
  // that material's digest, and the memcached key made from the digest.
  struct ValueKey {
    std::string material;
    uint64_t digest = 0;
    std::string name;
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
  RemoteTier() = default;
  memcached_st* Handle();         // a handle of the pool, or a new clone
  void Return(memcached_st* mc);  // back to the pool
  // One get; Ok, NotFound or Corruption; counts errors.
  Status GetOnce(memcached_st* mc, const ValueKey& key, DecodedSample* out);
  // One multi-get of the waits' values: each one's status as GetOnce's, and
  // its sample where Ok.
  void GetMany(memcached_st* mc, const std::vector<LeaseWait>& waits, std::vector<Status>* found,
               std::vector<std::shared_ptr<DecodedSample>>* samples);
  // Checks a value fetched (malloc'd; owned from here on) against the key:
  // Ok and the sample, or Corruption (counted, warned).
  Status TakeValue(const ValueKey& key, char* value, size_t length, DecodedSample* out);
  ValueKey KeyOf(SampleId id) const;
  static std::string LeaseName(const ValueKey& key);
  void PublishLoop();
  void LeaseWaitLoop();
  // Counts a failed call and warns (rate-limited) with its reason.
  void CountError(memcached_st* mc);
  // Sets the sample's value; counts it.
  void Set(memcached_st* mc, SampleId id, const DecodedSample& sample);

  RemoteTierOptions options_;
  const Catalog* catalog_ = nullptr;
  uint32_t base_ = 0;
  memcached_st* master_ = nullptr;  // configured; cloned for each handle

  mutable Mutex mu_;
  std::vector<memcached_st*> idle_ GUARDED_BY(mu_);
  std::condition_variable_any wake_;
  std::condition_variable_any drained_;
  std::deque<Write> queue_ GUARDED_BY(mu_);
  uint64_t queued_bytes_ GUARDED_BY(mu_) = 0;
  bool writing_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  RemoteTierStats stats_ GUARDED_BY(mu_);
  // Samples whose lease this daemon holds: their value is set at once.
  std::unordered_set<SampleId> leased_ GUARDED_BY(mu_);
  std::vector<LeaseWait> lease_waits_ GUARDED_BY(mu_);  // not being polled now
  bool waits_stopped_ GUARDED_BY(mu_) = false;
  std::condition_variable_any lease_wake_;
  std::thread publisher_;
  std::thread lease_waiter_;
};

}  // namespace joaderfs

#endif  // JOADERFS_CACHE_REMOTE_TIER_H_
