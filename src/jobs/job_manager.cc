#include "jobs/job_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <optional>
#include <set>

#include "common/printable.h"
#include "jobs/job_stream.h"
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

struct JobManager::Job {
  std::string name;
  uint32_t uid = 0;
  uint64_t serial = 0;
  JobSpec spec;
  Roaring subset;
  bool started = false;  // read from at least once: the spec is fixed

  PlanGroup* group = nullptr;  // set at the first epoch, with the stream
  JobHandle handle = 0;
  std::unique_ptr<JobStream> stream;

  std::set<Reader*> readers;
  std::deque<Reader*> waiting;  // readers with a pending Read, oldest first
  std::chrono::steady_clock::time_point idle_since = std::chrono::steady_clock::now();
  bool released = false;  // idle: planned samples given back

  bool running() const { return stream && stream->running(); }
  uint64_t epoch() const { return stream ? stream->epoch() : 0; }
};

struct JobManager::Reader {
  ReaderId id = 0;
  Job* job = nullptr;  // null once the job is removed
  uint64_t epoch = 0;
  RecordQueue pending;
  std::optional<uint64_t> interrupted_token;  // of a read not yet issued
  bool waiting = false;
  uint64_t token = 0;
  size_t max_bytes = 0;
  ReadReply reply;
};

JobManager::JobManager(const Catalog* catalog, SampleCache* cache, const LoaderPool* pool,
                       PlanGroups* groups, JobManagerOptions options)
    : catalog_(catalog),
      cache_(cache),
      pool_(pool),
      groups_(groups),
      options_(options),
      default_spec_([&] {
        JobSpec spec;
        spec.size = options.default_size;
        return spec;
      }()) {}

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
  std::lock_guard lock(mu_);
  if (jobs_.count(name)) return Status::Exists("job " + name + " exists");
  auto job = std::make_unique<Job>();
  job->name = name;
  job->uid = uid;
  job->serial = next_serial_++;
  job->spec = default_spec_;
  job->subset = ResolveSubset(job->spec.subset, *catalog_);
  jobs_by_serial_[job->serial] = job.get();
  jobs_[name] = std::move(job);
  spdlog::info("job {} created by uid {}", name, uid);
  return Status::Ok();
}

Status JobManager::RemoveJob(const std::string& name, uint32_t uid) {
  Actions actions;
  std::lock_guard lock(mu_);
  Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  if (uid != 0 && uid != job->uid) return Status::Permission("job " + name + " is not yours");
  if (job->group) {
    job->group->RemoveJob(job->handle);
    planning_.erase({job->group, job->handle});
  }
  ReleasePins(job, &actions);
  actions.Add([this] { cache_->RefreshNeeds(); });  // its ids are needed less
  for (Reader* r : job->readers) {
    r->job = nullptr;
    if (r->waiting) {
      r->waiting = false;
      actions.Add([reply = std::move(r->reply)] { reply(Status::Gone("job removed"), {}); });
    }
  }
  spdlog::info("job {} removed after {} samples", name,
               job->stream ? job->stream->delivered_total() : 0);
  jobs_by_serial_.erase(job->serial);
  jobs_.erase(name);
  return Status::Ok();
}

std::vector<std::string> JobManager::JobNames() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> names;
  for (const auto& [name, job] : jobs_) names.push_back(name);
  return names;
}

Status JobManager::JobOwner(const std::string& name, uint32_t* uid) const {
  std::lock_guard lock(mu_);
  const Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  *uid = job->uid;
  return Status::Ok();
}

