// The daemon's command line (docs/design.md 2.1): `joaderfs [options] SOURCE
// MOUNTPOINT` with `-o key=value,...` so that fstab and autofs work. Our
// keys are taken out; the rest (allow_other, -d, ...) is left for libfuse.

#ifndef JOADERFS_DAEMON_OPTIONS_H_
#define JOADERFS_DAEMON_OPTIONS_H_

#include <fuse_opt.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "loader/decoder.h"

namespace joaderfs {

struct DaemonOptions {
  std::string source;
  std::string mountpoint;
  uint64_t ram_cache = 0;
  // The cgroup memory limit ram_cache's default was taken from, when it is
  // below the machine's RAM; 0 otherwise.
  uint64_t ram_cache_cgroup_limit = 0;
  std::string cache_dir;  // empty when the disk tier is off (cache_dir=none)
  // 0 when not given: sized at mount from the data and cache_dir's free
  // space (daemon/components.h DefaultDiskCache).
  uint64_t disk_cache = 0;
  bool purge_disk_cache = false;  // empty the disk tier at mount
  // remote_cache= servers (host:port); empty: no remote tier.
  std::vector<std::string> remote_cache;
  uint64_t remote_publish = UINT64_MAX;
  uint64_t remote_timeout_ms = 100;  // one memcached call, whole
  std::string remote_key;            // a key file, or "insecure"; required with remote_cache
  std::string remote_old_key;        // a former key's file; empty: none
  std::string remote_tls;            // a CA bundle; empty: plain TCP
  std::string remote_tls_cert;       // this daemon's certificate and key (PEM); empty: none
  std::string metrics_listen;        // ADDR:PORT of the HTTP /metrics; empty: none
  unsigned threads = 0;
  uint32_t size = 224;
  // The cache's base resolution (loader/decoder.h DecodeBase); 256 by
  // measurement (docs/augmentation.md).
  uint32_t base = 256;
  uint64_t seed = 0;
  uint32_t lookahead = 128;
  uint64_t job_idle_timeout = 600;
  // The first back-off of a sample that failed to load (cache/sample_cache.h
  // FailureRetry), in seconds.
  uint64_t retry_failed = 30;
  // The deadline of one read of SOURCE (loader/source_reader.h), in seconds.
  uint64_t read_timeout = 30;
  // Reads of SOURCE in flight at once (I/O threads); 0: DefaultSourceReads
  // (daemon/components.h).
  unsigned source_reads = 0;
  // Bytes of SOURCE read or being read and not yet decoded; 0:
  // DefaultSourceInFlight.
  uint64_t source_in_flight = 0;
  uint64_t max_pixels = kDefaultMaxPixels;
  // Per-user limits (jobs/job_manager.h UserLimits; docs/admin-guide.md "Limits").
  uint32_t max_jobs_per_user = 64;
  uint32_t max_streams_per_user = 1024;
  uint32_t max_readers_per_user = 256;
  uint64_t max_unread_per_user = 0;  // 0: DefaultUnreadPerUser(ram_cache)
  bool limit_root = false;
  std::string label_key = "cls";  // tar shards (catalog/catalog.h CatalogOptions)
  std::string s3_endpoint;        // s3:// SOURCEs (catalog/s3_client.h S3Options)
  std::string s3_region;
  std::string s3_credentials;  // a credentials file; empty: the environment's keys
  std::string s3_profile;
  bool dependent_sampling = true;  // sampler=dsa (default) or isa
  bool drift_bound = true;         // jobs/drift_hold.h DriftHold::Holds
  std::string log;                 // a file, "syslog", or empty for the default
  std::string log_level = "info";
  bool foreground = false;
  bool debug = false;
  bool help = false;
  bool version = false;
};

// One of our -o options: the one description of it, from which --help
// (UsageText) and libfuse's option list are made, and to which
// doc_tables_test holds the option tables of docs/reference.md and docs/design.md
// and the OPTIONS of joaderfs(8), name for name and default for default.
//
// Adding an option: a field in DaemonOptions, its row in options.cc's
// kOptions (how its value is read and checked, where it goes, these
// words), and its entry in the three documents with the same default (the
// test names any that lacks it).
struct MountOptionInfo {
  std::string_view name;
  std::string_view value;     // what --help shows after "name="
  std::string_view fallback;  // the default, in the words every document uses
  std::string_view help;      // --help's text, before "(default ...)"
};

// Every option of ours, in --help's order.
std::vector<MountOptionInfo> MountOptionTable();

// The longest job_idle_timeout: ten years, far from overflowing the clock.
inline constexpr uint64_t kMaxIdleTimeout = 10ULL * 365 * 24 * 3600;
// The highest per-user limit an option may set: far past any lab's needs,
// and what the daemon can hold for one user.
inline constexpr uint64_t kMaxPerUserLimit = 1 << 20;
// The longest retry_failed: a day (a cap of 60 days).
inline constexpr uint64_t kMaxRetryFailed = 24 * 3600;
// The longest read_timeout: a day.
inline constexpr uint64_t kMaxReadTimeout = 24 * 3600;

// Parses argv into `options` and leaves libfuse's options in `fuse_args`
// (free them with fuse_opt_free_args). Checks each value on its own, and
// has libfuse check its options (an unknown one is refused naming the
// nearest valid one); looks at no file; the seed and cache_dir get their
// defaults. Fails with InvalidArgument naming the bad option. Not
// thread-safe (it sets libfuse's log function for the while).
Status ParseCommandLine(int argc, char** argv, DaemonOptions* options, fuse_args* fuse_args);

// ParseCommandLine, then the checks and defaults that need the machine.
// Fails with InvalidArgument naming the bad option, or NotFound for a
// missing SOURCE; creates cache_dir and fails when it is not writable.
Status ParseOptions(int argc, char** argv, DaemonOptions* options, fuse_args* fuse_args);

// The cache_dir when none is given: /var/cache/joaderfs for root, else
// $XDG_CACHE_HOME/joaderfs or ~/.cache/joaderfs.
std::string DefaultCacheDir();

// The default of max_unread_per_user: half of ram_cache, at most 2 GiB, so
// that the daemon's bound (docs/admin-guide.md "Limits") follows the memory it may use:
// a 300 MiB cgroup gets ram_cache 75 MiB and an allowance of 37.5 MiB a
// user, where a fixed 2 GiB would let one user's readers get it OOM-killed.
uint64_t DefaultUnreadPerUser(uint64_t ram_cache);

// The text of --help.
std::string UsageText(const char* program);

}  // namespace joaderfs

#endif  // JOADERFS_DAEMON_OPTIONS_H_
