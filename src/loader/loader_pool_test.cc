#include "loader/loader_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "testing/test_util.h"

namespace joaderfs {
namespace {

using namespace std::chrono_literals;

using testing::Eventually;

TEST(LoaderPoolTest, RunsEveryTask) {
  LoaderPool pool(4);
  EXPECT_EQ(pool.threads(), 4u);
  pool.Start();
  constexpr int kTasks = 200;
  std::vector<std::atomic<int>> runs(kTasks);
  std::atomic<int> total{0};
  for (int i = 0; i < kTasks; ++i) {
    pool.Submit([&, i] {
      ++runs[i];
      ++total;
    });
  }
  ASSERT_TRUE(Eventually([&] { return total.load() == kTasks; })) << total.load();
  for (int i = 0; i < kTasks; ++i) EXPECT_EQ(runs[i].load(), 1) << i;
  EXPECT_TRUE(Eventually([&] { return pool.queue_depth() == 0; }));
}

TEST(LoaderPoolTest, RunsTasksOnItsOwnThreads) {
  LoaderPool pool(2);
  pool.Start();
  std::promise<std::thread::id> where;
  pool.Submit([&] { where.set_value(std::this_thread::get_id()); });
  auto f = where.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  EXPECT_NE(f.get(), std::this_thread::get_id());
}

TEST(LoaderPoolTest, TasksSubmittedBeforeStartWait) {
  LoaderPool pool(2);
  std::atomic<int> ran{0};
  for (int i = 0; i < 5; ++i) pool.Submit([&] { ++ran; });
  EXPECT_EQ(pool.queue_depth(), 5u);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(ran.load(), 0);
  pool.Start();
  ASSERT_TRUE(Eventually([&] { return ran.load() == 5; })) << ran.load();
  EXPECT_EQ(pool.queue_depth(), 0u);
}

// Renders of cached samples go ahead of queued decodes, in their own order.
TEST(LoaderPoolTest, UrgentTasksRunFirst) {
  LoaderPool pool(1);
  std::vector<int> order;  // only the pool's one thread touches it
  std::vector<bool> on_worker;
  std::promise<void> done;
  for (int i = 0; i < 3; ++i) pool.Submit([&, i] { order.push_back(i); });
  for (int i = 10; i < 13; ++i) {
    pool.SubmitUrgent([&, i] {
      order.push_back(i);
      on_worker.push_back(LoaderPool::OnWorkerThread());
    });
  }
  pool.Submit([&] { done.set_value(); });
  EXPECT_EQ(pool.queue_depth(), 7u);
  pool.Start();
  ASSERT_EQ(done.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_EQ(order, (std::vector<int>{10, 11, 12, 0, 1, 2}));
  EXPECT_EQ(on_worker, (std::vector<bool>{true, true, true}));
  EXPECT_FALSE(LoaderPool::OnWorkerThread());
}

TEST(LoaderPoolTest, OneThreadRunsTasksInSubmissionOrder) {
  LoaderPool pool(1);
  std::vector<int> order;  // only the pool's one thread touches it
  std::promise<void> done;
  for (int i = 0; i < 50; ++i) pool.Submit([&, i] { order.push_back(i); });
  pool.Submit([&] { done.set_value(); });
  pool.Start();
  ASSERT_EQ(done.get_future().wait_for(10s), std::future_status::ready);
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
}

TEST(LoaderPoolTest, QueueDepthCountsWaitingTasks) {
  LoaderPool pool(1);
  pool.Start();
  std::promise<void> started, release;
  auto release_future = release.get_future().share();
  pool.Submit([&started, release_future] {
    started.set_value();
    release_future.wait();
  });
  ASSERT_EQ(started.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_EQ(pool.queue_depth(), 0u);
  std::atomic<int> ran{0};
  for (int i = 0; i < 3; ++i) pool.Submit([&] { ++ran; });
  EXPECT_EQ(pool.queue_depth(), 3u);
  EXPECT_EQ(ran.load(), 0);
  release.set_value();
  ASSERT_TRUE(Eventually([&] { return ran.load() == 3; }));
  EXPECT_EQ(pool.queue_depth(), 0u);
}

TEST(LoaderPoolTest, BusySecondsGrowsWithWork) {
  LoaderPool pool(2);
  EXPECT_EQ(pool.busy_seconds(), 0.0);
  pool.Start();
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(pool.busy_seconds(), 0.0) << "idle threads are not busy";
  for (int i = 0; i < 4; ++i) pool.Submit([] { std::this_thread::sleep_for(25ms); });
  // Four tasks of at least 25 ms each: at least 0.1 s summed over threads.
  EXPECT_TRUE(Eventually([&] { return pool.busy_seconds() >= 0.1; })) << pool.busy_seconds();
  const double after = pool.busy_seconds();
  EXPECT_LT(after, 5.0);
  pool.Submit([] { std::this_thread::sleep_for(30ms); });
  EXPECT_TRUE(Eventually([&] { return pool.busy_seconds() >= after + 0.03; }))
      << pool.busy_seconds();
}

// The busy share of the last seconds: every thread working (a task still
// running counts) is near 1, an idle pool 0, one thread of two busy about
// a half.
TEST(LoaderPoolTest, BusyFractionTellsASaturatedPool) {
  LoaderPool idle(2);
  idle.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(idle.busy_fraction(), 0);

  LoaderPool pool(2);
  pool.Start();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  for (int i = 0; i < 2; ++i) pool.Submit([released] { released.wait(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_GT(pool.busy_fraction(), 0.9);  // both tasks still running
  EXPECT_LE(pool.busy_fraction(), 1.0);
  release.set_value();

  LoaderPool half(2);
  half.Start();
  half.Submit([] { std::this_thread::sleep_for(std::chrono::milliseconds(600)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  // 0.6 s of 2 x 0.7 s or more (the sleep may overrun on a loaded machine).
  EXPECT_GT(half.busy_fraction(), 0.2);
  EXPECT_LT(half.busy_fraction(), 0.55);
}

TEST(LoaderPoolTest, DestructorDropsTasksNotStarted) {
  std::atomic<int> ran{0};
  {
    LoaderPool pool(2);
    for (int i = 0; i < 5; ++i) pool.Submit([&] { ++ran; });
  }
  EXPECT_EQ(ran.load(), 0);
}

TEST(LoaderPoolTest, DestructorWaitsForRunningTask) {
  std::atomic<bool> finished{false};
  std::promise<void> started;
  {
    LoaderPool pool(1);
    pool.Start();
    pool.Submit([&] {
      started.set_value();
      std::this_thread::sleep_for(50ms);
      finished = true;
    });
    ASSERT_EQ(started.get_future().wait_for(10s), std::future_status::ready);
  }
  EXPECT_TRUE(finished.load());
}

}  // namespace
}  // namespace joaderfs
