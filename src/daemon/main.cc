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
#include <sys/wait.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "catalog/catalog.h"
#include "common/memory_trim.h"
#include "common/ranked_mutex.h"
#include "daemon/components.h"
#include "daemon/log_sink.h"
#include "daemon/metrics_endpoint.h"
#include "daemon/mountpoint.h"
#include "daemon/options.h"
#include "fs/filesystem.h"
#include "fs/render.h"
#include "jobs/job_manager.h"

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

// Mounts `filesystem` at the mountpoint, showing as "SOURCE on MNT type
// fuse.joaderfs" in /proc/mounts as mounts of other file systems do, with
// libfuse's signal handlers but SIGHUP's (it reopens the log instead of
// unmounting). Null when it fails, its one-line reason printed (libfuse
// prints its own: an unknown option, a busy mountpoint).
fuse_session* MountSession(const DaemonOptions& o, fuse_args* args, Filesystem* filesystem,
                           LogSink* log) {
  std::string fsname = "-ofsname=";
  for (char c : o.source) {
    if (c == ',' || c == '\\') fsname += '\\';
    fsname += c;
  }
  fuse_opt_add_arg(args, fsname.c_str());
  fuse_opt_add_arg(args, "-osubtype=joaderfs");
  fuse_session* se =
      fuse_session_new(args, Filesystem::Operations(), sizeof(fuse_lowlevel_ops), filesystem);
  fuse_opt_free_args(args);
  if (!se) return nullptr;
  if (fuse_set_signal_handlers(se) != 0) {
    fuse_session_destroy(se);
    Fail("cannot install signal handlers");
    return nullptr;
  }
  log->ReopenOnSighup();
  if (fuse_session_mount(se, o.mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return nullptr;
  }
  return se;
}

// Once mounted: what the start-up noted goes to the mount command's stderr
// (which ReportMounted then lets go of), the log, and /stats.
void Announce(int argc, char** argv, const DaemonOptions& o, Components& c,
              const std::string& log_note, int mounted_fd) {
  if (!log_note.empty()) {
    std::fprintf(stderr, "joaderfs: %s\n", log_note.c_str());
    spdlog::warn("{}", log_note);
  }
  for (const std::string& w : c.warnings()) {
    std::fprintf(stderr, "joaderfs: warning: %s\n", w.c_str());
    spdlog::warn("{}", w);
  }
  c.filesystem()->SetMountWarnings(c.warnings());
  if (mounted_fd >= 0) ReportMounted(mounted_fd);

  std::string argline;
  for (int i = 0; i < argc; ++i) argline += std::string(i ? " " : "") + argv[i];
  spdlog::info("joaderfs {} started: {}", JOADERFS_VERSION, argline);
  const Catalog& catalog = c.catalog();
  spdlog::info(
      "{}: {} samples in {} classes; size {}, ram_cache {} MiB, {} threads, {} reads in flight "
      "within {} MiB (round trip {} us), seed {}",
      catalog.source(), catalog.size(), catalog.num_classes(), o.size, o.ram_cache >> 20, o.threads,
      c.sizing().source_reads, c.sizing().source_in_flight >> 20,
      catalog.store()->RoundTrip().count(), o.seed);
}

// Serves the mount until its session ends: decodes, systemd's readiness
// and watchdog, HTTP /metrics, the idle reaper. Returns what the session
// loop returned (SessionEndedCleanly).
int Serve(fuse_session* se, const DaemonOptions& o, Components& c) {
  c.StartDecoding();
  // systemd (Type=notify): the mount serves. Without NOTIFY_SOCKET these
  // do nothing.
  sd_notifyf(0, "READY=1\nSTATUS=serving %s at %s", c.catalog().source().c_str(),
             o.mountpoint.c_str());
  uint64_t watchdog_usec = 0;
  const bool watchdog = sd_watchdog_enabled(0, &watchdog_usec) > 0;
  std::unique_ptr<MetricsEndpoint> metrics;  // stopped before the jobs it renders go
  if (!o.metrics_listen.empty()) {
    Filesystem* filesystem = c.filesystem();
    const Status s = MetricsEndpoint::Start(
        o.metrics_listen,
        [filesystem, &o] { return RenderMetrics(filesystem->Stats(), o.mountpoint); }, &metrics);
    if (!s.ok()) spdlog::error("{}; no HTTP /metrics until the next mount", s.message());
  }
  int ret;
  {
    IdleReaper reaper(c.jobs(), watchdog);
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
  return ret;
}

int Run(int argc, char** argv) {
  DaemonOptions o;
  fuse_args args;
  if (Status s = ParseOptions(argc, argv, &o, &args); !s.ok()) return Fail(s.message());
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
  if (Status s = PrepareMountpoint(o.mountpoint, &detached); !s.ok()) return Fail(s.message());
  if (detached) {
    std::fprintf(stderr, "joaderfs: %s was left by a joaderfs that died; detached it\n",
                 o.mountpoint.c_str());
  }
  const int mounted_fd = o.foreground ? -1 : ForkDaemon();
  std::unique_ptr<LogSink> log;
  std::string log_note;
  if (Status s = LogSink::Open(o, &log, &log_note); !s.ok()) return Fail(s.message());
  std::unique_ptr<Components> c;
  if (Status s = Components::Build(o, argv[0], &c); !s.ok()) return Fail(s.message());
  fuse_session* se = MountSession(o, &args, c->filesystem(), log.get());
  if (!se) return 1;
  Announce(argc, argv, o, *c, log_note, mounted_fd);
  const int ret = Serve(se, o, *c);
  // A decode finishing now replies to a read through the session, and
  // writes to the tiers: decoding stops before either goes.
  c->StopDecoding();
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  c->FlushDiskTier();
  log.reset();  // stops the SIGHUP reopener, flushes the log
  return SessionEndedCleanly(ret) ? 0 : 1;
}

}  // namespace
}  // namespace joaderfs

int main(int argc, char** argv) { return joaderfs::Run(argc, argv); }
