// JobManager: every job of the mount, its spec and its readers: the
// registry, the control writes (spec, ids, resume), status, and the reads
// of a sitting. Each stream's state machine (epochs, planning, pins,
// serving readers) is a Lane (jobs/lane.h), run by Lanes (jobs/lanes.h) under the same lock.
//
// A job reads a subset of the catalog epoch after epoch through one stream
// (`next`), or with `ranks=W` through W streams (`next.R`), one per
// data-parallel rank, each with its own epochs, readers and status, reading
// its shard of each epoch (pacing/rank_split.h). Each stream is a participant
// of the mount's planning group; its order and how far ahead it plans come
// from there (sampling/plan_group.h): every job shares the base images of
// the cache, whatever its output size, crop and flip; its epoch's positions, window and
// delivery state are an EpochPositions (jobs/epoch_positions.h); planned base images
// are pinned in the RAM tier (cache/sample_cache.h) until done. When a
// position's base image is ready, a loader thread renders the job's own
// crop, resize and flip of it (loader/augment.h), off the manager's lock
// and off the readers' FUSE threads (jobs/shared_renders.h: jobs that would
// render the same centre crop share one); rendered bytes count against the
// RAM budget when the group plans. Each reader's unread records are a
// RecordQueue (records/record_queue.h), which frames replies.
//
// Its rooms: job_manager.cc, the registry, the control writes and status;
// job_manager_read.cc, the reads of a sitting and the idle release.
//
// This is the FUSE-free core of the filesystem: the fs/ layer maps paths to
// these calls and Status codes to errno, and renders the snapshots below.
//
// Thread-safe. One lock, the manager's own (mu_), guards its maps of jobs
// and readers and its Lanes, which are not thread-safe themselves. Read()
// never blocks: it replies at once, or later from the thread that makes
// data ready. Replies and cache calls run after the lock is dropped (the
// cache's callbacks re-enter the lanes): each public method takes the lock
// with an ActionsLock (jobs/actions.h);
// the planning group is called under it (it ranks below it,
// common/ranked_mutex.h). The job store (store/job_store.h, RocksDB, no lock
// of ours) is written under it for job records and epoch starts, so that no
// hand-out of an epoch is saved before the epoch; a reply's hand-outs are
// saved after the lock is dropped, before the reply.

#ifndef JOADERFS_JOBS_JOB_MANAGER_H_
#define JOADERFS_JOBS_JOB_MANAGER_H_

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/sample_cache.h"
#include "catalog/catalog.h"
#include "common/open_file_budget.h"
#include "common/ranked_mutex.h"
#include "common/status.h"
#include "jobs/lanes.h"
#include "jobs/shared_renders.h"
#include "loader/loader_pool.h"
#include "sampling/plan_group.h"
#include "spec/resume_text.h"
#include "spec/spec.h"
#include "store/job_store.h"

namespace joaderfs {

// The longest spec a write may hold: specs are a few keys.
inline constexpr size_t kMaxSpecBytes = 64 << 10;

// What one uid may hold at a time (docs/design.md 2.2 "Limits"): past a
// limit, CreateJob and a spec that adds streams fail with Quota (EDQUOT),
// OpenReader with TooMany (EMFILE). Jobs and streams count against the
// job's owner, readers against the uid that opened them. Root (uid 0) is
// exempt unless `limit_root`. The defaults are the mount options' (docs/reference.md).
struct UserLimits {
  uint32_t max_jobs = 64;
  uint32_t max_streams = 1024;  // `next` or `next.R`: a job with ranks=W has W
  uint32_t max_readers = 256;
  // Bytes of deliveries planned or handed out and not yet read (Lanes'
  // UnreadLimit): past it a uid's streams wait instead of failing. An
  // eighth of it more bounds what the uid's open control and rendered
  // files hold (open_file_bytes()).
  uint64_t max_unread = uint64_t{2} << 30;
  bool limit_root = false;
};

struct JobManagerOptions {
  uint32_t default_size = 224;
  // The sampler's seed, from which each job's default `seed` is derived.
  uint64_t seed = 0;
  std::chrono::seconds idle_timeout{600};
  UserLimits limits;
  // Hold a job's reads while it runs far ahead of a peer (jobs/drift_hold.h DriftHold).
  bool drift_bound = true;
};

// Everything `/stats` shows, taken at one moment per part.
struct MountStats {
  // What the mount warned of about its sizing (set by the FUSE layer).
  std::vector<std::string> warnings;
  CacheStats cache;
  DiskCacheStats disk;
  RemoteTierStats remote;  // all 0 without remote_cache
  unsigned decode_threads = 0;
  uint64_t decode_queue = 0;
  double decode_busy_seconds = 0;
  double decode_busy_fraction = 0;  // LoaderPool::busy_fraction
  uint64_t delivered = 0;
  double stall_seconds = 0;         // every job's readers' waits (Lanes::StallSeconds)
  double samples_per_s = 0;         // deliveries, recent (RateWindow)
  uint64_t renders = 0;             // deliveries resampled from base images
  uint64_t renders_shared = 0;      // deliveries handed a render another job made
  uint64_t special_files = 0;       // SOURCE entries left out: not regular files
  uint64_t identities_pending = 0;  // Catalog::identities_pending()
  uint64_t rejected_paths = 0;      // manifest paths left out: outside its folder
  ScanSkips scan_skips;
  ShardSkips shard_skips;
  PlannerStats planner;
  std::vector<std::pair<std::string, JobStatus>> jobs;  // by name
  SourceReaderStats source;                             // reads of SOURCE (loader/source_reader.h)
  SourceStoreStats source_store;  // its store's requests (catalog/source_store.h)
  // Each read of a stream, from its arrival to its reply (set by the FUSE
  // layer).
  LatencyHistogram::Snapshot read_wait;
};

class JobManager {
 public:
  // Called exactly once per Read() (jobs/lane.h).
  using ReadReply = joaderfs::ReadReply;
  using ReaderId = joaderfs::ReaderId;

