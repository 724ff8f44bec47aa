// The FUSE front end: the tree of docs/design.md 2.2 over the low-level API.
//
//   /README  /stats  /metrics  /dataset/{info,manifest}
//   /jobs/<id>/{spec,ids,next,status,resume,error}, or next.0 ... next.<W-1>
//   instead of next with ranks=W
//
// Inode numbers are fixed for the static nodes; every job gets a block of
// kJobInodeStride numbers (room for every rank's stream) that is never
// reused, so a stale inode of a
// removed job can only ever fail with ENOENT. Small files are rendered when
// opened and served from the handle (the manifest, from the catalog as it is
// read: ManifestView); `next` is a stream whose reads the
// JobManager answers asynchronously (a blocked read holds no thread).
//
// One Filesystem per process (interrupt callbacks find it through a global).

#ifndef JOADERFS_FS_FILESYSTEM_H_
#define JOADERFS_FS_FILESYSTEM_H_

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "catalog/catalog.h"
#include "common/latency_histogram.h"
#include "common/ranked_mutex.h"
#include "fs/render.h"
#include "jobs/job_manager.h"

namespace joaderfs {

class Filesystem {
 public:
  // `mountpoint` labels the /metrics series.
  Filesystem(const Catalog* catalog, JobManager* jobs, uint32_t default_size,
             std::string mountpoint);
  ~Filesystem();

  // Sizing warnings of the mount, shown in /stats; set before the session
  // runs.
  void SetMountWarnings(std::vector<std::string> warnings) { warnings_ = std::move(warnings); }

  // The job manager's figures with the FUSE layer's: the mount's warnings
  // and how long stream reads wait. Thread-safe.
  MountStats Stats() const;

  // The operations to pass to fuse_session_new(), with `this` as userdata.
  static const fuse_lowlevel_ops* Operations();

  // What the tree holds (see the top of this file).
  enum class Node {
    kNone,
    kRoot,
    kReadme,
    kStats,
    kMetrics,
    kDataset,
    kInfo,
    kManifest,
    kJobs,
    kJobDir,
    kSpec,
    kIds,
    kNext,
    kStatus,
    kResume,
    kError,
    kRankNext  // next.R
  };
  // Each node kind's behaviour (filesystem.cc holds the table).
  struct NodeKind;

 private:
  friend struct Ops;
  struct OpenFile;

  // Resolves an inode to its node kind and, for job nodes, the job name
  // (and for kRankNext the rank, if `rank` is given).
  Node Resolve(fuse_ino_t ino, std::string* job, uint32_t* rank = nullptr) const;
  fuse_ino_t JobInode(const std::string& job);
  // A stream file's size is what a reader opened now could read
  // (JobManager::StreamSize), else 0.
  bool Attr(fuse_ino_t ino, struct stat* st) const;
  // Renders a read-only file's content when it is opened.
  Status Render(OpenFile* file) const;
  // Charges what the rendered `file` holds to `uid` (open_file_bytes()).
  Status ChargeRendered(OpenFile* file, uint32_t uid) const;

  void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name);
  // With an open stream file (`fi`, as for lseek's SEEK_END), the size is
  // that reader's position plus what it has yet to read.
  void Getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void Setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set);
  void Readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off);
  void Mkdir(fuse_req_t req, fuse_ino_t parent, const char* name);
  void Rmdir(fuse_req_t req, fuse_ino_t parent, const char* name);
  void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi);
  void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
             fuse_file_info* fi);
  void Flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void Release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);

  const Catalog* catalog_;
  JobManager* jobs_;
  const uint32_t default_size_;
  const std::string mountpoint_;
  const uid_t uid_;
  const gid_t gid_;
  const timespec mount_time_;
  std::vector<std::string> warnings_;  // immutable once the session runs
  // Shared with replies in flight, which may outlive a read's request.
  std::shared_ptr<LatencyHistogram> read_wait_ = std::make_shared<LatencyHistogram>();
  std::atomic<uint64_t> next_read_token_{1};
  // /dataset/manifest, made at its first open and read by every handle.
  mutable std::once_flag manifest_once_;
  mutable std::unique_ptr<ManifestView> manifest_;

  mutable Mutex mu_;
  std::map<std::string, fuse_ino_t> job_inodes_ GUARDED_BY(mu_);
  std::unordered_map<fuse_ino_t, std::string> job_names_ GUARDED_BY(mu_);  // by dir inode
  fuse_ino_t next_job_inode_ GUARDED_BY(mu_);
  // The size of what the latest open of each rendered or control file gave
  // its reader: what stat says of it, so that cp, file servers and the
  // textfile collector see the bytes an open reads (fstat reaches the
  // daemon without the handle).
  std::unordered_map<fuse_ino_t, uint64_t> opened_size_ GUARDED_BY(mu_);
};

}  // namespace joaderfs

#endif  // JOADERFS_FS_FILESYSTEM_H_
