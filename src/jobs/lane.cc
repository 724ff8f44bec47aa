#include "jobs/lane.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "cache/budget.h"
#include "common/hash.h"
#include "common/random.h"
#include "common/rate_limited_log.h"
#include "jobs/rank_split.h"
#include "jobs/record.h"

namespace joaderfs {

namespace {

// The drift bound (docs/planner.md "Drift"): a leader is held only for a
// peer whose pace is within this factor of its own; a job this much faster
// is meant to run ahead.
constexpr double kSimilarPace = 1.5;

// A key equal for equal subsets (and, rarely, for others: then two jobs
// are held near each other for nothing, which costs time, never a sample).
uint64_t SubsetKey(const Roaring& subset) {
  uint64_t key = subset.cardinality();
  if (key > 0)
    key = key * 0x9E3779B97F4A7C15ull ^ (uint64_t{subset.minimum()} << 32) ^ subset.maximum();
  return key | 1;
}

// A delivery of a sample whose base image came from `tier`, in both scopes.
void CountDelivery(Lane* lane, Tier tier) {
  for (StreamCounts* counts : {&lane->epoch_counts, &lane->total_counts}) {
    ++counts->delivered;
    switch (tier) {
      case Tier::kRam: ++counts->ram_hits; break;
      case Tier::kDisk: ++counts->disk_hits; break;
      case Tier::kRemote: ++counts->remote_hits; break;
      case Tier::kDecode: ++counts->decodes; break;
    }
  }
}

}  // namespace

StreamCounts& StreamCounts::operator+=(const StreamCounts& other) {
  delivered += other.delivered;
  skipped += other.skipped;
  ram_hits += other.ram_hits;
  disk_hits += other.disk_hits;
  remote_hits += other.remote_hits;
  decodes += other.decodes;
  stall_seconds += other.stall_seconds;
  return *this;
}

Status CheckJobOwner(const std::string& job, uint32_t owner, uint32_t uid) {
  if (MayUseJob(uid, owner)) return Status::Ok();
  return Status::Permission("job " + job + " is not yours");
}

Lanes::Lanes(const Catalog* catalog, SampleCache* cache, LoaderPool* pool, PlanGroup* group,
             JobStore* store, UnreadLimit unread_limit, bool drift_bound)
    : catalog_(catalog),
      cache_(cache),
      pool_(pool),
      group_(group),
      store_(store),
      unread_limit_(unread_limit),
      drift_bound_(drift_bound) {}

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
  ReleasePins(lane, actions);
  UnchargeStream(lane, actions);
  held_.erase(lane);
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
  if (!lane->running()) StartEpoch(lane, actions);
  if (lane->released) {
    lane->released = false;
    lane->group->SetPaused(lane->handle, false);
    const std::vector<uint64_t> positions = lane->stream->Unrequested();
    spdlog::info("job {} is read again: fetching its {} planned samples", lane->job->name,
                 positions.size());
    for (uint64_t p : positions) RequestPosition(lane, p, actions);
  }
}

void Lanes::Release(Lane* lane, Actions* actions) {
  ReleasePins(lane, actions);
  lane->released = true;
  lane->group->SetPaused(lane->handle, true);
}

