// Lanes: the state machine of every job stream of the mount. A job reads
// through one stream (`next`), or through one per rank (`next.R`); each is a
// Lane. Here a lane starts its epochs, takes part in planning, pins and
// requests the samples planned for it, serves its waiting readers, and
// gives the pins back once positions are done or the lane is dropped.
//
// The registry of jobs, their control writes and status live in JobManager
// (jobs/job_manager.h), which owns a Lanes and holds its `mu` for every call
// below that says REQUIRES(mu). Jobs, lanes and readers are reached through
// the manager's maps and this class's, all guarded by `mu`.
//
// Work decided under `mu` that calls out (cache requests, whose callbacks
// re-enter; replies to readers) is queued on an Actions and runs after the
// lock is dropped.

#ifndef JOADERFS_JOBS_LANE_H_
#define JOADERFS_JOBS_LANE_H_

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/sample_cache.h"
#include "catalog/catalog.h"
#include "common/ranked_mutex.h"
#include "common/status.h"
#include "jobs/drift.h"
#include "jobs/job_store.h"
#include "jobs/job_stream.h"
#include "jobs/record_queue.h"
#include "jobs/shared_renders.h"
#include "jobs/spec.h"
#include "loader/loader_pool.h"
#include "sampling/plan_group.h"

namespace joaderfs {

// The owner rule: a job's files that change or consume it are its owner's,
// and root's. The one place that says so (fs/ and jobs/ ask here).
inline bool MayUseJob(uint32_t uid, uint32_t owner) { return uid == 0 || uid == owner; }
// Permission naming the job unless MayUseJob().
Status CheckJobOwner(const std::string& job, uint32_t owner, uint32_t uid);

// Called exactly once per read. On success `data` holds the bytes; no bytes
// means end of stream for that reader.
using ReadReply = std::function<void(const Status& status, std::span<const iovec> data)>;
using ReaderId = uint64_t;

// Work decided under the lock and done after it is dropped: cache requests
// (whose callbacks may re-enter the manager) and replies to readers. Runs
// them in order when destroyed: declare it before the lock.
class Actions {
 public:
  Actions() = default;
  Actions(const Actions&) = delete;
  ~Actions() {
    for (auto& action : actions_) action();
  }
  void Add(std::function<void()> action) { actions_.push_back(std::move(action)); }

 private:
  std::vector<std::function<void()>> actions_;
};

// A stream's figures over one scope (docs/design.md 2.5): the epoch a
// status names (`this_epoch`), or the stream's life in this daemon, across
// epochs and resumes (`total`).
struct StreamCounts {
  uint64_t delivered = 0;
  uint64_t skipped = 0;  // picks of samples that failed
  // The delivered samples by where their base image came from: the RAM
  // tier (ready, or already loading for another pick), or a load their
  // pick started that read the disk tier, read the remote tier or decoded.
  // They add up to `delivered`: a pick never delivered (its reader gone)
  // counts in none.
  uint64_t ram_hits = 0;
  uint64_t disk_hits = 0;
  uint64_t remote_hits = 0;
  uint64_t decodes = 0;
  // How long its readers' reads waited for data, reads still waiting
  // included.
  double stall_seconds = 0;

  StreamCounts& operator+=(const StreamCounts& other);
};

// A job's `status` file. Between epochs it describes the epoch that ended.
struct JobStatus {
  uint64_t epoch = 0;
  uint64_t remaining = 0;  // this epoch
  uint64_t subset_size = 0;
  uint64_t readers = 0;
  bool running = false;
  uint64_t epochs_completed = 0;
  uint32_t size = 0;
  uint32_t window = 0;
  uint64_t shared_picks = 0;
  uint32_t owner = 0;
  StreamCounts this_epoch;
  StreamCounts total;
  // RateWindow::Rate of its deliveries.
  double samples_per_s = 0;
  // "<file>: <reason>" of the latest rejected write to spec, ids or resume,
  // until a good write to that file; empty when none.
  std::string error;
  // With ranks=W: each rank's figures (the fields above add them up; epoch
  // and epochs_completed are the least of the ranks').
  std::vector<JobStatus> ranks;
};

// Deliveries over the last kSeconds, for a recent rate. Not thread-safe
// (its lane's lock guards it).
class RateWindow {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kSeconds = 10;
  void Add(Clock::time_point now, uint64_t n = 1);
  // Deliveries in the last kSeconds (the current second included) per
  // second of that window; while the first delivery is more recent than
  // that, per second since it (at least 1 s). 0 before any.
  double Rate(Clock::time_point now) const;

