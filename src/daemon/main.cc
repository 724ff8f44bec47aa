// joaderfs: mount a dataset and serve decoded samples to training jobs.
//
// Start-up order matters. Unless -f, the process forks first, before any
// thread exists (libvips, RocksDB, the disk tier's writer, the decode pool):
// a fork keeps only the forking thread, and locks taken before it belong to
// the parent. The parent waits until the child has mounted and then exits
// 0, or exits with the child's status if it failed. The child checks
// everything that can fail with a user error before mounting (a one-line
// message on the caller's stderr and exit status 1), and only then detaches
// from the terminal and the caller's session. So daemonized and -f run the
// same code with the same threads (docs/design.md 2.1).

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "cache/disk_cache.h"
#include "cache/remote_tier.h"
#include "cache/sample_cache.h"
#include "catalog/catalog.h"
#include "common/memory_trim.h"
#include "common/ranked_mutex.h"
#include "daemon/cache_dir_lock.h"
#include "daemon/log_sink.h"
#include "daemon/metrics_endpoint.h"
#include "daemon/mountpoint.h"
#include "daemon/options.h"
#include "daemon/scrub_environ.h"
#include "fs/filesystem.h"
#include "fs/render.h"
#include "jobs/job_manager.h"
#include "jobs/job_store.h"
#include "loader/decoder.h"
#include "loader/loader_pool.h"
#include "loader/source_reader.h"
#include "sampling/plan_group.h"

namespace joaderfs {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "joaderfs: %s\n", message.c_str());
  return 1;
}

// Forks the daemon. Returns in the child, with the write end of a pipe on
// which it reports a successful mount (ReportMounted); the parent never
// returns: it exits 0 once the child has mounted, else with the child's
// status. The child stays in the caller's process group until it has
// mounted: autofs lets only automount's process group (which its mount
// helpers share) touch the mountpoint while it is being mounted, and makes
// anyone else wait for the mount, which would be this very process.
int ForkDaemon() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    std::exit(Fail(std::string("cannot create a pipe: ") + std::strerror(errno)));
  }
  const pid_t child = fork();
  if (child < 0) std::exit(Fail(std::string("cannot fork: ") + std::strerror(errno)));
  if (child == 0) {
    close(fds[0]);
    return fds[1];
  }
  close(fds[1]);
  char byte;
  ssize_t n;
  do {
    n = read(fds[0], &byte, 1);
  } while (n < 0 && errno == EINTR);
  if (n == 1) std::_Exit(0);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  std::_Exit(WIFEXITED(status) && WEXITSTATUS(status) != 0 ? WEXITSTATUS(status) : 1);
}

// Once the mount is up: leaves the caller's session and detaches from the
// terminal as fuse_daemonize() does, then tells the waiting parent.
void ReportMounted(int fd) {
  if (setsid() < 0) spdlog::warn("cannot start a session: {}", std::strerror(errno));
  if (chdir("/") != 0) spdlog::warn("cannot chdir to /: {}", std::strerror(errno));
  const int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    dup2(null, STDIN_FILENO);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    if (null > STDERR_FILENO) close(null);
  }
  const char byte = 0;
  if (write(fd, &byte, 1) != 1) spdlog::warn("cannot report the mount: {}", std::strerror(errno));
  close(fd);
}

// The mean encoded size of SOURCE's images, from the sizes the scan found
// (a shard member's length), over at most 4096 samples spread evenly.
uint64_t MeanImageBytes(const Catalog& catalog) {
  const size_t n = catalog.size(), step = std::max<size_t>(1, n / 4096);
  uint64_t bytes = 0, count = 0;
  for (size_t id = 0; id < n; id += step, ++count) {
    const FileRange r = catalog.location(static_cast<SampleId>(id));
    bytes += r.partial ? r.length : r.file_size;
  }
  return count ? bytes / count : 0;
}

// What fuse_session_loop_mt() returned says how the mount ended: 0 when the
// kernel reported the unmount (ENODEV), the number of the signal that asked
// it to stop (SIGTERM, SIGINT; SIGHUP reopens the log instead), or a failed read of /dev/fuse as
// -errno. ECONNABORTED is an unmount too: a request the kernel dequeued for us just as the last
// file of a lazily unmounted mount closed is failed with it instead of ENODEV (libfuse 3.14 does
// not know this), as is an abort through /sys/fs/fuse/connections, which an administrator uses to
// stop a mount.
bool SessionEndedCleanly(int loop_result) {
  return loop_result == 0 || loop_result == SIGTERM || loop_result == SIGINT ||
         loop_result == -ECONNABORTED;
}

