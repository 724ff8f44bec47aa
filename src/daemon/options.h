// The daemon's command line (DESIGN.md 2.1): `joaderfs [options] SOURCE
// MOUNTPOINT` with `-o key=value,...` so that fstab and autofs work. Our
// keys are taken out; the rest (allow_other, -d, ...) is left for libfuse.

#ifndef JOADERFS_DAEMON_OPTIONS_H_
#define JOADERFS_DAEMON_OPTIONS_H_

#include <fuse_opt.h>

#include <cstdint>
#include <string>

#include "common/status.h"
#include "loader/decoder.h"

namespace joaderfs {

struct DaemonOptions {
  std::string source;
  std::string mountpoint;
  uint64_t ram_cache = 0;
  std::string cache_dir;  // empty when the disk tier is off (cache_dir=none)
  uint64_t disk_cache = 10ULL << 30;
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
  uint64_t max_pixels = kDefaultMaxPixels;
  bool dependent_sampling = true;  // sampler=dsa (default) or isa
  std::string log;                 // a file, "syslog", or empty for the default
  std::string log_level = "info";
  bool foreground = false;
  bool debug = false;
  bool help = false;
  bool version = false;
};

// The longest job_idle_timeout: ten years, far from overflowing the clock.
inline constexpr uint64_t kMaxIdleTimeout = 10ULL * 365 * 24 * 3600;
// The longest retry_failed: a day (a cap of 60 days).
inline constexpr uint64_t kMaxRetryFailed = 24 * 3600;

// Parses argv into `options` and leaves libfuse's options in `fuse_args`
// (free them with fuse_opt_free_args). Checks each value on its own and
// looks at no file; the seed and cache_dir get their defaults. Fails with
// InvalidArgument naming the bad option.
Status ParseCommandLine(int argc, char** argv, DaemonOptions* options, fuse_args* fuse_args);

// ParseCommandLine, then the checks and defaults that need the machine.
// Fails with InvalidArgument naming the bad option, or NotFound for a
// missing SOURCE; creates cache_dir and fails when it is not writable.
Status ParseOptions(int argc, char** argv, DaemonOptions* options, fuse_args* fuse_args);

// The text of --help.
std::string UsageText(const char* program);

}  // namespace joaderfs

#endif  // JOADERFS_DAEMON_OPTIONS_H_
