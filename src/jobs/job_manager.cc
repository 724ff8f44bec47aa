#include "jobs/job_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <optional>
#include <set>
#include <unordered_set>

#include "common/json.h"
#include "common/random.h"
#include "jobs/record.h"

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

enum class SlotState : uint8_t { kPlanned, kRequested, kReady, kDone };

// One position of a job's epoch.
struct Slot {
  SampleId id = 0;
  SlotState state = SlotState::kPlanned;
  SamplePtr sample;  // while kReady
};

// Bytes of one record handed to a reader and not yet read by it.
struct Piece {
  SamplePtr sample;
  std::array<uint8_t, kRecordHeaderSize> header;
  uint64_t total = 0;   // header + payload + padding
  uint64_t offset = 0;  // bytes already read
};

const std::array<uint8_t, kRecordAlignment> kZeros{};


// The bytes of one reply, kept alive until the reply has been sent.
struct ReplyData {
  std::vector<SamplePtr> samples;
  std::deque<std::array<uint8_t, kRecordHeaderSize>> headers;
  std::vector<iovec> iov;

  // Appends bytes [from, from + n) of `piece`.
  void Append(const Piece& piece, uint64_t from, uint64_t n) {
    const uint64_t payload = piece.sample->bytes();
    const uint64_t header_end = kRecordHeaderSize, payload_end = kRecordHeaderSize + payload;
    const uint64_t to = from + n;
    if (from < header_end) {
      headers.push_back(piece.header);
      iov.push_back({headers.back().data() + from, std::min(to, header_end) - from});
    }
    if (to > header_end && from < payload_end) {
      const uint64_t a = std::max(from, header_end), b = std::min(to, payload_end);
      samples.push_back(piece.sample);
      iov.push_back({piece.sample->pixels.get() + (a - header_end), b - a});
    }
    if (to > payload_end) {
      const uint64_t a = std::max(from, payload_end);
      iov.push_back({const_cast<uint8_t*>(kZeros.data()), to - a});
    }
  }
};

}  // namespace

struct JobManager::Job {
  std::string name;
  uint32_t uid = 0;
  uint64_t serial = 0;
  JobSpec spec;
  bool ids_subset = false;  // the subset came from the ids file
  Roaring subset;
  bool started = false;  // read from at least once: the spec is fixed

  PlanGroup* group = nullptr;  // set at the first epoch
  JobHandle handle = 0;

  // The current epoch, or the next one while !running.
  uint64_t epoch = 0;
  bool running = false;
  uint64_t epochs_completed = 0;

  // Positions [window_start, window_start + slots.size()) of the epoch.
  std::deque<Slot> slots;
  uint64_t window_start = 0;
  uint64_t planned = 0;            // positions planned this epoch
  uint64_t done = 0;               // positions handed or skipped this epoch
  uint64_t done_in_window = 0;
  std::deque<uint64_t> ready;      // ready positions of the window, in completion order
  uint64_t delivered = 0;          // this epoch
  uint64_t skipped = 0;            // this epoch
  uint64_t delivered_total = 0;

  std::set<Reader*> readers;
  std::deque<Reader*> waiting;     // readers with a pending Read, oldest first
  std::chrono::steady_clock::time_point idle_since = std::chrono::steady_clock::now();
  bool released = false;           // idle: planned samples given back

  uint64_t window_end() const {
    return std::min(window_start + spec.window, static_cast<uint64_t>(subset.cardinality()));
  }

  // The fields of the `status` file. Between epochs they describe the epoch
  // that ended.
  void WriteStatus(JsonWriter* w) const {
    const bool between = !running && epochs_completed > 0;
    const uint64_t size = subset.cardinality();
    w->Field("epoch", between ? epoch - 1 : epoch)
        .Field("delivered", delivered)
        .Field("remaining", between ? 0 : size - done)
        .Field("subset_size", size)
        .Field("readers", static_cast<uint64_t>(readers.size()));
  }
};

