// Lock order as a type. Every mutex of the daemon that may be held while
// another is taken has a rank; a thread may only take a mutex of a higher
// rank than every ranked mutex it already holds. A violation aborts at once
// with both ranks named, in every build, instead of deadlocking rarely: the
// check is a thread-local array lookup.
//
// The order follows the data path downwards (docs/design.md 3): the
// job manager may call the RAM tier, the RAM tier the disk tier, any of
// them the planning group, and the planning group nothing.
//
// RankedMutex meets BasicLockable and Lockable. Take it with MutexLock, which
// clang's -Wthread-safety understands (std::lock_guard it cannot see), and
// wait on it with std::condition_variable_any over the MutexLock. Mutex is
// the same without a rank, for leaf locks outside the data path.
//
// Clang's thread-safety analysis checks the locking at compile time. Members
// a mutex protects are declared GUARDED_BY it, and helpers that expect it
// held REQUIRES it; state reached only through guarded members (the job
// manager's jobs, lanes and readers) is covered by the REQUIRES of every
// helper that takes it. A clang build fails on an access without the lock
// (-Werror=thread-safety, CMakeLists.txt; scripts/test.sh's build-fuzz is
// such a build, of the daemon too); other compilers ignore the annotations.
// NO_THREAD_SAFETY_ANALYSIS only where the analysis cannot see why an access
// is safe, with the reason beside it (DiskCache's open path, which runs
// before the tier's writer thread exists).

#ifndef JOADERFS_COMMON_RANKED_MUTEX_H_
#define JOADERFS_COMMON_RANKED_MUTEX_H_

#include <array>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#if defined(__clang__)
#define JOADERFS_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define JOADERFS_THREAD_ANNOTATION(x)
#endif
#define CAPABILITY(x) JOADERFS_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY JOADERFS_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) JOADERFS_THREAD_ANNOTATION(guarded_by(x))
#define REQUIRES(...) JOADERFS_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) JOADERFS_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) JOADERFS_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) JOADERFS_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) JOADERFS_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// Only where no other thread can exist yet; say why beside it.
#define NO_THREAD_SAFETY_ANALYSIS JOADERFS_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace joaderfs {

enum class LockRank : int {
  kJobManager = 1,
  kSampleCache = 2,
  kDiskCache = 3,
  kPlanGroup = 4,  // the mount's planning group: a leaf
};

namespace lock_rank_internal {

constexpr int kRanks = 5;
// How many ranked mutexes of each rank this thread holds.
inline thread_local std::array<int, kRanks> held{};

inline void BeforeLock(int rank) {
  for (int r = rank; r < kRanks; ++r) {
    if (held[r] > 0) {
      std::fprintf(stderr, "joaderfs: lock order violated: taking rank %d while holding rank %d\n",
                   rank, r);
      std::abort();
    }
  }
}

}  // namespace lock_rank_internal

template <LockRank kRank>
class CAPABILITY("mutex") RankedMutex {
 public:
  void lock() ACQUIRE() {
    lock_rank_internal::BeforeLock(static_cast<int>(kRank));
    mu_.lock();
    ++lock_rank_internal::held[static_cast<int>(kRank)];
  }
  bool try_lock() TRY_ACQUIRE(true) {
    lock_rank_internal::BeforeLock(static_cast<int>(kRank));
    if (!mu_.try_lock()) return false;
    ++lock_rank_internal::held[static_cast<int>(kRank)];
    return true;
  }
  void unlock() RELEASE() {
    --lock_rank_internal::held[static_cast<int>(kRank)];
    mu_.unlock();
  }

 private:
  std::mutex mu_;
};

// A std::mutex that clang's analysis knows as a capability.
class CAPABILITY("mutex") Mutex {
 public:
  void lock() ACQUIRE() { mu_.lock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  void unlock() RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds `mu` for its scope, like std::unique_lock: BasicLockable itself, so
// std::condition_variable_any can release and retake it while waiting.
template <typename M>
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(M& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void lock() ACQUIRE() {
    mu_.lock();
    held_ = true;
  }
  void unlock() RELEASE() {
    held_ = false;
    mu_.unlock();
  }

 private:
  M& mu_;
  bool held_ = true;
};

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_RANKED_MUTEX_H_
