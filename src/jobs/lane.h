// The state of the mount's jobs as the manager holds it: a Job, its
// streams (Lane: `next`, or `next.R` of rank R) and their readers.
//
// Plain structs with raw back-pointers (a Lane's job, a Reader's lane),
// parts of JobManager's state: read or written only under its lock
// (JobManager::mu_). clang checks the ways in: every one is owned and
// reached through the manager's maps of jobs and readers, or through its
// Lanes (by serial, planning), all of them GUARDED_BY that lock; a pointer
// taken from them is used only within the same locked scope. JobManager
// owns Jobs and Readers; a Job owns its Lanes. A Reader outlives its lane's
// removal (`lane` is then null) until it is closed.

#ifndef JOADERFS_JOBS_LANE_H_
#define JOADERFS_JOBS_LANE_H_

#include <sys/uio.h>

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
#include <vector>

#include "catalog/catalog.h"
#include "common/status.h"
#include "jobs/epoch_positions.h"
#include "jobs/stream_figures.h"
#include "pacing/drift.h"
#include "records/record.h"
#include "records/record_queue.h"
#include "sampling/plan_group.h"
#include "spec/spec.h"
#include "store/job_store.h"

namespace joaderfs {

// Called exactly once per read. On success `data` holds the bytes; no bytes
// means end of stream for that reader.
using ReadReply = std::function<void(const Status& status, std::span<const iovec> data)>;
using ReaderId = uint64_t;

struct Job;
struct Reader;

// An elastic resume (docs/design.md 2.7): a `resume` without `rank=` on a
// ranked job. The ids of `epoch` consumed under any earlier number of
// ranks; the rest of that epoch is split anew among the job's ranks
// (pacing/rank_split.h SplitRest), and each rank reads its share of it
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

// One stream of a job: `next`, or `next.R` of rank R.
struct Lane {
  Job* job = nullptr;
  StreamIndex index = 0;  // the rank; 0 for `next`
  uint64_t serial = 0;    // names the stream's loads; new after a resume

  PlanGroup* group = nullptr;  // set at the first epoch, with its positions
  // A `group=` job's own planning group (else null): an independent
  // shuffle seeded by (group, seed) alone, so that the same job on any
  // daemon gets the same order (docs/admin-guide.md "Cluster"). New at every first epoch
  // (after a restart or a resume too), where it resumes the order at the
  // job's epoch less what was handed out (PlanGroup::ResumeJob).
  std::unique_ptr<PlanGroup> own_group;
  JobHandle handle = 0;
  // What each pick holds of its own until read (its rendered delivery;
  // 0 when it delivers the shared base image), charged to the job's owner.
  uint64_t pick_bytes = 0;
  // Which jobs could take its renders (SharedRenders::ShareKey of its
  // spec): its pins hold and drop them with this one key.
  uint32_t share_key = 0;

  // The drift bound (docs/planner.md "Drift"): lanes of one group with the
  // same subset (same key), or subsets sharing half of the smaller one
  // (jobs/drift_hold.h), are peers; a lane more than the lag limit ahead
  // of an active peer of similar pace has its reads held, within its hold
  // budget.
  uint64_t peer_key = 0;  // 0: never a peer (ranked)
  DriftState drift{std::chrono::steady_clock::now()};
  // Picks done over its life: epochs completed x epoch size + done.
  uint64_t progress() const {
    return positions ? positions->epochs_completed() * positions->epoch_size() + positions->done()
                     : 0;
  }
  std::unique_ptr<EpochPositions> positions;

  std::set<Reader*> readers;
  std::deque<Reader*> waiting;  // readers with a pending Read, oldest first
  std::chrono::steady_clock::time_point idle_since = std::chrono::steady_clock::now();
  bool released = false;  // idle: planned samples given back
  // Read again after a release, some of its planned picks wait for room in
  // its owner's allowance before they are fetched (Lanes::FetchPlanned).
  bool unfetched = false;

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

  bool running() const { return positions && positions->running(); }
  // The epoch the stream is in, or begins at its next read.
  uint64_t epoch() const {
    if (resume_epoch) return *resume_epoch;
    return positions ? positions->epoch() : 0;
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
  // the subset. Made off the lock (jobs/epoch_shards.h ShardsOf); a future
  // until then.
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

// The lane's stall: its answered reads' waits and those of reads waiting.
inline std::chrono::steady_clock::duration LaneStall(const Lane& lane,
                                                     std::chrono::steady_clock::time_point now) {
  std::chrono::steady_clock::duration stall = lane.stalled;
  for (const Reader* r : lane.readers) {
    if (r->stalled_since) stall += now - *r->stalled_since;
  }
  return stall;
}

// The lanes taking part in planning, by group and handle.
using PlanningLanes = std::map<std::pair<const PlanGroup*, JobHandle>, Lane*>;

}  // namespace joaderfs

#endif  // JOADERFS_JOBS_LANE_H_
