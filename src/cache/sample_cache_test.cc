#include "cache/sample_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loader/decoder.h"
#include "testing/test_util.h"

namespace joaderfs {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

using testing::NeededCounts;
using testing::PoolGate;
using testing::TempDir;

::testing::Environment* const kDecoderEnvironment =
    testing::AddDecoderEnvironment("sample_cache_test");

// Samples 0-3 are good kSize x kSize PNGs (class "a"), sample 4 is not an
// image. PNGs are their own base image at any base resolution.
constexpr uint32_t kSize = 32;
constexpr uint64_t kBytes = kSize * kSize * 3;
constexpr SampleId kBad = 4;

class SampleCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_ / "a");
    fs::create_directories(dir_ / "b");
    for (int i = 0; i < 4; ++i) {
      testing::WriteNoiseImage(dir_ / ("a/" + std::to_string(i) + ".png"), kSize, kSize, i + 1);
    }
    testing::WriteFile(dir_ / "b/bad.jpg", "not a jpeg at all");
    const Status s = Catalog::Open(dir_.path(), &catalog_);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_EQ(catalog_->size(), 5u);
    ASSERT_EQ(catalog_->relpath(kBad), "b/bad.jpg");
  }

  // Acquire() that waits for its callback.
  static SamplePtr AcquireSync(SampleCache* cache, SampleId id) {
    auto p = std::make_shared<std::promise<SamplePtr>>();
    auto f = p->get_future();
    cache->Acquire(id, [p](const SamplePtr& s) { p->set_value(s); });
    if (f.wait_for(10s) != std::future_status::ready) {
      ADD_FAILURE() << "no callback for sample " << id;
      return nullptr;
    }
    return f.get();
  }

  // Acquires and releases at once: a sample nobody pins any more.
  static SamplePtr Touch(SampleCache* cache, SampleId id) {
    SamplePtr s = AcquireSync(cache, id);
    cache->Release(id);
    return s;
  }

  TempDir dir_;
  std::unique_ptr<Catalog> catalog_;
  NeededCounts counts_;
};

TEST_F(SampleCacheTest, DecodesOnMissAndHitsAfterwards) {
  LoaderPool pool(2);
  pool.Start();
  SampleCache cache(catalog_.get(), &pool, nullptr, &counts_, kSize, 1 << 20);
  EXPECT_EQ(cache.budget(), uint64_t{1} << 20);
  EXPECT_EQ(cache.disk(), nullptr);
  const SamplePtr first = AcquireSync(&cache, 0);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->width, kSize);
  EXPECT_EQ(first->height, kSize);
  EXPECT_EQ(first->channels, 3u);
  CacheStats st = cache.Stats();
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.hits, 0u);
  EXPECT_EQ(st.decoded, 1u);
  EXPECT_EQ(st.entries, 1u);
  EXPECT_EQ(st.bytes, kBytes);
  EXPECT_EQ(st.pinned_bytes, kBytes);
  EXPECT_EQ(st.loading, 0u);
  EXPECT_EQ(st.budget, uint64_t{1} << 20);

  // A ready sample is handed over at once, on the caller's thread.
  SamplePtr again;
  std::thread::id where;
  cache.Acquire(0, [&](const SamplePtr& s) {
    again = s;
    where = std::this_thread::get_id();
  });
  EXPECT_EQ(again, first);
  EXPECT_EQ(where, std::this_thread::get_id());
  st = cache.Stats();
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.decoded, 1u);

  // Released by both holders it stays cached (within budget).
  cache.Release(0);
  cache.Release(0);
  st = cache.Stats();
  EXPECT_EQ(st.pinned_bytes, 0u);
  EXPECT_EQ(st.entries, 1u);
  EXPECT_EQ(st.bytes, kBytes);
  EXPECT_EQ(Touch(&cache, 0), first);
  EXPECT_EQ(cache.Stats().decoded, 1u);
}

