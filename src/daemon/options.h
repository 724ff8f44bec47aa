// The daemon's command line (docs/design.md 2.1): `joaderfs [options] SOURCE
// MOUNTPOINT` with `-o key=value,...` so that fstab and autofs work. Our
// keys are taken out; the rest (allow_other, -d, ...) is left for libfuse.

#ifndef JOADERFS_DAEMON_OPTIONS_H_
#define JOADERFS_DAEMON_OPTIONS_H_

#include <fuse_opt.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
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
  // 0 until sized from the data and cache_dir's free space (DefaultDiskCache),
  // when not given.
  uint64_t disk_cache = 0;
  bool purge_disk_cache = false;  // empty the disk tier at mount
  // remote_cache= servers (host:port); empty: no remote tier.
  std::vector<std::string> remote_cache;
  uint64_t remote_publish = UINT64_MAX;
  std::string remote_key;      // a key file, or "insecure"; required with remote_cache
  std::string remote_old_key;  // a former key's file; empty: none
  std::string remote_tls;      // a CA bundle; empty: plain TCP
  std::string remote_tls_cert;
  std::string metrics_listen;  // ADDR:PORT of the HTTP /metrics; empty: none  // this daemon's
                               // certificate and key (PEM); empty: none
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
  // Reads of SOURCE in flight at once (I/O threads); 0: DefaultSourceReads.
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
// Adding an option: a field in DaemonOptions, a Key and a row in
// options.cc's kMountOptions, its case in Apply(), and its entry in the
// three documents with the same default (the test names any that lacks it).
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
// Reads of SOURCE in flight when source_reads is not given: one per decode
// thread for local files; for a store `round_trip` away, enough that each
// decode thread has the next image's bytes when it finishes one (a decode
// takes ~2 ms: 1 + round_trip / 2 ms reads per decode thread), at most 256.
unsigned DefaultSourceReads(unsigned threads, std::chrono::microseconds round_trip);
// The bound on bytes of SOURCE in flight (read or being read, not yet
// decoded) when source_in_flight is not given: room for `reads` reads (the
// source_reads in effect, so sized from the round trip too) of the mean
// image four times over (one round running, three read and awaiting their
// decodes), at least 64 MiB and at most 1 GiB.
uint64_t DefaultSourceInFlight(unsigned reads, uint64_t mean_image_bytes);

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

// The memory limit of the cgroup this process runs in: the lowest limit on
// its path to the root, of cgroup v2 (memory.max) and v1
// (memory.limit_in_bytes), or nullopt when none. `proc_self_cgroup` is the
// text of /proc/self/cgroup; `read_file` returns a file's text, or nullopt.
std::optional<uint64_t> CgroupMemoryLimit(
    std::string_view proc_self_cgroup,
    const std::function<std::optional<std::string>(const std::string& path)>& read_file);

// ram_cache's default: a quarter of the machine's RAM or of the cgroup's
// limit, whichever is lower.
uint64_t DefaultRamCache(uint64_t ram, std::optional<uint64_t> cgroup_limit);

// The disk tier's size when disk_cache is not given: the decoded set's
// estimate (`samples` x DecodedSampleEstimate(base)), at most 80% of
// `room` (cache_dir's free space plus what the tier holds already); at
// least 64 MiB where the room allows, for an estimate that errs low.
struct DiskCacheSizing {
  uint64_t budget = 0;
  uint64_t decoded_estimate = 0;  // the set's bytes: more than `budget` when it cannot fit
};
DiskCacheSizing DefaultDiskCache(uint64_t samples, uint32_t base, uint64_t room);
// A decoded sample's bytes on disk at `base`: a 4:3 RGB image whose shorter
// side is `base`, plus 1/8 for the slot and the index; 1 MiB for base 0
// (full size: unknown before decoding).
uint64_t DecodedSampleEstimate(uint32_t base);

// The default of max_unread_per_user: half of ram_cache, at most 2 GiB, so
// that the daemon's bound (docs/admin-guide.md "Limits") follows the memory it may use:
// a 300 MiB cgroup gets ram_cache 75 MiB and an allowance of 37.5 MiB a
// user, where a fixed 2 GiB let one user's readers get it OOM-killed.
uint64_t DefaultUnreadPerUser(uint64_t ram_cache);

// cache_dir's free space plus the bytes of the files in it.
uint64_t CacheDirRoom(const std::string& dir);

// The text of --help.
std::string UsageText(const char* program);

}  // namespace joaderfs

#endif  // JOADERFS_DAEMON_OPTIONS_H_