struct JobManager::Reader {
  ReaderId id = 0;
  Job* job = nullptr;  // null once the job is removed
  uint64_t epoch = 0;
  std::deque<Piece> pending;
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
    return Status::InvalidArgument("job id '" + name + "' is not 1-64 characters of [A-Za-z0-9._-]");
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
  ReleaseSlots(job, &actions);
  actions.Add([this] { cache_->RefreshNeeds(); });  // its ids are needed less
  for (Reader* r : job->readers) {
    r->job = nullptr;
    if (r->waiting) {
      r->waiting = false;
      actions.Add([reply = std::move(r->reply)] { reply(Status::Gone("job removed"), {}); });
    }
  }
  spdlog::info("job {} removed after {} samples", name, job->delivered_total);
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
  std::lock_guard lock(mu_);
  Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  Status s = CheckWritableLocked(job, uid);
  if (!s.ok()) return s;
  JobSpec spec;
  s = ParseJobSpec(text, *catalog_, default_spec_, &spec);
  if (!s.ok()) return s;
  job->spec = std::move(spec);
  job->ids_subset = false;
  job->subset = ResolveSubset(job->spec.subset, *catalog_);
  spdlog::info("job {} spec: {} ({} samples)", name, text, job->subset.cardinality());
  return Status::Ok();
}

Status JobManager::SetIds(const std::string& name, uint32_t uid, std::string_view text) {
  Roaring ids;
  Status s = ParseIdList(text, *catalog_, &ids);
  if (!s.ok()) return s;
  if (ids.isEmpty()) return Status::InvalidArgument("ids: no sample listed");
  std::lock_guard lock(mu_);
  Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  s = CheckWritableLocked(job, uid);
  if (!s.ok()) return s;
  ids.runOptimize();
  job->subset = std::move(ids);
  job->ids_subset = true;
  job->spec.subset.kind = SubsetSpec::Kind::kIds;
  job->spec.subset.text = "ids";  // what was written to the ids file
  spdlog::info("job {} subset from ids file: {} samples", name, job->subset.cardinality());
  return Status::Ok();
}

Status JobManager::OpenReader(const std::string& name, ReaderId* id) {
  std::lock_guard lock(mu_);
  Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  auto reader = std::make_unique<Reader>();
  reader->id = next_reader_++;
  reader->job = job;
  reader->epoch = job->epoch;
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
                   job->name, r->pending.size(), r->epoch);
    }
  }
  readers_.erase(it);
}

bool JobManager::ReaderAtEof(const Reader* r) const {
  const Job* job = r->job;
  if (r->epoch < job->epoch) return true;  // its epoch is over
  if (job->running) return false;
  return job->spec.epochs != 0 && job->epochs_completed >= job->spec.epochs;
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
    if (!job->running) StartEpoch(job, &actions);
    if (job->released) {
      job->released = false;
      job->group->SetPaused(job->handle, false);
      spdlog::info("job {} is read again: fetching its {} planned samples", job->name,
                   job->slots.size());
      for (uint64_t p = job->window_start; p < job->window_start + job->slots.size(); ++p) {
        if (job->slots[p - job->window_start].state == SlotState::kPlanned) {
          RequestSlot(job, p, &actions);
        }
      }
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
    while (!job->ready.empty()) {
      const uint64_t position = job->ready.front();
      Slot& slot = job->slots[position - job->window_start];
      RecordHeader h;
      h.sample_id = slot.id;
      h.label = catalog_->label(slot.id);
      h.epoch = static_cast<uint32_t>(job->epoch);
      h.height = slot.sample->height;
      h.width = slot.sample->width;
      h.channels = slot.sample->channels;
      const uint64_t total = h.record_bytes();
      if (bytes > 0 && bytes + total > r->max_bytes) break;
      job->ready.pop_front();
      r->pending.push_back({std::move(slot.sample), EncodeRecordHeader(h), total, 0});
      bytes += total;
      ++job->delivered;
      ++job->delivered_total;
      ++delivered_;
      MarkDone(job, position, actions);
    }
    if (r->pending.empty()) return false;
  }
  auto data = std::make_shared<ReplyData>();
  uint64_t left = r->max_bytes;
  while (left > 0 && !r->pending.empty()) {
    Piece& piece = r->pending.front();
    const uint64_t n = std::min(left, piece.total - piece.offset);
    data->Append(piece, piece.offset, n);
    piece.offset += n;
    left -= n;
    if (piece.offset == piece.total) r->pending.pop_front();
  }
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
    planning_[{job->group, job->handle}] = job;
  } else {
    job->group->StartEpoch(job->handle);
  }
  job->running = true;
  job->slots.clear();
  job->ready.clear();
  job->window_start = job->planned = job->done = job->done_in_window = 0;
  job->delivered = job->skipped = 0;
  spdlog::info("job {} starts epoch {} ({} samples)", job->name, job->epoch,
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
    j->slots.push_back({pick.id, SlotState::kPlanned, nullptr});
    RequestSlot(j, j->planned++, actions);
  }
}

