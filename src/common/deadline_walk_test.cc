#include "common/deadline_walk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace joaderfs {
namespace {

using std::chrono::milliseconds;

// Steps that never return until released, as a stat on a hung filesystem.
struct Gate {
  std::mutex mu;
  std::condition_variable opened;
  bool open = false;
  void Wait() {
    std::unique_lock lock(mu);
    opened.wait(lock, [&] { return open; });
  }
  void Open() {
    std::lock_guard lock(mu);
    open = true;
    opened.notify_all();
  }
};

std::vector<size_t> Batches(size_t n, size_t each) {
  std::vector<size_t> out;
  for (size_t from = 0; from < n; from += each) out.push_back(from);
  return out;
}

TEST(ParallelWalkTest, EveryEntryOnceOnSeveralThreads) {
  constexpr size_t kN = 100'000;
  std::vector<int> seen(kN);
  std::atomic<int> made{0};
  const std::vector<size_t> given_up =
      ParallelWalkWithDeadline(kN, Batches(kN, 1000), 4, milliseconds(10'000), [&] {
        ++made;
        return [&](size_t i, const WalkPublisher& p) { p.Publish([&] { ++seen[i]; }); };
      });
  EXPECT_TRUE(given_up.empty());
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<long>(kN));
  EXPECT_GE(made.load(), 2);
}

// A step stuck for good costs its entry only: the rest of its batch goes to
// another thread, and what the stuck one publishes later is dropped.
TEST(ParallelWalkTest, StuckEntriesAreGivenUpAndTheRestWalked) {
  constexpr size_t kN = 2'000;
  auto gate = std::make_shared<Gate>();
  std::vector<int> seen(kN);
  const std::vector<size_t> given_up =
      ParallelWalkWithDeadline(kN, Batches(kN, 300), 2, milliseconds(200), [&, gate] {
        return [&, gate](size_t i, const WalkPublisher& p) {
          if (i == 7 || i == 1'500) gate->Wait();
          p.Publish([&] { ++seen[i]; });
        };
      });
  EXPECT_EQ(given_up, (std::vector<size_t>{7, 1'500}));
  gate->Open();
  std::this_thread::sleep_for(milliseconds(50));
  for (size_t i = 0; i < kN; ++i) EXPECT_EQ(seen[i], i == 7 || i == 1'500 ? 0 : 1) << i;
}

// A cancelled walk returns at once though a step hangs, well before the
// timeout, and nothing a thread publishes afterwards is taken.
TEST(ParallelWalkTest, ACancelledWalkReturnsAtOnce) {
  constexpr size_t kN = 1'000;
  auto gate = std::make_shared<Gate>();
  std::atomic<bool> cancel{false};
  std::vector<int> seen(kN);
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(100));
    cancel = true;
  });
  const auto start = std::chrono::steady_clock::now();
  ParallelWalkWithDeadline(
      kN, Batches(kN, 100), 2, milliseconds(60'000),
      [&, gate] {
        return [&, gate](size_t i, const WalkPublisher& p) {
          if (i == 3) gate->Wait();
          p.Publish([&] { ++seen[i]; });
        };
      },
      &cancel);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5'000));
  canceller.join();
  const std::vector<int> at_return = seen;
  gate->Open();
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(seen, at_return);
  EXPECT_EQ(seen[3], 0);
}

TEST(ParallelWalkTest, NothingToWalk) {
  EXPECT_TRUE(ParallelWalkWithDeadline(0, {}, 4, milliseconds(10), [] {
                return [](size_t, const WalkPublisher&) {};
              }).empty());
}

}  // namespace
}  // namespace joaderfs