// Entries are base images: decoded at the key's resolution, uncropped.
TEST_F(SampleCacheTest, MatchesDecodeBase) {
  LoaderPool pool(1);
  pool.Start();
  SampleCache cache(catalog_.get(), &pool, nullptr, &counts_, kSize, 1 << 20);
  const SamplePtr s = AcquireSync(&cache, 2);
  ASSERT_NE(s, nullptr);
  DecodedSample direct;
  ASSERT_TRUE(DecodeBase(catalog_->path(2), kSize, &direct).ok());
  ASSERT_EQ(s->width, direct.width);
  ASSERT_EQ(s->height, direct.height);
  ASSERT_EQ(s->bytes(), direct.bytes());
  EXPECT_EQ(std::memcmp(s->pixels.get(), direct.pixels.get(), direct.bytes()), 0);
}

TEST_F(SampleCacheTest, SingleFlight) {
  LoaderPool pool(1);
  pool.Start();
  SampleCache cache(catalog_.get(), &pool, nullptr, &counts_, kSize, 1 << 20);
  PoolGate gate(&pool, 1);  // the decode cannot finish before every Acquire is in

  constexpr int kCallers = 16;
  std::mutex mu;
  std::vector<SamplePtr> got;
  std::atomic<int> calls{0};
  std::promise<void> all_called;
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&] {
      cache.Acquire(1, [&](const SamplePtr& s) {
        {
          std::lock_guard lock(mu);
          got.push_back(s);
        }
        if (++calls == kCallers) all_called.set_value();
      });
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(calls.load(), 0);
  CacheStats st = cache.Stats();
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.hits, uint64_t{kCallers - 1});
  EXPECT_EQ(st.decoded, 0u);
  EXPECT_EQ(st.loading, 1u);
  EXPECT_EQ(pool.queue_depth(), 1u) << "one decode queued for all callers";

  gate.Release();
  ASSERT_EQ(all_called.get_future().wait_for(10s), std::future_status::ready);
  ASSERT_EQ(got.size(), size_t{kCallers});
  ASSERT_NE(got[0], nullptr);
  for (const SamplePtr& s : got) EXPECT_EQ(s, got[0]);
  st = cache.Stats();
  EXPECT_EQ(st.decoded, 1u);
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.loading, 0u);
  EXPECT_EQ(st.entries, 1u);
  EXPECT_EQ(st.bytes, kBytes);
  EXPECT_EQ(st.pinned_bytes, kBytes);
}

// A cache decodes at its base; at every base an entry is a whole image.
TEST_F(SampleCacheTest, KeysDifferByBase) {
  LoaderPool pool(1);
  pool.Start();
  CacheStats st;
  for (uint32_t base : {16u, kSize, 0u}) {
    SampleCache cache(catalog_.get(), &pool, nullptr, &counts_, base, 1 << 20);
    EXPECT_EQ(cache.base(), base);
    const SamplePtr s = Touch(&cache, 0);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->width, kSize);
    EXPECT_EQ(s->height, kSize);
    const CacheStats one = cache.Stats();
    st.misses += one.misses;
    st.decoded += one.decoded;
    st.entries += one.entries;
    st.bytes += one.bytes;
  }
  EXPECT_EQ(st.misses, 3u);
  EXPECT_EQ(st.decoded, 3u);
  EXPECT_EQ(st.entries, 3u);
  EXPECT_EQ(st.bytes, 3 * kBytes);
}

TEST_F(SampleCacheTest, PinnedSamplesAreNeverEvicted) {
  LoaderPool pool(1);
  pool.Start();
  SampleCache cache(catalog_.get(), &pool, nullptr, &counts_, kSize, kBytes);  // room for one
  const SamplePtr a = AcquireSync(&cache, 0);
  const SamplePtr b = AcquireSync(&cache, 1);
  const SamplePtr c = AcquireSync(&cache, 2);
  CacheStats st = cache.Stats();
  EXPECT_EQ(st.evictions, 0u);
  EXPECT_EQ(st.entries, 3u);
  EXPECT_EQ(st.bytes, 3 * kBytes);
  EXPECT_EQ(st.pinned_bytes, 3 * kBytes);
  EXPECT_GE(cache.CommittedBytes(), 3 * kBytes);
  // Still pinned: found without a decode.
  EXPECT_EQ(AcquireSync(&cache, 1), b);
  cache.Release(1);
  EXPECT_EQ(cache.Stats().decoded, 3u);

  // Unpinned one by one, they go as long as the cache is over budget.
  cache.Release(0);
  st = cache.Stats();
  EXPECT_EQ(st.evictions, 1u);
  EXPECT_EQ(st.entries, 2u);
  EXPECT_EQ(st.pinned_bytes, 2 * kBytes);
  cache.Release(1);
  cache.Release(2);
  st = cache.Stats();
  EXPECT_EQ(st.evictions, 2u);
  EXPECT_EQ(st.entries, 1u);
  EXPECT_EQ(st.bytes, kBytes);
  EXPECT_EQ(st.pinned_bytes, 0u);
  EXPECT_LE(st.bytes, st.budget);
  EXPECT_EQ(cache.CommittedBytes(), 0u);
}