// Pins the slot's sample in the cache (loading it if needed) until the slot
// is done or released.
void JobManager::RequestSlot(Job* job, uint64_t position, Actions* actions) {
  Slot& slot = job->slots[position - job->window_start];
  if (job->released) return;  // requested again when a reader comes back
  slot.state = SlotState::kRequested;
  const SampleKey key{job->spec.size, slot.id};
  actions->Add([this, key, serial = job->serial, epoch = job->epoch, position] {
    cache_->Acquire(key, [this, serial, epoch, position](const SamplePtr& sample) {
      OnLoaded(serial, epoch, position, sample);
    });
  });
}

// Unpins every slot of the job that holds a pin; they return to kPlanned.
void JobManager::ReleaseSlots(Job* job, Actions* actions) {
  std::vector<SampleKey> keys;
  for (Slot& slot : job->slots) {
    if (slot.state == SlotState::kRequested || slot.state == SlotState::kReady) {
      keys.push_back({job->spec.size, slot.id});
      slot.state = SlotState::kPlanned;
      slot.sample.reset();
    }
  }
  job->ready.clear();
  if (!keys.empty()) {
    actions->Add([this, keys = std::move(keys)] {
      for (const SampleKey& key : keys) cache_->Release(key);
    });
  }
}

void JobManager::OnLoaded(uint64_t serial, uint64_t epoch, uint64_t position,
                          const SamplePtr& sample) {
  Actions actions;
  std::lock_guard lock(mu_);
  auto it = jobs_by_serial_.find(serial);
  if (it == jobs_by_serial_.end()) return;
  Job* job = it->second;
  if (!job->running || job->epoch != epoch || position < job->window_start) return;
  Slot& slot = job->slots[position - job->window_start];
  if (slot.state != SlotState::kRequested) return;
  if (!sample) {
    ++job->skipped;
    MarkDone(job, position, &actions);
  } else {
    slot.state = SlotState::kReady;
    slot.sample = sample;
    if (position < job->window_end()) job->ready.push_back(position);
  }
  ServeWaiters(job, &actions);
}

// Position `position` was handed to a reader or skipped (a skipped sample
// may lie beyond the current window).
void JobManager::MarkDone(Job* job, uint64_t position, Actions* actions) {
  Slot& slot = job->slots[position - job->window_start];
  slot.state = SlotState::kDone;
  slot.sample.reset();
  job->group->Done(job->handle, slot.id);
  actions->Add([this, key = SampleKey{job->spec.size, slot.id}] { cache_->Release(key); });
  ++job->done;
  if (position < job->window_end()) ++job->done_in_window;
  if (job->done == job->subset.cardinality()) {
    EndEpoch(job);
    return;
  }
  while (job->done_in_window == job->window_end() - job->window_start) AdvanceWindow(job);
  Plan(job->group, actions);
}

// Moves to the next window. REQUIRES: every position of the current one is
// done and the epoch is not.
void JobManager::AdvanceWindow(Job* job) {
  const uint64_t width = job->window_end() - job->window_start;
  job->slots.erase(job->slots.begin(), job->slots.begin() + static_cast<ptrdiff_t>(width));
  job->window_start += width;
  job->done_in_window = 0;
  // Samples of the new window that finished early are ready in position
  // order; those skipped early count as done.
  const uint64_t planned_end = job->window_start + job->slots.size();
  for (uint64_t p = job->window_start; p < std::min(job->window_end(), planned_end); ++p) {
    const SlotState state = job->slots[p - job->window_start].state;
    if (state == SlotState::kReady) job->ready.push_back(p);
    if (state == SlotState::kDone) ++job->done_in_window;
  }
}

