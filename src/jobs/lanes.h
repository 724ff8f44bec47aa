// Lanes: the state machine of every job stream of the mount (a Lane,
// jobs/lane.h). Here a lane starts its epochs, takes part in planning, pins
// and requests the samples planned for it, serves its waiting readers, and
// gives the pins back once positions are done or the lane is dropped.
//
// Its rooms, one source each:
//   lanes.cc           epochs, resumes, planning and pins;
//   lanes_serve.cc     serving readers, their stall and rate figures, status;
//   lanes_dispatch.cc  requests to the cache, render dispatch, landing
//                      loads, and saving hand-outs;
// and the parts it owns, with state of their own: the unread allowance
// (pacing/unread_allowance.h), the drift bound's holds (jobs/drift_hold.h).
// Which ids a lane reads in an epoch (shards, elastic resume) is
// jobs/epoch_shards.h.
//
// Not thread-safe: externally synchronized by its owner, JobManager, as
// leveldb's VersionSet is by DBImpl's mutex. The manager's lock is the
// manager's (private, JobManager::mu_), and it holds its Lanes as a member
// GUARDED_BY that lock, so clang checks every call made into here. Two
// kinds of work reach the lanes from other threads, and take the owner's
// lock (`owner_lock`) themselves: a load landing (OnLoaded, from the cache's
// callbacks) and the drift bound's retry (an action run after a reply).
// Work decided here that calls out (cache requests, whose callbacks
// re-enter; replies to readers) is added to the caller's Actions
// (jobs/actions.h) and runs after the lock is dropped. Render() runs on a
// loader thread and touches only what is thread-safe on its own (the
// catalog, shared renders, the rendered-bytes count).

#ifndef JOADERFS_JOBS_LANES_H_
#define JOADERFS_JOBS_LANES_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include "cache/sample_cache.h"
#include "catalog/catalog.h"
#include "common/ranked_mutex.h"
#include "jobs/actions.h"
#include "jobs/drift_hold.h"
#include "jobs/epoch_shards.h"
#include "jobs/job_owner.h"
#include "jobs/lane.h"
#include "jobs/shared_renders.h"
#include "jobs/stream_figures.h"
#include "loader/loader_pool.h"
#include "pacing/unread_allowance.h"
#include "sampling/plan_group.h"
#include "store/job_store.h"

namespace joaderfs {

class Lanes {
 public:
  // The lock every call is made under, held by the caller (its owner's).
  using OwnerLock = RankedMutex<LockRank::kJobManager>;

  // All outlive the Lanes; `store` may be null (no persistence). Every lane
  // is a participant of `group` and pins base images in `cache`; the renders
  // of jobs of one size are shared through `renders`.
  Lanes(OwnerLock* owner_lock, const Catalog* catalog, SampleCache* cache, LoaderPool* pool,
        PlanGroup* group, SharedRenders* renders, JobStore* store, UnreadLimit unread_limit = {},
        bool drift_bound = true);

  // --- Epochs, resumes, planning and pins (lanes.cc).

  // (Re)makes the job's lanes for its spec. REQUIRES: none has readers.
  void Make(Job* job);
  // Ends the lane for good (its job is removed): leaves planning, gives
  // back its pins, and its readers' waiting reads fail with Gone. Returns
  // what the lane delivered over its life.
  uint64_t Remove(Lane* lane, Actions* actions);
  // Makes the lane begin `epoch` at its next read, without `skip` (those of
  // its ids consumed or handed out already).
  void SetResume(Lane* lane, uint64_t epoch, Roaring skip);
  // Makes every rank of the ranked job begin `epoch` at its next read with
  // its share of the rest once `consumed` is (an elastic resume), drops the
  // epochs under way and saves the resume. `split` is used if it was
  // prepared (PrepareElastic) for the job as it is now, else the rest is
  // split again here (a write to the job raced it). REQUIRES: no rank has
  // readers.
  void SetElasticResume(Job* job, uint64_t epoch, const Roaring& consumed, ElasticSplit split,
                        Actions* actions);
  // Drops the lane's epoch under way (for `resume`): pins, plan, state.
  void Reset(Lane* lane, Actions* actions);
  // Takes the lane out of its planning group (a `group=` lane's own goes).
  void LeaveGroup(Lane* lane);
  // Readies the lane for a read of `reader`: starts its epoch if none runs,
  // fetches again what an idle release gave back, and plans a lane that
  // has nothing in flight (it sat out while it had no reader, or waits for
  // room in its owner's allowance).
  void Wake(Lane* lane, Actions* actions);
  // Gives back the planned samples of a lane without readers (idle), and
  // their charge against its owner's allowance.
  void Release(Lane* lane, Actions* actions);
  // The lane's last reader closed: it plans nothing more against its
  // owner's allowance until read again, and leaves the allowance's queue.
  void LastReaderClosed(Lane* lane, Actions* actions);
  // A reader opened on the lane: one that has never begun an epoch (no
  // planning group yet) counts for the drift bound as a peer starting now
  // (DriftHold::Holds `starting`) until its first read begins one.
  void ReaderOpened(Lane* lane);