  // `group` outlives the manager; the cache tiers evict by its counts.
  // `store` (may be null: no persistence) outlives the manager too.
  // `pool` runs the renders.
  JobManager(const Catalog* catalog, SampleCache* cache, LoaderPool* pool, PlanGroup* group,
             JobManagerOptions options, JobStore* store = nullptr);
  ~JobManager();

  // Quota when `uid` holds its max_jobs (or max_streams) already.
  Status CreateJob(const std::string& name, uint32_t uid);
  // Makes a job saved by the job store before a restart: its spec, and each
  // stream's epoch continuing without the ids handed out. InvalidArgument
  // when the record does not fit the catalog (nothing is made).
  Status RestoreJob(const StoredJob& stored);
  // Ends the job: its readers' reads fail with Gone, its planned samples are
  // released.
  Status RemoveJob(const std::string& name, uint32_t uid);
  std::vector<std::string> JobNames() const;
  // The job's owner, or NotFound.
  Status JobOwner(const std::string& name, uint32_t* uid) const;
  // Permission unless `uid` may change or consume the job (MayUseJob).
  Status CheckOwner(const std::string& name, uint32_t uid) const;
  const Catalog& catalog() const { return *catalog_; }
  // What each uid's open handles of control and rendered files hold
  // (ControlFile, fs/): at most max_unread / 8 per uid. Thread-safe.
  OpenFileBudget& open_file_bytes() { return open_file_bytes_; }

  Status GetSpec(const std::string& name, std::string* text) const;
  // Replaces the spec with `text` parsed over the defaults (a subset set
  // through the ids file stays unless `text` names one). InvalidArgument
  // past kMaxSpecBytes. Once the job has been read from, Ok without a
  // change for the spec it has (a rerun of the same script), else Busy;
  // Permission unless `uid` owns the job or is 0. Quota when its ranks=
  // would take the owner past max_streams. Parses without holding the lock.
  Status SetSpec(const std::string& name, uint32_t uid, std::string_view text);
  // Sets the subset to the ids or relative paths listed in `text`.
  Status SetIds(const std::string& name, uint32_t uid, std::string_view text);
  // Sets the subset to `ids` (parsed already, e.g. line by line). Once the
  // job has been read from, Ok without a change for the subset it has, else
  // Busy.
  Status SetIdSubset(const std::string& name, uint32_t uid, Roaring ids);
  // Busy or Permission as SetSpec would fail, else Ok. With `ids`, as
  // SetIdSubset would for a list that holds them: a started job takes the
  // ids of its subset again.
  Status CheckWritable(const std::string& name, uint32_t uid, const Roaring* ids = nullptr) const;

  // Sets the rest of an epoch (docs/design.md 2.7): `text` is `epoch=E`, an
  // optional `rank=R`, then the ids consumed (the ids file's syntax). The
  // streams named (rank R, else all) next deliver exactly the rest of epoch
  // E, then go on to E+1. Without `rank=`, a ranked job takes the ids as
  // those consumed in E under any number of ranks, and splits the rest
  // anew among its ranks in equal shares (elastic; pacing/rank_split.h
  // SplitRest). Writes with the same E before the epoch is read add up
  // (several ranks may write theirs). Busy while a named stream has
  // readers; Permission as SetSpec. Fixes the spec.
  Status Resume(const std::string& name, uint32_t uid, std::string_view text);
  // The same, with the text parsed already (line by line as it was written).
  Status Resume(const std::string& name, uint32_t uid, ResumeText* text);

  // Records the outcome of a write (or the flush that applies it) to the
  // job's control file `file` (spec, ids, resume): a rejection's reason
  // becomes the job's error, shown by its `error` file and status; a good
  // write to the file whose rejection it shows clears it. Never
  // rate-limited; no-op for a job gone.
  void NoteWrite(const std::string& name, std::string_view file, const Status& result);
  // The job's error line (empty, or "<file>: <reason>\n"), or NotFound.
  Status GetError(const std::string& name, std::string* text) const;

  // The job's rank count (0: no ranks, the job reads `next`), or NotFound.
  Status Ranks(const std::string& name, uint32_t* ranks) const;