 private:
  static int64_t Second(Clock::time_point t);
  std::array<uint64_t, kSeconds> counts_{};
  std::array<int64_t, kSeconds> seconds_{};  // the second each count is for
  std::optional<Clock::time_point> first_;
};

struct Job;
struct Reader;

// The per-uid allowance of unread deliveries (docs/design.md 2.2
// "Limits"): the bytes a job owner's streams may hold in picks planned and
// not yet handed out (at their rendered size) and in its readers' queues.
// Past it, its streams plan nothing more until they are read.
struct UnreadLimit {
  uint64_t max_bytes = uint64_t{2} << 30;
  bool limit_root = false;  // root's jobs are exempt unless set
};

// An elastic resume (docs/design.md 2.7): a `resume` without `rank=` on a
// ranked job. The ids of `epoch` consumed under any earlier number of
// ranks; the rest of that epoch is split anew among the job's ranks
// (jobs/rank_split.h SplitRest), and each rank reads its share of it
// instead of its shard of the epoch. Kept, and saved in the job store, until
// the next one: a later `rank=R` resume or a restart within the epoch
// starts from the rank's share.
struct ElasticResume {
  uint64_t epoch = 0;
  Roaring consumed;             // within the job's subset
  std::vector<Roaring> shares;  // by rank: SplitRest(subset, consumed, epoch, ...)
  // A rank has begun the epoch: a later resume of it replaces `consumed`
  // instead of adding to it.
  bool read = false;
};

// An elastic resume's split: its inputs, taken under the manager's lock
// (Lanes::PrepareElastic), and its shares, made by Split() without it.
struct ElasticSplit {
  Roaring subset;
  uint32_t ranks = 0;
  bool drop_last = false;
  uint64_t epoch = 0;
  Roaring consumed;  // Lanes::ElasticConsumed
  std::vector<Roaring> shares;

  // A sort of the rest of the epoch.
  void Split();
  bool SameInputs(const ElasticSplit& other) const;
};

// One stream of a job: `next`, or `next.R` of rank R.
struct Lane {
  Job* job = nullptr;
  StreamIndex index = 0;  // the rank; 0 for `next`
  uint64_t serial = 0;    // names the stream's loads; new after a resume

  PlanGroup* group = nullptr;  // set at the first epoch, with the stream
  // A `group=` job's own planning group (else null): an independent
  // shuffle seeded by (group, seed) alone, so that the same job on any
  // daemon gets the same order (README "Cluster"). New at every first epoch.
  std::unique_ptr<PlanGroup> own_group;
  JobHandle handle = 0;
  // What each pick holds of its own until read (its rendered delivery;
  // 0 when it delivers the shared base image), charged to the job's owner.
  uint64_t pick_bytes = 0;

  // The drift bound (docs/planner.md "Drift"): lanes of one group with the
  // same subset (same key) are peers; a lane more than the lag limit ahead
  // of an active peer of similar pace has its reads held, within its hold
  // budget.
  uint64_t peer_key = 0;  // 0: never a peer (ranked)
  DriftState drift{std::chrono::steady_clock::now()};
  // Picks done over its life: epochs completed x epoch size + done.
  uint64_t progress() const {
    return stream ? stream->epochs_completed() * stream->epoch_size() + stream->done() : 0;
  }
  std::unique_ptr<JobStream> stream;

  std::set<Reader*> readers;
  std::deque<Reader*> waiting;  // readers with a pending Read, oldest first
  std::chrono::steady_clock::time_point idle_since = std::chrono::steady_clock::now();
  bool released = false;  // idle: planned samples given back

  // Set by `resume` or a restart: the epoch the next read begins, and the
  // ids of it already consumed (or handed out before the restart).
  std::optional<uint64_t> resume_epoch;
  Roaring resume_skip;
  bool resume_written = false;  // by the resume file, not a restart

  // Where its time goes (JobStatus): waits of answered reads, the recent
  // rate, and its counts (stall_seconds left 0: LaneStall() less
  // stalled_before_epoch gives the epoch's) over its life and since its
  // epoch began.
  std::chrono::steady_clock::duration stalled{};
  std::chrono::steady_clock::duration stalled_before_epoch{};
  RateWindow rate;
  StreamCounts total_counts;
  StreamCounts epoch_counts;