  // --- Serving readers, their figures, status (lanes_serve.cc).

  // Replies to `reader`'s pending read if it can be answered now: with its
  // unread bytes, with records ready in its lane, with EOF, or with Gone.
  bool TryServe(Reader* reader, Actions* actions);
  void ServeWaiters(Lane* lane, Actions* actions);
  bool ReaderAtEof(const Reader* reader) const;
  // The records `reader` may still read besides its unread bytes: what the
  // lane may hand it, and the repeats PadSkipped() will give it.
  uint64_t ReaderRecordsLeft(const Reader& reader) const;
  // The epoch the lane would begin next is past its spec's `epochs` (or
  // past what a record can number): a reader opened now gets EOF.
  static bool EpochsOver(const Lane& lane);
  // The reader's pending read waits for data (Read found none at once).
  void BeginStall(Reader* reader);
  // Its pending read is answered (or given up): adds its wait, if any, to
  // its lane's stall and the mount's.
  void EndStall(Reader* reader);
  // The mount's stall (every lane's, removed ones too, and reads waiting
  // now) and its recent rate of deliveries.
  double StallSeconds() const;
  double SamplesPerSecond() const { return rate_.Rate(std::chrono::steady_clock::now()); }
  uint64_t delivered() const { return delivered_; }
  // The lane's `status` (JobManager adds up a ranked job's).
  JobStatus StatusOf(const Lane& lane) const;
  // The samples the lane may still hand `reader` (docs/design.md 2.4
  // "File semantics"), or a reader opened now if null: none once its epoch
  // is over or the job's epochs are; else the rest of the epoch under way
  // not yet handed out, or between epochs the whole of the epoch its next
  // read begins (a resume's rest). Other readers and skipped samples may
  // take some of them.
  uint64_t Unhanded(const Lane& lane, const Reader* reader) const;
  // Serves again the readers of lanes held by the drift bound: a peer
  // moved, went quiet, or their budget refilled. Called after hand-outs
  // and once a second.
  void RetryHeld(Actions* actions);

  // --- The unread allowance (UnreadAllowance).

  // The reader's queue changed by `delta` bytes (Reader::owner's charge).
  void NoteQueued(const Reader& reader, int64_t delta, Actions* actions);
  // Bytes of unread deliveries `uid`'s jobs hold (UnreadLimit).
  uint64_t UnreadBytes(uint32_t uid) const { return unread_.Bytes(uid); }

