// What every RocksDB instance of ours (the disk tier's index, the job
// store) needs so that a full or failing cache filesystem never takes the
// daemon, and with it the mount, down. Debian 12's RocksDB (7.8) is built
// with assertions, and it aborts the process when a file it failed to
// write is written again: its WAL (later RocksDB releases no longer do)
// and its own LOG file, which its no-space recovery thread writes to. So
// its log goes to ours, and writes stop at the first that fails.
//
// The one project header that includes RocksDB's: the others name
// rocksdb::DB and RocksDbWrites only through pointers, so that RocksDB's
// headers stay behind the .cc files that use them (scripts/include_graph.py
// checks).

#ifndef JOADERFS_COMMON_ROCKSDB_SUPPORT_H_
#define JOADERFS_COMMON_ROCKSDB_SUPPORT_H_

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <string>
#include <string_view>

#include "common/ranked_mutex.h"
#include "common/status.h"

namespace joaderfs {

// Before DB::Open of the database at `path`: makes its folder (RocksDB warns
// when it is missing), sends RocksDB's own log to ours (warnings and
// errors, rate-limited) instead of a LOG file in that folder, and bounds its
// memtables and WAL (kRocksDbWorkingBytes): our records are small, and
// RocksDB's 64 MiB defaults alone could fill a small cache filesystem. Its
// RAM: the two memtables, a block cache of kRocksDbBlockCacheBytes for data
// blocks, and the tables' index and Bloom filter blocks (~2 bytes a record).
void PrepareRocksDb(const std::string& path, rocksdb::Options* options);

// The disk room one of our databases may take beyond its records: two
// memtables of 4 MiB in the WAL, a flush and a compaction in flight.
constexpr uint64_t kRocksDbWorkingBytes = 16ULL << 20;
// The block cache of each database (data blocks).
constexpr size_t kRocksDbBlockCacheBytes = 8ULL << 20;
// Its records' room per sample at worst: an index entry (about 40 bytes)
// written twice over by a compaction, and a job's per-sample state.
constexpr uint64_t kRocksDbBytesPerSample = 128;

// The writes to one RocksDB instance, one at a time, and none after the
// first that fails. RocksDB refuses writes after such an error until it is
// resumed, so stopping loses nothing it would have kept: the index or job
// records stay as of the failure, which the next daemon reopens.
//
// Thread-safe: a mutex of its own (a leaf of the lock order) held across
// each write.
class RocksDbWrites {
 public:
  // `db` outlives this object.
  explicit RocksDbWrites(rocksdb::DB* db) : db_(db) {}

  // db->Write(options, batch), or the first failure's status once a write
  // has failed (the batch is then dropped). Logs the first failure as an
  // error, naming the database's path.
  rocksdb::Status Write(const rocksdb::WriteOptions& options, rocksdb::WriteBatch* batch);

  bool failed() const;

 private:
  rocksdb::DB* const db_;
  mutable Mutex mu_;
  rocksdb::Status failure_ GUARDED_BY(mu_);  // ok until a write fails
};

// Whether the write-ahead log `wal` (a RocksDB *.log file's bytes) is
// damaged before its tail: a record that fails its checksum, or a bad
// header, with a whole record after it. A torn last record (a crash inside a
// write) is no damage. RocksDB's kTolerateCorruptedTailRecords cannot tell
// the two apart inside the file's last 32 KiB block: a damaged length there
// reads as a record cut short by the end of the file, and the records behind
// it are dropped silently. Returns Corruption naming `name` and the offset.
Status CheckWalBeforeTail(std::string_view wal, const std::string& name);

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_ROCKSDB_SUPPORT_H_
