// The RAM tier of decoded samples, keyed by sample id, in front of the disk
// tier and the decoder. An entry is the image decoded at the mount's `base`
// (loader/decoder.h DecodeBase), uncropped: every job cuts its own
// deliveries from it (loader/augment.h), whatever its output size, crop and
// flip, so one entry serves them all.
//
// Acquire() is single-flight: however many jobs ask for a sample while it
// is being loaded, it is loaded once (from the disk tier, else decoded) and
// every caller gets the same immutable sample. Each Acquire() pins the entry
// until the matching Release(): the job manager acquires a sample when it
// plans it for a job and releases it once delivered, so a planned sample is
// never evicted before every job that planned it has it.
//
// Unpinned entries are kept within the byte budget by the RefCnt policy of
// the JOADER paper (eviction_policy.h, the same code the simulator runs):
// the entry the fewest jobs still need this epoch (RefCounts, answered by
// the planning group) goes first; among equal counts, the one that
// was released first. A count only changes when a job picks the sample
// (and then holds it pinned, so it is re-read on release) or when a job
// starts an epoch, arrives or leaves: the job manager then calls
// RefreshNeeds(). A load asks the disk tier, then the remote tier
// (remote_tier.h: other daemons' decodes), then decodes. Every decoded
// sample is also queued for the disk tier
// (write-through: a later epoch, a later job or a restarted daemon may want
// it, and its pixels are at hand now), and an evicted sample that a job
// still needs is queued again in case its first write was dropped. A
// decoded sample is published to the remote tier too, and one fetched from
// there is kept by the disk tier.
//
// A sample that fails to load is remembered as bad and answered null at
// once, without touching its file, until it may heal: once the back-off
// since its last failure has passed (FailureRetry: doubling to a cap), or
// once its file's size or mtime differs from what they were at the failure,
// whichever comes first. The file is looked at (a stat, on a loader thread
// like the decode, never under the lock) at most once per check interval,
// by the first Acquire() after it; that Acquire() waits for the stat, and
// for the decode when the file changed. A bad sample is thus decoded again
// only when the back-off allows or its file changed, and a job that skipped
// it in one epoch gets it in a later one once it heals.
//
// Thread-safe. Callbacks run without the cache's lock: at once on the
// caller's thread when the sample is ready, else on a loader thread.
// RefCounts is asked under the cache's lock, which ranks above it
// (common/ranked_mutex.h).

#ifndef JOADERFS_CACHE_SAMPLE_CACHE_H_
#define JOADERFS_CACHE_SAMPLE_CACHE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/disk_cache.h"
#include "cache/eviction_policy.h"
#include "cache/ref_counts.h"
#include "cache/remote_tier.h"
#include "catalog/catalog.h"
#include "common/latency_histogram.h"
#include "common/ranked_mutex.h"
#include "loader/decoded_sample.h"
#include "loader/loader_pool.h"
#include "loader/source_reader.h"

namespace joaderfs {

struct CacheStats {
  uint64_t hits = 0;                          // Acquire() found the sample ready or loading
  uint64_t misses = 0;                        // Acquire() started a load
  uint64_t decoded = 0;                       // successful decodes
  uint64_t failed = 0;                        // distinct samples now remembered as bad
  uint64_t retries = 0;                       // loads tried again of samples remembered as bad
  LatencyHistogram::Snapshot decode_latency;  // each decode of a base image, failed ones too
  uint64_t healed = 0;                        // bad samples that later loaded
  uint64_t evictions = 0;
  uint64_t bytes = 0;  // pixels of ready entries
  uint64_t pinned_bytes = 0;
  uint64_t budget = 0;
  uint64_t entries = 0;
  uint64_t loading = 0;  // entries being loaded
};

// When a bad sample is tried again (see above).
struct FailureRetry {
  using Duration = std::chrono::steady_clock::duration;
  Duration backoff = std::chrono::seconds(30);        // after the first failure; doubles per retry
  Duration cap = std::chrono::minutes(30);            // the longest back-off
  Duration check_interval = std::chrono::seconds(2);  // between stats of its file
};
// The mount's retry_failed=SECONDS: a back-off from SECONDS doubling to 60 x
// SECONDS, the file looked at every min(2 s, SECONDS).
FailureRetry FailureRetryFrom(std::chrono::seconds start);

// Where an Acquire() found its sample: the RAM tier (ready, or being loaded
// for an earlier Acquire, or remembered as bad), or a load that this
// Acquire started, which read the disk tier, read the remote tier or decoded.
enum class Tier { kRam, kDisk, kRemote, kDecode };

class SampleCache {
 public:
  // `sample` is null when the image could not be decoded.
  using Callback = std::function<void(const SamplePtr& sample)>;
  using TierCallback = std::function<void(const SamplePtr& sample, Tier tier)>;
  // `disk` may be null (cache_dir=none); when not, it holds images at the
  // same `base` (0: the image at its own resolution). `counts` outlives the
  // cache. SOURCE is read by `reader`, which must be stopped before `pool`
  // goes (its callbacks submit decodes); null: the cache makes its own, with
  // default options and the pool's number of threads, and stops it first
  // when it goes. `remote` (may be null) outlives the cache and holds
  // images at the same `base`.
  SampleCache(const Catalog* catalog, LoaderPool* pool, DiskCache* disk, const RefCounts* counts,
              uint32_t base, uint64_t budget_bytes, FailureRetry retry = {},
              SourceReader* reader = nullptr, RemoteTier* remote = nullptr);
  ~SampleCache();
  // Stops the reader the cache made for itself (none given), and the
  // remote tier's lease waits: reads and waits not yet done are dropped, and
  // those whose callbacks run are waited for. Call it before `pool` goes
  // when the cache outlives the pool: their callbacks submit to it. The
  // destructor does it too.
  void StopReads();