Status JobManager::GetSpec(const std::string& name, std::string* text) const {
  std::lock_guard lock(mu_);
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
  std::lock_guard lock(mu_);
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
  JobSpec spec;
  Status s = ParseJobSpec(text, *catalog_, base, &spec);
  if (!s.ok()) return s;
  // Past the RAM budget only PlanOverdraft() bytes may be planned, so a
  // larger sample would never be.
  if (spec.size > 0 && SampleBytes(spec.size) > PlanOverdraft(cache_->budget())) {
    return Status::InvalidArgument("spec: a sample of size=" + std::to_string(spec.size) +
                                   " takes " + std::to_string(SampleBytes(spec.size) >> 10) +
                                   " KiB, more than a quarter of ram_cache");
  }
  const bool names_subset = spec.subset.kind != SubsetSpec::Kind::kIds;
  if (!names_subset) spec.subset = default_spec_.subset;
  Roaring subset = ResolveSubset(spec.subset, *catalog_);
  std::lock_guard lock(mu_);
  Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  s = CheckWritableLocked(job, uid);
  if (!s.ok()) return s;
  if (!names_subset && job->spec.subset.kind == SubsetSpec::Kind::kIds) {
    spec.subset = job->spec.subset;  // the ids file's subset stays
  } else {
    job->subset = std::move(subset);
  }
  job->spec = std::move(spec);
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
  std::lock_guard lock(mu_);
  Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  Status s = CheckWritableLocked(job, uid);
  if (!s.ok()) return s;
  job->subset = std::move(ids);
  job->spec.subset.kind = SubsetSpec::Kind::kIds;
  job->spec.subset.text = "ids";  // what was written to the ids file
  spdlog::info("job {} subset from ids file: {} samples", name, job->subset.cardinality());
  return Status::Ok();
}

Status JobManager::OpenReader(const std::string& name, uint32_t uid, ReaderId* id) {
  std::lock_guard lock(mu_);
  Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  // Reading consumes the job's samples: only its owner (or root) may.
  if (uid != 0 && uid != job->uid) return Status::Permission("job " + name + " is not yours");
  auto reader = std::make_unique<Reader>();
  reader->id = next_reader_++;
  reader->job = job;
  reader->epoch = job->epoch();
  job->readers.insert(reader.get());
  *id = reader->id;
  readers_[reader->id] = std::move(reader);
  return Status::Ok();
}

void JobManager::CloseReader(ReaderId id) {
  Actions actions;
  std::lock_guard lock(mu_);
  auto it = readers_.find(id);
  if (it == readers_.end()) return;
  Reader* r = it->second.get();
  if (r->waiting) {
    actions.Add([reply = std::move(r->reply)] { reply(Status::Interrupted(), {}); });
  }
  if (Job* job = r->job) {
    job->readers.erase(r);
    std::erase(job->waiting, r);
    if (job->readers.empty()) job->idle_since = std::chrono::steady_clock::now();
    if (!r->pending.empty()) {
      spdlog::warn("job {}: a reader closed with {} records unread; they are lost for epoch {}",
                   job->name, r->pending.records(), r->epoch);
    }
  }
  readers_.erase(it);
}

bool JobManager::ReaderAtEof(const Reader* r) const {
  const Job* job = r->job;
  if (r->epoch < job->epoch()) return true;  // its epoch is over
  if (job->running()) return false;
  return job->stream && job->spec.epochs != 0 &&
         job->stream->epochs_completed() >= job->spec.epochs;
}

void JobManager::Read(ReaderId id, size_t max_bytes, uint64_t token, ReadReply reply) {
  Actions actions;
  std::lock_guard lock(mu_);
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
  if (r->pending.empty() && r->job && !ReaderAtEof(r)) {
    Job* job = r->job;
    job->started = true;
    if (!job->running()) StartEpoch(job, &actions);
    if (job->released) {
      job->released = false;
      job->group->SetPaused(job->handle, false);
      const std::vector<uint64_t> positions = job->stream->Unrequested();
      spdlog::info("job {} is read again: fetching its {} planned samples", job->name,
                   positions.size());
      for (uint64_t p : positions) RequestPosition(job, p, &actions);
    }
  }
  if (!TryServe(r, &actions)) r->job->waiting.push_back(r);
  if (r->job) ServeWaiters(r->job, &actions);  // the epoch may have ended
}

