#include "jobs/job_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <future>
#include <optional>

#include "cache/budget.h"
#include "common/printable.h"
#include "common/rate_limited_log.h"
#include "pacing/rank_split.h"

namespace joaderfs {

JobManager::JobManager(const Catalog* catalog, SampleCache* cache, LoaderPool* pool,
                       PlanGroup* group, JobManagerOptions options, JobStore* store)
    : catalog_(catalog),
      cache_(cache),
      pool_(pool),
      group_(group),
      options_(options),
      open_file_bytes_(options.limits.max_unread / 8, options.limits.limit_root),
      default_spec_([&] {
        JobSpec spec;
        spec.size = options.default_size;
        return spec;
      }()),
      store_(store),
      shared_renders_(group, SharedRenders::KeepBytesFor(cache->budget())),
      lanes_(&mu_, catalog, cache, pool, group, &shared_renders_, store,
             UnreadLimit{options.limits.max_unread, options.limits.limit_root},
             options.drift_bound) {}

JobManager::~JobManager() = default;

Job* JobManager::FindJob(const std::string& name) const {
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
  if (Limited(uid)) {
    const UserLimits& limits = options_.limits;
    const Usage& used = usage_[uid];
    if (used.jobs >= limits.max_jobs) {
      return Status::Quota("uid " + std::to_string(uid) + " has " + std::to_string(used.jobs) +
                           " jobs, the most max_jobs_per_user=" + std::to_string(limits.max_jobs) +
                           " allows");
    }
    if (used.streams >= limits.max_streams) {
      return Status::Quota("uid " + std::to_string(uid) + " has " + std::to_string(used.streams) +
                           " job streams, the most max_streams_per_user=" +
                           std::to_string(limits.max_streams) + " allows");
    }
  }
  auto job = std::make_unique<Job>();
  job->name = name;
  job->uid = uid;
  job->spec = default_spec_;
  job->spec.augment.seed = JobSeed(options_.seed, name);
  job->subset = ResolveSubset(job->spec.subset, *catalog_);
  lanes_.Make(job.get());
  AddUsage(uid, 1, static_cast<int64_t>(job->lanes.size()), 0);
  SaveJob(*job);
  jobs_[name] = std::move(job);
  // Per uid: an unprivileged user churning jobs must not flood the log.
  Warnings().Log(spdlog::level::info, "job created, uid " + std::to_string(uid),
                 "job {} created by uid {}", name, uid);
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
  const bool random = spec.subset.kind == SubsetSpec::Kind::kRandom;
  Roaring subset;
  if (stored.has_ids) {
    if (stored.ids.isEmpty() || stored.ids.maximum() >= catalog_->size()) {
      return Status::InvalidArgument("its ids lie outside the dataset");
    }
    subset = stored.ids;
    if (!random) {
      spec.subset.kind = SubsetSpec::Kind::kIds;
      spec.subset.text = "ids";
    }
  } else {
    subset = random ? ShuffledPrefixSubset(spec.subset, *catalog_)
                    : ResolveSubset(spec.subset, *catalog_);
  }
  s = CheckRanksFit(spec, subset);
  if (!s.ok()) return s;
  // The latest elastic resume: its shares are split again (they depend on
  // nothing else), before taking the lock.
  std::optional<ElasticResume> elastic;
  if (stored.elastic_epoch && spec.ranks > 0) {
    if (!stored.elastic_consumed.isEmpty() &&
        stored.elastic_consumed.maximum() >= catalog_->size()) {
      return Status::InvalidArgument("its resume lies outside the dataset");
    }
    const Roaring consumed = stored.elastic_consumed & subset;
    elastic = ElasticResume{
        *stored.elastic_epoch, consumed,
        SplitRest(subset, consumed, *stored.elastic_epoch, spec.ranks, spec.drop_last),
        /*read=*/true};  // a resume written after the restart replaces it
  }
  MutexLock lock(mu_);
  if (jobs_.count(stored.name)) return Status::Exists("job " + stored.name + " exists");
  auto job = std::make_unique<Job>();
  job->name = stored.name;
  job->uid = stored.uid;
  job->spec = std::move(spec);
  job->subset = std::move(subset);
  job->started = stored.fixed;
  lanes_.Make(job.get());
  // Counted, not refused: the job was accepted before the restart.
  AddUsage(job->uid, 1, static_cast<int64_t>(job->lanes.size()), 0);
  job->elastic = std::move(elastic);  // before the streams: their epoch may be its
  for (const StoredStream& st : stored.streams) {
    if (st.index >= job->lanes.size()) continue;
    Lane* lane = job->lanes[st.index].get();
    lanes_.SetResume(lane, st.epoch, st.handed_out);
  }
  spdlog::info("job {} of uid {} restored: {} streams under way", stored.name, stored.uid,
               stored.streams.size());
  jobs_[stored.name] = std::move(job);
  return Status::Ok();
}

void JobManager::AddUsage(uint32_t uid, int64_t jobs, int64_t streams, int64_t readers) {
  Usage& used = usage_[uid];
  used.jobs += jobs;
  used.streams += streams;
  used.readers += readers;
  if (used.jobs == 0 && used.streams == 0 && used.readers == 0) usage_.erase(uid);
}

void JobManager::SaveJob(const Job& job) {
  if (!store_) return;
  // A random subset's ids are kept too: a restart never draws them again,
  // so no change of the draw can change a stored job's subset.
  const bool ids = job.spec.subset.kind == SubsetSpec::Kind::kIds ||
                   job.spec.subset.kind == SubsetSpec::Kind::kRandom;
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
  ActionsLock lock(mu_);
  Actions* actions = lock.actions();
  Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  if (Status s = CheckJobOwner(name, job->uid, uid); !s.ok()) return s;
  uint64_t delivered = 0;
  for (const auto& lane : job->lanes) delivered += lanes_.Remove(lane.get(), actions);
  AddUsage(job->uid, -1, -static_cast<int64_t>(job->lanes.size()), 0);
  actions->Add([this] { cache_->RefreshNeeds(); });  // its ids are needed less
  if (store_) store_->RemoveJob(name);
  Warnings().Log(spdlog::level::info, "job removed, uid " + std::to_string(uid),
                 "job {} removed by uid {} after {} samples", name, uid, delivered);
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

Status JobManager::CheckOwner(const std::string& name, uint32_t uid) const {
  MutexLock lock(mu_);
  const Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  return CheckJobOwner(name, job->uid, uid);
}

Status JobManager::GetSpec(const std::string& name, std::string* text) const {
  MutexLock lock(mu_);
  const Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  *text = job->spec.ToString();
  return Status::Ok();
}

Status JobManager::CheckWritableLocked(const Job* job, uint32_t uid, const Roaring* ids) const {
  if (Status s = CheckJobOwner(job->name, job->uid, uid); !s.ok()) return s;
  if (!job->started) return Status::Ok();
  if (ids == nullptr) {
    return Status::Busy("job " + job->name +
                        " has started; its spec is fixed (a new spec wants a new job id, or rmdir "
                        "jobs/" +
                        job->name + " first)");
  }
  // A rerun of the same script writes the same ids again: only an id
  // outside the subset tells that they differ before the whole list is in.
  Roaring outside = *ids - job->subset;
  if (outside.isEmpty()) return Status::Ok();
  return Status::Busy("job " + job->name + " has started; its subset is fixed, and id " +
                      std::to_string(outside.minimum()) + " is not in it");
}

Status JobManager::CheckWritable(const std::string& name, uint32_t uid, const Roaring* ids) const {
  MutexLock lock(mu_);
  const Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  return CheckWritableLocked(job, uid, ids);
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
  s = CheckJobOwner(name, job->uid, uid);
  if (!s.ok()) return s;
  const bool keeps_ids = !names_subset && job->spec.subset.kind == SubsetSpec::Kind::kIds;
  if (keeps_ids) spec.subset = job->spec.subset;  // the ids file's subset stays
  if (job->started) {
    // A rerun of the same training script writes the same spec again.
    // A random subset's ids are the ones drawn when the job was made (an
    // older daemon's draw for a job it stored), whatever the draw is now.
    const bool drawn = spec.subset.kind == SubsetSpec::Kind::kRandom;
    if (spec.ToString() == job->spec.ToString() && (keeps_ids || drawn || subset == job->subset)) {
      return Status::Ok();
    }
    return Status::Busy("job " + name +
                        " has started; its spec is fixed, and this spec differs from it (only the "
                        "spec its spec file shows may be written again; another spec wants a new "
                        "job id, or rmdir jobs/" +
                        name + " first)");
  }
  s = CheckRanksFit(spec, keeps_ids ? job->subset : subset);
  if (!s.ok()) return s;
  const bool new_lanes = spec.ranks != job->spec.ranks;
  const uint64_t streams = std::max<uint32_t>(spec.ranks, 1);
  if (new_lanes) {
    for (const auto& lane : job->lanes) {
      if (!lane->readers.empty()) {
        return Status::Busy("job " + name + " has open readers; ranks= cannot change");
      }
    }
    // Each stream costs RAM whether read or not: a user's are bounded.
    const uint64_t others = usage_[job->uid].streams - job->lanes.size();
    if (Limited(uid) && others + streams > options_.limits.max_streams) {
      return Status::Quota(
          "spec: ranks=" + std::to_string(spec.ranks) + " makes " +
          std::to_string(others + streams) + " job streams of uid " + std::to_string(job->uid) +
          ", past max_streams_per_user=" + std::to_string(options_.limits.max_streams));
    }
  }
  if (!keeps_ids) job->subset = std::move(subset);
  job->spec = std::move(spec);
  job->splits.clear();  // made for the old subset or drop_last
  if (new_lanes) {
    AddUsage(job->uid, 0, static_cast<int64_t>(streams) - static_cast<int64_t>(job->lanes.size()),
             0);
    lanes_.Make(job);
  }
  SaveJob(*job);
  Warnings().Log(spdlog::level::info, "spec written, uid " + std::to_string(uid),
                 "job {} spec by uid {}: {} ({} samples)", name, uid, Printable(text),
                 job->subset.cardinality());
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
  Status s = CheckWritableLocked(job, uid, &ids);
  if (!s.ok()) return s;
  if (job->started) {
    if (ids == job->subset) return Status::Ok();  // the same ids written again
    return Status::Busy("job " + name + " has started; its subset is fixed, and these " +
                        std::to_string(ids.cardinality()) + " ids differ from its " +
                        std::to_string(job->subset.cardinality()));
  }
  s = CheckRanksFit(job->spec, ids);
  if (!s.ok()) return s;
  job->subset = std::move(ids);
  job->splits.clear();
  job->spec.subset.kind = SubsetSpec::Kind::kIds;
  job->spec.subset.text = "ids";  // what was written to the ids file
  SaveJob(*job);
  Warnings().Log(spdlog::level::info, "ids written, uid " + std::to_string(uid),
                 "job {} subset from ids file by uid {}: {} samples", name, uid,
                 job->subset.cardinality());
  return Status::Ok();
}

Status JobManager::Resume(const std::string& name, uint32_t uid, std::string_view text) {
  ResumeText parsed(*catalog_);
  Status s = parsed.Add(text, /*last=*/true);
  if (!s.ok()) return s;
  return Resume(name, uid, &parsed);
}

Status JobManager::Resume(const std::string& name, uint32_t uid, ResumeText* text) {
  if (Status s = text->Finish(); !s.ok()) return s;
  const std::optional<uint64_t> epoch = text->epoch(), rank = text->rank();
  Roaring consumed = std::move(text->ids());
  // Without rank=, a ranked job splits the rest of the epoch anew (elastic).
  ElasticSplit elastic;
  if (rank) {
    MakeShardsUnlocked(name, uid, *epoch);
  } else {
    elastic = SplitElasticUnlocked(name, uid, *epoch, consumed);
  }
  ActionsLock lock(mu_);
  Actions* actions = lock.actions();
  Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  if (Status s = CheckJobOwner(name, job->uid, uid); !s.ok()) return s;
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
  const bool is_elastic = job->ranked() && !rank;
  if (is_elastic) {
    lanes_.SetElasticResume(job, *epoch, consumed, std::move(elastic), actions);
  } else {
    for (Lane* lane : lanes) {
      // A stream not yet read since the last resume of the same epoch adds
      // these ids to it.
      const bool adds = lane->resume_written && lane->resume_epoch == epoch;
      lanes_.Reset(lane, actions);
      lanes_.SetResume(lane, *epoch, adds ? lane->resume_skip | consumed : consumed);
      lane->resume_written = true;
      if (store_) store_->StartEpoch(name, lane->index, *lane->resume_epoch, lane->resume_skip);
    }
  }
  actions->Add([this] { cache_->RefreshNeeds(); });
  job->started = true;
  SaveJob(*job);
  std::string streams;
  if (rank) {
    streams = " for rank " + std::to_string(*rank);
  } else if (is_elastic) {
    streams = " split anew over " + std::to_string(job->spec.ranks) + " ranks";
  }
  Warnings().Log(spdlog::level::info, "resume written, uid " + std::to_string(uid),
                 "job {} resumes epoch {}{} by uid {}: {} ids consumed", name, *epoch, streams, uid,
                 consumed.cardinality());
  return Status::Ok();
}

void JobManager::NoteWrite(const std::string& name, std::string_view file, const Status& result) {
  MutexLock lock(mu_);
  Job* job = FindJob(name);
  if (!job) return;
  if (result.ok()) {
    if (job->error_file == file) {
      job->error_file.clear();
      job->error.clear();
    }
    return;
  }
  std::string_view reason = result.message();
  // Most reasons name their file already.
  if (reason.starts_with(file) && reason.substr(file.size()).starts_with(": ")) {
    reason.remove_prefix(file.size() + 2);
  }
  job->error_file = std::string(file);
  // One line, whatever the writer wrote.
  job->error = job->error_file + ": " + Printable(reason, 1024);
}

Status JobManager::GetError(const std::string& name, std::string* text) const {
  MutexLock lock(mu_);
  const Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  *text = job->error.empty() ? std::string() : job->error + "\n";
  return Status::Ok();
}

Status JobManager::Ranks(const std::string& name, uint32_t* ranks) const {
  MutexLock lock(mu_);
  const Job* job = FindJob(name);
  if (!job) return Status::NotFound("no job " + name);
  *ranks = job->spec.ranks;
  return Status::Ok();
}

JobStatus JobManager::StatusLocked(const Job& job) const {
  JobStatus st;
  if (!job.ranked()) {
    st = lanes_.StatusOf(*job.lanes[0]);
    st.error = job.error;
    return st;
  }
  st.error = job.error;
  st.epoch = st.epochs_completed = ~uint64_t{0};
  for (const auto& lane : job.lanes) {
    JobStatus r = lanes_.StatusOf(*lane);
    st.epoch = std::min(st.epoch, r.epoch);
    st.epochs_completed = std::min(st.epochs_completed, r.epochs_completed);
    st.remaining += r.remaining;
    st.readers += r.readers;
    st.running = st.running || r.running;
    st.this_epoch += r.this_epoch;
    st.total += r.total;
    st.shared_picks += r.shared_picks;
    st.samples_per_s += r.samples_per_s;
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
  if (cache_->remote()) stats.remote = cache_->remote()->Stats();
  stats.decode_threads = pool_->threads();
  stats.decode_queue = pool_->queue_depth();
  stats.decode_busy_seconds = pool_->busy_seconds();
  stats.decode_busy_fraction = pool_->busy_fraction();
  stats.renders = shared_renders_.renders();
  stats.renders_shared = shared_renders_.reused();
  stats.special_files = catalog_->special_files();
  stats.identities_pending = catalog_->identities_pending();
  stats.rejected_paths = catalog_->rejected_paths();
  stats.scan_skips = catalog_->scan_skips();
  stats.shard_skips = catalog_->shard_skips();
  stats.planner = group_->Stats();
  stats.source = cache_->ReadStats();
  stats.source_store = catalog_->store()->Stats();
  MutexLock lock(mu_);
  stats.delivered = lanes_.delivered();
  stats.stall_seconds = lanes_.StallSeconds();
  stats.samples_per_s = lanes_.SamplesPerSecond();
  for (const auto& [name, job] : jobs_) stats.jobs.emplace_back(name, StatusLocked(*job));
  return stats;
}

}  // namespace joaderfs