void JobManager::EndEpoch(Job* job) {
  spdlog::info("job {} ends epoch {}: {} delivered, {} skipped", job->name, job->epoch,
               job->delivered, job->skipped);
  job->running = false;
  job->slots.clear();
  job->ready.clear();
  ++job->epochs_completed;
  ++job->epoch;
  // Waiting readers get EOF from the caller's ServeWaiters().
}

void JobManager::ReleaseIdleJobs() {
  Actions actions;
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  for (auto& [name, job] : jobs_) {
    if (!job->running || job->released || !job->readers.empty() ||
        now - job->idle_since < options_.idle_timeout) {
      continue;
    }
    ReleaseSlots(job.get(), &actions);
    job->released = true;
    job->group->SetPaused(job->handle, true);
    spdlog::info("job {} has had no reader for {}s: released its {} planned samples", name,
                 options_.idle_timeout.count(), job->slots.size());
  }
}

Status JobManager::JobStatusJson(const std::string& name, std::string* json) const {
  std::lock_guard lock(mu_);
  const Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  JsonWriter w;
  w.BeginObject();
  job->WriteStatus(&w);
  w.Field("running", job->running)
      .Field("epochs_completed", job->epochs_completed)
      .Field("skipped", job->skipped)
      .Field("delivered_total", job->delivered_total)
      .Field("size", job->spec.size)
      .Field("window", job->spec.window)
      .Field("shared_picks", job->group ? job->group->SharedPicks(job->handle) : 0)
      .Field("owner", job->uid);
  w.EndObject();
  *json = w.Finish();
  return Status::Ok();
}

std::string JobManager::StatsJson() const {
  const CacheStats cache = cache_->Stats();
  const DiskCacheStats disk = cache_->disk() ? cache_->disk()->Stats() : DiskCacheStats{};
  JsonWriter w;
  std::lock_guard lock(mu_);
  w.BeginObject();
  w.Field("decoded", cache.decoded)
      .Field("delivered", delivered_)
      .Field("ram_hits", cache.hits)
      .Field("ram_misses", cache.misses)
      .Field("disk_hits", disk.hits)
      .Field("disk_misses", disk.misses)
      .Field("ram_bytes", cache.bytes)
      .Field("ram_pinned_bytes", cache.pinned_bytes)
      .Field("ram_budget", cache.budget)
      .Field("ram_entries", cache.entries)
      .Field("ram_evictions", cache.evictions)
      .Field("disk_bytes", disk.bytes)
      .Field("disk_budget", disk.budget)
      .Field("disk_entries", disk.entries)
      .Field("disk_evictions", disk.evictions)
      .Field("disk_writes", disk.writes)
      .Field("disk_write_drops", disk.write_drops)
      .Field("disk_corrupt", disk.corrupt)
      .Field("skipped", cache.failed)
      .Field("decode_threads", pool_->threads())
      .Field("decode_queue", static_cast<uint64_t>(pool_->queue_depth()))
      .Field("decode_busy_seconds", pool_->busy_seconds());
  PlannerStats planner;
  groups_->ForEach([&](const PlanGroup& group) {
    const PlannerStats s = group.Stats();
    planner.rounds += s.rounds;
    planner.picks += s.picks;
    planner.shared_picks += s.shared_picks;
    planner.coupled_picks += s.coupled_picks;
  });
  w.BeginObject("planner")
      .Field("rounds", planner.rounds)
      .Field("picks", planner.picks)
      .Field("shared_picks", planner.shared_picks)
      .Field("coupled_picks", planner.coupled_picks)
      .EndObject();
  w.BeginObject("jobs");
  for (const auto& [name, job] : jobs_) {
    w.BeginObject(name);
    job->WriteStatus(&w);
    w        .EndObject();
  }
  w.EndObject();
  w.EndObject();
  return w.Finish();
}

}  // namespace joaderfs