  // Pins the entry of `id` and calls `done` exactly once with its sample.
  void Acquire(SampleId id, Callback done);
  // The same, telling `done` where the sample came from (per-job figures).
  void AcquireWithTier(SampleId id, TierCallback done);
  // Unpins one Acquire() of `id`.
  void Release(SampleId id);

  // Re-reads every unpinned entry's count: call after a job starts an
  // epoch, arrives or leaves. Asks RefCounts once per entry.
  void RefreshNeeds();

  // Bytes that pinned samples hold or will hold once loaded: the job
  // manager plans less ahead when this reaches the budget. Lock-free, so it
  // may be called under any lock.
  uint64_t CommittedBytes() const { return committed_.load(std::memory_order_relaxed); }
  // The mean size of loaded samples (a 224 x 224 guess before the first).
  // Lock-free too.
  uint64_t AverageSampleBytes() const { return average_bytes_.load(std::memory_order_relaxed); }
  uint64_t budget() const { return budget_; }
  // The resolution its entries are decoded at (DecodeBase's `base`).
  uint32_t base() const { return base_; }

  CacheStats Stats() const;
  SourceReaderStats ReadStats() const { return reader_->Stats(); }
  // The disk tier behind this cache, or null.
  const DiskCache* disk() const { return disk_; }
  // The remote tier behind the disk tier, or null.
  const RemoteTier* remote() const { return remote_; }

 private:
  struct Entry {
    SamplePtr sample;  // null while loading
    // While loading; the first is the Acquire() that started the load.
    std::vector<TierCallback> waiters;
    uint32_t pins = 0;           // evictable (tracked by its policy) when 0 and ready
    uint64_t loading_bytes = 0;  // while loading: the bytes it is expected to hold
  };

  using Clock = std::chrono::steady_clock;
  // What a failed sample's file looked like: a change means it may heal.
  // Asked of the catalog's store (a stat, or a HEAD of an object).
  struct FileIdentity {
    int64_t size = -1;      // -1: it could not be looked at
    int64_t mtime_ns = -1;  // an object's ETag digest
    bool operator==(const FileIdentity&) const = default;
  };
  struct Bad {
    FileIdentity file;             // at the last failure
    Clock::time_point retry_at;    // the back-off ends
    Clock::time_point checked_at;  // the file was last looked at
    Clock::duration backoff{};     // the wait that ends at retry_at
    // Its read was abandoned (SourceReader::Result::stuck): only the
    // back-off heals it, as a stat of its file may hang a decode thread.
    bool stuck = false;
  };
  // What one load found, for Finish().
  struct Outcome {
    Status status = Status::NotFound("no disk tier");
    std::shared_ptr<DecodedSample> loaded = std::make_shared<DecodedSample>();
    bool from_disk = false;
    bool from_remote = false;
    bool unchanged = false;   // a bad sample whose file is as it was: not tried again
    bool as_scanned = false;  // decoded from the file the scan saw
    bool stuck = false;       // the read was abandoned
  };
  FileIdentity Identify(SampleId id) const;
  // `unless_same`: a bad sample whose back-off has not ended: load it only
  // if its file no longer has this identity, else answer null again.
  // On a decode thread: the disk tier, else a read by reader_, whose bytes
  // Decode() decodes on a decode thread; both end in Finish().
  void Load(SampleId id, std::optional<FileIdentity> unless_same);
  // Reads the file on the reader's threads, then decodes it on a decode
  // thread (Decode); from Load, or from the remote tier's lease-wait thread.
  void ReadAndDecode(SampleId id);
  void Decode(SampleId id, const FileRange& range, SourceReader::Result read);
  void Finish(SampleId id, Outcome o);
  void EvictLocked() REQUIRES(mu_);
  void UpdateCommitted() REQUIRES(mu_);

  const Catalog* catalog_;
  LoaderPool* pool_;
  DiskCache* disk_;
  RemoteTier* remote_;
  const RefCounts* ref_counts_;
  const uint32_t base_;
  const uint64_t budget_;
  const FailureRetry retry_;
  std::unique_ptr<SourceReader> own_reader_;  // when none was given
  SourceReader* reader_;
  std::atomic<uint64_t> committed_{0};
  std::atomic<uint64_t> average_bytes_{224 * 224 * 3};  // written under mu_

  mutable RankedMutex<LockRank::kSampleCache> mu_;
  std::unordered_map<SampleId, Entry> entries_ GUARDED_BY(mu_);
  // The unpinned ready entries, in eviction order.
  const std::unique_ptr<EvictionPolicy> evictable_ GUARDED_BY(mu_);
  std::unordered_map<SampleId, Bad> bad_ GUARDED_BY(mu_);
  // Release()s still to come for Acquire()s answered null, which pinned
  // nothing: they must not unpin a later load of the same key (a retry).
  std::unordered_map<SampleId, uint32_t> owed_releases_ GUARDED_BY(mu_);
  CacheStats stats_ GUARDED_BY(mu_);
  LatencyHistogram decode_latency_;             // each decode of a base image from SOURCE's bytes
  uint64_t loading_bytes_ GUARDED_BY(mu_) = 0;  // the entries loading will hold
};

}  // namespace joaderfs

#endif  // JOADERFS_CACHE_SAMPLE_CACHE_H_
