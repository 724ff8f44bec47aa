#include "cache/disk_cache.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "testing/test_util.h"

namespace joaderfs {
namespace {
namespace fs = std::filesystem;

// A temporary folder with an ImageFolder of placeholder files (the disk
// tier never decodes) and a cache folder beside it.
class DiskCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 8; ++i) WriteSource(i, "content " + std::to_string(i));
    ReopenCatalog();
  }

  void WriteSource(int i, const std::string& content) {
    testing::WriteFile(root_ / ("src/c/img" + std::to_string(i) + ".jpg"), content);
  }
  void ReopenCatalog() { ASSERT_TRUE(Catalog::Open(root_ / "src", &catalog_).ok()); }
  std::string cache_dir() const { return root_ / "cache"; }

  // The jobs' needs, as the planning group would answer them: the input of
  // the eviction order under test.
  struct NeededCounts final : RefCounts {
    void Counts(std::span<const SampleId> ids, std::span<uint32_t> counts) const override {
      for (size_t i = 0; i < ids.size(); ++i) counts[i] = ids[i] < two_jobs_need_below ? 2 : 0;
    }
    SampleId two_jobs_need_below = 0;
  };
  NeededCounts counts_;

  std::unique_ptr<DiskCache> OpenCache(uint64_t budget = 1 << 30, uint32_t base = 16) {
    std::unique_ptr<DiskCache> cache;
    Status s = DiskCache::Open(cache_dir(), catalog_.get(), &counts_, base, budget, &cache);
    EXPECT_TRUE(s.ok()) << s.message();
    return cache;
  }

  // A sample whose pixels are all `value`.
  static SamplePtr Sample(uint8_t value, uint32_t side = 16) {
    auto s = std::make_shared<DecodedSample>();
    s->height = s->width = side;
    s->pixels.reset(new uint8_t[s->bytes()], std::default_delete<uint8_t[]>());
    std::memset(s->pixels.get(), value, s->bytes());
    return s;
  }

  static bool AllPixels(const DecodedSample& s, uint8_t value) {
    for (uint64_t i = 0; i < s.bytes(); ++i) {
      if (s.pixels.get()[i] != value) return false;
    }
    return true;
  }

  // Source files 8..n-1 beside SetUp's, and a catalog of all n.
  void GrowSource(int n) {
    for (int i = 8; i < n; ++i) WriteSource(i, "content " + std::to_string(i));
    ReopenCatalog();
  }

  // Whether every sample below n is served with the pixels `value(id)`.
  template <typename Value>
  static void ExpectServed(DiskCache* cache, SampleId n, Value value) {
    for (SampleId id = 0; id < n; ++id) {
      DecodedSample out;
      const Status s = cache->Get(id, &out);
      ASSERT_TRUE(s.ok()) << id << ": " << s.message();
      EXPECT_TRUE(AllPixels(out, value(id))) << id;
    }
  }

  // The rebuild held while a test looks at a tier before it.
  struct HoldRebuild {
    HoldRebuild() { DiskCache::TEST_HoldRebuild(true); }
    ~HoldRebuild() { DiskCache::TEST_HoldRebuild(false); }
  };

  testing::TempDir root_{"joaderfs-disk-test"};
  std::unique_ptr<Catalog> catalog_;
};

TEST_F(DiskCacheTest, StoresAndServesSamples) {
  auto cache = OpenCache();
  DecodedSample out;
  EXPECT_EQ(cache->Get(3, &out).code(), Status::Code::kNotFound);
  cache->PutAsync(3, Sample(42));
  cache->Flush();
  ASSERT_TRUE(cache->Get(3, &out).ok());
  EXPECT_EQ(out.height, 16u);
  EXPECT_EQ(out.width, 16u);
  EXPECT_EQ(out.channels, 3u);
  EXPECT_TRUE(AllPixels(out, 42));
  // Another sample is another entry.
  EXPECT_EQ(cache->Get(4, &out).code(), Status::Code::kNotFound);
  const DiskCacheStats stats = cache->Stats();
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 2u);
  EXPECT_EQ(stats.entries, 1u);
  EXPECT_EQ(stats.bytes, DiskCache::SlotBytes(16 * 16 * 3));
  // A mount at another base misses what this one stored.
  cache.reset();
  cache = OpenCache(1 << 30, 32);
  EXPECT_EQ(cache->Get(3, &out).code(), Status::Code::kNotFound);
}

