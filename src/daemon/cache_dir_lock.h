// One daemon per cache_dir (docs/design.md 2.1). The daemon holds a POSIX record
// lock on cache_dir/joaderfs.lock for as long as it runs, and writes its pid
// there for people. The kernel drops the lock when the process ends, however
// it ends, so a crashed daemon never blocks the next one.
//
// A cache_dir-wide lock, not only RocksDB's per-database LOCK: daemons of
// different SOURCEs would otherwise share one folder and each spend the
// whole disk_cache budget in it.
//
// POSIX locks belong to a process and are not inherited by fork(): take the
// lock in the process that serves the mount, after daemonizing.
//
// Owns its file descriptor. Not thread-safe; one per process.

#ifndef JOADERFS_DAEMON_CACHE_DIR_LOCK_H_
#define JOADERFS_DAEMON_CACHE_DIR_LOCK_H_

#include <memory>
#include <string>

#include "common/status.h"

namespace joaderfs {

class CacheDirLock {
 public:
  // Locks the existing folder `dir`. Busy, naming `dir` and the holder's
  // pid, when another process holds it; IOError when the file cannot be
  // made.
  static Status Acquire(const std::string& dir, std::unique_ptr<CacheDirLock>* out);
  ~CacheDirLock();  // closing the file releases the lock
  CacheDirLock(const CacheDirLock&) = delete;
  CacheDirLock& operator=(const CacheDirLock&) = delete;

 private:
  explicit CacheDirLock(int fd) : fd_(fd) {}

  const int fd_;
};

}  // namespace joaderfs

#endif  // JOADERFS_DAEMON_CACHE_DIR_LOCK_H_