TEST_F(SampleCacheTest, UnpinnedSamplesStayWithinBudget) {
  LoaderPool pool(1);
  pool.Start();
  SampleCache cache(catalog_.get(), &pool, nullptr, &counts_, kSize, 2 * kBytes);
  for (int round = 0; round < 3; ++round) {
    for (SampleId id = 0; id < 4; ++id) {
      ASSERT_NE(Touch(&cache, id), nullptr);
      const CacheStats st = cache.Stats();
      EXPECT_LE(st.bytes, st.budget) << "round " << round << " id " << id;
      EXPECT_LE(st.entries, 2u);
    }
  }
  const CacheStats st = cache.Stats();
  EXPECT_EQ(st.entries, 2u);
  EXPECT_EQ(st.misses + st.hits, 12u);
  EXPECT_EQ(st.decoded, st.misses);
  EXPECT_EQ(st.evictions, st.decoded - 2);
}

TEST_F(SampleCacheTest, LeastRecentlyUsedGoesFirstAmongEqualCounts) {
  LoaderPool pool(1);
  pool.Start();
  SampleCache cache(catalog_.get(), &pool, nullptr, &counts_, kSize, 2 * kBytes);
  const SamplePtr a = Touch(&cache, 0);
  Touch(&cache, 1);
  EXPECT_EQ(Touch(&cache, 0), a);  // 0 is now the most recent
  Touch(&cache, 2);                // over budget: 1 goes
  CacheStats st = cache.Stats();
  EXPECT_EQ(st.evictions, 1u);
  EXPECT_EQ(st.entries, 2u);
  EXPECT_EQ(st.misses, 3u);
  EXPECT_EQ(Touch(&cache, 0), a);
  Touch(&cache, 2);
  EXPECT_EQ(cache.Stats().misses, 3u) << "0 and 2 should have stayed";
  Touch(&cache, 1);
  EXPECT_EQ(cache.Stats().misses, 4u) << "1 should have been evicted";
}

// Every decode is written to the disk tier; later loads come from it.
TEST_F(SampleCacheTest, WritesThroughToDiskAndLoadsFromIt) {
  LoaderPool pool(1);
  pool.Start();
  std::unique_ptr<DiskCache> disk;
  ASSERT_TRUE(
      DiskCache::Open(dir_ / "cache", catalog_.get(), &counts_, kSize, 1 << 30, &disk).ok());
  {
    SampleCache cache(catalog_.get(), &pool, disk.get(), &counts_, kSize, kBytes);  // room for one
    const SamplePtr first = Touch(&cache, 0);
    Touch(&cache, 1);
    disk->Flush();
    EXPECT_EQ(disk->Stats().writes, 2u);
    EXPECT_EQ(cache.Stats().evictions, 1u);
    const SamplePtr again = Touch(&cache, 0);  // evicted: from disk
    ASSERT_TRUE(again);
    EXPECT_EQ(cache.Stats().decoded, 2u);
    EXPECT_EQ(disk->Stats().hits, 1u);
    EXPECT_EQ(std::memcmp(first->pixels.get(), again->pixels.get(), first->bytes()), 0);
  }
  disk->Flush();
  EXPECT_EQ(disk->Stats().writes, 2u) << "what the tier holds is not written again";
}