  bool running() const { return stream && stream->running(); }
  // The epoch the stream is in, or begins at its next read.
  uint64_t epoch() const {
    if (resume_epoch) return *resume_epoch;
    return stream ? stream->epoch() : 0;
  }
};

struct Job {
  std::string name;
  uint32_t uid = 0;
  JobSpec spec;
  Roaring subset;
  bool started = false;                      // read from (or resumed): the spec is fixed
  std::vector<std::unique_ptr<Lane>> lanes;  // one, or one per rank
  // The shards of the latest epochs (ranked jobs), by epoch, kept for the
  // ranks that begin the epoch after the first: splitting costs a sort of
  // the subset. Made off the lock (Lanes::ShardsOf); a future until then.
  std::map<uint64_t, std::shared_future<std::vector<Roaring>>> splits;
  std::optional<ElasticResume> elastic;  // ranked jobs
  // The latest rejected control write (JobManager::NoteWrite): the file
  // and the line its `error` file shows.
  std::string error_file;
  std::string error;

  bool ranked() const { return spec.ranks > 0; }
};

struct Reader {
  ReaderId id = 0;
  Lane* lane = nullptr;  // null once the job is removed
  uint32_t owner = 0;    // the job's: its queue counts against that uid
  uint64_t epoch = 0;
  RecordQueue pending;
  std::optional<uint64_t> interrupted_token;  // of a read not yet issued
  bool waiting = false;
  // The pending read could not be answered at once: its wait began here.
  std::optional<std::chrono::steady_clock::time_point> stalled_since;
  uint64_t token = 0;
  size_t max_bytes = 0;
  ReadReply reply;
  // A reader of records of one size may have sized the file first (docs/
  // design.md 2.4 "File semantics"): the samples of its epoch skipped since
  // it opened, whether it has been the only reader handed records of its
  // epoch, and its latest record, repeated at its end in place of the
  // skipped samples (Lanes::PadSkipped).
  uint64_t skipped = 0;
  bool alone = true;
  SamplePtr last_sample;
  RecordHeader last_header;
};

// Thread-safe through `mu`; see the top of this file.
class Lanes {
 public:
  // All outlive the Lanes; `store` may be null (no persistence). Every lane
  // is a participant of `group` and pins base images in `cache`.
  Lanes(const Catalog* catalog, SampleCache* cache, LoaderPool* pool, PlanGroup* group,
        JobStore* store, UnreadLimit unread_limit = {}, bool drift_bound = true);

  // The manager's lock: it guards the jobs, lanes and readers. The planning
  // group ranks below it (common/ranked_mutex.h).
  mutable RankedMutex<LockRank::kJobManager> mu;

  // (Re)makes the job's lanes for its spec. REQUIRES: none has readers.
  void Make(Job* job) REQUIRES(mu);
  // Ends the lane for good (its job is removed): leaves planning, gives
  // back its pins, and its readers' waiting reads fail with Gone. Returns
  // what the lane delivered over its life.
  uint64_t Remove(Lane* lane, Actions* actions) REQUIRES(mu);
  // Makes the lane begin `epoch` at its next read, without `skip` (those of
  // its ids consumed or handed out already).
  void SetResume(Lane* lane, uint64_t epoch, Roaring skip) REQUIRES(mu);
  // The inputs of an elastic resume of the ranked job that adds `consumed`
  // to `epoch`, for ElasticSplit::Split() to split without the lock.
  ElasticSplit PrepareElastic(const Job& job, uint64_t epoch, const Roaring& consumed) const
      REQUIRES(mu);
  // Makes every rank of the ranked job begin `epoch` at its next read with
  // its share of the rest once `consumed` is (an elastic resume), drops the
  // epochs under way and saves the resume. `split` is used if it was
  // prepared for the job as it is now, else the rest is split again here (a
  // write to the job raced it). REQUIRES: no rank has readers.
  void SetElasticResume(Job* job, uint64_t epoch, const Roaring& consumed, ElasticSplit split,
                        Actions* actions) REQUIRES(mu);
  // Drops the lane's epoch under way (for `resume`): pins, plan, state.
  void Reset(Lane* lane, Actions* actions) REQUIRES(mu);
  // Takes the lane out of its planning group (a `group=` lane's own goes).
  void LeaveGroup(Lane* lane) REQUIRES(mu);
  // Readies the lane for a read of `reader`: starts its epoch if none runs,
  // fetches again what an idle release gave back.
  void Wake(Lane* lane, Actions* actions) REQUIRES(mu);
  // Gives back the planned samples of a lane without readers (idle).
  void Release(Lane* lane, Actions* actions) REQUIRES(mu);

