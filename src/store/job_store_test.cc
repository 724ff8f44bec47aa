#include "store/job_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "testing/test_util.h"

namespace joaderfs {
namespace {

using testing::TempDir;

class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteImageFolder(source_.path(), {16});  // placeholders: no decode here
    ASSERT_TRUE(Catalog::Open(source_.path(), &catalog_).ok());
  }

  std::unique_ptr<JobStore> OpenStore() {
    std::unique_ptr<JobStore> store;
    const Status s = JobStore::Open(cache_dir_.path(), *catalog_, &store);
    EXPECT_TRUE(s.ok()) << s.message();
    return store;
  }

  static Roaring Ids(std::initializer_list<uint32_t> ids) {
    Roaring r;
    for (uint32_t id : ids) r.add(id);
    return r;
  }

  TempDir source_{"joaderfs-store-src"};
  TempDir cache_dir_{"joaderfs-store"};
  std::unique_ptr<Catalog> catalog_;
};

TEST_F(JobStoreTest, KeepsJobsEpochsAndHandOutsAcrossReopens) {
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
    store->PutJob("a", 1000, true, "subset=all\nsize=224\n", nullptr);
    const Roaring ids = Ids({3, 5, 7});
    store->PutJob("b", 0, false, "subset=ids\nsize=32\n", &ids);
    store->StartEpoch("a", 1, 4, Ids({9}));
    const SampleId handed[] = {1, 2};
    store->AddHandedOut("a", 1, 4, handed);
    const SampleId stale[] = {6};
    store->AddHandedOut("a", 1, 3, stale);  // raced the start of epoch 4
    store->StartEpoch("b", 0, 0, Roaring());
    store->StartEpoch("gone", 0, 2, Roaring());
    store->PutJob("gone", 1, false, "subset=all\n", nullptr);
    store->RemoveJob("gone");
  }
  auto store = OpenStore();
  ASSERT_TRUE(store);
  std::vector<StoredJob> jobs;
  ASSERT_TRUE(store->Load(&jobs).ok());
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].name, "a");
  EXPECT_EQ(jobs[0].uid, 1000u);
  EXPECT_TRUE(jobs[0].fixed);
  EXPECT_EQ(jobs[0].spec, "subset=all\nsize=224\n");
  EXPECT_FALSE(jobs[0].has_ids);
  ASSERT_EQ(jobs[0].streams.size(), 1u);
  EXPECT_EQ(jobs[0].streams[0].index, 1u);
  EXPECT_EQ(jobs[0].streams[0].epoch, 4u);
  EXPECT_EQ(jobs[0].streams[0].handed_out, Ids({1, 2, 9}));
  EXPECT_EQ(jobs[1].name, "b");
  EXPECT_TRUE(jobs[1].has_ids);
  EXPECT_EQ(jobs[1].ids, Ids({3, 5, 7}));
  ASSERT_EQ(jobs[1].streams.size(), 1u);
  EXPECT_TRUE(jobs[1].streams[0].handed_out.isEmpty());
  // A new epoch drops the last one's hand-outs.
  store->StartEpoch("a", 1, 5, Roaring());
  store.reset();
  store = OpenStore();
  ASSERT_TRUE(store->Load(&jobs).ok());
  EXPECT_EQ(jobs[0].streams[0].epoch, 5u);
  EXPECT_TRUE(jobs[0].streams[0].handed_out.isEmpty());
}

// The latest elastic resume of a job is kept with it and goes with it.
TEST_F(JobStoreTest, KeepsTheLatestElasticResume) {
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
    store->PutJob("a", 1000, true, "subset=all\nranks=3\n", nullptr);
    store->PutJob("b", 1000, true, "subset=all\nranks=2\n", nullptr);
    store->PutElasticResume("a", 2, Ids({1, 4}));
    store->PutElasticResume("a", 3, Ids({0, 5, 6}));  // replaces
    store->PutElasticResume("gone", 1, Ids({2}));
    store->PutJob("gone", 1, false, "subset=all\n", nullptr);
    store->RemoveJob("gone");
  }
  auto store = OpenStore();
  ASSERT_TRUE(store);
  std::vector<StoredJob> jobs;
  ASSERT_TRUE(store->Load(&jobs).ok());
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].elastic_epoch, 3u);
  EXPECT_EQ(jobs[0].elastic_consumed, Ids({0, 5, 6}));
  EXPECT_FALSE(jobs[1].elastic_epoch);
  // One of a job that is not there is a damaged store.
  store->PutElasticResume("nobody", 1, Ids({2}));
  EXPECT_EQ(store->Load(&jobs).code(), Status::Code::kCorruption);
}

TEST_F(JobStoreTest, ADamagedStoreIsRefused) {
  std::string path;
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
    store->PutJob("a", 1, false, "subset=all\n", nullptr);
    path = store->path();
  }
  // Garbage over every file of the database (its manifest and log included).
  for (const auto& entry : std::filesystem::directory_iterator(path)) {
    if (!entry.is_regular_file() || entry.path().filename() == "LOCK") continue;
    std::ofstream(entry.path(), std::ios::binary | std::ios::trunc) << "not a rocksdb file";
  }
  std::unique_ptr<JobStore> store;
  Status s = JobStore::Open(cache_dir_.path(), *catalog_, &store);
  if (s.ok()) {
    std::vector<StoredJob> jobs;
    s = store->Load(&jobs);
  }
  EXPECT_FALSE(s.ok()) << "a damaged store was served";
}

TEST_F(JobStoreTest, DamageInTheLastBlockOfTheLogIsNoTornTail) {
  // A kill -9 leaves the hand-outs in the log (copied while the store is
  // open). A damaged length in its last 32 KiB block made RocksDB's replay
  // stop there silently, and the hand-outs behind it came back.
  TempDir crashed("joaderfs-store-crashed");
  std::string log;
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
    store->PutJob("a", 1, false, "subset=all\n", nullptr);
    store->StartEpoch("a", 0, 0, Roaring());
    for (SampleId id = 0; id < 16; ++id) store->AddHandedOut("a", 0, 0, {&id, 1});
    const auto relative = std::filesystem::relative(store->path(), cache_dir_.path());
    const std::filesystem::path copy = std::filesystem::path(crashed.path()) / relative;
    std::filesystem::create_directories(copy);
    std::filesystem::copy(store->path(), copy);
    for (const auto& entry : std::filesystem::directory_iterator(copy)) {
      if (entry.path().extension() == ".log") log = entry.path();
    }
  }
  ASSERT_FALSE(log.empty());
  std::string wal = testing::ReadFile(log);
  ASSERT_LT(wal.size(), 32768u) << "all in the last block";
  // The header of a record in the middle (7 bytes and its length each).
  size_t pos = 0;
  for (int record = 0; record < 8; ++record) {
    pos += 7 + (uint8_t(wal[pos + 4]) | size_t{uint8_t(wal[pos + 5])} << 8);
  }
  wal[pos + 4] = wal[pos + 5] = '\xff';
  testing::WriteFile(log, wal);
  std::unique_ptr<JobStore> store;
  const Status s = JobStore::Open(crashed.path(), *catalog_, &store);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << "a store that lost hand-outs was served";
  EXPECT_NE(s.message().find("damaged at byte"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace joaderfs