 private:
  // lanes.cc
  void StartEpoch(Lane* lane, Actions* actions);
  // Tops up the planned queues of the group's lanes; the group decides who
  // plans when (sampling/plan_group.h).
  void Plan(PlanGroup* group, Actions* actions);
  // Gives back the lane's pins and their charge against its owner's
  // allowance: its picks in flight become planned and unrequested.
  void ReleasePins(Lane* lane, Actions* actions);
  // Requests the lane's planned, unrequested picks (after a release) as
  // far as its owner's allowance lets them in; the rest wait for room,
  // fetched by the group's next Plan() before it plans anything new.
  void FetchPlanned(Lane* lane, Actions* actions);
  void SetUnfetched(Lane* lane, bool unfetched);
  // Releases what the lane finished, reports it to the planner and tops up
  // the plans.
  void AfterDone(Lane* lane, Actions* actions);
  // Bytes of the planning group's samples: the mean base image.
  uint64_t SampleBytes() const;
  // Adds `delta` to `uid`'s unread bytes; once they fall below the
  // allowance, the groups its streams were held back in plan again.
  void AddUnread(uint32_t uid, int64_t delta, Actions* actions);
  // Whether the lane's picks are charged to its owner's unread bytes: they
  // hold renders of their own, and the allowance applies to the owner.
  // Each is charged from its request (or from its planning, which requests
  // it) until it is done or its pin is given back.
  bool PicksCharged(const Lane& lane) const {
    return lane.pick_bytes > 0 && unread_.Limited(lane.job->uid);
  }
  // Picks requested and not done: the lane's charged ones.
  static uint64_t InFlight(const Lane& lane) {
    if (!lane.positions) return 0;
    return lane.positions->planned() - lane.positions->done() - lane.positions->unrequested();
  }
  // The lane as it asks its owner's allowance for a pick, `pending` more
  // picks let in already for it in this Plan().
  UnreadAllowance::Asker AskerOf(const Lane& lane, uint64_t pending = 0) const {
    return {&lane, lane.group, !lane.readers.empty() && InFlight(lane) + pending == 0};
  }
  // The lane waits for no room: it leaves its owner's queue.
  void ForgetWaiter(Lane* lane, Actions* actions);

  // lanes_serve.cc
  // At the end of the epoch of a reader of fixed-size records that has
  // been alone in it: queues its latest record again, flagged
  // kRecordRepeat, once per sample skipped since it opened, so that it
  // reads the size its file showed.
  void PadSkipped(Reader* reader, Actions* actions);

  // lanes_dispatch.cc
  // Pins the position's sample in the cache (loading it if needed) until
  // the position is done or its pins are given back.
  void RequestPosition(Lane* lane, uint64_t position, Actions* actions);
  // Gives back the pins (cache and shared renders) of `ids`, after the lock.
  void ReleaseIds(const Lane& lane, std::vector<SampleId> ids, Actions* actions);
  // Renders the job's delivery of a loaded base image, then OnLoaded().
  // Runs on a loader thread, without the lock.
  void Render(const AugmentSpec& augment, uint32_t size, uint64_t serial, uint64_t epoch,
              uint64_t position, SampleId id, const SamplePtr& base, Tier tier);
  // `tier`: where the base image came from (counted if the load lands).
  void OnLoaded(uint64_t serial, uint64_t epoch, uint64_t position, const SamplePtr& sample,
                Tier tier);
  // Saves the ids handed out of the lane's `epoch` in the job store, after
  // the lock and before the reply that hands them leaves: a crash of the
  // daemon loses no hand-out.
  void SaveHandedOut(const Lane& lane, uint64_t epoch, std::vector<SampleId> handed,
                     Actions* actions);

  OwnerLock* const owner_lock_;
  const Catalog* catalog_;
  SampleCache* cache_;
  LoaderPool* pool_;
  PlanGroup* group_;
  JobStore* const store_;
  // Bytes of rendered deliveries alive (in streams and readers' queues):
  // counted down by their pixels' deleter, so shared with them.
  const std::shared_ptr<std::atomic<uint64_t>> rendered_bytes_ =
      std::make_shared<std::atomic<uint64_t>>(0);
  SharedRenders* const shared_renders_;  // thread-safe: its own leaf lock

  std::unordered_map<uint64_t, Lane*> by_serial_;
  PlanningLanes planning_;
  uint64_t next_serial_ = 1;
  UnreadAllowance unread_;
  std::set<Lane*> unfetched_;  // lanes with `unfetched` set
  // Lanes with a reader open that have not begun their first epoch.
  std::set<Lane*> starting_;
  DriftHold drift_hold_;
  // The mount's figures: deliveries, waits of answered reads (all lanes,
  // removed ones too), recent rate.
  uint64_t delivered_ = 0;
  std::chrono::steady_clock::duration stalled_{};
  RateWindow rate_;
};

}  // namespace joaderfs

#endif  // JOADERFS_JOBS_LANES_H_
