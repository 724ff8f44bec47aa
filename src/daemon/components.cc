#include "daemon/components.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "cache/disk_cache.h"
#include "cache/remote_tier.h"
#include "cache/sample_cache.h"
#include "catalog/catalog.h"
#include "common/memory_trim.h"
#include "common/rocksdb_support.h"
#include "daemon/cache_dir_lock.h"
#include "daemon/machine.h"
#include "daemon/remote_tier_setup.h"
#include "daemon/scrub_environ.h"
#include "fs/filesystem.h"
#include "jobs/job_manager.h"
#include "loader/decoder.h"
#include "loader/loader_pool.h"
#include "loader/source_reader.h"
#include "sampling/plan_group.h"
#include "store/job_store.h"

namespace joaderfs {
namespace {

// SOURCE's reads in flight: on an object store more than one per decode
// thread, enough to hide its round trip (DefaultSourceReads); and their
// bytes, and those read and awaiting decode, within source_in_flight: by
// default room for those reads of the mean image several times over.
MountSizing SizeReads(const DaemonOptions& o, const Catalog& catalog) {
  MountSizing s;
  s.source_reads =
      o.source_reads ? o.source_reads : DefaultSourceReads(o.threads, catalog.store()->RoundTrip());
  s.source_in_flight = o.source_in_flight
                           ? o.source_in_flight
                           : DefaultSourceInFlight(s.source_reads, catalog.mean_image_bytes());
  return s;
}

// Jobs plan far enough ahead to keep the reads beyond one per decode
// thread busy.
PlanGroupOptions PlanOptions(const DaemonOptions& o, const MountSizing& sizing) {
  PlanGroupOptions go;
  go.cadence.lookahead = o.lookahead;
  go.cadence.min_lookahead = 4 * o.threads;
  go.cadence.read_ahead = 2 * uint64_t{std::max(sizing.source_reads, o.threads) - o.threads};
  // Picks in their read hold no RAM yet: as many bytes of their renders as
  // their reads may have in flight go uncounted against ram_cache.
  go.cadence.transit_bytes = go.cadence.read_ahead > 0 ? sizing.source_in_flight : 0;
  go.seed = o.seed;
  go.dependent_sampling = o.dependent_sampling;
  return go;
}

JobManagerOptions JobOptions(const DaemonOptions& o) {
  JobManagerOptions jo;
  jo.default_size = o.size;
  jo.seed = o.seed;
  jo.idle_timeout = std::chrono::seconds(o.job_idle_timeout);
  jo.limits.max_jobs = o.max_jobs_per_user;
  jo.limits.max_streams = o.max_streams_per_user;
  jo.limits.max_readers = o.max_readers_per_user;
  jo.limits.max_unread = o.max_unread_per_user;
  jo.limits.limit_root = o.limit_root;
  jo.drift_bound = o.drift_bound;
  return jo;
}

}  // namespace

Status Components::Build(const DaemonOptions& o, const char* program,
                         std::unique_ptr<Components>* out) {
  std::unique_ptr<Components> c(new Components());
  std::string error;
  if (!InitDecoder(program, &error)) return Status::IOError("cannot start libvips: " + error);
  SetMaxPixels(o.max_pixels);
  // Taken before the scan: the catalog's snapshot lives in cache_dir too.
  if (!o.cache_dir.empty()) {
    if (Status s = CacheDirLock::Acquire(o.cache_dir, &c->cache_dir_lock_); !s.ok()) return s;
  }
  if (Status s = c->OpenCatalog(o); !s.ok()) return s;
  c->sizing_ = SizeReads(o, *c->catalog_);
  c->group_ = std::make_unique<PlanGroup>(PlanOptions(o, c->sizing_));
  if (o.ram_cache_cgroup_limit != 0) {
    c->warnings_.push_back(fmt::format(
        "ram_cache: {} MiB, a quarter of this cgroup's memory limit ({} MiB), not of the "
        "machine's RAM (set ram_cache, or raise the limit)",
        o.ram_cache >> 20, o.ram_cache_cgroup_limit >> 20));
  }
  if (Status s = c->OpenDiskTier(o); !s.ok()) return s;
  // Servers that do not answer yet cost misses and a warning, never the
  // mount. No server's value is larger than the largest base image this
  // daemon would hold in RAM: a larger declared size is refused before
  // allocation.
  if (!o.remote_cache.empty()) {
    const uint64_t max_image_bytes = std::min<uint64_t>(o.max_pixels * 4, o.ram_cache / 4);
    Status s = OpenRemoteTier(o, c->catalog_.get(), max_image_bytes, &c->remote_);
    if (!s.ok()) return s;
  }
  c->pool_ = std::make_unique<LoaderPool>(o.threads);
  // SOURCE is read on I/O threads of their own (loader/source_reader.h).
  SourceReaderOptions ro;
  ro.threads = c->sizing_.source_reads;
  ro.max_bytes_in_flight = c->sizing_.source_in_flight;
  ro.timeout = std::chrono::seconds(o.read_timeout);
  ro.store = c->catalog_->store();
  c->reader_ = std::make_unique<SourceReader>(ro);
  c->cache_ = std::make_unique<SampleCache>(
      c->catalog_.get(), c->pool_.get(), c->disk_.get(), c->group_.get(), o.base, o.ram_cache,
      FailureRetryFrom(std::chrono::seconds(o.retry_failed)), c->reader_.get(), c->remote_.get());
  c->OpenJobs(o);
  c->filesystem_ =
      std::make_unique<Filesystem>(c->catalog_.get(), c->jobs_.get(), o.size, o.mountpoint);
  *out = std::move(c);
  return Status::Ok();
}

Components::~Components() = default;

Status Components::OpenCatalog(const DaemonOptions& o) {
  CatalogOptions co;
  co.label_key = o.label_key;
  co.s3_endpoint = o.s3_endpoint;
  co.s3_region = o.s3_region;
  co.s3_credentials = o.s3_credentials;
  co.s3_profile = o.s3_profile;
  co.read_timeout = std::chrono::seconds(o.read_timeout);
  co.cache_dir = o.cache_dir;
  const Status s = Catalog::Open(o.source, co, &catalog_);
  // The scan's lists and names are freed: RSS returns to what the catalog holds.
  TrimFreeMemory(kKeepFreeBytes);
  // The credentials were read (or never needed): none stays in the
  // environment /proc/PID/environ shows.
  ScrubEnvironment(kSecretVariables);
  return s;
}

Status Components::OpenDiskTier(const DaemonOptions& o) {
  if (o.cache_dir.empty()) return Status::Ok();
  Status s;
  if (o.purge_disk_cache) {
    uint64_t purged = 0;
    s = DiskCache::Purge(o.cache_dir, catalog_->source(), &purged);
    if (!s.ok()) return s;
    spdlog::warn("disk tier: purged {} MiB of {} in {} (purge_disk_cache=1)", purged >> 20,
                 catalog_->source(), o.cache_dir);
  }
  uint64_t budget = o.disk_cache;
  if (budget == 0) {  // not given: sized for the data and the disk
    const DiskCacheSizing d = DefaultDiskCache(catalog_->size(), o.base, CacheDirRoom(o.cache_dir));
    budget = d.budget;
    if (d.decoded_estimate > d.budget) {
      warnings_.push_back(
          fmt::format("disk tier: {} MiB in {} of ~{} MiB of decoded samples; later epochs decode "
                      "the rest (free space there or set disk_cache)",
                      d.budget >> 20, o.cache_dir, d.decoded_estimate >> 20));
    }
  }
  s = DiskCache::Open(o.cache_dir, catalog_.get(), group_.get(), o.base, budget, &disk_);
  if (s.code() == Status::Code::kBusy) return s;
  if (!s.ok()) {
    // The tier only saves decodes: a daemon without it serves every job.
    spdlog::warn("{}; running without a disk tier until the next mount", s.message());
    disk_.reset();
  }
  return Status::Ok();
}

void Components::OpenJobs(const DaemonOptions& o) {
  // Jobs survive restarts in the cache_dir (docs/design.md 2.7); a damaged
  // store is left as it is and not used.
  std::vector<StoredJob> stored_jobs;
  if (!o.cache_dir.empty()) {
    Status s = JobStore::Open(o.cache_dir, *catalog_, &job_store_);
    if (s.ok()) s = job_store_->Load(&stored_jobs);
    if (!s.ok()) {
      spdlog::error("{}; jobs are not kept across restarts this time", s.message());
      job_store_.reset();
      stored_jobs.clear();
    }
  }
  jobs_ = std::make_unique<JobManager>(catalog_.get(), cache_.get(), pool_.get(), group_.get(),
                                       JobOptions(o), job_store_.get());
  for (const StoredJob& stored : stored_jobs) {
    const Status s = jobs_->RestoreJob(stored);
    if (!s.ok()) spdlog::error("job {} not restored: {}", stored.name, s.message());
  }
}

void Components::StartDecoding() { pool_->Start(); }

void Components::StopDecoding() {
  reader_->Stop();
  cache_->StopReads();
  pool_.reset();
}

void Components::FlushDiskTier() {
  if (disk_) disk_->Flush();
}

unsigned DefaultSourceReads(unsigned threads, std::chrono::microseconds round_trip) {
  const uint64_t per_thread = 1 + static_cast<uint64_t>(round_trip.count()) / 2000;
  return static_cast<unsigned>(std::clamp<uint64_t>(uint64_t{threads} * per_thread, threads, 256));
}

uint64_t DefaultSourceInFlight(unsigned reads, uint64_t mean_image_bytes) {
  constexpr uint64_t kMin = uint64_t{64} << 20, kMax = uint64_t{1} << 30;
  // No overflow: reads <= 1024 and an image is at most 4 GiB (tar_index.h).
  return std::clamp<uint64_t>(4 * uint64_t{reads} * std::min(mean_image_bytes, kMax), kMin, kMax);
}

uint64_t DecodedSampleEstimate(uint32_t base) {
  if (base == 0) return 1ULL << 20;
  const uint64_t pixels = uint64_t{base} * base * 4 / 3;
  return pixels * 3 * 9 / 8;
}

DiskCacheSizing DefaultDiskCache(uint64_t samples, uint32_t base, uint64_t room) {
  // The floor covers an estimate that errs low on a small set; the room
  // bounds both, and a full disk still gets a tier that works (and evicts).
  constexpr uint64_t kFloor = 64ULL << 20, kLeast = 1ULL << 20;
  DiskCacheSizing d;
  d.decoded_estimate = samples * DecodedSampleEstimate(base);
  // The two databases in cache_dir (the tier's index, the job store) keep
  // their room, so that a filled tier never leaves them none to reopen in.
  const uint64_t databases = 2 * (kRocksDbWorkingBytes + samples * kRocksDbBytesPerSample);
  const uint64_t usable = room > databases ? room - databases : 0;
  d.budget = std::max(kLeast, std::min(std::max(kFloor, d.decoded_estimate), usable / 10 * 8));
  return d;
}

}  // namespace joaderfs
