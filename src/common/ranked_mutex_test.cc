#include "common/ranked_mutex.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

namespace joaderfs {
namespace {

TEST(RankedMutex, DownTheDataPathIsAllowed) {
  RankedMutex<LockRank::kJobManager> manager;
  RankedMutex<LockRank::kSampleCache> cache;
  RankedMutex<LockRank::kPlanGroup> group;
  std::lock_guard a(manager);
  std::lock_guard b(cache);
  std::lock_guard c(group);
}

TEST(RankedMutex, ReleasedLocksNoLongerCount) {
  RankedMutex<LockRank::kSampleCache> cache;
  RankedMutex<LockRank::kJobManager> manager;
  { std::lock_guard a(cache); }
  std::lock_guard b(manager);
  std::lock_guard c(cache);
}

TEST(RankedMutexDeathTest, UpTheDataPathAborts) {
  EXPECT_DEATH(
      {
        RankedMutex<LockRank::kPlanGroup> group;
        RankedMutex<LockRank::kSampleCache> cache;
        std::lock_guard a(group);
        std::lock_guard b(cache);
      },
      "lock order violated: taking rank 2 while holding rank 4");
}

TEST(RankedMutexDeathTest, SameRankTwiceAborts) {
  EXPECT_DEATH(
      {
        RankedMutex<LockRank::kPlanGroup> one;
        RankedMutex<LockRank::kPlanGroup> two;
        std::lock_guard a(one);
        std::lock_guard b(two);
      },
      "lock order violated");
}

// MutexLock counts towards the lock order like any other holder.
TEST(MutexLockDeathTest, UpTheDataPathAborts) {
  EXPECT_DEATH(
      {
        RankedMutex<LockRank::kPlanGroup> group;
        RankedMutex<LockRank::kSampleCache> cache;
        MutexLock a(group);
        MutexLock b(cache);
      },
      "lock order violated: taking rank 2 while holding rank 4");
}

// A lock released early is not released again by its destructor.
TEST(MutexLock, UnlockedEarlyIsReleasedOnce) {
  RankedMutex<LockRank::kSampleCache> cache;
  const int rank = static_cast<int>(LockRank::kSampleCache);
  {
    MutexLock lock(cache);
    EXPECT_EQ(lock_rank_internal::held[rank], 1);
    lock.unlock();
    EXPECT_EQ(lock_rank_internal::held[rank], 0);
  }
  EXPECT_EQ(lock_rank_internal::held[rank], 0);
  if (cache.try_lock()) {
    cache.unlock();
  } else {
    ADD_FAILURE() << "the mutex is still locked";
  }
}

// condition_variable_any waits on a MutexLock and gives it back held. The
// setter can only run once the wait has released the lock.
TEST(MutexLock, ConditionVariableWaitsOnIt) {
  RankedMutex<LockRank::kDiskCache> mu;
  const int rank = static_cast<int>(LockRank::kDiskCache);
  std::condition_variable_any ready;
  bool flag = false;
  std::thread setter;
  {
    MutexLock lock(mu);
    setter = std::thread([&] {
      MutexLock lock(mu);
      flag = true;
      ready.notify_all();
    });
    ready.wait(lock, [&] { return flag; });
    EXPECT_EQ(lock_rank_internal::held[rank], 1);
  }
  EXPECT_EQ(lock_rank_internal::held[rank], 0);
  setter.join();
  if (mu.try_lock()) {
    mu.unlock();
  } else {
    ADD_FAILURE() << "the mutex is still locked";
  }
}

}  // namespace
}  // namespace joaderfs
