#include "common/ranked_mutex.h"

#include <gtest/gtest.h>

#include <mutex>

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
        RankedMutex<LockRank::kPlanGroups> groups;
        RankedMutex<LockRank::kSampleCache> cache;
        std::lock_guard a(groups);
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

}  // namespace
}  // namespace joaderfs