  // A new reader of the job's stream: `next` when `rank` is empty, else
  // `next.<rank>` (NotFound where the spec has no such file). Permission
  // unless `uid` owns the job or is 0: reading consumes the job's samples.
  // TooMany when `uid` has max_readers open already.
  // A reader of a rank opened between epochs returns once the shards of the
  // epoch its first read begins are made (a sort of the subset, done
  // without the lock, once per epoch for all ranks).
  Status OpenReader(const std::string& name, uint32_t uid, ReaderId* reader,
                    std::optional<uint32_t> rank = std::nullopt);
  void CloseReader(ReaderId reader);
  // Up to `max_bytes` of the reader's stream. `token` names this read for
  // Interrupt(); it must differ from the reader's previous reads'.
  void Read(ReaderId reader, size_t max_bytes, uint64_t token, ReadReply reply);
  // Makes the read named `token` reply Interrupted, now if it waits, or as
  // soon as it is issued if it has not reached Read() yet.
  void Interrupt(ReaderId reader, uint64_t token);

  // The size the stream file shows (docs/design.md 2.4 "File semantics"),
  // for a reader opened now: the bytes of the samples it could be handed
  // (Lanes::Unhanded), where the job's records have one size; else nothing
  // (and for a job or stream that does not exist).
  std::optional<uint64_t> StreamSize(const std::string& name, std::optional<uint32_t> rank) const;
  // The same for an open reader: the bytes it has yet to read, its unread
  // records and what it may still be handed.
  std::optional<uint64_t> ReaderUnread(ReaderId reader) const;

  Status GetJobStatus(const std::string& name, JobStatus* status) const;
  MountStats Stats() const;

  // Bytes of unread deliveries the jobs of `uid` hold (UserLimits
  // max_unread); 0 for an exempt uid.
  uint64_t UnreadBytes(uint32_t uid) const;

  // Releases the planned samples of jobs without readers for longer than
  // the idle timeout, and retries reads the drift bound holds (a peer may
  // have gone quiet). Called once a second.
  void ReleaseIdleJobs();

 private:
  // What one uid holds, against UserLimits.
  struct Usage {
    uint64_t jobs = 0;
    uint64_t streams = 0;
    uint64_t readers = 0;
  };
  // Whether the limits apply to what `uid` does.
  bool Limited(uint32_t uid) const { return uid != 0 || options_.limits.limit_root; }
  // Adds to `uid`'s usage (each may be negative), dropping an entry that
  // falls to nothing.
  void AddUsage(uint32_t uid, int64_t jobs, int64_t streams, int64_t readers) REQUIRES(mu_);

  // Jobs, lanes and readers are reached through the maps below, which mu_
  // guards: every helper that takes one REQUIRES(mu_).
  Job* FindJob(const std::string& name) const REQUIRES(mu_);
  Status CheckWritableLocked(const Job* job, uint32_t uid, const Roaring* ids = nullptr) const
      REQUIRES(mu_);
  // Whether `subset` gives every rank of `spec` at least one sample.
  static Status CheckRanksFit(const JobSpec& spec, const Roaring& subset);
  // Saves the job's record in the store, if any.
  void SaveJob(const Job& job) REQUIRES(mu_);
  JobStatus StatusLocked(const Job& job) const REQUIRES(mu_);
  // Makes the shards of the ranked job's `epoch` (if `uid` may read it),
  // sorting without the lock.
  void MakeShardsUnlocked(const std::string& name, uint32_t uid, uint64_t epoch) EXCLUDES(mu_);
  // Splits the rest of `epoch` for an elastic resume of the ranked job
  // adding `consumed` (if `uid` may resume it), sorting without the lock.
  ElasticSplit SplitElasticUnlocked(const std::string& name, uint32_t uid, uint64_t epoch,
                                    const Roaring& consumed) EXCLUDES(mu_);

  const Catalog* catalog_;
  SampleCache* cache_;
  LoaderPool* pool_;
  PlanGroup* group_;
  const JobManagerOptions options_;
  OpenFileBudget open_file_bytes_;
  const JobSpec default_spec_;
  JobStore* const store_;
  // The manager's lock: it guards the lanes and the maps of jobs and
  // readers below. The planning group ranks below it
  // (common/ranked_mutex.h). Taken with an ActionsLock where the work
  // decided under it calls out.
  mutable RankedMutex<LockRank::kJobManager> mu_;
  SharedRenders shared_renders_;  // thread-safe: its own leaf lock
  Lanes lanes_ GUARDED_BY(mu_);

  std::map<std::string, std::unique_ptr<Job>> jobs_ GUARDED_BY(mu_);
  std::unordered_map<ReaderId, std::unique_ptr<Reader>> readers_ GUARDED_BY(mu_);
  ReaderId next_reader_ GUARDED_BY(mu_) = 1;
  // Who opened each reader, for its uid's reader count.
  std::unordered_map<ReaderId, uint32_t> reader_uids_ GUARDED_BY(mu_);
  std::unordered_map<uint32_t, Usage> usage_ GUARDED_BY(mu_);
};

}  // namespace joaderfs

#endif  // JOADERFS_JOBS_JOB_MANAGER_H_
