// The disk tier: decoded samples kept under cache_dir in RocksDB, so that a
// RAM miss, a later epoch, or a restarted daemon need not decode again.
//
// Storage: one RocksDB database per SOURCE (cache_dir/<hash of SOURCE>/).
// Sample values live in RocksDB's integrated blob files (BlobDB): they are
// large (150 KB at 224x224) and written once, so keeping them out of the
// LSM tree means compactions move only keys. We chose this over our own
// segment files because RocksDB then owns atomicity and crash recovery; a
// small metadata record per sample (id, bytes) sits in the default column
// family, written in the same batch, so the in-memory index can be rebuilt
// at open without reading any pixels.
//
// Keys: the output size and a fingerprint of the source file (its relative
// path, size, mtime and inode), so a changed file is simply a miss while
// every unchanged sample stays valid. Values carry a CRC32 of their pixels;
// an entry that fails it (or that RocksDB reports corrupt) is deleted and
// reported as Corruption, never served.
//
// Writes go through one background thread so they stay off the read path;
// when the byte budget is exceeded, entries that fewer jobs still need
// (RefCounts, from the planning groups) are dropped first.
//
// Thread-safe. RocksDB is called without the tier's lock held; the lock
// ranks below the RAM tier's and above the planning groups'
// (common/ranked_mutex.h).

#ifndef JOADERFS_CACHE_DISK_CACHE_H_
#define JOADERFS_CACHE_DISK_CACHE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache/ref_counts.h"
#include "catalog/catalog.h"
#include "common/random.h"
#include "common/ranked_mutex.h"
#include "common/status.h"
#include "loader/decoded_sample.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
}  // namespace rocksdb

namespace joaderfs {

struct DiskCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t corrupt = 0;     // entries that failed their checksum, dropped
  uint64_t writes = 0;
  uint64_t write_drops = 0;  // writes skipped because the queue was full
  uint64_t evictions = 0;
  uint64_t bytes = 0;       // pixel bytes stored
  uint64_t budget = 0;
  uint64_t entries = 0;
};

class DiskCache {
 public:
  // Opens (creating) the database for `catalog`'s SOURCE under `dir`.
  // Fails when another daemon holds it or the folder is unusable. `counts`
  // (entries needed by fewer jobs are dropped first) outlives the tier.
  static Status Open(const std::string& dir, const Catalog* catalog, const RefCounts* counts,
                     uint64_t budget_bytes, std::unique_ptr<DiskCache>* out);
  ~DiskCache();  // finishes queued writes

  // Ok and the sample; NotFound; or Corruption (the entry has been dropped).
  Status Get(uint32_t size, SampleId id, DecodedSample* out);

  // Queues the sample for writing unless it is stored already.
  void PutAsync(uint32_t size, SampleId id, SamplePtr sample);

  // Waits until every queued write is done (for tests and shutdown).
  void Flush();

  DiskCacheStats Stats() const;

  // The database folder (for tests that damage it on purpose).
  const std::string& path() const { return path_; }

 private:
  struct IndexEntry {
    SampleId id;
    uint32_t size;
    uint64_t bytes;
    size_t slot;  // position in keys_
  };
  struct Write {
    uint32_t size;
    SampleId id;
    SamplePtr sample;
  };

  DiskCache() = default;
  Status OpenDatabase();
  void CloseDatabase();
  std::string Key(uint32_t size, SampleId id) const;
  void Unindex(const std::string& key);  // REQUIRES: mu_ held
  // Deletes the entry from RocksDB. REQUIRES: mu_ not held; unindexed.
  void Delete(const std::string& key);
  void WriteLoop();
  void EvictLocked(std::vector<std::string>* victims);

  const Catalog* catalog_ = nullptr;
  const RefCounts* ref_counts_ = nullptr;
  std::string path_;
  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::ColumnFamilyHandle* samples_ = nullptr;  // blob-backed values
  rocksdb::ColumnFamilyHandle* meta_ = nullptr;     // default family: id and bytes
  std::vector<uint64_t> fingerprints_;              // per sample id

  mutable RankedMutex<LockRank::kDiskCache> mu_;
  std::condition_variable_any wake_;
  std::condition_variable_any drained_;
  std::deque<Write> queue_;                                // GUARDED_BY(mu_)
  bool writing_ = false;                                   // GUARDED_BY(mu_)
  bool stopping_ = false;                                  // GUARDED_BY(mu_)
  std::unordered_map<std::string, IndexEntry> index_;      // GUARDED_BY(mu_)
  std::vector<std::string> keys_;                          // GUARDED_BY(mu_), for sampling victims
  Rng rng_{0x6a6f61646572ULL};                             // GUARDED_BY(mu_)
  DiskCacheStats stats_;                                   // GUARDED_BY(mu_)
  std::thread writer_;
};

}  // namespace joaderfs

#endif  // JOADERFS_CACHE_DISK_CACHE_H_