// Calls JobManager::ReleaseIdleJobs() every second until stopped, gives
// freed memory back (common/memory_trim.h), and pets systemd's watchdog.
class IdleReaper {
 public:
  // `watchdog`: systemd's WatchdogSec= is set; each round tells it the
  // daemon lives (sd_notify WATCHDOG=1), so a round that never ends (a
  // deadlock) gets the service restarted.
  IdleReaper(JobManager* jobs, bool watchdog)
      : thread_([this, jobs, watchdog] {
          MutexLock lock(mu_);
          while (!stop_) {
            wake_.wait_for(lock, std::chrono::seconds(1));
            lock.unlock();
            jobs->ReleaseIdleJobs();
            TrimFreeMemory(kKeepFreeBytes);
            if (watchdog) sd_notify(0, "WATCHDOG=1");
            lock.lock();
          }
        }) {}
  ~IdleReaper() {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

 private:
  Mutex mu_;
  std::condition_variable_any wake_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The remote tier of remote_cache=, its cluster keys and TLS files loaded.
Status OpenRemoteTier(const DaemonOptions& o, const Catalog* catalog,
                      std::unique_ptr<RemoteTier>* out) {
  RemoteTierOptions rto;
  rto.servers = o.remote_cache;
  rto.publish_limit = o.remote_publish;
  if (o.remote_key == "insecure") {
    rto.key = ClusterKey::Insecure();
  } else if (Status s = ClusterKey::Load(o.remote_key, &rto.key); !s.ok()) {
    return s;
  }
  if (!o.remote_old_key.empty()) {
    rto.old_key.emplace();
    if (Status s = ClusterKey::Load(o.remote_old_key, &*rto.old_key); !s.ok()) {
      return Status::InvalidArgument("remote_old_key: " + s.message());
    }
  }
  rto.tls.ca_file = o.remote_tls;
  rto.tls.cert_file = o.remote_tls_cert;
  // No server's value is larger than the largest base image this daemon
  // would hold in RAM: a larger declared size is refused before allocation.
  rto.max_value = std::min<uint64_t>(o.max_pixels * 4, o.ram_cache / 4) + ClusterKey::kSealOverhead;
  return RemoteTier::Open(rto, catalog, o.base, out);
}

int Run(int argc, char** argv) {
  DaemonOptions o;
  fuse_args args;
  Status s = ParseOptions(argc, argv, &o, &args);
  if (!s.ok()) return Fail(s.message());
  if (o.help) {
    std::fputs(UsageText(argv[0]).c_str(), stdout);
    return 0;
  }
  if (o.version) {
    std::printf("joaderfs %s (libfuse %s)\n", JOADERFS_VERSION, fuse_pkgversion());
    return 0;
  }
  // Before the fork, so that a refusal is the mount command's one line.
  bool detached = false;
  s = PrepareMountpoint(o.mountpoint, &detached);
  if (!s.ok()) return Fail(s.message());
  if (detached) {
    std::fprintf(stderr, "joaderfs: %s was left by a joaderfs that died; detached it\n",
                 o.mountpoint.c_str());
  }
  const int mounted_fd = o.foreground ? -1 : ForkDaemon();
  std::unique_ptr<LogSink> log;
  std::string log_note;
  s = LogSink::Open(o, &log, &log_note);
  if (!s.ok()) return Fail(s.message());
  std::string error;
  if (!InitDecoder(argv[0], &error)) return Fail("cannot start libvips: " + error);
  SetMaxPixels(o.max_pixels);
  std::unique_ptr<Catalog> catalog;
  CatalogOptions catalog_options;
  catalog_options.label_key = o.label_key;
  catalog_options.s3_endpoint = o.s3_endpoint;
  catalog_options.s3_region = o.s3_region;
  catalog_options.s3_credentials = o.s3_credentials;
  catalog_options.s3_profile = o.s3_profile;
  catalog_options.read_timeout = std::chrono::seconds(o.read_timeout);
  s = Catalog::Open(o.source, catalog_options, &catalog);
  // The credentials were read (or never needed): none stays in the
  // environment /proc/PID/environ shows.
  ScrubEnvironment(kSecretVariables);
  if (!s.ok()) return Fail(s.message());

  // The planning group answers both tiers' RefCounts: made first, gone last.
  // SOURCE's reads in flight (loader/source_reader.h, made below): on an
  // object store more than one per decode thread, enough to hide its round
  // trip (DefaultSourceReads), and jobs plan far enough ahead to keep them
  // busy.
  const unsigned source_reads = o.source_reads
                                    ? o.source_reads
                                    : DefaultSourceReads(o.threads, catalog->store()->RoundTrip());
  // Their bytes, and those read and awaiting decode, within
  // source_in_flight: by default room for those reads of the mean image
  // several times over.
  const uint64_t source_in_flight =
      o.source_in_flight ? o.source_in_flight
                         : DefaultSourceInFlight(source_reads, MeanImageBytes(*catalog));
  PlanGroupOptions go;
  go.cadence.lookahead = o.lookahead;
  go.cadence.min_lookahead = 4 * o.threads;
  go.cadence.read_ahead = 2 * uint64_t{std::max(source_reads, o.threads) - o.threads};
  // Picks in their read hold no RAM yet: as many bytes of their renders as
  // their reads may have in flight go uncounted against ram_cache.
  go.cadence.transit_bytes = go.cadence.read_ahead > 0 ? source_in_flight : 0;
  go.seed = o.seed;
  go.dependent_sampling = o.dependent_sampling;
  PlanGroup group(go);
  // Sizing warnings: logged, on the mount command's stderr and in /stats,
  // where an admin looks.
  std::vector<std::string> warnings;
  if (o.ram_cache_cgroup_limit != 0) {
    warnings.push_back(fmt::format(
        "ram_cache: {} MiB, a quarter of this cgroup's memory limit ({} MiB), not of the "
        "machine's RAM (set ram_cache, or raise the limit)",
        o.ram_cache >> 20, o.ram_cache_cgroup_limit >> 20));
  }
  std::unique_ptr<CacheDirLock> cache_dir_lock;  // held until exit
  std::unique_ptr<DiskCache> disk;
  if (!o.cache_dir.empty()) {
    s = CacheDirLock::Acquire(o.cache_dir, &cache_dir_lock);
    if (!s.ok()) return Fail(s.message());
    if (o.purge_disk_cache) {
      uint64_t purged = 0;
      s = DiskCache::Purge(o.cache_dir, catalog->source(), &purged);
      if (!s.ok()) return Fail(s.message());
      spdlog::warn("disk tier: purged {} MiB of {} in {} (purge_disk_cache=1)", purged >> 20,
                   catalog->source(), o.cache_dir);
    }
    if (o.disk_cache == 0) {  // not given: sized for the data and the disk
      const DiskCacheSizing d =
          DefaultDiskCache(catalog->size(), o.base, CacheDirRoom(o.cache_dir));
      o.disk_cache = d.budget;
      if (d.decoded_estimate > d.budget) {
        warnings.push_back(fmt::format(
            "disk tier: {} MiB in {} of ~{} MiB of decoded samples; later epochs decode "
            "the rest (free space there or set disk_cache)",
            d.budget >> 20, o.cache_dir, d.decoded_estimate >> 20));
      }
    }
    s = DiskCache::Open(o.cache_dir, catalog.get(), &group, o.base, o.disk_cache, &disk);
    if (s.code() == Status::Code::kBusy) return Fail(s.message());
    if (!s.ok()) {
      // The tier only saves decodes: a daemon without it serves every job.
      spdlog::warn("{}; running without a disk tier until the next mount", s.message());
      disk.reset();
    }
  }
  // The remote tier (remote_cache=): servers that do not answer yet cost
  // misses and a warning, never the mount.
  std::unique_ptr<RemoteTier> remote;
  if (!o.remote_cache.empty()) {
    s = OpenRemoteTier(o, catalog.get(), &remote);
    if (!s.ok()) return Fail(s.message());
  }
  // Decode threads call into the tiers: the pool is stopped first at
  // shutdown (see below).
  auto pool = std::make_unique<LoaderPool>(o.threads);
  // SOURCE is read on I/O threads of their own, one per decode thread to
  // start with (loader/source_reader.h); stopped before the pool.
  // On an object store, more: enough reads in flight to hide its round trip
  // (DefaultSourceReads), so that decode threads never wait for a GET.
  SourceReaderOptions ro;
  ro.threads = source_reads;
  ro.max_bytes_in_flight = source_in_flight;
  ro.timeout = std::chrono::seconds(o.read_timeout);
  ro.store = catalog->store();
  SourceReader reader(ro);
  SampleCache cache(catalog.get(), pool.get(), disk.get(), &group, o.base, o.ram_cache,
                    FailureRetryFrom(std::chrono::seconds(o.retry_failed)), &reader, remote.get());
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
  // Jobs survive restarts in the cache_dir (docs/design.md 2.7); a damaged store
  // is left as it is and not used.
  std::unique_ptr<JobStore> job_store;
  std::vector<StoredJob> stored_jobs;
  if (!o.cache_dir.empty()) {
    s = JobStore::Open(o.cache_dir, *catalog, &job_store);
    if (s.ok()) s = job_store->Load(&stored_jobs);
    if (!s.ok()) {
      spdlog::error("{}; jobs are not kept across restarts this time", s.message());
      job_store.reset();
      stored_jobs.clear();
    }
  }
  JobManager jobs(catalog.get(), &cache, pool.get(), &group, jo, job_store.get());
  for (const StoredJob& stored : stored_jobs) {
    s = jobs.RestoreJob(stored);
    if (!s.ok()) spdlog::error("job {} not restored: {}", stored.name, s.message());
  }
  Filesystem filesystem(catalog.get(), &jobs, o.size, o.mountpoint);

  // Show as "SOURCE on MNT type fuse.joaderfs" in /proc/mounts, as mounts
  // of other file systems do.
  std::string fsname = "-ofsname=";
  for (char c : o.source) {
    if (c == ',' || c == '\\') fsname += '\\';
    fsname += c;
  }
  fuse_opt_add_arg(&args, fsname.c_str());
  fuse_opt_add_arg(&args, "-osubtype=joaderfs");

  // libfuse prints its own one-line reason (an unknown option, a busy
  // mountpoint) before these fail.
  fuse_session* se =
      fuse_session_new(&args, Filesystem::Operations(), sizeof(fuse_lowlevel_ops), &filesystem);
  fuse_opt_free_args(&args);
  if (!se) return 1;
  if (fuse_set_signal_handlers(se) != 0) {
    fuse_session_destroy(se);
    return Fail("cannot install signal handlers");
  }
  log->ReopenOnSighup();  // in place of libfuse's: SIGHUP no longer unmounts
  if (fuse_session_mount(se, o.mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return 1;
  }
  if (!log_note.empty()) {
    std::fprintf(stderr, "joaderfs: %s\n", log_note.c_str());
    spdlog::warn("{}", log_note);
  }
  for (const std::string& w : warnings) {
    std::fprintf(stderr, "joaderfs: warning: %s\n", w.c_str());
    spdlog::warn("{}", w);
  }
  filesystem.SetMountWarnings(warnings);
  if (mounted_fd >= 0) ReportMounted(mounted_fd);

  std::string argline;
  for (int i = 0; i < argc; ++i) argline += std::string(i ? " " : "") + argv[i];
  spdlog::info("joaderfs {} started: {}", JOADERFS_VERSION, argline);
  spdlog::info(
      "{}: {} samples in {} classes; size {}, ram_cache {} MiB, {} threads, {} reads in flight "
      "within {} MiB (round trip {} us), seed {}",
      catalog->source(), catalog->size(), catalog->num_classes(), o.size, o.ram_cache >> 20,
      o.threads, ro.threads, ro.max_bytes_in_flight >> 20, catalog->store()->RoundTrip().count(),
      o.seed);

  pool->Start();
  // systemd (Type=notify): the mount serves. Without NOTIFY_SOCKET these
  // do nothing.
  sd_notifyf(0, "READY=1\nSTATUS=serving %s at %s", catalog->source().c_str(),
             o.mountpoint.c_str());
  uint64_t watchdog_usec = 0;
  const bool watchdog = sd_watchdog_enabled(0, &watchdog_usec) > 0;
  std::unique_ptr<MetricsEndpoint> metrics;  // stopped before the jobs it renders go
  if (!o.metrics_listen.empty()) {
    s = MetricsEndpoint::Start(
        o.metrics_listen,
        [&filesystem, &o] { return RenderMetrics(filesystem.Stats(), o.mountpoint); }, &metrics);
    if (!s.ok()) spdlog::error("{}; no HTTP /metrics until the next mount", s.message());
  }
  int ret;
  {
    IdleReaper reaper(&jobs, watchdog);
    fuse_loop_config* config = fuse_loop_cfg_create();
    fuse_loop_cfg_set_clone_fd(config, 0);
    ret = fuse_session_loop_mt(se, config);
    fuse_loop_cfg_destroy(config);
  }
  sd_notify(0, "STOPPING=1");
  metrics.reset();
  if (SessionEndedCleanly(ret)) {
    spdlog::info("unmounting {}", o.mountpoint);
  } else {
    spdlog::error("unmounting {}: the session ended with error {} ({})", o.mountpoint, ret,
                  ret < 0 ? std::strerror(-ret) : strsignal(ret));
  }
  // A decode finishing now replies to a read through the session, and
  // writes to the tiers: the pool stops before either goes, and the reader
  // and the remote tier's lease waits (StopReads), whose callbacks submit
  // to the pool, before the pool. Reads blocked in SOURCE are not waited
  // for (their threads are detached).
  reader.Stop();
  cache.StopReads();
  pool.reset();
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  if (disk) disk->Flush();
  log.reset();  // stops the SIGHUP reopener, flushes the log
  return SessionEndedCleanly(ret) ? 0 : 1;
}

}  // namespace
}  // namespace joaderfs

int main(int argc, char** argv) { return joaderfs::Run(argc, argv); }
