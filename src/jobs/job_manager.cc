#include "jobs/job_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <future>
#include <optional>
#include <set>

#include "common/parse.h"
#include "common/printable.h"
#include "jobs/job_stream.h"
#include "jobs/rank_split.h"
#include "jobs/record.h"
#include "jobs/record_queue.h"

namespace joaderfs {

// Work decided under the lock and done after it is dropped: cache requests
// (whose callbacks may re-enter the manager) and replies to readers.
class JobManager::Actions {
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

namespace {

// If the first non-blank line of `text` starts with `key`, consumes it and
// sets `value` to the number after the key (empty if it is not one).
bool TakeNumberLine(std::string_view* text, std::string_view key, std::optional<uint64_t>* value) {
  const size_t start = text->find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos || !text->substr(start).starts_with(key)) return false;
  const size_t end = std::min(text->find('\n', start), text->size());
  std::string_view number = text->substr(start + key.size(), end - start - key.size());
  while (!number.empty() && (number.back() == '\r' || number.back() == ' ')) {
    number.remove_suffix(1);
  }
  *value = ParseUint(number);
  text->remove_prefix(std::min(end + 1, text->size()));
  return true;
}

}  // namespace

// One stream of a job: `next`, or `next.R` of rank R.
struct JobManager::Lane {
  Job* job = nullptr;
  StreamIndex index = 0;  // the rank; 0 for `next`
  uint64_t serial = 0;    // names the stream's loads; new after a resume

  PlanGroup* group = nullptr;  // set at the first epoch, with the stream
  JobHandle handle = 0;
  std::unique_ptr<JobStream> stream;

  std::set<Reader*> readers;
  std::deque<Reader*> waiting;  // readers with a pending Read, oldest first
  std::chrono::steady_clock::time_point idle_since = std::chrono::steady_clock::now();
  bool released = false;  // idle: planned samples given back

  // Set by `resume` or a restart: the epoch the next read begins, and the
  // ids of it already consumed (or handed out before the restart).
  std::optional<uint64_t> resume_epoch;
  Roaring resume_skip;
  bool resume_written = false;     // by the resume file, not a restart
  uint64_t delivered_earlier = 0;  // by streams a resume replaced

  bool running() const { return stream && stream->running(); }
  uint64_t epoch() const { return NextEpoch(*this); }
};

struct JobManager::Job {
  std::string name;
  uint32_t uid = 0;
  JobSpec spec;
  Roaring subset;
  bool started = false;                      // read from (or resumed): the spec is fixed
  std::vector<std::unique_ptr<Lane>> lanes;  // one, or one per rank
  // The shards of the latest epochs (ranked jobs), by epoch, kept for the
  // ranks that begin the epoch after the first: splitting costs a sort of
  // the subset. Made off the lock (ShardsOf); a future until then.
  std::map<uint64_t, std::shared_future<std::vector<Roaring>>> splits;

