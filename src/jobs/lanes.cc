// Lanes: epochs, resumes, planning and pins (jobs/lanes.h).

#include "jobs/lanes.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "cache/budget.h"
#include "common/hash.h"
#include "common/random.h"

namespace joaderfs {

namespace {

// A key equal for equal subsets (and, rarely, for others: then two jobs
// are held near each other for nothing, which costs time, never a sample).
uint64_t SubsetKey(const Roaring& subset) {
  uint64_t key = subset.cardinality();
  if (key > 0)
    key = key * 0x9E3779B97F4A7C15ull ^ (uint64_t{subset.minimum()} << 32) ^ subset.maximum();
  return key | 1;
}

}  // namespace

Lanes::Lanes(OwnerLock* owner_lock, const Catalog* catalog, SampleCache* cache, LoaderPool* pool,
             PlanGroup* group, SharedRenders* renders, JobStore* store, UnreadLimit unread_limit,
             bool drift_bound)
    : owner_lock_(owner_lock),
      catalog_(catalog),
      cache_(cache),
      pool_(pool),
      group_(group),
      store_(store),
      shared_renders_(renders),
      unread_(unread_limit),
      drift_hold_(drift_bound) {}

void Lanes::Make(Job* job) {
  for (const auto& lane : job->lanes) by_serial_.erase(lane->serial);
  job->lanes.clear();
  job->splits.clear();
  job->elastic.reset();  // split for the old ranks
  const uint32_t n = std::max<uint32_t>(job->spec.ranks, 1);
  for (uint32_t i = 0; i < n; ++i) {
    auto lane = std::make_unique<Lane>();
    lane->job = job;
    lane->index = i;
    lane->serial = next_serial_++;
    by_serial_[lane->serial] = lane.get();
    job->lanes.push_back(std::move(lane));
  }
}

uint64_t Lanes::Remove(Lane* lane, Actions* actions) {
  LeaveGroup(lane);
  ForgetWaiter(lane, actions);
  SetUnfetched(lane, false);
  ReleasePins(lane, actions);
  drift_hold_.Forget(lane);
  starting_.erase(lane);
  for (Reader* r : lane->readers) {
    if (r->waiting) EndStall(r);
    r->lane = nullptr;
    if (r->waiting) {
      r->waiting = false;
      actions->Add([reply = std::move(r->reply)] { reply(Status::Gone("job removed"), {}); });
    }
  }
  by_serial_.erase(lane->serial);
  return lane->total_counts.delivered;
}

void Lanes::Wake(Lane* lane, Actions* actions) {
  if (!lane->running()) {
    StartEpoch(lane, actions);
  } else if (lane->released) {
    lane->released = false;
    lane->group->SetPaused(lane->handle, false);
    spdlog::info("job {} is read again: fetching its {} planned samples", lane->job->name,
                 lane->positions->unrequested());
    FetchPlanned(lane, actions);
  } else if (lane->unfetched) {
    FetchPlanned(lane, actions);
  } else if (PicksCharged(*lane) && InFlight(*lane) == 0) {
    // Nothing will land for its reader: it sat out while it had no reader,
    // or waits for room; asking now queues it for the room reads free.
    Plan(lane->group, actions);
  }
}

void Lanes::Release(Lane* lane, Actions* actions) {
  lane->released = true;
  lane->group->SetPaused(lane->handle, true);
  SetUnfetched(lane, false);  // all of them are, until read again
  ForgetWaiter(lane, actions);
  ReleasePins(lane, actions);
}

void Lanes::LastReaderClosed(Lane* lane, Actions* actions) {
  starting_.erase(lane);
  ForgetWaiter(lane, actions);
}

void Lanes::ReaderOpened(Lane* lane) {
  if (!lane->group) starting_.insert(lane);
}

void Lanes::FetchPlanned(Lane* lane, Actions* actions) {
  if (lane->readers.empty() && PicksCharged(*lane)) return;  // fetched when read
  const std::vector<uint64_t> positions = lane->positions->Unrequested();
  size_t fetched = 0;
  for (uint64_t p : positions) {
    if (PicksCharged(*lane) && !unread_.LetIn(lane->job->uid, lane->pick_bytes, AskerOf(*lane))) {
      break;
    }
    RequestPosition(lane, p, actions);
    ++fetched;
  }
  SetUnfetched(lane, fetched < positions.size());
}

void Lanes::SetUnfetched(Lane* lane, bool unfetched) {
  lane->unfetched = unfetched;
  if (unfetched) {
    unfetched_.insert(lane);
  } else {
    unfetched_.erase(lane);
  }
}

uint64_t Lanes::SampleBytes() const { return cache_->AverageSampleBytes(); }

void Lanes::StartEpoch(Lane* lane, Actions* actions) {
  Job* job = lane->job;
  uint64_t epoch = lane->epoch();
  Roaring skip;
  if (lane->resume_epoch) {
    skip = std::move(lane->resume_skip);
    lane->resume_epoch.reset();
    lane->resume_skip = Roaring();
    lane->resume_written = false;
  }
  Roaring ids = EpochSubset(job, *lane, epoch);
  ids -= skip;  // not empty: SetResume moves past a fully consumed epoch
  if (job->elastic && job->elastic->epoch == epoch) job->elastic->read = true;
  const bool full = skip.isEmpty();
  if (!lane->group) {
    const JobSpec& spec = job->spec;
    lane->group = group_;
    // What each delivery holds besides the shared base image until read.
    lane->pick_bytes = spec.size > 0              ? SquareSampleBytes(spec.size)
                       : spec.augment.augmented() ? SampleBytes()
                                                  : 0;
    lane->share_key = SharedRenders::ShareKey(spec.augment, spec.size, spec.renders());
    if (spec.group.empty()) {
      lane->handle = lane->group->AddJob(ids, spec.window, lane->pick_bytes);
    } else {
      // Its first handle and its epochs alone drive the shuffle; after a
      // restart or a resume it goes on at the job's epoch, less what was
      // handed out of it, so it still reads in the order of the same job
      // on other daemons.
      lane->own_group = std::make_unique<PlanGroup>(
          NewIndependentPlanner(
              MixSeed(Fnv1a(kFnv1aBasis, spec.group.data(), spec.group.size()), spec.augment.seed)),
          group_->cadence());
      lane->group = lane->own_group.get();
      lane->handle = lane->group->ResumeJob(ids, spec.window, lane->pick_bytes, epoch, skip);
    }
    lane->peer_key = job->ranked() ? 0 : SubsetKey(job->subset);
    starting_.erase(lane);
    lane->positions = std::make_unique<EpochPositions>(ids.cardinality(), job->spec.window, epoch);
    planning_[{lane->group, lane->handle}] = lane;
  } else if (job->ranked() || !full || lane->positions->epoch_size() != ids.cardinality()) {
    // A rank's shard changes every epoch; a resumed epoch is shorter, and
    // so is the planner's subset for it until the next full epoch.
    lane->group->StartEpoch(lane->handle, ids);
  } else {
    lane->group->StartEpoch(lane->handle);
  }
  lane->positions->StartEpoch(ids.cardinality());
  lane->epoch_counts = {};
  lane->stalled_before_epoch = LaneStall(*lane, std::chrono::steady_clock::now());
  // Under the lock, so that no hand-out of this epoch is written before it.
  if (store_) store_->StartEpoch(job->name, lane->index, epoch, skip);
  if (job->ranked()) {
    spdlog::info("job {} rank {} starts epoch {} ({} samples)", job->name, lane->index, epoch,
                 ids.cardinality());
  } else {
    spdlog::info("job {} starts epoch {} ({} samples)", job->name, epoch, ids.cardinality());
  }
  actions->Add([this] { cache_->RefreshNeeds(); });  // its ids are needed again
  Plan(lane->group, actions);
}

void Lanes::SetResume(Lane* lane, uint64_t epoch, Roaring skip) {
  Roaring epoch_ids = EpochSubset(lane->job, *lane, epoch);
  skip &= epoch_ids;
  if (skip.cardinality() == epoch_ids.cardinality()) {
    // Nothing of it left: the stream goes on with the next epoch (ReaderAtEof
    // then sees an epochs= limit).
    ++epoch;
    skip = Roaring();
  }
  lane->resume_epoch = epoch;
  lane->resume_skip = std::move(skip);
}

void Lanes::SetElasticResume(Job* job, uint64_t epoch, const Roaring& consumed, ElasticSplit split,
                             Actions* actions) {
  ElasticSplit now = PrepareElastic(*job, epoch, consumed);
  if (split.shares.size() != job->spec.ranks || !split.SameInputs(now)) {
    now.Split();
    split = std::move(now);
  }
  job->elastic = ElasticResume{epoch, std::move(split.consumed), std::move(split.shares)};
  if (store_) store_->PutElasticResume(job->name, epoch, job->elastic->consumed);
  for (const auto& lane : job->lanes) {
    Reset(lane.get(), actions);
    SetResume(lane.get(), epoch, Roaring());  // the share is the rest already
    lane->resume_written = true;
    if (store_) store_->StartEpoch(job->name, lane->index, *lane->resume_epoch, Roaring());
  }
}

void Lanes::LeaveGroup(Lane* lane) {
  if (!lane->group) return;
  lane->group->RemoveJob(lane->handle);
  planning_.erase({lane->group, lane->handle});
  if (lane->own_group) {
    unread_.Forget(lane->own_group.get());
    lane->own_group.reset();
  }
  lane->group = nullptr;
}

void Lanes::Reset(Lane* lane, Actions* actions) {
  LeaveGroup(lane);
  ForgetWaiter(lane, actions);
  SetUnfetched(lane, false);
  ReleasePins(lane, actions);
  drift_hold_.End(lane, std::chrono::steady_clock::now());
  lane->positions.reset();
  lane->released = false;
  // Loads requested for the old stream must not land in the new one.
  by_serial_.erase(lane->serial);
  lane->serial = next_serial_++;
  by_serial_[lane->serial] = lane;
}

void Lanes::Plan(PlanGroup* group, Actions* actions) {
  // Rendered deliveries not yet read hold RAM as well as the pinned base
  // images they came from.
  const BudgetView budget{cache_->CommittedBytes() + rendered_bytes_->load(), cache_->budget(),
                          SampleBytes()};
  // Streams read again after a release fetch what they planned first.
  for (Lane* lane : std::vector<Lane*>(unfetched_.begin(), unfetched_.end())) {
    if (lane->group == group) FetchPlanned(lane, actions);
  }
  // A stream whose owner holds its allowance of unread deliveries sits
  // out, and so does one of a limited owner with no reader (its planned
  // picks wait for a reader or its idle release), or with picks still to
  // fetch; each one let in gets one pick a round, charged as it is let in
  // so that the next round sees it.
  std::map<Lane*, uint64_t> let_in;
  auto may_plan = [&](JobHandle handle) {
    Lane* lane = planning_.at({group, handle});
    if (!PicksCharged(*lane)) return true;
    if (lane->readers.empty() || lane->unfetched) return false;
    uint64_t& pending = let_in[lane];
    if (!unread_.LetIn(lane->job->uid, lane->pick_bytes, AskerOf(*lane, pending))) return false;
    ++pending;
    return true;
  };
  std::vector<Pick> picks;
  group->Plan(budget, &picks, may_plan);
  for (const Pick& pick : picks) {
    Lane* lane = planning_.at({group, pick.job});
    if (auto it = let_in.find(lane); it != let_in.end()) --it->second;
    RequestPosition(lane, lane->positions->Plan(pick.id), actions);
  }
  // One let in whose epoch had no id left got no pick.
  for (const auto& [lane, unused] : let_in) {
    if (unused > 0)
      AddUnread(lane->job->uid, -static_cast<int64_t>(unused * lane->pick_bytes), actions);
  }
}

void Lanes::ReleasePins(Lane* lane, Actions* actions) {
  if (!lane->positions) return;
  const uint64_t charged = InFlight(*lane);
  ReleaseIds(*lane, lane->positions->ReleasePins(), actions);
  // Their renders are dropped: a pick is charged again when fetched again.
  if (charged > 0 && PicksCharged(*lane)) {
    AddUnread(lane->job->uid, -static_cast<int64_t>(charged * lane->pick_bytes), actions);
  }
}

void Lanes::AfterDone(Lane* lane, Actions* actions) {
  std::vector<SampleId> ids = lane->positions->TakeDoneIds();
  for (SampleId id : ids) lane->group->Done(lane->handle, id);
  if (PicksCharged(*lane)) {
    AddUnread(lane->job->uid, -static_cast<int64_t>(ids.size() * lane->pick_bytes), actions);
  }
  ReleaseIds(*lane, std::move(ids), actions);
  if (!lane->running()) {
    ForgetWaiter(lane, actions);  // nothing to wait for until its next epoch
    // Waiting readers get EOF from the caller's ServeWaiters().
    const std::string rank =
        lane->job->ranked() ? " rank " + std::to_string(lane->index) : std::string();
    spdlog::info("job {}{} ends epoch {}: {} delivered, {} skipped", lane->job->name, rank,
                 lane->epoch() - 1, lane->positions->delivered(), lane->positions->skipped());
    return;
  }
  Plan(lane->group, actions);
}

void Lanes::NoteQueued(const Reader& r, int64_t delta, Actions* actions) {
  if (delta != 0 && unread_.Limited(r.owner)) AddUnread(r.owner, delta, actions);
}

void Lanes::ForgetWaiter(Lane* lane, Actions* actions) {
  if (!unread_.Limited(lane->job->uid)) return;
  for (PlanGroup* group : unread_.Forget(lane->job->uid, lane)) Plan(group, actions);
}

void Lanes::AddUnread(uint32_t uid, int64_t delta, Actions* actions) {
  for (PlanGroup* group : unread_.Add(uid, delta)) Plan(group, actions);
}

}  // namespace joaderfs
