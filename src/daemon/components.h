// The daemon's composition root: every component of one mount, built from
// the mount's options in the order each needs the ones before it, and every
// default that is sized at mount from the data or the machine (the reads of
// SOURCE in flight and their bytes, the plans' cadence, the disk tier's
// budget, the remote tier's largest value). main.cc mounts the Filesystem
// and serves it; nothing here knows about the FUSE session.
//
// Order: the catalog (a scan of SOURCE), the planning group (it answers
// both tiers' RefCounts: made first, gone last), the cache_dir's lock and
// the disk tier, the remote tier, the decode pool, the reader of SOURCE,
// the RAM tier, the job store and the jobs it restores, the Filesystem.
// They go in the reverse order.
//
// Not thread-safe: built, started, stopped and destroyed on one thread; the
// components are thread-safe as their own headers say.

#ifndef JOADERFS_DAEMON_COMPONENTS_H_
#define JOADERFS_DAEMON_COMPONENTS_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/options.h"

namespace joaderfs {

class CacheDirLock;
class Catalog;
class DiskCache;
class Filesystem;
class JobManager;
class JobStore;
class LoaderPool;
class PlanGroup;
class RemoteTier;
class SampleCache;
class SourceReader;

// What the options leave to be sized once SOURCE is known.
struct MountSizing {
  unsigned source_reads = 0;      // reads of SOURCE in flight at once
  uint64_t source_in_flight = 0;  // their bytes, and those awaiting decode
};

class Components {
 public:
  // Builds every component for `o` (ParseOptions' result): starts libvips
  // (`program` is argv[0]), scans SOURCE, opens the tiers and the job store
  // and restores its jobs. A failure the user must fix (a SOURCE without
  // samples, a cache_dir another daemon holds, a key that does not load) is
  // returned as one line; a disk tier or job store that cannot be used is
  // logged and done without. Call after the fork: it starts threads.
  static Status Build(const DaemonOptions& o, const char* program,
                      std::unique_ptr<Components>* out);
  ~Components();
  Components(const Components&) = delete;
  Components& operator=(const Components&) = delete;

  Filesystem* filesystem() { return filesystem_.get(); }
  JobManager* jobs() { return jobs_.get(); }
  const Catalog& catalog() const { return *catalog_; }
  const MountSizing& sizing() const { return sizing_; }
  // Sizing warnings (a cgroup's limit, a disk tier smaller than the data),
  // for the mount command's stderr, the log and /stats.
  const std::vector<std::string>& warnings() const { return warnings_; }

  // Starts the decode threads: once the mount is up.
  void StartDecoding();
  // Stops what calls into the tiers and replies through the session: the
  // reader of SOURCE, the remote tier's lease waits (their callbacks submit
  // decodes), then the decode pool. Reads blocked in SOURCE are not waited
  // for (their threads are detached). Before the FUSE session goes.
  void StopDecoding();
  // Waits for the disk tier's queued writes: after the session is gone.
  void FlushDiskTier();

 private:
  Components() = default;
  Status OpenCatalog(const DaemonOptions& o);
  Status OpenDiskTier(const DaemonOptions& o);
  void OpenJobs(const DaemonOptions& o);

  MountSizing sizing_;
  std::vector<std::string> warnings_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<PlanGroup> group_;
  std::unique_ptr<CacheDirLock> cache_dir_lock_;  // held until exit
  std::unique_ptr<DiskCache> disk_;
  std::unique_ptr<RemoteTier> remote_;
  std::unique_ptr<LoaderPool> pool_;
  std::unique_ptr<SourceReader> reader_;
  std::unique_ptr<SampleCache> cache_;
  std::unique_ptr<JobStore> job_store_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<Filesystem> filesystem_;
};

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

// The disk tier's size when disk_cache is not given: the decoded set's
// estimate (`samples` x DecodedSampleEstimate(base)), at most 80% of
// `room` (CacheDirRoom: cache_dir's free space plus what the tier holds); at
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

}  // namespace joaderfs

#endif  // JOADERFS_DAEMON_COMPONENTS_H_