void JobManager::Interrupt(ReaderId id, uint64_t token) {
  Actions actions;
  std::lock_guard lock(mu_);
  auto it = readers_.find(id);
  if (it == readers_.end()) return;
  Reader* r = it->second.get();
  if (r->waiting && r->token == token) {
    r->waiting = false;
    if (r->job) std::erase(r->job->waiting, r);
    actions.Add([reply = std::move(r->reply)] { reply(Status::Interrupted(), {}); });
  } else {
    r->interrupted_token = token;
  }
}

// Replies to `r`'s pending read if it can be answered now: with its unread
// bytes, with records ready in its job's window, with EOF, or with Gone.
bool JobManager::TryServe(Reader* r, Actions* actions) {
  Job* job = r->job;
  if (!job) {
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
    while (job->running()) {
      const std::optional<JobStream::Ready> next = job->stream->PeekReady();
      if (!next) break;
      RecordHeader h;
      h.sample_id = next->id;
      h.label = catalog_->label(next->id);
      h.epoch = static_cast<uint32_t>(job->epoch());
      h.height = next->sample->height;
      h.width = next->sample->width;
      h.channels = next->sample->channels;
      if (bytes > 0 && bytes + h.record_bytes() > r->max_bytes) break;
      bytes += h.record_bytes();
      r->pending.Push(job->stream->TakeReady()->sample, h);
      ++delivered_;
      AfterDone(job, actions);
    }
    if (r->pending.empty()) return false;
  }
  auto data = r->pending.Take(r->max_bytes);
  r->waiting = false;
  actions->Add([reply = std::move(r->reply), data] { reply(Status::Ok(), data->iov); });
  return true;
}

void JobManager::ServeWaiters(Job* job, Actions* actions) {
  while (!job->waiting.empty()) {
    Reader* r = job->waiting.front();
    if (!TryServe(r, actions)) return;
    job->waiting.pop_front();
  }
}

uint64_t JobManager::SampleBytes(uint32_t size) const {
  // Size 0 keeps each image's own size: the mean of those loaded so far.
  return size > 0 ? uint64_t{size} * size * 3 : cache_->AverageSampleBytes();
}

void JobManager::StartEpoch(Job* job, Actions* actions) {
  if (!job->group) {
    const uint64_t per_sample = SampleBytes(job->spec.size);
    job->group = groups_->Get(job->spec.size, cache_->budget() / per_sample);
    job->handle = job->group->AddJob(job->subset, job->spec.window);
    job->stream = std::make_unique<JobStream>(job->subset.cardinality(), job->spec.window);
    planning_[{job->group, job->handle}] = job;
  } else {
    job->group->StartEpoch(job->handle);
  }
  job->stream->StartEpoch();
  spdlog::info("job {} starts epoch {} ({} samples)", job->name, job->epoch(),
               job->subset.cardinality());
  actions->Add([this] { cache_->RefreshNeeds(); });  // its ids are needed again
  Plan(job->group, actions);
}

// Tops up the planned queues of the group's jobs; the group decides who
// plans when (sampling/plan_group.h).
void JobManager::Plan(PlanGroup* group, Actions* actions) {
  const BudgetView budget{cache_->CommittedBytes(), cache_->budget(), SampleBytes(group->size())};
  std::vector<Pick> picks;
  group->Plan(budget, &picks);
  for (const Pick& pick : picks) {
    Job* j = planning_.at({group, pick.job});
    RequestPosition(j, j->stream->Plan(pick.id), actions);
  }
}