  // Replies to `reader`'s pending read if it can be answered now: with its
  // unread bytes, with records ready in its lane, with EOF, or with Gone.
  bool TryServe(Reader* reader, Actions* actions) REQUIRES(mu);
  void ServeWaiters(Lane* lane, Actions* actions) REQUIRES(mu);
  bool ReaderAtEof(const Reader* reader) const REQUIRES(mu);
  // The records `reader` may still read besides its unread bytes: what the
  // lane may hand it, and the repeats PadSkipped() will give it.
  uint64_t ReaderRecordsLeft(const Reader& reader) const REQUIRES(mu);
  // The epoch the lane would begin next is past its spec's `epochs` (or
  // past what a record can number): a reader opened now gets EOF.
  static bool EpochsOver(const Lane& lane);
  // The reader's pending read waits for data (Read found none at once).
  void BeginStall(Reader* reader) REQUIRES(mu);
  // Its pending read is answered (or given up): adds its wait, if any, to
  // its lane's stall and the mount's.
  void EndStall(Reader* reader) REQUIRES(mu);
  // The mount's stall (every lane's, removed ones too, and reads waiting
  // now) and its recent rate of deliveries.
  double StallSeconds() const REQUIRES(mu);
  double SamplesPerSecond() const REQUIRES(mu) {
    return rate_.Rate(std::chrono::steady_clock::now());
  }

  // The shards of a ranked job's `epoch`, made or being made; else sets
  // `split` to the task that makes them (a sort of the subset), for the
  // caller to run, after dropping the lock where it can.
  std::shared_future<std::vector<Roaring>> ShardsOf(
      Job* job, uint64_t epoch, std::packaged_task<std::vector<Roaring>()>* split) REQUIRES(mu);

  // The lane's `status` (JobManager adds up a ranked job's).
  JobStatus StatusOf(const Lane& lane) const REQUIRES(mu);
  // The samples the lane may still hand `reader` (docs/design.md 2.4
  // "File semantics"), or a reader opened now if null: none once its epoch
  // is over or the job's epochs are; else the rest of the epoch under way
  // not yet handed out, or between epochs the whole of the epoch its next
  // read begins (a resume's rest). Other readers and skipped samples may
  // take some of them.
  uint64_t Unhanded(const Lane& lane, const Reader* reader) const REQUIRES(mu);

  // Serves again the readers of lanes held by the drift bound: a peer
  // moved, went quiet, or their budget refilled. Called after hand-outs
  // and once a second.
  void RetryHeld(Actions* actions) REQUIRES(mu);

  // The reader's queue changed by `delta` bytes (Reader::owner's charge).
  void NoteQueued(const Reader& reader, int64_t delta, Actions* actions) REQUIRES(mu);
  // Bytes of unread deliveries `uid`'s jobs hold (UnreadLimit).
  uint64_t UnreadBytes(uint32_t uid) const REQUIRES(mu);

  uint64_t delivered() const REQUIRES(mu) { return delivered_; }
  const SharedRenders& shared_renders() const { return shared_renders_; }