  bool ranked() const { return spec.ranks > 0; }
};

struct JobManager::Reader {
  ReaderId id = 0;
  Lane* lane = nullptr;  // null once the job is removed
  uint64_t epoch = 0;
  RecordQueue pending;
  std::optional<uint64_t> interrupted_token;  // of a read not yet issued
  bool waiting = false;
  uint64_t token = 0;
  size_t max_bytes = 0;
  ReadReply reply;
};

JobManager::JobManager(const Catalog* catalog, SampleCache* cache, LoaderPool* pool,
                       PlanGroups* groups, JobManagerOptions options, JobStore* store)
    : catalog_(catalog),
      cache_(cache),
      pool_(pool),
      groups_(groups),
      options_(options),
      default_spec_([&] {
        JobSpec spec;
        spec.size = options.default_size;
        return spec;
      }()),
      store_(store) {}

JobManager::~JobManager() = default;

JobManager::Job* JobManager::FindJob(const std::string& name) const {
  auto it = jobs_.find(name);
  return it == jobs_.end() ? nullptr : it->second.get();
}

Status JobManager::CreateJob(const std::string& name, uint32_t uid) {
  if (!IsValidJobName(name)) {
    return Status::InvalidArgument("job id '" + name +
                                   "' is not 1-64 characters of [A-Za-z0-9._-]");
  }
  MutexLock lock(mu_);
  if (jobs_.count(name)) return Status::Exists("job " + name + " exists");
  auto job = std::make_unique<Job>();
  job->name = name;
  job->uid = uid;
  job->spec = default_spec_;
  job->spec.augment.seed = JobSeed(options_.seed, name);
  job->subset = ResolveSubset(job->spec.subset, *catalog_);
  MakeLanes(job.get());
  SaveJob(*job);
  jobs_[name] = std::move(job);
  spdlog::info("job {} created by uid {}", name, uid);
  return Status::Ok();
}

Status JobManager::RestoreJob(const StoredJob& stored) {
  if (!IsValidJobName(stored.name)) return Status::InvalidArgument("bad job id");
  // An ids-file subset is saved apart: its spec line names no subset.
  std::string text;
  for (size_t i = 0; i < stored.spec.size();) {
    const size_t end = std::min(stored.spec.find('\n', i), stored.spec.size());
    const std::string_view line = std::string_view(stored.spec).substr(i, end - i);
    if (line != "subset=ids") text.append(line).push_back('\n');
    i = end + 1;
  }
  JobSpec spec;
  Status s = ParseJobSpec(text, *catalog_, default_spec_, &spec);
  if (!s.ok()) return s;
  Roaring subset = ResolveSubset(spec.subset, *catalog_);
  if (stored.has_ids) {
    if (stored.ids.isEmpty() || stored.ids.maximum() >= catalog_->size()) {
      return Status::InvalidArgument("its ids lie outside the dataset");
    }
    subset = stored.ids;
    spec.subset.kind = SubsetSpec::Kind::kIds;
    spec.subset.text = "ids";
  }
  s = CheckRanksFit(spec, subset);
  if (!s.ok()) return s;
  MutexLock lock(mu_);
  if (jobs_.count(stored.name)) return Status::Exists("job " + stored.name + " exists");
  auto job = std::make_unique<Job>();
  job->name = stored.name;
  job->uid = stored.uid;
  job->spec = std::move(spec);
  job->subset = std::move(subset);
  job->started = stored.fixed;
  MakeLanes(job.get());
  for (const StoredStream& st : stored.streams) {
    if (st.index >= job->lanes.size()) continue;
    Lane* lane = job->lanes[st.index].get();
    SetResume(lane, st.epoch, st.handed_out);
  }
  spdlog::info("job {} of uid {} restored: {} streams under way", stored.name, stored.uid,
               stored.streams.size());
  jobs_[stored.name] = std::move(job);
  return Status::Ok();
}

void JobManager::MakeLanes(Job* job) {
  for (const auto& lane : job->lanes) lanes_by_serial_.erase(lane->serial);
  job->lanes.clear();
  job->splits.clear();
  const uint32_t n = std::max<uint32_t>(job->spec.ranks, 1);
  for (uint32_t i = 0; i < n; ++i) {
    auto lane = std::make_unique<Lane>();
    lane->job = job;
    lane->index = i;
    lane->serial = next_serial_++;
    lanes_by_serial_[lane->serial] = lane.get();
    job->lanes.push_back(std::move(lane));
  }
}

void JobManager::SaveJob(const Job& job) {
  if (!store_) return;
  const bool ids = job.spec.subset.kind == SubsetSpec::Kind::kIds;
  store_->PutJob(job.name, job.uid, job.started, job.spec.ToString(), ids ? &job.subset : nullptr);
}

Status JobManager::CheckRanksFit(const JobSpec& spec, const Roaring& subset) {
  if (spec.ranks == 0 || RankShardSize(subset.cardinality(), spec.ranks, spec.drop_last) > 0) {
    return Status::Ok();
  }
  return Status::InvalidArgument("ranks=" + std::to_string(spec.ranks) +
                                 " with drop_last=1 leaves no sample per rank of a subset of " +
                                 std::to_string(subset.cardinality()));
}

Status JobManager::RemoveJob(const std::string& name, uint32_t uid) {
  Actions actions;
  MutexLock lock(mu_);
  Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  if (uid != 0 && uid != job->uid) return Status::Permission("job " + name + " is not yours");
  uint64_t delivered = 0;
  for (const auto& lane : job->lanes) {
    if (lane->group) {
      lane->group->RemoveJob(lane->handle);
      planning_.erase({lane->group, lane->handle});
    }
    ReleasePins(lane.get(), &actions);
    for (Reader* r : lane->readers) {
      r->lane = nullptr;
      if (r->waiting) {
        r->waiting = false;
        actions.Add([reply = std::move(r->reply)] { reply(Status::Gone("job removed"), {}); });
      }
    }
    delivered += lane->delivered_earlier + (lane->stream ? lane->stream->delivered_total() : 0);
    lanes_by_serial_.erase(lane->serial);
  }
  actions.Add([this] { cache_->RefreshNeeds(); });  // its ids are needed less
  if (store_) store_->RemoveJob(name);
  spdlog::info("job {} removed after {} samples", name, delivered);
  jobs_.erase(name);
  return Status::Ok();
}

std::vector<std::string> JobManager::JobNames() const {
  MutexLock lock(mu_);
  std::vector<std::string> names;
  for (const auto& [name, job] : jobs_) names.push_back(name);
  return names;
}

Status JobManager::JobOwner(const std::string& name, uint32_t* uid) const {
  MutexLock lock(mu_);
  const Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  *uid = job->uid;
  return Status::Ok();
}

Status JobManager::GetSpec(const std::string& name, std::string* text) const {
  MutexLock lock(mu_);
  const Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  *text = job->spec.ToString();
  return Status::Ok();
}

Status JobManager::CheckWritableLocked(const Job* job, uint32_t uid) const {
  if (uid != 0 && uid != job->uid) return Status::Permission("job " + job->name + " is not yours");
  if (job->started) return Status::Busy("job " + job->name + " has started; its spec is fixed");
  return Status::Ok();
}

Status JobManager::CheckWritable(const std::string& name, uint32_t uid) const {
  MutexLock lock(mu_);
  const Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  return CheckWritableLocked(job, uid);
}

Status JobManager::SetSpec(const std::string& name, uint32_t uid, std::string_view text) {
  if (text.size() > kMaxSpecBytes) {
    return Status::InvalidArgument("spec: " + std::to_string(text.size()) + " bytes, at most " +
                                   std::to_string(kMaxSpecBytes));
  }
  // Parse and resolve before taking the lock: a long spec must not stall
  // the other jobs. The base's subset is a marker: a spec that names no
  // subset keeps one set through the ids file.
  JobSpec base = default_spec_;
  base.subset.kind = SubsetSpec::Kind::kIds;
  base.augment.seed = JobSeed(options_.seed, name);
  JobSpec spec;
  Status s = ParseJobSpec(text, *catalog_, base, &spec);
  if (!s.ok()) return s;
  // Each stream may plan one delivery past the RAM budget: a delivery over
  // PlanOverdraft() bytes would make that margin unbounded.
  s = CheckSizeFitsBudget(spec.size, cache_->budget());
  if (!s.ok()) return Status::InvalidArgument("spec: " + s.message());
  const bool names_subset = spec.subset.kind != SubsetSpec::Kind::kIds;
  if (!names_subset) spec.subset = default_spec_.subset;
  Roaring subset = ResolveSubset(spec.subset, *catalog_);
  MutexLock lock(mu_);
  Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  s = CheckWritableLocked(job, uid);
  if (!s.ok()) return s;
  const bool keeps_ids = !names_subset && job->spec.subset.kind == SubsetSpec::Kind::kIds;
  s = CheckRanksFit(spec, keeps_ids ? job->subset : subset);
  if (!s.ok()) return s;
  const bool new_lanes = spec.ranks != job->spec.ranks;
  if (new_lanes) {
    for (const auto& lane : job->lanes) {
      if (!lane->readers.empty()) {
        return Status::Busy("job " + name + " has open readers; ranks= cannot change");
      }
    }
  }
  if (keeps_ids) {
    spec.subset = job->spec.subset;  // the ids file's subset stays
  } else {
    job->subset = std::move(subset);
  }
  job->spec = std::move(spec);
  job->splits.clear();  // made for the old subset or drop_last
  if (new_lanes) MakeLanes(job);
  SaveJob(*job);
  spdlog::info("job {} spec: {} ({} samples)", name, Printable(text), job->subset.cardinality());
  return Status::Ok();
}

Status JobManager::SetIds(const std::string& name, uint32_t uid, std::string_view text) {
  Roaring ids;
  Status s = ParseIdList(text, *catalog_, &ids);
  if (!s.ok()) return s;
  return SetIdSubset(name, uid, std::move(ids));
}

Status JobManager::SetIdSubset(const std::string& name, uint32_t uid, Roaring ids) {
  if (ids.isEmpty()) return Status::InvalidArgument("ids: no sample listed");
  ids.runOptimize();
  MutexLock lock(mu_);
  Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  Status s = CheckWritableLocked(job, uid);
  if (!s.ok()) return s;
  s = CheckRanksFit(job->spec, ids);
  if (!s.ok()) return s;
  job->subset = std::move(ids);
  job->splits.clear();
  job->spec.subset.kind = SubsetSpec::Kind::kIds;
  job->spec.subset.text = "ids";  // what was written to the ids file
  SaveJob(*job);
  spdlog::info("job {} subset from ids file: {} samples", name, job->subset.cardinality());
  return Status::Ok();
}

Status JobManager::Resume(const std::string& name, uint32_t uid, std::string_view text) {
  // epoch=E, then an optional rank=R, then the ids: parsed outside the lock.
  std::optional<uint64_t> epoch, rank;
  if (!TakeNumberLine(&text, "epoch=", &epoch) || !epoch) {
    return Status::InvalidArgument("resume: expected epoch=E on the first line");
  }
  if (TakeNumberLine(&text, "rank=", &rank) && !rank) {
    return Status::InvalidArgument("resume: rank= expects a number");
  }
  Roaring consumed;
  Status s = ParseIdList(text, *catalog_, &consumed);
  if (!s.ok()) return s;
  MakeShardsUnlocked(name, uid, *epoch);
  Actions actions;
  MutexLock lock(mu_);
  Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  if (uid != 0 && uid != job->uid) return Status::Permission("job " + name + " is not yours");
  if (rank && (!job->ranked() || *rank >= job->lanes.size())) {
    return Status::InvalidArgument("resume: job " + name + " has no rank " + std::to_string(*rank));
  }
  if (job->spec.epochs != 0 && *epoch >= job->spec.epochs) {
    return Status::InvalidArgument("resume: epoch " + std::to_string(*epoch) +
                                   " is past epochs=" + std::to_string(job->spec.epochs));
  }
  std::vector<Lane*> lanes;
  for (const auto& lane : job->lanes) {
    if (rank && lane->index != *rank) continue;
    if (!lane->readers.empty()) {
      return Status::Busy("resume: job " + name + " has open readers");
    }
    lanes.push_back(lane.get());
  }
  for (Lane* lane : lanes) {
    // A stream not yet read since the last resume of the same epoch adds
    // these ids to it.
    const bool adds = lane->resume_written && lane->resume_epoch == epoch;
    ResetLane(lane, &actions);
    SetResume(lane, *epoch, adds ? lane->resume_skip | consumed : consumed);
    lane->resume_written = true;
    if (store_) store_->StartEpoch(name, lane->index, *lane->resume_epoch, lane->resume_skip);
  }
  actions.Add([this] { cache_->RefreshNeeds(); });
  job->started = true;
  SaveJob(*job);
  spdlog::info("job {} resumes epoch {}{}: {} ids consumed", name, *epoch,
               rank ? " for rank " + std::to_string(*rank) : "", consumed.cardinality());
  return Status::Ok();
}

Status JobManager::Ranks(const std::string& name, uint32_t* ranks) const {
  MutexLock lock(mu_);
  const Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  *ranks = job->spec.ranks;
  return Status::Ok();
}

Status JobManager::OpenReader(const std::string& name, uint32_t uid, ReaderId* id,
                              std::optional<uint32_t> rank) {
  Actions actions;
  MutexLock lock(mu_);
  Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  if (job->ranked() != rank.has_value() || (rank && *rank >= job->lanes.size())) {
    return Status::NotFound("job " + name + " has no such stream");
  }
  // Reading consumes the job's samples: only its owner (or root) may.
  if (uid != 0 && uid != job->uid) return Status::Permission("job " + name + " is not yours");
  Lane* lane = job->lanes[rank.value_or(0)].get();
  auto reader = std::make_unique<Reader>();
  reader->id = next_reader_++;
  reader->lane = lane;
  reader->epoch = lane->epoch();
  lane->readers.insert(reader.get());
  *id = reader->id;
  readers_[reader->id] = std::move(reader);
  // Only a reader opened between epochs begins one (a reader's epoch is the
  // one it opened in): its job's shards of that epoch are made now, so that
  // StartEpoch() finds them instead of sorting under the lock.
  const uint64_t epochs = job->spec.epochs;
  if (job->ranked() && !lane->running() && (epochs == 0 || NextEpoch(*lane) < epochs)) {
    auto split = std::make_shared<std::packaged_task<std::vector<Roaring>()>>();
    std::shared_future<std::vector<Roaring>> shards = ShardsOf(job, NextEpoch(*lane), split.get());
    // The sort runs here if this reader is the first to need them, else
    // this open waits for the reader that makes them.
    actions.Add([split, shards] {
      if (split->valid()) (*split)();
      shards.wait();
    });
  }
  return Status::Ok();
}

void JobManager::CloseReader(ReaderId id) {
  Actions actions;
  MutexLock lock(mu_);
  auto it = readers_.find(id);
  if (it == readers_.end()) return;
  Reader* r = it->second.get();
  if (r->waiting) {
    actions.Add([reply = std::move(r->reply)] { reply(Status::Interrupted(), {}); });
  }
  if (Lane* lane = r->lane) {
    lane->readers.erase(r);
    std::erase(lane->waiting, r);
    if (lane->readers.empty()) lane->idle_since = std::chrono::steady_clock::now();
    if (!r->pending.empty()) {
      spdlog::warn("job {}: a reader closed with {} records unread; they are lost for epoch {}",
                   lane->job->name, r->pending.records(), r->epoch);
    }
  }
  readers_.erase(it);
}

uint64_t JobManager::NextEpoch(const Lane& lane) {
  if (lane.resume_epoch) return *lane.resume_epoch;
  return lane.stream ? lane.stream->epoch() : 0;
}

bool JobManager::ReaderAtEof(const Reader* r) const {
  const Lane* lane = r->lane;
  if (r->epoch < lane->epoch()) return true;  // its epoch is over
  if (lane->running()) return false;
  const uint64_t epochs = lane->job->spec.epochs;
  return epochs != 0 && NextEpoch(*lane) >= epochs;
}

void JobManager::Read(ReaderId id, size_t max_bytes, uint64_t token, ReadReply reply) {
  Actions actions;
  MutexLock lock(mu_);
  auto it = readers_.find(id);
  if (it == readers_.end() || max_bytes == 0) {
    actions.Add([reply = std::move(reply)] { reply(Status::Ok(), {}); });
    return;
  }
  Reader* r = it->second.get();
  if (r->waiting) {
    // The kernel serialises reads of one open file; this guards the reply
    // of the read in flight should that ever change.
    actions.Add([reply = std::move(reply)] { reply(Status::Busy("a read is in flight"), {}); });
    return;
  }
  if (r->interrupted_token == std::optional<uint64_t>(token)) {
    actions.Add([reply = std::move(reply)] { reply(Status::Interrupted(), {}); });
    return;
  }
  r->token = token;
  r->max_bytes = max_bytes;
  r->reply = std::move(reply);
  r->waiting = true;
  if (r->pending.empty() && r->lane && !ReaderAtEof(r)) {
    Lane* lane = r->lane;
    if (!lane->job->started) {
      lane->job->started = true;
      SaveJob(*lane->job);
    }
    if (!lane->running()) StartEpoch(lane, &actions);
    if (lane->released) {
      lane->released = false;
      lane->group->SetPaused(lane->handle, false);
      const std::vector<uint64_t> positions = lane->stream->Unrequested();
      spdlog::info("job {} is read again: fetching its {} planned samples", lane->job->name,
                   positions.size());
      for (uint64_t p : positions) RequestPosition(lane, p, &actions);
    }
  }
  if (!TryServe(r, &actions)) r->lane->waiting.push_back(r);
  if (r->lane) ServeWaiters(r->lane, &actions);  // the epoch may have ended
}

void JobManager::Interrupt(ReaderId id, uint64_t token) {
  Actions actions;
  MutexLock lock(mu_);
  auto it = readers_.find(id);
  if (it == readers_.end()) return;
  Reader* r = it->second.get();
  if (r->waiting && r->token == token) {
    r->waiting = false;
    if (r->lane) std::erase(r->lane->waiting, r);
    actions.Add([reply = std::move(r->reply)] { reply(Status::Interrupted(), {}); });
  } else {
    r->interrupted_token = token;
  }
}

// Replies to `r`'s pending read if it can be answered now: with its unread
// bytes, with records ready in its job's window, with EOF, or with Gone.
bool JobManager::TryServe(Reader* r, Actions* actions) {
  Lane* lane = r->lane;
  if (!lane) {
    r->waiting = false;
    actions->Add([reply = std::move(r->reply)] { reply(Status::Gone("job removed"), {}); });
    return true;
  }
  if (r->pending.empty()) {
    if (ReaderAtEof(r)) {
      r->waiting = false;
      actions->Add([reply = std::move(r->reply)] { reply(Status::Ok(), {}); });
      return true;
    }
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
      h.reserved = next->sample->record_box;
      if (bytes > 0 && bytes + h.record_bytes() > r->max_bytes) break;
      bytes += h.record_bytes();
      r->pending.Push(lane->stream->TakeReady()->sample, h);
      handed.push_back(next->id);
      ++delivered_;
      AfterDone(lane, actions);
    }
    if (r->pending.empty()) return false;
    // Saved before the reply leaves: a crash of the daemon loses no hand-out.
    if (store_) {
      actions->Add(
          [this, name = lane->job->name, index = lane->index, epoch, handed = std::move(handed)] {
            store_->AddHandedOut(name, index, epoch, handed);
          });
    }
  }
  auto data = r->pending.Take(r->max_bytes);
  r->waiting = false;
  actions->Add([reply = std::move(r->reply), data] { reply(Status::Ok(), data->iov); });
  return true;
}