// Pins the position's sample in the cache (loading it if needed) until the
// position is done or its pins are given back.
void JobManager::RequestPosition(Job* job, uint64_t position, Actions* actions) {
  if (job->released) return;  // requested again when a reader comes back
  job->stream->MarkRequested(position);
  const SampleKey key{job->spec.size, job->stream->IdAt(position)};
  actions->Add([this, key, serial = job->serial, epoch = job->epoch(), position] {
    cache_->Acquire(key, [this, serial, epoch, position](const SamplePtr& sample) {
      OnLoaded(serial, epoch, position, sample);
    });
  });
}

void JobManager::ReleasePins(Job* job, Actions* actions) {
  if (!job->stream) return;
  std::vector<SampleId> ids = job->stream->ReleasePins();
  if (ids.empty()) return;
  actions->Add([this, size = job->spec.size, ids = std::move(ids)] {
    for (SampleId id : ids) cache_->Release({size, id});
  });
}

void JobManager::OnLoaded(uint64_t serial, uint64_t epoch, uint64_t position,
                          const SamplePtr& sample) {
  Actions actions;
  std::lock_guard lock(mu_);
  auto it = jobs_by_serial_.find(serial);
  if (it == jobs_by_serial_.end()) return;
  Job* job = it->second;
  if (!job->stream->OnLoaded(epoch, position, sample)) return;
  if (!sample) AfterDone(job, &actions);  // skipped
  ServeWaiters(job, &actions);
}

void JobManager::AfterDone(Job* job, Actions* actions) {
  std::vector<SampleId> ids = job->stream->TakeDoneIds();
  for (SampleId id : ids) job->group->Done(job->handle, id);
  actions->Add([this, size = job->spec.size, ids = std::move(ids)] {
    for (SampleId id : ids) cache_->Release({size, id});
  });
  if (!job->running()) {
    // Waiting readers get EOF from the caller's ServeWaiters().
    spdlog::info("job {} ends epoch {}: {} delivered, {} skipped", job->name, job->epoch() - 1,
                 job->stream->delivered(), job->stream->skipped());
    return;
  }
  Plan(job->group, actions);
}

void JobManager::ReleaseIdleJobs() {
  Actions actions;
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  for (auto& [name, job] : jobs_) {
    if (!job->running() || job->released || !job->readers.empty() ||
        now - job->idle_since < options_.idle_timeout) {
      continue;
    }
    ReleasePins(job.get(), &actions);
    job->released = true;
    job->group->SetPaused(job->handle, true);
    spdlog::info("job {} has had no reader for {}s: released its planned samples", name,
                 options_.idle_timeout.count());
  }
}

JobStatus JobManager::StatusLocked(const Job& job) const {
  JobStatus st;
  const JobStream* stream = job.stream.get();
  const bool between = stream && !stream->running() && stream->epochs_completed() > 0;
  st.subset_size = job.subset.cardinality();
  st.epoch = between ? stream->epoch() - 1 : job.epoch();
  st.delivered = stream ? stream->delivered() : 0;
  st.remaining = between ? 0 : st.subset_size - (stream ? stream->done() : 0);
  st.readers = job.readers.size();
  st.running = job.running();
  st.epochs_completed = stream ? stream->epochs_completed() : 0;
  st.skipped = stream ? stream->skipped() : 0;
  st.delivered_total = stream ? stream->delivered_total() : 0;
  st.size = job.spec.size;
  st.window = job.spec.window;
  st.shared_picks = job.group ? job.group->SharedPicks(job.handle) : 0;
  st.owner = job.uid;
  return st;
}

Status JobManager::GetJobStatus(const std::string& name, JobStatus* status) const {
  std::lock_guard lock(mu_);
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
  stats.special_files = catalog_->special_files();
  stats.rejected_paths = catalog_->rejected_paths();
  groups_->ForEach([&](const PlanGroup& group) { stats.planner += group.Stats(); });
  std::lock_guard lock(mu_);
  stats.delivered = delivered_;
  for (const auto& [name, job] : jobs_) stats.jobs.emplace_back(name, StatusLocked(*job));
  return stats;
}

}  // namespace joaderfs
