// Lanes: serving readers, their stall and rate figures, and status
// (jobs/lanes.h).

#include "jobs/lanes.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "records/record.h"

namespace joaderfs {

namespace {

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
    if (lane->running() && lane->positions->PeekReady() &&
        drift_hold_.Holds(lane, planning_, starting_, now)) {
      return false;
    }
    // Hand ready records to this reader: at least one, then as many as fit.
    uint64_t bytes = 0;
    std::vector<SampleId> handed;
    const uint64_t epoch = lane->epoch();
    while (lane->running()) {
      const std::optional<EpochPositions::Ready> next = lane->positions->PeekReady();
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
      auto frame = FrameRecord(spec.format, h, spec.augment.flip > 0);
      const uint64_t record_bytes = frame->bytes(h.payload_bytes());
      if (bytes > 0 && bytes + record_bytes > r->max_bytes) break;
      bytes += record_bytes;
      const EpochPositions::Ready ready = *lane->positions->TakeReady();
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
    drift_hold_.End(lane, now);
    // Its peers held by the drift bound may go on now.
    if (!drift_hold_.empty()) {
      actions->Add([this] {
        ActionsLock lock(*owner_lock_);
        RetryHeld(lock.actions());
      });
    }
    SaveHandedOut(*lane, epoch, std::move(handed), actions);
  }
  lane->drift.NoteServed(std::chrono::steady_clock::now(), lane->progress());
  const uint64_t queued = r->pending.held_bytes();
  auto data = r->pending.Take(r->max_bytes);
  NoteQueued(*r, static_cast<int64_t>(r->pending.held_bytes()) - static_cast<int64_t>(queued),
             actions);
  EndStall(r);
  r->waiting = false;
  actions->Add([reply = std::move(r->reply), data] {
    data->FinishChecksums();  // reads every pixel: outside the lock
    reply(Status::Ok(), data->iov);
  });
  return true;
}

void Lanes::ServeWaiters(Lane* lane, Actions* actions) {
  while (!lane->waiting.empty()) {
    Reader* r = lane->waiting.front();
    if (!TryServe(r, actions)) return;
    lane->waiting.pop_front();
  }
}

void Lanes::RetryHeld(Actions* actions) {
  const std::vector<Lane*> lanes = drift_hold_.held();
  const auto now = std::chrono::steady_clock::now();
  for (Lane* lane : lanes) {
    if (lane->waiting.empty()) {
      drift_hold_.End(lane, now);  // its readers went away
    } else {
      ServeWaiters(lane, actions);
    }
  }
}

void Lanes::PadSkipped(Reader* r, Actions* actions) {
  if (!r->alone || !r->last_sample || r->skipped == 0 || !r->lane->job->spec.record_bytes()) {
    return;
  }
  RecordHeader h = r->last_header;
  h.flags |= kRecordRepeat;
  auto frame = FrameRecord(RecordFormat::kPlain, h, false);
  spdlog::debug("job {}: reader {} pads epoch {} with {} repeated records (skipped samples)",
                r->lane->job->name, r->id, r->epoch, r->skipped);
  for (; r->skipped > 0; --r->skipped) {
    r->pending.Push(r->last_sample, frame);
    NoteQueued(*r, static_cast<int64_t>(frame->bytes(h.payload_bytes())), actions);
  }
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

uint64_t Lanes::ReaderRecordsLeft(const Reader& r) const {
  return Unhanded(*r.lane, &r) + (r.alone && r.last_sample ? r.skipped : 0);
}

uint64_t Lanes::Unhanded(const Lane& lane, const Reader* r) const {
  if (r ? ReaderAtEof(r) : !lane.running() && EpochsOver(lane)) return 0;
  const Job& job = *lane.job;
  if (lane.running()) return lane.positions->epoch_size() - lane.positions->done();
  const uint64_t full = FullEpochSize(job);
  if (!lane.resume_epoch) return full;
  const Roaring* share = ElasticShare(job, lane, *lane.resume_epoch);
  const uint64_t ids = share ? share->cardinality() : full;
  return ids - std::min<uint64_t>(ids, lane.resume_skip.cardinality());
}

void Lanes::BeginStall(Reader* r) { r->stalled_since = std::chrono::steady_clock::now(); }

void Lanes::EndStall(Reader* r) {
  if (!r->stalled_since) return;
  const auto waited = std::chrono::steady_clock::now() - *r->stalled_since;
  r->stalled_since.reset();
  stalled_ += waited;
  if (r->lane) r->lane->stalled += waited;
}

double Lanes::StallSeconds() const {
  const auto now = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration stall = stalled_;
  for (const auto& [serial, lane] : by_serial_) stall += LaneStall(*lane, now) - lane->stalled;
  return Seconds(stall);
}

JobStatus Lanes::StatusOf(const Lane& lane) const {
  JobStatus st;
  const Job& job = *lane.job;
  const EpochPositions* positions = lane.positions.get();
  const bool between = positions && !positions->running() && !lane.resume_epoch;
  const uint64_t full = FullEpochSize(job);
  st.subset_size = full;
  st.epoch = between && positions->epoch() > 0 ? positions->epoch() - 1 : lane.epoch();
  // A pending resume names an epoch not begun.
  if (!lane.resume_epoch) st.this_epoch = lane.epoch_counts;
  if (lane.resume_epoch) {
    const Roaring* share = ElasticShare(job, lane, *lane.resume_epoch);
    const uint64_t ids = share ? share->cardinality() : full;
    st.remaining = ids - std::min<uint64_t>(ids, lane.resume_skip.cardinality());
  } else if (positions && positions->running()) {
    st.remaining = positions->epoch_size() - positions->done();
  } else {
    st.remaining = between ? 0 : full;
  }
  st.readers = lane.readers.size();
  st.running = lane.running();
  st.epochs_completed = positions ? positions->epochs_completed() : 0;
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

}  // namespace joaderfs