TEST_F(DiskCacheTest, SurvivesReopen) {
  {
    auto cache = OpenCache();
    for (SampleId id = 0; id < 8; ++id) cache->PutAsync(id, Sample(static_cast<uint8_t>(id)));
  }  // the destructor finishes queued writes
  auto cache = OpenCache();
  cache->WaitForRebuild();
  EXPECT_EQ(cache->Stats().entries, 8u);
  for (SampleId id = 0; id < 8; ++id) {
    DecodedSample out;
    ASSERT_TRUE(cache->Get(id, &out).ok()) << id;
    EXPECT_TRUE(AllPixels(out, static_cast<uint8_t>(id)));
  }
}

TEST_F(DiskCacheTest, ModifiedSourceFileIsAMissOthersStay) {
  {
    auto cache = OpenCache();
    for (SampleId id = 0; id < 8; ++id) cache->PutAsync(id, Sample(7));
  }
  WriteSource(5, "a different and longer content");
  ReopenCatalog();
  auto cache = OpenCache();
  DecodedSample out;
  for (SampleId id = 0; id < 8; ++id) {
    EXPECT_EQ(cache->Get(id, &out).ok(), id != 5) << id;
  }
}

TEST_F(DiskCacheTest, SecondDaemonOnTheSameSourceIsRefused) {
  auto first = OpenCache();
  std::unique_ptr<DiskCache> second;
  const Status s = DiskCache::Open(cache_dir(), catalog_.get(), &counts_, 16, 1 << 30, &second);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("in use"), std::string::npos) << s.message();
}