// Replies to `r`'s pending read if it can be answered now: with its unread
// bytes, with records ready in its job's window, with EOF, or with Gone.
bool Lanes::TryServe(Reader* r, Actions* actions) {
  Lane* lane = r->lane;
  if (!lane) {
    EndStall(r);
    r->waiting = false;
    actions->Add([reply = std::move(r->reply)] { reply(Status::Gone("job removed"), {}); });
    return true;
  }
  if (r->pending.empty() && ReaderAtEof(r)) PadSkipped(r, actions);
  if (r->pending.empty()) {
    if (ReaderAtEof(r)) {
      EndStall(r);
      r->waiting = false;
      actions->Add([reply = std::move(r->reply)] { reply(Status::Ok(), {}); });
      return true;
    }
    const auto now = std::chrono::steady_clock::now();
    if (lane->running() && lane->stream->PeekReady() && HeldByDrift(lane, now)) return false;
    // Hand ready records to this reader: at least one, then as many as fit.
    uint64_t bytes = 0;
    std::vector<SampleId> handed;
    const uint64_t epoch = lane->epoch();
    while (lane->running()) {
      const std::optional<JobStream::Ready> next = lane->stream->PeekReady();
      if (!next) break;
      RecordHeader h;
      h.sample_id = next->id;
      h.label = catalog_->label(next->id);
      h.epoch = static_cast<uint32_t>(epoch);
      h.height = next->sample->height;
      h.width = next->sample->width;
      h.channels = next->sample->channels;
      h.flags = next->sample->record_flags;
      h.crop_box = next->sample->record_box;
      const JobSpec& spec = lane->job->spec;
      // A TFRecord's checksum reads the pixels once (about 10 us for
      // 224 x 224 x 3 with SSE4.2), here under the lock.
      auto frame = std::make_shared<const RecordFrame>(
          FrameRecord(spec.format, h, next->sample->pixels.get(), spec.augment.flip > 0));
      const uint64_t record_bytes = frame->bytes(h.payload_bytes());
      if (bytes > 0 && bytes + record_bytes > r->max_bytes) break;
      bytes += record_bytes;
      const JobStream::Ready ready = *lane->stream->TakeReady();
      CountDelivery(lane, ready.tier);
      r->last_sample = ready.sample;
      r->last_header = h;
      r->pending.Push(r->last_sample, std::move(frame));
      // Charged before AfterDone gives back the pick's charge: the owner's
      // unread bytes never dip below what it holds.
      NoteQueued(*r, static_cast<int64_t>(record_bytes), actions);
      handed.push_back(next->id);
      ++delivered_;
      lane->rate.Add(now);
      rate_.Add(now);
      AfterDone(lane, actions);
    }
    if (r->pending.empty()) return false;
    for (Reader* other : lane->readers) {
      if (other != r && other->epoch == r->epoch) other->alone = false;
    }
    EndHold(lane, now);
    // Its peers held by the drift bound may go on now.
    if (!held_.empty()) {
      actions->Add([this] {
        Actions retry;
        MutexLock lock(mu);
        RetryHeld(&retry);
      });
    }
    // Saved before the reply leaves: a crash of the daemon loses no hand-out.
    if (store_) {
      actions->Add(
          [this, name = lane->job->name, index = lane->index, epoch, handed = std::move(handed)] {
            store_->AddHandedOut(name, index, epoch, handed);
          });
    }
  }
  lane->drift.NoteServed(std::chrono::steady_clock::now(), lane->progress());
  const uint64_t queued = r->pending.held_bytes();
  auto data = r->pending.Take(r->max_bytes);
  NoteQueued(*r, static_cast<int64_t>(r->pending.held_bytes()) - static_cast<int64_t>(queued),
             actions);
  EndStall(r);
  r->waiting = false;
  actions->Add([reply = std::move(r->reply), data] { reply(Status::Ok(), data->iov); });
  return true;
}

void Lanes::BeginStall(Reader* r) { r->stalled_since = std::chrono::steady_clock::now(); }

void Lanes::EndStall(Reader* r) {
  if (!r->stalled_since) return;
  const auto waited = std::chrono::steady_clock::now() - *r->stalled_since;
  r->stalled_since.reset();
  stalled_ += waited;
  if (r->lane) r->lane->stalled += waited;
}