TEST_F(SampleCacheTest, FewestNeedingJobsGoesFirst) {
  LoaderPool pool(1);
  pool.Start();
  SampleCache cache(catalog_.get(), &pool, nullptr, &counts_, kSize, 2 * kBytes);
  counts_.needed = {{0, 0}, {1, 3}, {2, 1}, {3, 0}};
  Touch(&cache, 1);  // needed by 3 jobs, the oldest
  Touch(&cache, 0);  // needed by none
  Touch(&cache, 2);  // over budget: 0 goes although 1 is older
  EXPECT_EQ(cache.Stats().evictions, 1u);
  Touch(&cache, 1);
  Touch(&cache, 2);
  EXPECT_EQ(cache.Stats().misses, 3u) << "1 and 2 should have stayed";
  Touch(&cache, 0);  // over budget again: 2 (needed by 1) goes, not 1 (by 3)
  Touch(&cache, 1);
  EXPECT_EQ(cache.Stats().misses, 4u) << "1 should have stayed";
}

TEST_F(SampleCacheTest, EvictedSampleStaysValidForItsHolders) {
  LoaderPool pool(1);
  pool.Start();
  SampleCache cache(catalog_.get(), &pool, nullptr, &counts_, kSize, kBytes);
  const SamplePtr a = Touch(&cache, 0);
  ASSERT_NE(a, nullptr);
  const std::vector<uint8_t> copy(a->pixels.get(), a->pixels.get() + a->bytes());
  Touch(&cache, 1);
  Touch(&cache, 2);
  EXPECT_EQ(cache.Stats().evictions, 2u);
  EXPECT_EQ(std::vector<uint8_t>(a->pixels.get(), a->pixels.get() + a->bytes()), copy);
}

TEST_F(SampleCacheTest, SampleLargerThanBudgetIsDeliveredNotKept) {
  LoaderPool pool(1);
  pool.Start();
  SampleCache cache(catalog_.get(), &pool, nullptr, &counts_, kSize, kBytes - 1);
  const SamplePtr s = Touch(&cache, 3);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->bytes(), kBytes);
  CacheStats st = cache.Stats();
  EXPECT_EQ(st.entries, 0u);
  EXPECT_EQ(st.bytes, 0u);
  EXPECT_NE(Touch(&cache, 3), nullptr);
  st = cache.Stats();
  EXPECT_EQ(st.misses, 2u);
  EXPECT_EQ(st.decoded, 2u);
}

TEST_F(SampleCacheTest, ReleasedWhileLoadingIsKeptUnpinned) {
  LoaderPool pool(1);
  pool.Start();
  SampleCache cache(catalog_.get(), &pool, nullptr, &counts_, kSize, 1 << 20);
  std::promise<SamplePtr> got;
  {
    PoolGate gate(&pool, 1);
    cache.Acquire(0, [&](const SamplePtr& s) { got.set_value(s); });
    cache.Release(0);  // the job went away before the decode ran
  }
  auto f = got.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  const SamplePtr s = f.get();
  ASSERT_NE(s, nullptr);
  const CacheStats st = cache.Stats();
  EXPECT_EQ(st.entries, 1u);
  EXPECT_EQ(st.pinned_bytes, 0u);
  EXPECT_EQ(st.loading, 0u);
  EXPECT_EQ(cache.CommittedBytes(), 0u);
  EXPECT_EQ(Touch(&cache, 0), s);
  EXPECT_EQ(cache.Stats().decoded, 1u);
}

TEST_F(SampleCacheTest, ExtraReleaseIsHarmless) {
  LoaderPool pool(1);
  pool.Start();
  SampleCache cache(catalog_.get(), &pool, nullptr, &counts_, kSize, kBytes);
  cache.Release(3);  // never acquired
  const SamplePtr a = AcquireSync(&cache, 0);
  cache.Release(0);
  cache.Release(0);                            // one too many
  const SamplePtr b = AcquireSync(&cache, 1);  // pinned; evicts 0
  const SamplePtr c = AcquireSync(&cache, 2);  // pinned too
  const CacheStats st = cache.Stats();
  EXPECT_EQ(st.pinned_bytes, 2 * kBytes);
  EXPECT_EQ(st.entries, 2u);
  EXPECT_EQ(st.evictions, 1u);
}