 private:
  // The ids the lane reads in `epoch`: the job's subset, its share of an
  // elastic resume's rest, or its shard (made under the lock if OpenReader
  // did not make it).
  Roaring EpochSubset(Job* job, const Lane& lane, uint64_t epoch) REQUIRES(mu);
  // The ids of `epoch` an elastic resume of the job with `consumed` counts
  // as consumed: with those of an earlier resume of the epoch that no rank
  // has read yet (several writes add up), within the subset.
  Roaring ElasticConsumed(const Job& job, uint64_t epoch, const Roaring& consumed) const
      REQUIRES(mu);
  // The lane's share of the job's elastic resume of `epoch`; null if none.
  const Roaring* ElasticShare(const Job& job, const Lane& lane, uint64_t epoch) const REQUIRES(mu);
  void StartEpoch(Lane* lane, Actions* actions) REQUIRES(mu);
  // Tops up the planned queues of the group's lanes; the group decides who
  // plans when (sampling/plan_group.h).
  void Plan(PlanGroup* group, Actions* actions) REQUIRES(mu);
  // Pins the position's sample in the cache (loading it if needed) until
  // the position is done or its pins are given back.
  void RequestPosition(Lane* lane, uint64_t position, Actions* actions) REQUIRES(mu);
  void ReleasePins(Lane* lane, Actions* actions) REQUIRES(mu);
  // Gives back the pins (cache and shared renders) of `ids`, after the lock.
  void ReleaseIds(std::vector<SampleId> ids, Actions* actions);
  // `tier`: where the base image came from (counted if the load lands).
  void OnLoaded(uint64_t serial, uint64_t epoch, uint64_t position, const SamplePtr& sample,
                Tier tier) EXCLUDES(mu);
  // Releases what the lane finished, reports it to the planner and tops up
  // the plans.
  void AfterDone(Lane* lane, Actions* actions) REQUIRES(mu);
  // Bytes of the planning group's samples: the mean base image.
  uint64_t SampleBytes() const;
  // Adds `delta` to `uid`'s unread bytes; once they fall below the
  // allowance, the groups its streams were held back in plan again.
  void AddUnread(uint32_t uid, int64_t delta, Actions* actions) REQUIRES(mu);
  // Whether the allowance may hold back `uid`'s streams.
  bool UnreadLimited(uint32_t uid) const { return uid != 0 || unread_limit_.limit_root; }
  // Whether the lane's picks are charged to its owner's unread bytes: they
  // hold renders of their own, and the allowance applies to the owner.
  bool PicksCharged(const Lane& lane) const {
    return lane.pick_bytes > 0 && UnreadLimited(lane.job->uid);
  }
  // Gives back the charge of the lane's picks not yet done (its stream is
  // dropped).
  void UnchargeStream(Lane* lane, Actions* actions) REQUIRES(mu);
  // Whether the drift bound holds the lane's next hand-out back now.
  bool HeldByDrift(Lane* lane, std::chrono::steady_clock::time_point now) REQUIRES(mu);
  // The lane's reads are answered: what it waited while held comes out of
  // its hold budget.
  void EndHold(Lane* lane, std::chrono::steady_clock::time_point now) REQUIRES(mu);
  // At the end of the epoch of a reader of fixed-size records that has
  // been alone in it: queues its latest record again, flagged
  // kRecordRepeat, once per sample skipped since it opened, so that it
  // reads the size its file showed.
  void PadSkipped(Reader* reader, Actions* actions) REQUIRES(mu);
  // Renders the job's delivery of a loaded base image, then OnLoaded().
  // Runs on a loader thread, without the lock.
  void Render(const AugmentSpec& augment, uint32_t size, uint64_t serial, uint64_t epoch,
              uint64_t position, SampleId id, const SamplePtr& base, Tier tier);

  const Catalog* catalog_;
  SampleCache* cache_;
  LoaderPool* pool_;
  PlanGroup* group_;
  JobStore* const store_;
  const UnreadLimit unread_limit_;
  const bool drift_bound_;  // HeldByDrift may hold
  // Bytes of rendered deliveries alive (in streams and readers' queues):
  // counted down by their pixels' deleter, so shared with them.
  const std::shared_ptr<std::atomic<uint64_t>> rendered_bytes_ =
      std::make_shared<std::atomic<uint64_t>>(0);
  SharedRenders shared_renders_;

  std::unordered_map<uint64_t, Lane*> by_serial_ GUARDED_BY(mu);
  // Lanes taking part in planning, by group and handle.
  std::map<std::pair<const PlanGroup*, JobHandle>, Lane*> planning_ GUARDED_BY(mu);
  uint64_t next_serial_ GUARDED_BY(mu) = 1;
  uint64_t delivered_ GUARDED_BY(mu) = 0;
  std::chrono::steady_clock::duration stalled_ GUARDED_BY(mu){};  // answered reads, all lanes
  RateWindow rate_ GUARDED_BY(mu);
  // By job owner: unread bytes, and the groups that held its streams back.
  struct Unread {
    uint64_t bytes = 0;
    std::set<PlanGroup*> held_back;
  };
  std::unordered_map<uint32_t, Unread> unread_ GUARDED_BY(mu);
  // Lanes with reads held by the drift bound.
  std::set<Lane*> held_ GUARDED_BY(mu);
};

}  // namespace joaderfs

#endif  // JOADERFS_JOBS_LANE_H_