namespace {

// The lane's stall: its answered reads' waits and those of reads waiting.
std::chrono::steady_clock::duration LaneStall(const Lane& lane,
                                              std::chrono::steady_clock::time_point now) {
  std::chrono::steady_clock::duration stall = lane.stalled;
  for (const Reader* r : lane.readers) {
    if (r->stalled_since) stall += now - *r->stalled_since;
  }
  return stall;
}

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

double Lanes::StallSeconds() const {
  const auto now = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration stall = stalled_;
  for (const auto& [serial, lane] : by_serial_) stall += LaneStall(*lane, now) - lane->stalled;
  return Seconds(stall);
}

void RateWindow::Add(Clock::time_point now, uint64_t n) {
  const int64_t second = Second(now);
  const size_t slot = static_cast<size_t>(second % kSeconds);
  if (seconds_[slot] != second) {
    seconds_[slot] = second;
    counts_[slot] = 0;
  }
  counts_[slot] += n;
  if (!first_) first_ = now;
}

double RateWindow::Rate(Clock::time_point now) const {
  if (!first_) return 0;
  const int64_t second = Second(now);
  uint64_t sum = 0;
  for (int i = 0; i < kSeconds; ++i) {
    if (seconds_[i] > second - kSeconds && seconds_[i] <= second) sum += counts_[i];
  }
  const double span = std::clamp(Seconds(now - *first_), 1.0, double{kSeconds});
  return static_cast<double>(sum) / span;
}

int64_t RateWindow::Second(Clock::time_point t) {
  // Shifted so that no real second is 0, the slots' initial value.
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count() + 1;
}

void Lanes::ServeWaiters(Lane* lane, Actions* actions) {
  while (!lane->waiting.empty()) {
    Reader* r = lane->waiting.front();
    if (!TryServe(r, actions)) return;
    lane->waiting.pop_front();
  }
}

uint64_t Lanes::SampleBytes() const { return cache_->AverageSampleBytes(); }

std::shared_future<std::vector<Roaring>> Lanes::ShardsOf(
    Job* job, uint64_t epoch, std::packaged_task<std::vector<Roaring>()>* split) {
  auto it = job->splits.find(epoch);
  if (it != job->splits.end()) return it->second;
  *split = std::packaged_task<std::vector<Roaring>()>(
      [subset = job->subset, epoch, ranks = job->spec.ranks, drop_last = job->spec.drop_last] {
        return SplitEpoch(subset, epoch, ranks, drop_last);
      });
  auto shards = job->splits.emplace(epoch, split->get_future().share()).first->second;
  // Ranks run epochs near each other: two epochs' shards are plenty (the
  // one just asked for is kept, even if older: a resume).
  while (job->splits.size() > 2) {
    auto oldest = job->splits.begin();
    if (oldest->first == epoch) ++oldest;
    job->splits.erase(oldest);
  }
  return shards;
}

const Roaring* Lanes::ElasticShare(const Job& job, const Lane& lane, uint64_t epoch) const {
  if (!job.elastic || job.elastic->epoch != epoch) return nullptr;
  return &job.elastic->shares[lane.index];
}

Roaring Lanes::EpochSubset(Job* job, const Lane& lane, uint64_t epoch) {
  if (!job->ranked()) return job->subset;
  if (const Roaring* share = ElasticShare(*job, lane, epoch)) return *share;
  std::packaged_task<std::vector<Roaring>()> split;
  std::shared_future<std::vector<Roaring>> shards = ShardsOf(job, epoch, &split);
  // Not made at open: a resume or a restart, or the subset changed since.
  if (split.valid()) split();
  return shards.get()[lane.index];
}

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
    if (!spec.group.empty()) {
      // Its first handle and its epochs alone drive the shuffle.
      lane->own_group = std::make_unique<PlanGroup>(
          NewIndependentPlanner(
              MixSeed(Fnv1a(kFnv1aBasis, spec.group.data(), spec.group.size()), spec.augment.seed)),
          group_->cadence());
      lane->group = lane->own_group.get();
    }
    // What each delivery holds besides the shared base image until read.
    lane->pick_bytes = spec.size > 0              ? SquareSampleBytes(spec.size)
                       : spec.augment.augmented() ? SampleBytes()
                                                  : 0;
    lane->handle = lane->group->AddJob(ids, spec.window, lane->pick_bytes);
    lane->peer_key = job->ranked() ? 0 : SubsetKey(job->subset);
    lane->stream = std::make_unique<JobStream>(ids.cardinality(), job->spec.window, epoch);
    planning_[{lane->group, lane->handle}] = lane;
  } else if (job->ranked() || !full || lane->stream->epoch_size() != ids.cardinality()) {
    // A rank's shard changes every epoch; a resumed epoch is shorter, and
    // so is the planner's subset for it until the next full epoch.
    lane->group->StartEpoch(lane->handle, ids);
  } else {
    lane->group->StartEpoch(lane->handle);
  }
  lane->stream->StartEpoch(ids.cardinality());
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