TEST_F(SampleCacheTest, BadImageIsRemembered) {
  LoaderPool pool(1);
  pool.Start();
  SampleCache cache(catalog_.get(), &pool, nullptr, &counts_, kSize, 1 << 20);
  PoolGate gate(&pool, 1);
  constexpr int kCallers = 8;
  std::atomic<int> calls{0}, nulls{0};
  std::promise<void> all_called;
  for (int i = 0; i < kCallers; ++i) {
    cache.Acquire(kBad, [&](const SamplePtr& s) {
      if (!s) ++nulls;
      if (++calls == kCallers) all_called.set_value();
    });
  }
  gate.Release();
  ASSERT_EQ(all_called.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_EQ(nulls.load(), kCallers);
  CacheStats st = cache.Stats();
  EXPECT_EQ(st.failed, 1u);
  EXPECT_EQ(st.decoded, 0u);
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.entries, 0u);
  EXPECT_EQ(st.bytes, 0u);
  EXPECT_EQ(st.loading, 0u);
  for (int i = 0; i < kCallers; ++i) cache.Release(kBad);
  EXPECT_EQ(cache.CommittedBytes(), 0u);

  // Asked again later: answered at once with null, never decoded again.
  bool called = false;
  SamplePtr again = std::make_shared<DecodedSample>();
  cache.Acquire(kBad, [&](const SamplePtr& s) {
    called = true;
    again = s;
  });
  EXPECT_TRUE(called);
  EXPECT_EQ(again, nullptr);
  st = cache.Stats();
  EXPECT_EQ(st.failed, 1u);
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(pool.queue_depth(), 0u);

  // Good samples are unaffected.
  EXPECT_NE(AcquireSync(&cache, 0), nullptr);
}

// A bad sample is tried again as soon as its file changes, and its file is
// looked at, not decoded, while it stays as it was.
TEST_F(SampleCacheTest, BadSampleHealsWhenItsFileChanges) {
  LoaderPool pool(1);
  pool.Start();
  FailureRetry retry;
  retry.backoff = retry.cap = std::chrono::hours(1);
  retry.check_interval = std::chrono::seconds(0);
  SampleCache cache(catalog_.get(), &pool, nullptr, &counts_, kSize, 1 << 20, retry);
  EXPECT_EQ(Touch(&cache, kBad), nullptr);
  EXPECT_EQ(Touch(&cache, kBad), nullptr);  // stat'ed, unchanged
  CacheStats st = cache.Stats();
  EXPECT_EQ(st.failed, 1u);
  EXPECT_EQ(st.healed, 0u);
  EXPECT_EQ(st.retries, 0u);
  EXPECT_EQ(st.decoded, 0u);

  testing::WriteNoiseImage(catalog_->path(kBad), kSize, kSize, 9);  // repaired in place
  const SamplePtr healed = Touch(&cache, kBad);
  ASSERT_NE(healed, nullptr);
  EXPECT_EQ(healed->width, kSize);
  st = cache.Stats();
  EXPECT_EQ(st.failed, 0u);
  EXPECT_EQ(st.healed, 1u);
  EXPECT_EQ(st.retries, 1u);
  EXPECT_EQ(st.decoded, 1u);
  EXPECT_EQ(Touch(&cache, kBad), healed);  // now an ordinary entry
}

// Without a change to its file, a bad sample is decoded again only when its
// back-off has passed, and each failed retry doubles the back-off.
TEST_F(SampleCacheTest, BadSampleIsRetriedOnlyAfterItsBackoff) {
  LoaderPool pool(1);
  pool.Start();
  FailureRetry retry;
  retry.backoff = std::chrono::seconds(1);
  retry.cap = std::chrono::seconds(2);
  retry.check_interval = std::chrono::hours(1);  // never looks at the file
  SampleCache cache(catalog_.get(), &pool, nullptr, &counts_, kSize, 1 << 20, retry);
  // Every load of the bad sample is a miss: misses count its tries.
  EXPECT_EQ(Touch(&cache, kBad), nullptr);
  EXPECT_EQ(cache.Stats().misses, 1u);
  EXPECT_EQ(Touch(&cache, kBad), nullptr);
  EXPECT_EQ(cache.Stats().misses, 1u);  // within 1 s: not tried
  std::this_thread::sleep_for(1100ms);
  EXPECT_EQ(Touch(&cache, kBad), nullptr);
  EXPECT_EQ(cache.Stats().misses, 2u);  // tried, failed: 2 s now
  std::this_thread::sleep_for(1100ms);
  EXPECT_EQ(Touch(&cache, kBad), nullptr);
  EXPECT_EQ(cache.Stats().misses, 2u);  // within 2 s: not tried
  std::this_thread::sleep_for(1200ms);
  // Repaired with the back-off over: loads at this try.
  testing::WriteNoiseImage(catalog_->path(kBad), kSize, kSize, 9);
  EXPECT_NE(Touch(&cache, kBad), nullptr);
  EXPECT_EQ(cache.Stats().misses, 3u);
  EXPECT_EQ(cache.Stats().failed, 0u);
}

