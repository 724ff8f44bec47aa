// Lock order as a type. Every mutex of the daemon that may be held while
// another is taken has a rank; a thread may only take a mutex of a higher
// rank than every ranked mutex it already holds. A violation aborts at once
// with both ranks named, in every build, instead of deadlocking rarely: the
// check is a thread-local array lookup.
//
// The order follows the data path downwards (DESIGN.md 3, STYLE.md): the
// job manager may call the RAM tier, the RAM tier the disk tier, any of
// them the planning groups, and the planning groups nothing.
//
// RankedMutex meets BasicLockable and Lockable: use it with std::lock_guard,
// std::unique_lock and std::condition_variable_any.

#ifndef JOADERFS_COMMON_RANKED_MUTEX_H_
#define JOADERFS_COMMON_RANKED_MUTEX_H_

#include <array>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace joaderfs {

enum class LockRank : int {
  kJobManager = 1,
  kSampleCache = 2,
  kDiskCache = 3,
  kPlanGroups = 4,  // the registry of groups
  kPlanGroup = 5,   // one group: a leaf
};

namespace lock_rank_internal {

constexpr int kRanks = 6;
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
class RankedMutex {
 public:
  void lock() {
    lock_rank_internal::BeforeLock(static_cast<int>(kRank));
    mu_.lock();
    ++lock_rank_internal::held[static_cast<int>(kRank)];
  }
  bool try_lock() {
    lock_rank_internal::BeforeLock(static_cast<int>(kRank));
    if (!mu_.try_lock()) return false;
    ++lock_rank_internal::held[static_cast<int>(kRank)];
    return true;
  }
  void unlock() {
    --lock_rank_internal::held[static_cast<int>(kRank)];
    mu_.unlock();
  }

 private:
  std::mutex mu_;
};

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_RANKED_MUTEX_H_
