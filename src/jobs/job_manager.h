// JobManager: every job of the mount, its spec, its readers and its stream.
//
// A job reads a subset of the catalog epoch after epoch. Its order comes
// from the planner of its group (jobs with the same output size); planned
// ids are requested from the cache ahead of the readers (up to `lookahead`
// positions), and delivered to whichever open reader asks next. Within
// each window of `window` consecutive positions samples are delivered in the
// order they become ready (RINAS), so one slow image does not stall the rest.
//
// This is the FUSE-free core of the filesystem: the fs/ layer maps paths to
// these calls and Status codes to errno.
//
// Thread-safe. Read() never blocks: it replies at once, or later from the
// thread that makes data ready. Replies and cache calls run without the
// manager's lock (the cache calls back into NeedCounts under its own).

#ifndef JOADERFS_JOBS_JOB_MANAGER_H_
#define JOADERFS_JOBS_JOB_MANAGER_H_

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/sample_cache.h"
#include "catalog/catalog.h"
#include "common/status.h"
#include "jobs/spec.h"
#include "loader/loader_pool.h"
#include "sampling/planner.h"

namespace joaderfs {

struct JobManagerOptions {
  uint32_t default_size = 224;
  uint32_t lookahead = 128;
  // What a job may always plan ahead, even when planned samples fill the
  // RAM budget: enough to keep the decode threads busy.
  uint32_t min_lookahead = 8;
  bool dependent_sampling = true;  // false: independent shuffles (baseline)
  // How many picks ahead another job of its group may be for a job to copy
  // its picks index by index (sampling/dependent_planner.h). 0: half of
  // what the RAM budget holds at the group's size, within [16, 4096], so
  // that the copied picks are still cached when the follower wants them.
  uint64_t coupling_horizon = 0;
  std::chrono::seconds idle_timeout{600};
  uint64_t seed = 0;
};

class JobManager {
 public:
  // Called exactly once per Read(). On success `data` holds the bytes; no
  // bytes means end of stream for this reader.
  using ReadReply = std::function<void(const Status& status, std::span<const iovec> data)>;
  using ReaderId = uint64_t;

  JobManager(const Catalog* catalog, SampleCache* cache, const LoaderPool* pool,
             JobManagerOptions options);
  ~JobManager();

  Status CreateJob(const std::string& name, uint32_t uid);
  // Ends the job: its readers' reads fail with Gone, its planned samples are
  // released.
  Status RemoveJob(const std::string& name, uint32_t uid);
  std::vector<std::string> JobNames() const;
  // The job's owner, or NotFound.
  Status JobOwner(const std::string& name, uint32_t* uid) const;

  Status GetSpec(const std::string& name, std::string* text) const;
  // Replaces the spec with `text` parsed over the defaults. Busy once the
  // job has been read from; Permission unless `uid` owns the job or is 0.
  Status SetSpec(const std::string& name, uint32_t uid, std::string_view text);
  // Sets the subset to the ids or relative paths listed in `text`.
  Status SetIds(const std::string& name, uint32_t uid, std::string_view text);
  // Busy or Permission as SetSpec would fail, else Ok.
  Status CheckWritable(const std::string& name, uint32_t uid) const;

  Status OpenReader(const std::string& name, ReaderId* reader);
  void CloseReader(ReaderId reader);
  // Up to `max_bytes` of the reader's stream. `token` names this read for
  // Interrupt(); it must differ from the reader's previous reads'.
  void Read(ReaderId reader, size_t max_bytes, uint64_t token, ReadReply reply);
  // Makes the read named `token` reply Interrupted, now if it waits, or as
  // soon as it is issued if it has not reached Read() yet.
  void Interrupt(ReaderId reader, uint64_t token);

  Status JobStatusJson(const std::string& name, std::string* json) const;
  std::string StatsJson() const;

  // Releases the planned samples of jobs without readers for longer than
  // the idle timeout. Called periodically.
  void ReleaseIdleJobs();

  // How many jobs still need each of `ids` at output size `size` in their
  // current epoch, counting samples planned and not yet delivered: the cache
  // tiers' eviction priority. Never calls the cache.
  void NeedCounts(uint32_t size, std::span<const SampleId> ids, std::span<uint32_t> counts) const;

 private:
  struct Job;
  struct Reader;
  struct Group;
  class Actions;

  Job* FindJob(const std::string& name) const;
  Status CheckWritableLocked(const Job* job, uint32_t uid) const;
  void StartEpoch(Job* job, Actions* actions);
  void Plan(Group* group, Actions* actions);
  void RequestSlot(Job* job, uint64_t position, Actions* actions);
  void ReleaseSlots(Job* job, Actions* actions);
  void OnLoaded(uint64_t serial, uint64_t epoch, uint64_t position, const SamplePtr& sample);
  void MarkDone(Job* job, uint64_t position, Actions* actions);
  void AdvanceWindow(Job* job);
  void ServeWaiters(Job* job, Actions* actions);
  bool TryServe(Reader* reader, Actions* actions);
  void EndEpoch(Job* job);
  bool ReaderAtEof(const Reader* reader) const;
  uint64_t EffectiveLookahead(const Job* job) const;

  const Catalog* catalog_;
  SampleCache* cache_;
  const LoaderPool* pool_;
  const JobManagerOptions options_;
  const JobSpec default_spec_;

  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Job>> jobs_;        // GUARDED_BY(mu_)
  std::unordered_map<uint64_t, Job*> jobs_by_serial_;       // GUARDED_BY(mu_)
  std::unordered_map<ReaderId, std::unique_ptr<Reader>> readers_;  // GUARDED_BY(mu_)
  std::map<uint32_t, std::unique_ptr<Group>> groups_;       // GUARDED_BY(mu_), by size
  uint64_t next_serial_ = 1;                                // GUARDED_BY(mu_)
  ReaderId next_reader_ = 1;                                // GUARDED_BY(mu_)
  uint64_t delivered_ = 0;                                  // GUARDED_BY(mu_)
};

}  // namespace joaderfs

#endif  // JOADERFS_JOBS_JOB_MANAGER_H_