TEST_F(DiskCacheTest, CorruptBytesAreNeverServed) {
  {
    auto cache = OpenCache();
    for (SampleId id = 0; id < 8; ++id) cache->PutAsync(id, Sample(200));
  }
  // Flip bytes in the middle of every slot file: the pixels live there.
  std::string db;
  for (const auto& e : fs::directory_iterator(cache_dir())) db = e.path().string();
  int damaged = 0;
  for (const auto& e : fs::directory_iterator(db)) {
    if (e.path().filename().string().rfind("slots-", 0) != 0) continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto size = fs::file_size(e.path());
    for (uint64_t at = size / 4; at < size * 3 / 4; at += 97) {
      f.seekp(static_cast<std::streamoff>(at));
      f.put(static_cast<char>(0x5a));
    }
    ++damaged;
  }
  ASSERT_GT(damaged, 0);
  auto cache = OpenCache();
  int served = 0, refused = 0;
  for (SampleId id = 0; id < 8; ++id) {
    DecodedSample out;
    const Status s = cache->Get(id, &out);
    if (s.ok()) {
      ++served;
      EXPECT_TRUE(AllPixels(out, 200)) << "sample " << id << " served with damaged pixels";
    } else {
      ++refused;
      EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.message();
      // A refused entry is gone: the next look is a plain miss.
      EXPECT_EQ(cache->Get(id, &out).code(), Status::Code::kNotFound);
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_EQ(cache->Stats().corrupt, static_cast<uint64_t>(refused));
}

TEST_F(DiskCacheTest, ASlotHoldingAnotherSamplesBytesIsNeverServed) {
  // What a reused slot looks like after a crash lost the eviction's index
  // delete: the slot header names another key.
  const uint64_t slot = DiskCache::SlotBytes(16 * 16 * 3);
  std::string slots;
  {
    auto cache = OpenCache();
    cache->PutAsync(0, Sample(10));
    cache->Flush();
    cache->PutAsync(1, Sample(11));
    cache->Flush();
    slots = cache->path() + "/slots-" + std::to_string(slot);
  }
  const auto size = fs::file_size(slots);  // two slots, the last unpadded
  ASSERT_GT(size, slot);
  {
    std::fstream f(slots, std::ios::in | std::ios::out | std::ios::binary);
    std::string second(size - slot, '\0');
    f.seekg(static_cast<std::streamoff>(slot));
    ASSERT_TRUE(f.read(second.data(), static_cast<std::streamsize>(second.size())));
    f.seekp(0);
    ASSERT_TRUE(f.write(second.data(), static_cast<std::streamsize>(second.size())));
  }
  auto cache = OpenCache();
  cache->WaitForRebuild();  // free slots are known once it is done
  DecodedSample out;
  EXPECT_EQ(cache->Get(0, &out).code(), Status::Code::kCorruption);
  EXPECT_EQ(cache->Get(0, &out).code(), Status::Code::kNotFound);
  ASSERT_TRUE(cache->Get(1, &out).ok());
  EXPECT_TRUE(AllPixels(out, 11));
  // The freed slot is used again.
  cache->PutAsync(2, Sample(12));
  cache->Flush();
  EXPECT_EQ(fs::file_size(slots), size);
  ASSERT_TRUE(cache->Get(2, &out).ok());
  EXPECT_TRUE(AllPixels(out, 12));
}

TEST_F(DiskCacheTest, OverBudgetDropsWhatFewestJobsNeed) {
  const uint64_t one = DiskCache::SlotBytes(16 * 16 * 3);
  auto cache = OpenCache(4 * one);
  // Ids 0-3 are needed by two jobs, ids 4-7 by none.
  counts_.two_jobs_need_below = 4;
  for (SampleId id = 4; id < 8; ++id) cache->PutAsync(id, Sample(1));
  cache->Flush();
  for (SampleId id = 0; id < 4; ++id) {
    cache->PutAsync(id, Sample(2));
    cache->Flush();
  }
  const DiskCacheStats stats = cache->Stats();
  EXPECT_LE(stats.bytes, 4 * one);
  EXPECT_EQ(stats.evictions, 4u);
  // Each eviction compares several random entries, so the needed ones
  // survive unless a sample drew only them; with 8 draws that is rare, and
  // the fixed seed makes this run deterministic.
  DecodedSample out;
  int needed_kept = 0;
  for (SampleId id = 0; id < 4; ++id) needed_kept += cache->Get(id, &out).ok();
  EXPECT_GE(needed_kept, 3);
}

TEST_F(DiskCacheTest, ReopenServesEveryEntryBeforeTheRebuild) {
  {
    auto cache = OpenCache();
    for (SampleId id = 0; id < 8; ++id) cache->PutAsync(id, Sample(static_cast<uint8_t>(id + 1)));
  }
  HoldRebuild hold;
  auto cache = OpenCache();
  // Open returned with nothing rebuilt in RAM, and reads go to RocksDB.
  EXPECT_EQ(cache->Stats().entries, 0u);
  ExpectServed(cache.get(), 8, [](SampleId id) { return static_cast<uint8_t>(id + 1); });
  // A write of a stored sample is no second entry.
  cache->PutAsync(3, Sample(99));
  cache->Flush();
  EXPECT_EQ(cache->Stats().writes, 0u);
  DiskCache::TEST_HoldRebuild(false);
  cache->WaitForRebuild();
  EXPECT_EQ(cache->Stats().entries, 8u);
  EXPECT_EQ(cache->Stats().bytes, 8 * DiskCache::SlotBytes(16 * 16 * 3));
  ExpectServed(cache.get(), 8, [](SampleId id) { return static_cast<uint8_t>(id + 1); });
}

TEST_F(DiskCacheTest, WritesDuringTheRebuildNeverOverwriteAUsedSlot) {
  GrowSource(64);
  {
    auto cache = OpenCache();
    for (SampleId id = 0; id < 32; ++id) cache->PutAsync(id, Sample(static_cast<uint8_t>(id)));
  }
  {
    HoldRebuild hold;
    auto cache = OpenCache();
    for (SampleId id = 32; id < 64; ++id) cache->PutAsync(id, Sample(static_cast<uint8_t>(id)));
    cache->Flush();
    EXPECT_EQ(cache->Stats().writes, 32u);
    ExpectServed(cache.get(), 64, [](SampleId id) { return static_cast<uint8_t>(id); });
  }
  // And the next rebuild finds both kinds, each slot named once.
  auto cache = OpenCache();
  cache->WaitForRebuild();
  EXPECT_EQ(cache->Stats().entries, 64u);
  EXPECT_EQ(cache->Stats().corrupt, 0u);
  ExpectServed(cache.get(), 64, [](SampleId id) { return static_cast<uint8_t>(id); });
}

TEST_F(DiskCacheTest, FreeSlotsAreReusedOnceRebuilt) {
  const uint64_t one = DiskCache::SlotBytes(16 * 16 * 3);
  std::string slots;
  {
    auto cache = OpenCache(4 * one);
    for (SampleId id = 0; id < 4; ++id) cache->PutAsync(id, Sample(1));
    cache->Flush();
    slots = cache->path() + "/slots-" + std::to_string(one);
  }
  const auto size = fs::file_size(slots);
  auto cache = OpenCache(4 * one);
  cache->WaitForRebuild();
  // Each write evicts one entry and takes its slot: the file never grows.
  for (SampleId id = 4; id < 8; ++id) {
    cache->PutAsync(id, Sample(2));
    cache->Flush();
    EXPECT_EQ(fs::file_size(slots), size) << id;
  }
  const DiskCacheStats stats = cache->Stats();
  EXPECT_EQ(stats.evictions, 4u);
  EXPECT_EQ(stats.entries, 4u);
  int served = 0;
  for (SampleId id = 0; id < 8; ++id) {
    DecodedSample out;
    if (!cache->Get(id, &out).ok()) continue;
    ++served;
    EXPECT_TRUE(AllPixels(out, id < 4 ? 1 : 2)) << id;
  }
  EXPECT_EQ(served, 4);
}

TEST_F(DiskCacheTest, AnotherBasesEntriesGoFirstAndTheirKeysWithThem) {
  const uint64_t one = DiskCache::SlotBytes(16 * 16 * 3);
  {
    auto cache = OpenCache(4 * one, 16);
    for (SampleId id = 0; id < 4; ++id) cache->PutAsync(id, Sample(1));
  }
  {
    // Ids 4-7 written at base 32 are needed by nobody either: only the
    // order of kinds puts base 16's entries first.
    auto cache = OpenCache(4 * one, 32);
    cache->WaitForRebuild();
    EXPECT_EQ(cache->Stats().entries, 4u);
    for (SampleId id = 4; id < 8; ++id) {
      cache->PutAsync(id, Sample(2));
      cache->Flush();
    }
    EXPECT_EQ(cache->Stats().evictions, 4u);
    for (SampleId id = 4; id < 8; ++id) {
      DecodedSample out;
      ASSERT_TRUE(cache->Get(id, &out).ok()) << id;
      EXPECT_TRUE(AllPixels(out, 2));
    }
  }
  // Their index keys went with their slots: a plain miss at base 16, never
  // an entry naming a slot that base 32's samples now hold.
  auto cache = OpenCache(4 * one, 16);
  for (SampleId id = 0; id < 4; ++id) {
    DecodedSample out;
    EXPECT_EQ(cache->Get(id, &out).code(), Status::Code::kNotFound) << id;
  }
  cache->WaitForRebuild();
  EXPECT_EQ(cache->Stats().entries, 4u);
  EXPECT_EQ(cache->Stats().corrupt, 0u);
}

TEST_F(DiskCacheTest, ABurstOfWritesIsNotDropped) {
  constexpr SampleId kBurst = 2048;  // four times what the queue once held
  GrowSource(kBurst);
  auto cache = OpenCache();
  for (SampleId id = 0; id < kBurst; ++id) cache->PutAsync(id, Sample(static_cast<uint8_t>(id)));
  cache->Flush();
  EXPECT_EQ(cache->Stats().write_drops, 0u);
  EXPECT_EQ(cache->Stats().writes, kBurst);
  ExpectServed(cache.get(), kBurst, [](SampleId id) { return static_cast<uint8_t>(id); });
}

// A burst the writer takes in one batch, larger than the whole budget: the
// slot files never grow past the budget (what does not fit is dropped and
// counted), where a batch written whole once took 8 MiB of a 6 MiB tier.
TEST_F(DiskCacheTest, ABatchLargerThanTheBudgetIsCutToIt) {
  constexpr SampleId kBurst = 2048;
  GrowSource(kBurst);
  const uint64_t budget = 64 * DiskCache::SlotBytes(16 * 16 * 3);
  auto cache = OpenCache(budget);
  for (SampleId id = 0; id < kBurst; ++id) cache->PutAsync(id, Sample(static_cast<uint8_t>(id)));
  cache->Flush();
  uint64_t slot_file_bytes = 0;
  for (const auto& e : fs::directory_iterator(cache->path())) {
    if (e.path().filename().string().rfind("slots-", 0) == 0) slot_file_bytes += e.file_size();
  }
  EXPECT_LE(slot_file_bytes, budget);
  EXPECT_LE(cache->Stats().bytes, budget);
  EXPECT_EQ(cache->Stats().writes + cache->Stats().write_drops, kBurst);
}

TEST_F(DiskCacheTest, EntriesOfAKilledWriterAreServedRightOrMissed) {
  GrowSource(512);
  int served_total = 0;
  for (int delay_us : {0, 2000, 20000}) {
    fs::remove_all(cache_dir());
    const pid_t pid = fork();
    if (pid == 0) {
      // The writer killed mid-way: no destructor, no Flush.
      std::unique_ptr<DiskCache> cache;
      if (!DiskCache::Open(cache_dir(), catalog_.get(), &counts_, 16, 1 << 30, &cache).ok()) {
        _exit(1);
      }
      for (SampleId id = 0; id < 512; ++id) {
        cache->PutAsync(id, Sample(static_cast<uint8_t>(id * 7)));
      }
      usleep(delay_us);
      kill(getpid(), SIGKILL);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer did not start";
    auto cache = OpenCache();
    int served = 0;
    for (SampleId id = 0; id < 512; ++id) {
      DecodedSample out;
      const Status s = cache->Get(id, &out);
      if (s.ok()) {
        ++served;
        EXPECT_TRUE(AllPixels(out, static_cast<uint8_t>(id * 7))) << id << " after " << delay_us;
      } else {
        EXPECT_TRUE(s.code() == Status::Code::kNotFound || s.code() == Status::Code::kCorruption)
            << s.message();
      }
    }
    served_total += served;
    // Whatever it lost is written again, and then served.
    for (SampleId id = 0; id < 512; ++id) {
      cache->PutAsync(id, Sample(static_cast<uint8_t>(id * 7)));
    }
    cache->Flush();
    cache->WaitForRebuild();
    ExpectServed(cache.get(), 512, [](SampleId id) { return static_cast<uint8_t>(id * 7); });
  }
  EXPECT_GT(served_total, 0);  // some writes were done before the kill
}

}  // namespace
}  // namespace joaderfs
