// JobManager's reads of a sitting: readers open, read, are interrupted and
// close; the shards and elastic splits a reader's first read may need,
// made off the lock; and the idle release. The registry, the control
// writes and status are job_manager.cc.

#include "jobs/job_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <future>
#include <optional>

#include "common/rate_limited_log.h"

namespace joaderfs {

Status JobManager::OpenReader(const std::string& name, uint32_t uid, ReaderId* id,
                              std::optional<uint32_t> rank) {
  ActionsLock lock(mu_);
  Actions* actions = lock.actions();
  Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  if (job->ranked() != rank.has_value() || (rank && *rank >= job->lanes.size())) {
    return Status::NotFound("job " + name + " has no such stream");
  }
  // Reading consumes the job's samples: only its owner (or root) may.
  if (Status s = CheckJobOwner(name, job->uid, uid); !s.ok()) return s;
  // Each reader may hold a delivery it has begun to read: a user's are
  // bounded.
  if (const uint64_t open = usage_.contains(uid) ? usage_[uid].readers : 0;
      Limited(uid) && open >= options_.limits.max_readers) {
    return Status::TooMany("uid " + std::to_string(uid) + " has " + std::to_string(open) +
                           " readers open, the most max_readers_per_user=" +
                           std::to_string(options_.limits.max_readers) + " allows");
  }
  Lane* lane = job->lanes[rank.value_or(0)].get();
  auto reader = std::make_unique<Reader>();
  reader->id = next_reader_++;
  reader->lane = lane;
  reader->owner = job->uid;
  reader->epoch = lane->epoch();
  lane->readers.insert(reader.get());
  *id = reader->id;
  reader_uids_[reader->id] = uid;
  AddUsage(uid, 0, 0, 1);
  // Per open, not per sample: who reads when, for a stream that stalls.
  spdlog::debug("job {} stream {}: reader {} opened by uid {} in epoch {} ({} open)", name,
                lane->index, reader->id, uid, reader->epoch, lane->readers.size());
  readers_[reader->id] = std::move(reader);
  lanes_.ReaderOpened(lane);
  // Only a reader opened between epochs begins one (a reader's epoch is the
  // one it opened in): its job's shards of that epoch are made now, so that
  // StartEpoch() finds them instead of sorting under the lock.
  const uint64_t epochs = job->spec.epochs;
  if (job->ranked() && !lane->running() && (epochs == 0 || lane->epoch() < epochs)) {
    auto split = std::make_shared<std::packaged_task<std::vector<Roaring>()>>();
    std::shared_future<std::vector<Roaring>> shards = ShardsOf(job, lane->epoch(), split.get());
    // The sort runs here if this reader is the first to need them, else
    // this open waits for the reader that makes them.
    actions->Add([split, shards] {
      if (split->valid()) (*split)();
      shards.wait();
    });
  }
  return Status::Ok();
}

std::optional<uint64_t> JobManager::StreamSize(const std::string& name,
                                               std::optional<uint32_t> rank) const {
  MutexLock lock(mu_);
  const Job* job = FindJob(name);
  if (!job || job->ranked() != rank.has_value() || (rank && *rank >= job->lanes.size())) {
    return std::nullopt;
  }
  const std::optional<uint64_t> record = job->spec.record_bytes();
  if (!record) return std::nullopt;
  return *record * lanes_.Unhanded(*job->lanes[rank.value_or(0)], nullptr);
}

std::optional<uint64_t> JobManager::ReaderUnread(ReaderId id) const {
  MutexLock lock(mu_);
  auto it = readers_.find(id);
  if (it == readers_.end() || !it->second->lane) return std::nullopt;
  const Reader& r = *it->second;
  const std::optional<uint64_t> record = r.lane->job->spec.record_bytes();
  if (!record) return std::nullopt;
  return r.pending.unread_bytes() + *record * lanes_.ReaderRecordsLeft(r);
}

void JobManager::CloseReader(ReaderId id) {
  ActionsLock lock(mu_);
  Actions* actions = lock.actions();
  auto it = readers_.find(id);
  if (it == readers_.end()) return;
  Reader* r = it->second.get();
  if (r->waiting) {
    lanes_.EndStall(r);
    actions->Add([reply = std::move(r->reply)] { reply(Status::Interrupted(), {}); });
  }
  if (Lane* lane = r->lane) {
    lane->readers.erase(r);
    spdlog::debug("job {} stream {}: reader {} closed ({} open)", lane->job->name, lane->index, id,
                  lane->readers.size());
    std::erase(lane->waiting, r);
    if (lane->readers.empty()) {
      lane->idle_since = std::chrono::steady_clock::now();
      lanes_.LastReaderClosed(lane, actions);
    }
    if (!r->pending.empty()) {
      // Rate-limited per job: a reader killed in a loop would flood the log.
      Warnings().Warn("lost records, job " + lane->job->name,
                      "job {}: a reader closed with {} records unread; they are lost for epoch {} "
                      "(to read the whole epoch again: echo epoch={} > jobs/{}/resume)",
                      lane->job->name, r->pending.records(), r->epoch, r->epoch, lane->job->name);
    }
  }
  lanes_.NoteQueued(*r, -static_cast<int64_t>(r->pending.held_bytes()), actions);
  if (auto owner = reader_uids_.find(id); owner != reader_uids_.end()) {
    AddUsage(owner->second, 0, 0, -1);
    reader_uids_.erase(owner);
  }
  readers_.erase(it);
}

void JobManager::Read(ReaderId id, size_t max_bytes, uint64_t token, ReadReply reply) {
  ActionsLock lock(mu_);
  Actions* actions = lock.actions();
  auto it = readers_.find(id);
  if (it == readers_.end() || max_bytes == 0) {
    actions->Add([reply = std::move(reply)] { reply(Status::Ok(), {}); });
    return;
  }
  Reader* r = it->second.get();
  if (r->waiting) {
    // The kernel serialises reads of one open file; this guards the reply
    // of the read in flight should that ever change.
    actions->Add([reply = std::move(reply)] { reply(Status::Busy("a read is in flight"), {}); });
    return;
  }
  if (r->interrupted_token == std::optional<uint64_t>(token)) {
    actions->Add([reply = std::move(reply)] { reply(Status::Interrupted(), {}); });
    return;
  }
  r->token = token;
  r->max_bytes = max_bytes;
  r->reply = std::move(reply);
  r->waiting = true;
  if (r->pending.empty() && r->lane && !lanes_.ReaderAtEof(r)) {
    Lane* lane = r->lane;
    if (!lane->job->started) {
      lane->job->started = true;
      SaveJob(*lane->job);
    }
    lanes_.Wake(lane, actions);
  }
  if (!lanes_.TryServe(r, actions)) {
    lanes_.BeginStall(r);
    r->lane->waiting.push_back(r);
  }
  if (r->lane) lanes_.ServeWaiters(r->lane, actions);  // the epoch may have ended
}

void JobManager::Interrupt(ReaderId id, uint64_t token) {
  ActionsLock lock(mu_);
  Actions* actions = lock.actions();
  auto it = readers_.find(id);
  if (it == readers_.end()) return;
  Reader* r = it->second.get();
  if (r->waiting && r->token == token) {
    lanes_.EndStall(r);
    r->waiting = false;
    if (r->lane) std::erase(r->lane->waiting, r);
    actions->Add([reply = std::move(r->reply)] { reply(Status::Interrupted(), {}); });
  } else {
    r->interrupted_token = token;
  }
}

void JobManager::MakeShardsUnlocked(const std::string& name, uint32_t uid, uint64_t epoch) {
  std::packaged_task<std::vector<Roaring>()> split;
  std::shared_future<std::vector<Roaring>> shards;
  {
    MutexLock lock(mu_);
    Job* job = FindJob(name);
    if (!job || !job->ranked() || !MayUseJob(uid, job->uid) ||
        (job->spec.epochs != 0 && epoch >= job->spec.epochs)) {
      return;
    }
    shards = ShardsOf(job, epoch, &split);
  }
  if (split.valid()) split();
  shards.wait();
}

ElasticSplit JobManager::SplitElasticUnlocked(const std::string& name, uint32_t uid, uint64_t epoch,
                                              const Roaring& consumed) {
  ElasticSplit split;
  {
    MutexLock lock(mu_);
    const Job* job = FindJob(name);
    if (!job || !job->ranked() || !MayUseJob(uid, job->uid) ||
        (job->spec.epochs != 0 && epoch >= job->spec.epochs)) {
      return split;  // refused, or split under the lock if the job changes
    }
    split = PrepareElastic(*job, epoch, consumed);
  }
  split.Split();
  return split;
}

uint64_t JobManager::UnreadBytes(uint32_t uid) const {
  MutexLock lock(mu_);
  return lanes_.UnreadBytes(uid);
}

void JobManager::ReleaseIdleJobs() {
  ActionsLock lock(mu_);
  Actions* actions = lock.actions();
  const auto now = std::chrono::steady_clock::now();
  for (auto& [name, job] : jobs_) {
    for (const auto& lane : job->lanes) {
      if (!lane->running() || lane->released || !lane->readers.empty() ||
          now - lane->idle_since < options_.idle_timeout) {
        continue;
      }
      lanes_.Release(lane.get(), actions);
      spdlog::info("job {} stream {} has had no reader for {}s: released its planned samples", name,
                   lane->index, options_.idle_timeout.count());
    }
  }
  lanes_.RetryHeld(actions);  // a peer went quiet, or a budget refilled
  actions->Add([this] { shared_renders_.Trim(); });
}

}  // namespace joaderfs
