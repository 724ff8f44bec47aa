// JobStore: the jobs of a mount kept in RocksDB in the cache_dir, so that
// they survive a restart of the daemon, clean or kill -9 (docs/design.md 2.7).
//
// Per job it keeps the owner, the spec text (and the ids of an ids-file
// or random:F:SEED subset), whether the spec is fixed, the latest elastic resume of a ranked
// job (its epoch and the ids consumed in it), and per stream (`next`, or
// each rank's `next.R`) the epoch under way and the ids handed out in it. Hand-outs are
// written (WAL, no fsync) before the read reply that carries them leaves the
// daemon, one small write per reply, so a kill -9 of the daemon loses none:
// after a restart each stream continues its epoch with the ids not handed
// out. What was handed out and not consumed comes back only through the
// `resume` file.
//
// Layout: one RocksDB database per dataset, `<cache_dir>/<source hash>-jobs1`,
// beside the disk tier's folder. Keys:
//   j <name>                       -> uid, fixed, spec text, ids subset
//   r <name>                       -> elastic resume: epoch, ids consumed
//   e <name> \0 <stream>           -> epoch under way
//   h <name> \0 <stream> <epoch> <seq> -> ids handed out (portable roaring)
// (<stream>, <epoch>, <seq> big-endian, so a stream's keys sort together).
// Hand-outs of another epoch than the stream's are stale (a reply racing
// the next epoch's start) and dropped when loading.
//
// A store RocksDB or the decoder finds damaged is refused: Open() fails
// with Corruption, and the daemon logs it and keeps no jobs.
//
// Thread-safe: RocksDB serialises writes; the sequence counter is atomic.

#ifndef JOADERFS_STORE_JOB_STORE_H_
#define JOADERFS_STORE_JOB_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <roaring/roaring.hh>

#include "catalog/catalog.h"
#include "common/status.h"

// RocksDB stays behind job_store.cc: only pointers to it here.
namespace rocksdb {
class DB;
}

namespace joaderfs {

class RocksDbWrites;

// A stream of a job: `next` is stream 0 of an unranked job; rank R is R.
using StreamIndex = uint32_t;

struct StoredStream {
  StreamIndex index = 0;
  uint64_t epoch = 0;
  Roaring handed_out;  // this epoch
};

struct StoredJob {
  std::string name;
  uint32_t uid = 0;
  bool fixed = false;  // read from: the spec may not change
  std::string spec;    // as JobSpec::ToString() writes it
  Roaring ids;         // the subset, when set through the ids file or random:F:SEED
  bool has_ids = false;
  // The latest elastic resume (a `resume` without `rank=` on a ranked job):
  // its epoch, and the ids consumed in it under any number of ranks.
  std::optional<uint64_t> elastic_epoch;
  Roaring elastic_consumed;
  std::vector<StoredStream> streams;  // those that have begun an epoch
};

class JobStore {
 public:
  // Opens (or makes) the store of `catalog`'s dataset in `cache_dir`.
  // Corruption when it is damaged; Busy when another process holds it.
  static Status Open(const std::string& cache_dir, const Catalog& catalog,
                     std::unique_ptr<JobStore>* out);
  ~JobStore();

  // Every stored job, by name. Corruption when a record does not decode.
  Status Load(std::vector<StoredJob>* jobs);

  // Writes the job's record (not its streams).
  void PutJob(const std::string& name, uint32_t uid, bool fixed, const std::string& spec,
              const Roaring* ids);
  // Replaces the job's elastic resume.
  void PutElasticResume(const std::string& name, uint64_t epoch, const Roaring& consumed);
  // Deletes the job and its streams.
  void RemoveJob(const std::string& name);
  // The stream begins `epoch`, `handed_out` already handed out (a resumed
  // epoch's consumed ids, else empty); earlier hand-outs are dropped.
  void StartEpoch(const std::string& name, StreamIndex stream, uint64_t epoch,
                  const Roaring& handed_out);
  // Ids handed out to a reader of the stream in `epoch`.
  void AddHandedOut(const std::string& name, StreamIndex stream, uint64_t epoch,
                    std::span<const SampleId> ids);

  const std::string& path() const { return path_; }

 private:
  JobStore() = default;
  void Write(const char* what, const std::string& name, void* batch);

  std::string path_;
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<RocksDbWrites> writes_;  // over db_; stops at a failure
  std::atomic<uint64_t> next_seq_{0};
};

}  // namespace joaderfs

#endif  // JOADERFS_STORE_JOB_STORE_H_
