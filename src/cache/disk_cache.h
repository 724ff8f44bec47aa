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
// RocksDB is the one index: a Get is one point lookup in it (5-10 us
// against a 1.3 ms decode). What RAM holds is only what choosing slots and
// victims needs, in flat arrays: per catalog sample a 4-byte position in
// `entries_` (or "none" / "queued"); per entry of the current catalog and
// base 12 bytes (id, slot, slot size); per slot a bit (used or free); and
// per other entry (another base's, a changed file's: needed by nobody) its
// key in one shared buffer and 16 bytes. Open() only opens RocksDB (and
// checks its files' checksums) and the slot files, so a remount is quick
// whatever the tier holds; the writer thread then
// rebuilds those arrays from RocksDB in steps between its writes, once the
// catalog has taken every file's identity (Catalog::WaitForIdentities: an
// entry is sorted by its fingerprint) or read_timeout has passed, and a
// sample whose identity is not taken yet is neither looked up nor written.
// Until it
// is done, writes go past every slot the files held at open (never onto a
// slot an entry may name) and only entries already rebuilt can be evicted.
//
// Writes go through one background thread so they stay off the read path;
// it takes every queued write at once and puts their index entries in one
// RocksDB batch. When the byte budget is exceeded, entries that fewer jobs
// still need (RefCounts, from the planning group) are dropped first.
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
#include <set>
#include <string>
#include <thread>
#include <utility>
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
class Iterator;
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
  uint64_t bytes = 0;  // slot bytes in use (of the entries rebuilt so far)
  uint64_t budget = 0;
  uint64_t entries = 0;  // rebuilt so far: all once WaitForRebuild() returns
};

class DiskCache {
 public:
  // Opens (creating) the tier for `catalog`'s SOURCE under `dir`, holding
  // images decoded at `base` (DecodeBase's). Fails when another daemon
  // holds it or the folder is unusable. `counts` (entries needed by fewer
  // jobs are dropped first) outlives the tier. Opens RocksDB and the slot
  // files only (before the writer thread starts, without mu_): the rest is
  // rebuilt in the background.
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
  // Waits until the in-RAM arrays are rebuilt from RocksDB (for tests and
  // benchmarks: nothing else needs to wait for it).
  void WaitForRebuild();

  DiskCacheStats Stats() const;

  // The tier's folder (for tests that damage it on purpose).
  const std::string& path() const { return path_; }

  // Disk bytes a sample of `bytes` pixels takes: its slot, which is what
  // the budget counts.
  static uint64_t SlotBytes(uint64_t bytes);

  // Tests: while held, no tier takes a rebuild step (writes go on).
  static void TEST_HoldRebuild(bool hold);

 private:
  // Where a sample is, and what it must look like there: an index value.
  struct Location {
    uint64_t slot_bytes = 0;  // selects the slot file
    uint64_t slot = 0;
    uint64_t bytes = 0;  // pixel bytes
    uint32_t crc = 0;    // of the pixels
  };
  // An entry of the current catalog and base. Slot sizes are multiples of
  // 64 (SlotBytes), slots per file below 2^32.
  struct Entry {
    SampleId id;
    uint32_t slot;
    uint32_t slot_units;  // slot bytes / 64
  };
  // An entry nobody needs (another base's, or a file changed or gone since):
  // its key is stale_keys_[previous key_end, key_end).
  struct StaleEntry {
    uint64_t key_end;
    uint32_t slot;
    uint32_t slot_units;
  };
  struct SlotFile {
    int fd = -1;
    uint64_t high_water = 0;        // slots ever used, or in the file at open
    std::vector<uint64_t> used;     // a bit per slot below high_water
    uint64_t first_maybe_free = 0;  // no free slot below it
  };
  struct Write {
    SampleId id;
    SamplePtr sample;
  };
  // entry_at_ values that are no position in entries_.
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr uint32_t kQueued = UINT32_MAX - 1;

  DiskCache() = default;
  // Before the writer thread starts: nothing else can hold mu_ yet.
  Status OpenIndex() NO_THREAD_SAFETY_ANALYSIS;
  void StartAfresh(const char* why, const Status& s) NO_THREAD_SAFETY_ANALYSIS;
  Status OpenSlotFiles() NO_THREAD_SAFETY_ANALYSIS;
  std::string Key(SampleId id) const;
  SlotFile* File(uint64_t slot_bytes) REQUIRES(mu_);
  uint64_t AllocateSlot(uint64_t slot_bytes) REQUIRES(mu_);
  // Marks a slot used; false when it was already (two entries name it).
  bool MarkUsed(uint64_t slot_bytes, uint64_t slot) REQUIRES(mu_);
  void FreeSlot(uint64_t slot_bytes, uint64_t slot) REQUIRES(mu_);
  void Unindex(uint32_t at) REQUIRES(mu_);  // entries_[at]; frees its slot
  void EvictLocked(std::vector<std::string>* victims) REQUIRES(mu_);
  // Deletes index keys from RocksDB. REQUIRES: mu_ not held; unindexed.
  void DeleteKeys(const std::vector<std::string>& keys) EXCLUDES(mu_);
  void WriteLoop();
  void WriteAll(std::vector<Write>* writes) EXCLUDES(mu_);
  // One step of the rebuild (writer thread): false once it is done.
  bool RebuildStep() EXCLUDES(mu_);
  void FinishRebuild() EXCLUDES(mu_);

  const Catalog* catalog_ = nullptr;
  const RefCounts* ref_counts_ = nullptr;
  uint32_t base_ = 0;
  std::string path_;
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<RocksDbWrites> index_writes_;  // over db_; stops at a failure
  // The writer thread's walk over RocksDB while it rebuilds.
  std::unique_ptr<rocksdb::Iterator> rebuild_it_;

  mutable RankedMutex<LockRank::kDiskCache> mu_;
  std::condition_variable_any wake_;
  std::condition_variable_any drained_;
  std::deque<Write> queue_ GUARDED_BY(mu_);
  uint64_t queued_bytes_ GUARDED_BY(mu_) = 0;
  bool writing_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool rebuilt_ GUARDED_BY(mu_) = false;
  std::vector<uint32_t> entry_at_ GUARDED_BY(mu_);  // per catalog sample
  std::vector<Entry> entries_ GUARDED_BY(mu_);
  std::string stale_keys_ GUARDED_BY(mu_);
  std::vector<StaleEntry> stale_ GUARDED_BY(mu_);
  // While rebuilding: slots of entries that reads dropped before the
  // rebuild reached them (it must not count them used), and slots that two
  // entries named (both dropped when it is done).
  std::set<std::pair<uint64_t, uint64_t>> dropped_early_ GUARDED_BY(mu_);
  std::vector<std::pair<uint64_t, uint64_t>> shared_slots_ GUARDED_BY(mu_);
  // Slot files by slot size; a file's fd stays open until the tier closes.
  std::map<uint64_t, SlotFile> files_ GUARDED_BY(mu_);
  Rng rng_ GUARDED_BY(mu_){0x6a6f61646572ULL};
  DiskCacheStats stats_ GUARDED_BY(mu_);
  std::thread writer_;
};

}  // namespace joaderfs

#endif  // JOADERFS_CACHE_DISK_CACHE_H_