void JobManager::ServeWaiters(Lane* lane, Actions* actions) {
  while (!lane->waiting.empty()) {
    Reader* r = lane->waiting.front();
    if (!TryServe(r, actions)) return;
    lane->waiting.pop_front();
  }
}

uint64_t JobManager::SampleBytes() const { return cache_->AverageSampleBytes(); }

std::shared_future<std::vector<Roaring>> JobManager::ShardsOf(
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

void JobManager::MakeShardsUnlocked(const std::string& name, uint32_t uid, uint64_t epoch) {
  std::packaged_task<std::vector<Roaring>()> split;
  std::shared_future<std::vector<Roaring>> shards;
  {
    MutexLock lock(mu_);
    Job* job = FindJob(name);
    if (!job || !job->ranked() || (uid != 0 && uid != job->uid) ||
        (job->spec.epochs != 0 && epoch >= job->spec.epochs)) {
      return;
    }
    shards = ShardsOf(job, epoch, &split);
  }
  if (split.valid()) split();
  shards.wait();
}

Roaring JobManager::EpochSubset(Job* job, const Lane& lane, uint64_t epoch) {
  if (!job->ranked()) return job->subset;
  std::packaged_task<std::vector<Roaring>()> split;
  std::shared_future<std::vector<Roaring>> shards = ShardsOf(job, epoch, &split);
  // Not made at open: a resume or a restart, or the subset changed since.
  if (split.valid()) split();
  return shards.get()[lane.index];
}

void JobManager::StartEpoch(Lane* lane, Actions* actions) {
  Job* job = lane->job;
  uint64_t epoch = NextEpoch(*lane);
  Roaring skip;
  if (lane->resume_epoch) {
    skip = std::move(lane->resume_skip);
    lane->resume_epoch.reset();
    lane->resume_skip = Roaring();
    lane->resume_written = false;
  }
  Roaring ids = EpochSubset(job, *lane, epoch);
  ids -= skip;  // not empty: SetResume moves past a fully consumed epoch
  const bool full = skip.isEmpty();
  if (!lane->group) {
    lane->group = groups_->Get(options_.base, cache_->budget() / SampleBytes());
    // What each delivery holds besides the shared base image until read.
    const JobSpec& spec = job->spec;
    const uint64_t pick_bytes = spec.size > 0              ? SquareSampleBytes(spec.size)
                                : spec.augment.augmented() ? SampleBytes()
                                                           : 0;
    lane->handle = lane->group->AddJob(ids, spec.window, pick_bytes);
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

void JobManager::SetResume(Lane* lane, uint64_t epoch, Roaring skip) {
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

void JobManager::ResetLane(Lane* lane, Actions* actions) {
  if (lane->group) {
    lane->group->RemoveJob(lane->handle);
    planning_.erase({lane->group, lane->handle});
    lane->group = nullptr;
  }
  ReleasePins(lane, actions);
  if (lane->stream) lane->delivered_earlier += lane->stream->delivered_total();
  lane->stream.reset();
  lane->released = false;
  // Loads requested for the old stream must not land in the new one.
  lanes_by_serial_.erase(lane->serial);
  lane->serial = next_serial_++;
  lanes_by_serial_[lane->serial] = lane;
}

// Tops up the planned queues of the group's jobs; the group decides who
// plans when (sampling/plan_group.h).
void JobManager::Plan(PlanGroup* group, Actions* actions) {
  // Rendered deliveries not yet read hold RAM as well as the pinned base
  // images they came from.
  const BudgetView budget{cache_->CommittedBytes() + rendered_bytes_->load(), cache_->budget(),
                          SampleBytes()};
  std::vector<Pick> picks;
  group->Plan(budget, &picks);
  for (const Pick& pick : picks) {
    Lane* lane = planning_.at({group, pick.job});
    RequestPosition(lane, lane->stream->Plan(pick.id), actions);
  }
}

// Pins the position's sample in the cache (loading it if needed) until the
// position is done or its pins are given back.
void JobManager::RequestPosition(Lane* lane, uint64_t position, Actions* actions) {
  if (lane->released) return;  // requested again when a reader comes back
  lane->stream->MarkRequested(position);
  const SampleKey key{options_.base, lane->stream->IdAt(position)};
  shared_renders_.Hold(key.id);  // dropped with the pin
  const JobSpec& spec = lane->job->spec;
  // A size-0 evaluation job takes the base image as it is.
  const bool render = spec.size > 0 || spec.augment.augmented();
  actions->Add([this, key, render, augment = spec.augment, size = spec.size, serial = lane->serial,
                epoch = lane->epoch(), position] {
    cache_->Acquire(key, [=, this](const SamplePtr& base) {
      if (!render || !base) {
        OnLoaded(serial, epoch, position, base);
        return;
      }
      // A decode's callback runs on the loader thread that decoded it:
      // render there. A hit's runs on whichever thread planned, maybe a
      // reader's FUSE thread, where rendering would serialise that reader:
      // hand it to the loader threads ahead of queued decodes.
      if (LoaderPool::OnWorkerThread()) {
        Render(augment, size, serial, epoch, position, key.id, base);
      } else {
        pool_->SubmitUrgent(
            [=, this] { Render(augment, size, serial, epoch, position, key.id, base); });
      }
    });
  });
}

void JobManager::Render(const AugmentSpec& augment, uint32_t size, uint64_t serial, uint64_t epoch,
                        uint64_t position, SampleId id, const SamplePtr& base) {
  OnLoaded(serial, epoch, position,
           shared_renders_.Render(base, augment, size, epoch, id, rendered_bytes_));
}

void JobManager::ReleasePins(Lane* lane, Actions* actions) {
  if (!lane->stream) return;
  ReleaseIds(lane->stream->ReleasePins(), actions);
}

void JobManager::ReleaseIds(std::vector<SampleId> ids, Actions* actions) {
  if (ids.empty()) return;
  actions->Add([this, ids = std::move(ids)] {
    for (SampleId id : ids) {
      cache_->Release({options_.base, id});
      shared_renders_.Drop(id);
    }
  });
}

void JobManager::OnLoaded(uint64_t serial, uint64_t epoch, uint64_t position,
                          const SamplePtr& sample) {
  Actions actions;
  MutexLock lock(mu_);
  auto it = lanes_by_serial_.find(serial);
  if (it == lanes_by_serial_.end()) return;
  Lane* lane = it->second;
  if (!lane->stream || !lane->stream->OnLoaded(epoch, position, sample)) return;
  lane->group->Landed(lane->handle);       // the cache's figures count it now
  if (!sample) AfterDone(lane, &actions);  // skipped
  ServeWaiters(lane, &actions);
}

void JobManager::AfterDone(Lane* lane, Actions* actions) {
  std::vector<SampleId> ids = lane->stream->TakeDoneIds();
  for (SampleId id : ids) lane->group->Done(lane->handle, id);
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

void JobManager::ReleaseIdleJobs() {
  Actions actions;
  MutexLock lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  for (auto& [name, job] : jobs_) {
    for (const auto& lane : job->lanes) {
      if (!lane->running() || lane->released || !lane->readers.empty() ||
          now - lane->idle_since < options_.idle_timeout) {
        continue;
      }
      ReleasePins(lane.get(), &actions);
      lane->released = true;
      lane->group->SetPaused(lane->handle, true);
      spdlog::info("job {} stream {} has had no reader for {}s: released its planned samples", name,
                   lane->index, options_.idle_timeout.count());
    }
  }
}

JobStatus JobManager::LaneStatus(const Lane& lane) const {
  JobStatus st;
  const Job& job = *lane.job;
  const JobStream* stream = lane.stream.get();
  const bool between = stream && !stream->running() && !lane.resume_epoch;
  const uint64_t full =
      job.ranked() ? RankShardSize(job.subset.cardinality(), job.spec.ranks, job.spec.drop_last)
                   : job.subset.cardinality();
  st.subset_size = full;
  st.epoch = between && stream->epoch() > 0 ? stream->epoch() - 1 : lane.epoch();
  st.delivered = stream && !lane.resume_epoch ? stream->delivered() : 0;
  if (lane.resume_epoch) {
    st.remaining = full - std::min<uint64_t>(full, lane.resume_skip.cardinality());
  } else if (stream && stream->running()) {
    st.remaining = stream->epoch_size() - stream->done();
  } else {
    st.remaining = between ? 0 : full;
  }
  st.readers = lane.readers.size();
  st.running = lane.running();
  st.epochs_completed = stream ? stream->epochs_completed() : 0;
  st.skipped = stream ? stream->skipped() : 0;
  st.delivered_total = lane.delivered_earlier + (stream ? stream->delivered_total() : 0);
  st.size = job.spec.size;
  st.window = job.spec.window;
  st.shared_picks = lane.group ? lane.group->SharedPicks(lane.handle) : 0;
  st.owner = job.uid;
  return st;
}

JobStatus JobManager::StatusLocked(const Job& job) const {
  if (!job.ranked()) return LaneStatus(*job.lanes[0]);
  JobStatus st;
  st.epoch = st.epochs_completed = ~uint64_t{0};
  for (const auto& lane : job.lanes) {
    JobStatus r = LaneStatus(*lane);
    st.epoch = std::min(st.epoch, r.epoch);
    st.epochs_completed = std::min(st.epochs_completed, r.epochs_completed);
    st.delivered += r.delivered;
    st.remaining += r.remaining;
    st.readers += r.readers;
    st.running = st.running || r.running;
    st.skipped += r.skipped;
    st.delivered_total += r.delivered_total;
    st.shared_picks += r.shared_picks;
    st.ranks.push_back(std::move(r));
  }
  st.subset_size = job.subset.cardinality();
  st.size = job.spec.size;
  st.window = job.spec.window;
  st.owner = job.uid;
  return st;
}

Status JobManager::GetJobStatus(const std::string& name, JobStatus* status) const {
  MutexLock lock(mu_);
  const Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  *status = StatusLocked(*job);
  return Status::Ok();
}

MountStats JobManager::Stats() const {
  MountStats stats;
  stats.cache = cache_->Stats();
  if (cache_->disk()) stats.disk = cache_->disk()->Stats();
  stats.decode_threads = pool_->threads();
  stats.decode_queue = pool_->queue_depth();
  stats.decode_busy_seconds = pool_->busy_seconds();
  stats.renders = shared_renders_.renders();
  stats.renders_shared = shared_renders_.reused();
  stats.special_files = catalog_->special_files();
  stats.rejected_paths = catalog_->rejected_paths();
  groups_->ForEach([&](const PlanGroup& group) { stats.planner += group.Stats(); });
  MutexLock lock(mu_);
  stats.delivered = delivered_;
  for (const auto& [name, job] : jobs_) stats.jobs.emplace_back(name, StatusLocked(*job));
  return stats;
}

}  // namespace joaderfs