// The Release() of an Acquire() answered null comes after it; when a retry
// of the same sample is loading by then, it must not unpin the retry.
TEST_F(SampleCacheTest, ReleaseOfANullAnswerLeavesARetryPinned) {
  LoaderPool pool(1);
  pool.Start();
  FailureRetry retry;
  retry.backoff = retry.cap = std::chrono::hours(1);
  retry.check_interval = std::chrono::seconds(0);
  SampleCache cache(catalog_.get(), &pool, nullptr, &counts_, kSize, 1 << 20, retry);
  EXPECT_EQ(AcquireSync(&cache, kBad), nullptr);  // job 1: failed load
  EXPECT_EQ(AcquireSync(&cache, kBad), nullptr);  // job 2: unchanged file
  testing::WriteNoiseImage(catalog_->path(kBad), kSize, kSize, 9);
  const SamplePtr healed = AcquireSync(&cache, kBad);  // job 3: healed, pinned
  ASSERT_NE(healed, nullptr);
  cache.Release(kBad);  // jobs 1 and 2 are done with their skips
  cache.Release(kBad);
  EXPECT_EQ(cache.Stats().pinned_bytes, healed->bytes());
  cache.Release(kBad);  // job 3
  EXPECT_EQ(cache.Stats().pinned_bytes, 0u);
  EXPECT_EQ(cache.CommittedBytes(), 0u);
}

TEST_F(SampleCacheTest, ConcurrentAcquiresOfManyKeys) {
  LoaderPool pool(4);
  pool.Start();
  // Two mounts' caches, at two bases, over one pool.
  SampleCache at_size(catalog_.get(), &pool, nullptr, &counts_, kSize, 1 << 20);
  SampleCache at_16(catalog_.get(), &pool, nullptr, &counts_, 16, 1 << 20);
  constexpr int kThreads = 8, kRounds = 20;
  std::atomic<int> calls{0};
  std::promise<void> all_called;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        const SampleId id = static_cast<SampleId>((t + r) % 5);
        SampleCache* cache = (r % 2) ? &at_size : &at_16;
        cache->Acquire(id, [&, id, cache](const SamplePtr& s) {
          if (!s != (id == kBad)) ADD_FAILURE() << "sample " << id << (s ? " decoded" : " null");
          cache->Release(id);
          if (++calls == kThreads * kRounds) all_called.set_value();
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(all_called.get_future().wait_for(10s), std::future_status::ready);
  CacheStats st;
  for (const SampleCache* cache : {&at_size, &at_16}) {
    const CacheStats one = cache->Stats();
    st.misses += one.misses;
    st.hits += one.hits;
    st.decoded += one.decoded;
    st.failed += one.failed;
    st.entries += one.entries;
    st.bytes += one.bytes;
    st.pinned_bytes += one.pinned_bytes;
    st.loading += one.loading;
  }
  EXPECT_EQ(st.misses, 10u);  // 5 ids x 2 bases, each loaded once
  EXPECT_EQ(st.hits, uint64_t{kThreads * kRounds} - 10);
  EXPECT_EQ(st.decoded, 8u);
  EXPECT_EQ(st.failed, 2u);  // the bad id at both bases
  EXPECT_EQ(st.entries, 8u);
  EXPECT_EQ(st.bytes, 8 * kBytes);  // whole PNGs at either base
  EXPECT_EQ(st.pinned_bytes, 0u);
  EXPECT_EQ(st.loading, 0u);
}

}  // namespace
}  // namespace joaderfs