void ElasticSplit::Split() { shares = SplitRest(subset, consumed, epoch, ranks, drop_last); }

bool ElasticSplit::SameInputs(const ElasticSplit& other) const {
  return ranks == other.ranks && drop_last == other.drop_last && epoch == other.epoch &&
         subset == other.subset && consumed == other.consumed;
}

ElasticSplit Lanes::PrepareElastic(const Job& job, uint64_t epoch, const Roaring& consumed) const {
  ElasticSplit split;
  split.subset = job.subset;
  split.ranks = job.spec.ranks;
  split.drop_last = job.spec.drop_last;
  split.epoch = epoch;
  split.consumed = ElasticConsumed(job, epoch, consumed);
  return split;
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

Roaring Lanes::ElasticConsumed(const Job& job, uint64_t epoch, const Roaring& consumed) const {
  Roaring all = consumed & job.subset;
  if (job.elastic && job.elastic->epoch == epoch && !job.elastic->read) {
    all |= job.elastic->consumed;
  }
  return all;
}

void Lanes::LeaveGroup(Lane* lane) {
  if (!lane->group) return;
  lane->group->RemoveJob(lane->handle);
  planning_.erase({lane->group, lane->handle});
  if (lane->own_group) {
    for (auto& [uid, unread] : unread_) unread.held_back.erase(lane->own_group.get());
    lane->own_group.reset();
  }
  lane->group = nullptr;
}

void Lanes::Reset(Lane* lane, Actions* actions) {
  LeaveGroup(lane);
  ReleasePins(lane, actions);
  UnchargeStream(lane, actions);
  EndHold(lane, std::chrono::steady_clock::now());
  lane->stream.reset();
  lane->released = false;
  // Loads requested for the old stream must not land in the new one.
  by_serial_.erase(lane->serial);
  lane->serial = next_serial_++;
  by_serial_[lane->serial] = lane;
}

// Tops up the planned queues of the group's jobs; the group decides who
// plans when (sampling/plan_group.h).
void Lanes::Plan(PlanGroup* group, Actions* actions) {
  // Rendered deliveries not yet read hold RAM as well as the pinned base
  // images they came from.
  const BudgetView budget{cache_->CommittedBytes() + rendered_bytes_->load(), cache_->budget(),
                          SampleBytes()};
  // A stream whose owner holds its allowance of unread deliveries sits
  // out; each one let in gets one pick a round, charged as it is let in so
  // that the next round sees it.
  std::map<Lane*, uint64_t> let_in;
  auto may_plan = [&](JobHandle handle) REQUIRES(mu) {
    Lane* lane = planning_.at({group, handle});
    if (!PicksCharged(*lane)) return true;
    const uint32_t uid = lane->job->uid;
    Unread& unread = unread_[uid];
    if (unread.bytes >= unread_limit_.max_bytes) {
      if (unread.held_back.insert(group).second) {
        Warnings().Warn("unread allowance, uid " + std::to_string(uid),
                        "uid {} holds {} MiB of unread deliveries, the most "
                        "max_unread_per_user={} MiB allows: its jobs plan no further until read",
                        uid, unread.bytes >> 20, unread_limit_.max_bytes >> 20);
      }
      return false;
    }
    unread.bytes += lane->pick_bytes;
    ++let_in[lane];
    return true;
  };
  std::vector<Pick> picks;
  group->Plan(budget, &picks, may_plan);
  for (const Pick& pick : picks) {
    Lane* lane = planning_.at({group, pick.job});
    if (auto it = let_in.find(lane); it != let_in.end()) --it->second;
    RequestPosition(lane, lane->stream->Plan(pick.id), actions);
  }
  // One let in whose epoch had no id left got no pick.
  for (const auto& [lane, unused] : let_in) {
    if (unused > 0)
      AddUnread(lane->job->uid, -static_cast<int64_t>(unused * lane->pick_bytes), actions);
  }
}

// Pins the position's sample in the cache (loading it if needed) until the
// position is done or its pins are given back.
void Lanes::RequestPosition(Lane* lane, uint64_t position, Actions* actions) {
  if (lane->released) return;  // requested again when a reader comes back
  lane->stream->MarkRequested(position);
  const SampleId id = lane->stream->IdAt(position);
  shared_renders_.Hold(id);  // dropped with the pin
  const JobSpec& spec = lane->job->spec;
  // A size-0 evaluation job takes the base image as it is.
  const bool render = spec.size > 0 || spec.augment.augmented();
  actions->Add([this, id, render, augment = spec.augment, size = spec.size, serial = lane->serial,
                epoch = lane->epoch(), position] {
    cache_->AcquireWithTier(id, [=, this](const SamplePtr& base, Tier tier) {
      if (!render || !base) {
        OnLoaded(serial, epoch, position, base, tier);
        return;
      }
      // A decode's callback runs on the loader thread that decoded it:
      // render there. A hit's runs on whichever thread planned, maybe a
      // reader's FUSE thread, where rendering would serialise that reader:
      // hand it to the loader threads ahead of queued decodes.
      if (LoaderPool::OnWorkerThread()) {
        Render(augment, size, serial, epoch, position, id, base, tier);
      } else {
        pool_->SubmitUrgent(
            [=, this] { Render(augment, size, serial, epoch, position, id, base, tier); });
      }
    });
  });
}

void Lanes::Render(const AugmentSpec& augment, uint32_t size, uint64_t serial, uint64_t epoch,
                   uint64_t position, SampleId id, const SamplePtr& base, Tier tier) {
  OnLoaded(serial, epoch, position,
           shared_renders_.Render(base, augment, size, epoch, id, rendered_bytes_), tier);
}

void Lanes::ReleasePins(Lane* lane, Actions* actions) {
  if (!lane->stream) return;
  ReleaseIds(lane->stream->ReleasePins(), actions);
}

void Lanes::ReleaseIds(std::vector<SampleId> ids, Actions* actions) {
  if (ids.empty()) return;
  actions->Add([this, ids = std::move(ids)] {
    for (SampleId id : ids) {
      cache_->Release(id);
      shared_renders_.Drop(id);
    }
  });
}

void Lanes::OnLoaded(uint64_t serial, uint64_t epoch, uint64_t position, const SamplePtr& sample,
                     Tier tier) {
  Actions actions;
  MutexLock lock(mu);
  auto it = by_serial_.find(serial);
  if (it == by_serial_.end()) return;
  Lane* lane = it->second;
  if (!lane->stream || !lane->stream->OnLoaded(epoch, position, sample, tier)) return;
  lane->group->Landed(lane->handle);  // the cache's figures count it now
  if (!sample) {
    ++lane->epoch_counts.skipped;
    ++lane->total_counts.skipped;
    for (Reader* r : lane->readers) {
      if (r->epoch == epoch) ++r->skipped;  // PadSkipped
    }
    AfterDone(lane, &actions);
  }
  ServeWaiters(lane, &actions);
}

void Lanes::AfterDone(Lane* lane, Actions* actions) {
  std::vector<SampleId> ids = lane->stream->TakeDoneIds();
  for (SampleId id : ids) lane->group->Done(lane->handle, id);
  if (PicksCharged(*lane)) {
    AddUnread(lane->job->uid, -static_cast<int64_t>(ids.size() * lane->pick_bytes), actions);
  }
  ReleaseIds(std::move(ids), actions);
  if (!lane->running()) {
    // Waiting readers get EOF from the caller's ServeWaiters().
    const std::string rank =
        lane->job->ranked() ? " rank " + std::to_string(lane->index) : std::string();
    spdlog::info("job {}{} ends epoch {}: {} delivered, {} skipped", lane->job->name, rank,
                 lane->epoch() - 1, lane->stream->delivered(), lane->stream->skipped());
    return;
  }
  Plan(lane->group, actions);
}

void Lanes::PadSkipped(Reader* r, Actions* actions) {
  if (!r->alone || !r->last_sample || r->skipped == 0 || !r->lane->job->spec.record_bytes()) {
    return;
  }
  RecordHeader h = r->last_header;
  h.flags |= kRecordRepeat;
  auto frame = std::make_shared<const RecordFrame>(
      FrameRecord(RecordFormat::kPlain, h, r->last_sample->pixels.get(), false));
  spdlog::debug("job {}: reader {} pads epoch {} with {} repeated records (skipped samples)",
                r->lane->job->name, r->id, r->epoch, r->skipped);
  for (; r->skipped > 0; --r->skipped) {
    r->pending.Push(r->last_sample, frame);
    NoteQueued(*r, static_cast<int64_t>(frame->bytes(h.payload_bytes())), actions);
  }
}

uint64_t Lanes::ReaderRecordsLeft(const Reader& r) const {
  return Unhanded(*r.lane, &r) + (r.alone && r.last_sample ? r.skipped : 0);
}

bool Lanes::ReaderAtEof(const Reader* r) const {
  const Lane* lane = r->lane;
  if (r->epoch < lane->epoch()) return true;  // its epoch is over
  return !lane->running() && EpochsOver(*lane);
}

bool Lanes::EpochsOver(const Lane& lane) {
  // No record could name the epoch after the last.
  if (lane.epoch() > kMaxRecordEpoch) return true;
  const uint64_t epochs = lane.job->spec.epochs;
  return epochs != 0 && lane.epoch() >= epochs;
}

uint64_t Lanes::Unhanded(const Lane& lane, const Reader* r) const {
  if (r ? ReaderAtEof(r) : !lane.running() && EpochsOver(lane)) return 0;
  const Job& job = *lane.job;
  if (lane.running()) return lane.stream->epoch_size() - lane.stream->done();
  const uint64_t full =
      job.ranked() ? RankShardSize(job.subset.cardinality(), job.spec.ranks, job.spec.drop_last)
                   : job.subset.cardinality();
  if (!lane.resume_epoch) return full;
  const Roaring* share = ElasticShare(job, lane, *lane.resume_epoch);
  const uint64_t ids = share ? share->cardinality() : full;
  return ids - std::min<uint64_t>(ids, lane.resume_skip.cardinality());
}

JobStatus Lanes::StatusOf(const Lane& lane) const {
  JobStatus st;
  const Job& job = *lane.job;
  const JobStream* stream = lane.stream.get();
  const bool between = stream && !stream->running() && !lane.resume_epoch;
  const uint64_t full =
      job.ranked() ? RankShardSize(job.subset.cardinality(), job.spec.ranks, job.spec.drop_last)
                   : job.subset.cardinality();
  st.subset_size = full;
  st.epoch = between && stream->epoch() > 0 ? stream->epoch() - 1 : lane.epoch();
  // A pending resume names an epoch not begun.
  if (!lane.resume_epoch) st.this_epoch = lane.epoch_counts;
  if (lane.resume_epoch) {
    const Roaring* share = ElasticShare(job, lane, *lane.resume_epoch);
    const uint64_t ids = share ? share->cardinality() : full;
    st.remaining = ids - std::min<uint64_t>(ids, lane.resume_skip.cardinality());
  } else if (stream && stream->running()) {
    st.remaining = stream->epoch_size() - stream->done();
  } else {
    st.remaining = between ? 0 : full;
  }
  st.readers = lane.readers.size();
  st.running = lane.running();
  st.epochs_completed = stream ? stream->epochs_completed() : 0;
  st.size = job.spec.size;
  st.window = job.spec.window;
  st.shared_picks = lane.group ? lane.group->SharedPicks(lane.handle) : 0;
  st.owner = job.uid;
  const auto now = std::chrono::steady_clock::now();
  const auto stall = LaneStall(lane, now);
  st.total = lane.total_counts;
  st.total.stall_seconds = Seconds(stall);
  if (!lane.resume_epoch) st.this_epoch.stall_seconds = Seconds(stall - lane.stalled_before_epoch);
  st.samples_per_s = lane.rate.Rate(now);
  return st;
}

bool Lanes::HeldByDrift(Lane* lane, std::chrono::steady_clock::time_point now) {
  if (!drift_bound_ || lane->peer_key == 0 || !lane->group) return false;
  // Past the planner's coupling horizon jobs share no picks (independent
  // shuffles share none at any distance). The horizon follows what RAM
  // holds (sampling/plan_group.h), and a leader waits at a quarter of it:
  // that leaves the laggards' read-ahead (a DataLoader holds several
  // batches) room: half still cost 1.43 decodes per distinct at RAM 5%
  // (docs/planner.md "Drift").
  const uint64_t horizon = lane->group->coupling_horizon();
  if (horizon == 0) return false;
  const uint64_t limit = horizon / 4;
  const uint64_t progress = lane->progress();
  const std::optional<double> pace = lane->drift.FreePace(now, progress);
  if (!pace) return false;  // too early to tell a faster job from drift
  bool ahead = false;
  for (auto it = planning_.lower_bound({lane->group, 0});
       it != planning_.end() && it->first.first == lane->group && !ahead; ++it) {
    Lane* peer = it->second;
    if (peer == lane || peer->peer_key != lane->peer_key || peer->released) continue;
    if (peer->waiting.empty() && !peer->drift.Active(now)) continue;  // stopped
    const uint64_t behind = peer->progress();
    // Past the horizon they share nothing anyway: a late or slower job.
    if (progress <= behind + limit || progress > behind + horizon) continue;
    const std::optional<double> peer_pace = peer->drift.FreePace(now, behind);
    ahead = peer_pace && *pace <= kSimilarPace * *peer_pace;
  }
  if (!ahead || !lane->drift.Hold(now)) return false;
  held_.insert(lane);
  return true;
}

void Lanes::EndHold(Lane* lane, std::chrono::steady_clock::time_point now) {
  held_.erase(lane);
  lane->drift.EndHold(now);
}

void Lanes::RetryHeld(Actions* actions) {
  const std::vector<Lane*> lanes(held_.begin(), held_.end());
  const auto now = std::chrono::steady_clock::now();
  for (Lane* lane : lanes) {
    if (lane->waiting.empty()) {
      EndHold(lane, now);  // its readers went away
    } else {
      ServeWaiters(lane, actions);
    }
  }
}

void Lanes::NoteQueued(const Reader& r, int64_t delta, Actions* actions) {
  if (delta != 0 && UnreadLimited(r.owner)) AddUnread(r.owner, delta, actions);
}

uint64_t Lanes::UnreadBytes(uint32_t uid) const {
  auto it = unread_.find(uid);
  return it == unread_.end() ? 0 : it->second.bytes;
}

void Lanes::UnchargeStream(Lane* lane, Actions* actions) {
  if (!lane->stream || !PicksCharged(*lane)) return;
  const uint64_t open = lane->stream->planned() - lane->stream->done();
  AddUnread(lane->job->uid, -static_cast<int64_t>(open * lane->pick_bytes), actions);
}

void Lanes::AddUnread(uint32_t uid, int64_t delta, Actions* actions) {
  auto it = unread_.try_emplace(uid).first;
  Unread& unread = it->second;
  unread.bytes = static_cast<uint64_t>(static_cast<int64_t>(unread.bytes) + delta);
  if (unread.bytes < unread_limit_.max_bytes && !unread.held_back.empty()) {
    const std::set<PlanGroup*> groups = std::move(unread.held_back);
    unread.held_back.clear();
    for (PlanGroup* group : groups) Plan(group, actions);
    return;  // Plan may have rehashed unread_
  }
  if (unread.bytes == 0 && unread.held_back.empty()) unread_.erase(it);
}

}  // namespace joaderfs
