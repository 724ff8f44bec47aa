// The disk tier: decoded samples kept under cache_dir, so that a RAM miss, a
// later epoch, or a restarted daemon need not decode again.
//
// Storage: one folder per SOURCE (cache_dir/<hash of SOURCE>-v3/) holding
// slot files and a RocksDB index. A sample's bytes (a base image,
// loader/decoder.h DecodeBase) go to a slot of a slot file: one file per slot
// size (`slots-<bytes>`), slot sizes in steps of 1/8 of a power of two, so
// freed slots are reused and files never fragment. A write is one pwrite()
// of the slot, a read one pread(), where a value in RocksDB (a blob file)
// is copied into a write batch, the memtable and, at flush, the blob file:
// 0.43 CPU ms per 224x224 write and 0.28 ms per read, against 1.3 ms for
// the decode they save.
//
// The index (RocksDB, WAL on, not synced) maps a key to the sample's slot,
// byte size and CRC32C. Keys: the mount's base and a fingerprint of the
// source file (its relative path, size, mtime and inode), so a changed file
// is simply a miss while every unchanged sample stays valid (and a mount at
// another base misses every entry, which then goes first when room is
// needed). Each slot
// starts with a header naming its key's hash, the image's dimensions and
// the CRC of its pixels; a read whose slot does not match its index entry,
// or whose pixels fail the CRC, is never served: the entry is dropped and
// reported as Corruption. That covers a crash between a slot's write and
// its index entry's, a slot reused after an eviction whose index delete was
// lost, and damaged files.
//
// Writes go through one background thread so they stay off the read path;
// when the byte budget is exceeded, entries that fewer jobs still need
// (RefCounts, from the planning group) are dropped first.
//
// Thread-safe. Files and RocksDB are read and written without the tier's
// lock held; the lock ranks below the RAM tier's and above the planning
// groups' (common/ranked_mutex.h).

#ifndef JOADERFS_CACHE_DISK_CACHE_H_
#define JOADERFS_CACHE_DISK_CACHE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
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

// RocksDB stays behind disk_cache.cc: only pointers to it here.
namespace rocksdb {
class DB;
}  // namespace rocksdb

namespace joaderfs {

class RocksDbWrites;

struct DiskCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t corrupt = 0;      // entries that failed their checks, dropped
  uint64_t writes = 0;       // samples written to the tier
  uint64_t write_drops = 0;  // writes skipped because the queue was full
  uint64_t evictions = 0;
  uint64_t bytes = 0;  // slot bytes in use
  uint64_t budget = 0;
  uint64_t entries = 0;
};

class DiskCache {
 public:
  // Opens (creating) the tier for `catalog`'s SOURCE under `dir`, holding
  // images decoded at `base` (DecodeBase's). Fails when another daemon
  // holds it or the folder is unusable. `counts` (entries needed by fewer
  // jobs are dropped first) outlives the tier.
  // (It fills the tier before its writer thread starts, without mu_.)
  static Status Open(const std::string& dir, const Catalog* catalog, const RefCounts* counts,
                     uint32_t base, uint64_t budget_bytes,
                     std::unique_ptr<DiskCache>* out) NO_THREAD_SAFETY_ANALYSIS;
  // Removes the tier of SOURCE in cache folder `dir` (every format's, not
  // the job store beside it): after a compromise, so that nothing it held
  // is served again. The caller holds the cache_dir lock.
  static Status Purge(const std::string& dir, const std::string& source, uint64_t* bytes);
  ~DiskCache();  // finishes queued writes

  // Ok and the sample; NotFound; or Corruption (the entry has been dropped).
  Status Get(SampleId id, DecodedSample* out);

  // Queues the sample for writing unless it is stored already.
  void PutAsync(SampleId id, SamplePtr sample);

  // Waits until every queued write is done (for tests and shutdown).
  void Flush();

  DiskCacheStats Stats() const;

  // The tier's folder (for tests that damage it on purpose).
  const std::string& path() const { return path_; }

  // Disk bytes a sample of `bytes` pixels takes: its slot, which is what
  // the budget counts.
  static uint64_t SlotBytes(uint64_t bytes);

 private:
  // Where a sample is, and what it must look like there.
  struct Location {
    uint64_t slot_bytes = 0;  // selects the slot file
    uint64_t slot = 0;
    uint64_t bytes = 0;  // pixel bytes
    uint32_t crc = 0;    // of the pixels
  };
  struct IndexEntry {
    SampleId id;
    uint32_t base;  // of its key: an earlier mount's may differ
    Location where;
    size_t at;  // position in keys_
  };
  struct SlotFile {
    int fd = -1;
    uint64_t high_water = 0;     // slots ever used
    std::vector<uint64_t> free;  // freed slots below high_water
  };
  struct Write {
    SampleId id;
    SamplePtr sample;
  };

  DiskCache() = default;
  // Before the writer thread starts: nothing else can hold mu_ yet.
  Status OpenIndex() NO_THREAD_SAFETY_ANALYSIS;
  void StartAfresh(const char* why, const Status& s) NO_THREAD_SAFETY_ANALYSIS;
  Status OpenSlotFiles() NO_THREAD_SAFETY_ANALYSIS;
  std::string Key(SampleId id) const;
  SlotFile* File(uint64_t slot_bytes) REQUIRES(mu_);
  uint64_t AllocateSlot(uint64_t slot_bytes) REQUIRES(mu_);
  void Unindex(const std::string& key) REQUIRES(mu_);  // frees its slot
  void EvictLocked(std::vector<std::string>* victims) REQUIRES(mu_);
  // Deletes index keys from RocksDB. REQUIRES: mu_ not held; unindexed.
  void DeleteKeys(const std::vector<std::string>& keys) EXCLUDES(mu_);
  void WriteLoop();

  const Catalog* catalog_ = nullptr;
  const RefCounts* ref_counts_ = nullptr;
  uint32_t base_ = 0;
  std::string path_;
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<RocksDbWrites> index_writes_;  // over db_; stops at a failure
  std::vector<uint64_t> fingerprints_;           // per sample id

  mutable RankedMutex<LockRank::kDiskCache> mu_;
  std::condition_variable_any wake_;
  std::condition_variable_any drained_;
  std::deque<Write> queue_ GUARDED_BY(mu_);
  bool writing_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::unordered_map<std::string, IndexEntry> index_ GUARDED_BY(mu_);
  std::vector<std::string> keys_ GUARDED_BY(mu_);  // for sampling victims
  // Slot files by slot size; a file's fd stays open until the tier closes.
  std::map<uint64_t, SlotFile> files_ GUARDED_BY(mu_);
  Rng rng_ GUARDED_BY(mu_){0x6a6f61646572ULL};
  DiskCacheStats stats_ GUARDED_BY(mu_);
  std::thread writer_;
};

}  // namespace joaderfs

#endif  // JOADERFS_CACHE_DISK_CACHE_H_
