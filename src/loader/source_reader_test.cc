#include "loader/source_reader.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "catalog/catalog.h"
#include "testing/test_util.h"

namespace joaderfs {
namespace {

using namespace std::chrono_literals;
using testing::Eventually;
using testing::TempDir;
using testing::WriteFile;

// Collects the results of reads, in the order they end.
struct Results {
  std::mutex mu;
  std::vector<SourceReader::Result> got;

  SourceReader::Done Add() {
    return [this](SourceReader::Result r) {
      std::lock_guard lock(mu);
      got.push_back(std::move(r));
    };
  }
  size_t size() {
    std::lock_guard lock(mu);
    return got.size();
  }
  SourceReader::Result Take(size_t i) {
    std::lock_guard lock(mu);
    return std::move(got.at(i));
  }
};

SourceReaderOptions Options(unsigned threads, std::chrono::milliseconds timeout,
                            unsigned max_extra_threads = 16) {
  SourceReaderOptions o;
  o.threads = threads;
  o.timeout = timeout;
  o.max_extra_threads = max_extra_threads;
  return o;
}

TEST(SourceReaderTest, ReadsTheBytesOfAFile) {
  TempDir dir;
  WriteFile(dir / "a", "encoded bytes");
  SourceReader reader(Options(2, 10s));
  Results results;
  reader.Read(FileRange::WholeFile(dir / "a"), 1 << 20, 0, results.Add());
  ASSERT_TRUE(Eventually([&] { return results.size() == 1; }));
  SourceReader::Result r = results.Take(0);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(*r.bytes, "encoded bytes");
  EXPECT_FALSE(r.stuck);
  const SourceReaderStats st = reader.Stats();
  EXPECT_EQ(st.bytes, 13u);
  EXPECT_EQ(st.reads, 1u);
  EXPECT_EQ(st.timed_out, 0u);
  EXPECT_EQ(st.bytes_in_flight, 13u);  // held by `r`
  r.bytes.reset();
  EXPECT_EQ(reader.Stats().bytes_in_flight, 0u);
}

TEST(SourceReaderTest, PassesOnReadErrors) {
  TempDir dir;
  SourceReader reader(Options(1, 10s));
  Results results;
  reader.Read(FileRange::WholeFile(dir / "missing"), 1 << 20, 0, results.Add());
  ASSERT_TRUE(Eventually([&] { return results.size() == 1; }));
  SourceReader::Result r = results.Take(0);
  EXPECT_EQ(r.status.code(), Status::Code::kIOError);
  EXPECT_FALSE(r.stuck);
  EXPECT_EQ(r.bytes, nullptr);
}

TEST(SourceReaderTest, BoundsBytesInFlight) {
  TempDir dir;
  WriteFile(dir / "a", std::string(600, 'a'));
  WriteFile(dir / "b", std::string(600, 'b'));
  SourceReaderOptions o = Options(2, 10s);
  o.max_bytes_in_flight = 1000;
  SourceReader reader(o);
  Results results;
  reader.Read(FileRange::WholeFile(dir / "a"), 1 << 20, 600, results.Add());
  ASSERT_TRUE(Eventually([&] { return results.size() == 1; }));
  reader.Read(FileRange::WholeFile(dir / "b"), 1 << 20, 600, results.Add());
  std::this_thread::sleep_for(200ms);
  // a's bytes are held: b would take 1200 bytes in flight.
  EXPECT_EQ(results.size(), 1u);
  EXPECT_EQ(reader.Stats().queued, 1u);
  results.Take(0).bytes.reset();
  ASSERT_TRUE(Eventually([&] { return results.size() == 2; }));
  EXPECT_EQ(*results.Take(1).bytes, std::string(600, 'b'));
}

TEST(SourceReaderTest, StopDropsWhatIsQueued) {
  TempDir dir;
  WriteFile(dir / "a", std::string(600, 'a'));
  SourceReaderOptions o = Options(1, 10s);
  o.max_bytes_in_flight = 100;
  SourceReader reader(o);
  Results results;
  reader.Read(FileRange::WholeFile(dir / "a"), 1 << 20, 600, results.Add());
  ASSERT_TRUE(Eventually([&] { return results.size() == 1; }));
  reader.Read(FileRange::WholeFile(dir / "a"), 1 << 20, 600, results.Add());  // waits for room
  reader.Stop();
  results.Take(0).bytes.reset();
  reader.Read(FileRange::WholeFile(dir / "a"), 1 << 20, 600, results.Add());
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(results.size(), 1u);
}

// The local store, whose reads are counted and held until Open() (the
// first few wait there: the reads queued meanwhile are what a coalescing
// thread finds); with Gate(), only some of them.
class GatedStore : public SourceStore {
 public:
  Status Read(const FileRange& range, uint64_t max_bytes, std::string* out, bool* as_scanned,
              FileStamp* seen) const override {
    {
      std::lock_guard lock(mu_);
      ranges_.push_back(range);
    }
    if (range.path.find(gated_) != std::string::npos) gate_.wait();
    return LocalSourceStore()->Read(range, max_bytes, out, as_scanned, seen);
  }
  SourceIdentity Identify(const std::string& path) const override {
    return LocalSourceStore()->Identify(path);
  }
  void Open() { open_.set_value(); }
  // Only reads of paths holding `part` wait (before any read).
  void Gate(std::string part) { gated_ = std::move(part); }
  std::vector<FileRange> ranges() const {
    std::lock_guard lock(mu_);
    return ranges_;
  }

 private:
  mutable std::mutex mu_;
  mutable std::vector<FileRange> ranges_;
  std::string gated_;  // every path holds ""
  std::promise<void> open_;
  std::shared_future<void> gate_ = open_.get_future().share();
};

// Room freed at once for many queued reads starts them all on the threads
// waiting, though each event wakes only one thread (the threads hand the
// wake-up on).
TEST(SourceReaderTest, RoomFreedStartsEveryQueuedReadThatFits) {
  TempDir dir;
  WriteFile(dir / "big", std::string(1000, 'b'));
  for (int i = 0; i < 8; ++i) WriteFile(dir / ("small" + std::to_string(i)), "small");
  auto store = std::make_shared<GatedStore>();
  store->Gate("small");
  SourceReaderOptions o = Options(8, 10s);
  o.max_bytes_in_flight = 1000;
  o.store = store;
  SourceReader reader(o);
  Results results;
  reader.Read(FileRange::WholeFile(dir / "big"), 1 << 20, 1000, results.Add());
  ASSERT_TRUE(Eventually([&] { return results.size() == 1; }));
  for (int i = 0; i < 8; ++i) {
    reader.Read(FileRange::WholeFile(dir / ("small" + std::to_string(i))), 1 << 20, 100,
                results.Add());
  }
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(store->ranges().size(), 1u);  // big's bytes are held: no room
  results.Take(0).bytes.reset();          // room for all eight
  EXPECT_TRUE(Eventually([&] { return store->ranges().size() == 9; }))
      << store->ranges().size() - 1 << " of 8 reads started";
  store->Open();
  ASSERT_TRUE(Eventually([&] { return results.size() == 9; }));
}

// A WebDataset shard written by tar(1): members k0.jpg ... k5.jpg of 3000
// distinct bytes each, each with a k<i>.cls, and `pad` bytes of k2.pad
// after k2's members; its catalog, whose locations are the members.
class ShardTest : public ::testing::Test {
 protected:
  void Write(uint64_t pad) {
    ::mkdir((dir_ / "src").c_str(), 0755);
    ::mkdir((dir_ / "shards").c_str(), 0755);
    std::string names;
    for (int i = 0; i < 6; ++i) {
      const std::string key = "k" + std::to_string(i);
      WriteFile(dir_ / ("src/" + key + ".jpg"), std::string(3000, static_cast<char>('a' + i)));
      WriteFile(dir_ / ("src/" + key + ".cls"), std::to_string(i % 2) + "\n");
      names += " " + key + ".jpg " + key + ".cls";
      if (i == 2 && pad) {
        WriteFile(dir_ / "src/k2.pad", std::string(pad, 'p'));
        names += " k2.pad";
      }
    }
    WriteFile(dir_ / "blocker", "blocker");
    const std::string cmd =
        "tar --format=ustar -C " + (dir_ / "src") + " -cf " + (dir_ / "shards/a.tar") + names;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    ASSERT_TRUE(Catalog::Open(dir_ / "shards", &catalog_).ok());
    ASSERT_EQ(catalog_->size(), 6u);
  }

  // Reads the blocker on the one thread (held at the gate), queues the six
  // members behind it, opens the gate and waits for all seven; each
  // member's result is checked and its bytes freed at once.
  void ReadAll(SourceReaderOptions o) {
    o.threads = 1;
    o.store = store_;
    std::mutex mu;
    std::map<std::string, std::string> got;  // relpath or "blocker" -> bytes or error
    SourceReader reader(o);
    auto add = [&](std::string name) {
      return [&mu, &got, name](SourceReader::Result r) {
        std::lock_guard lock(mu);
        got[name] = r.status.ok() ? *r.bytes : "error: " + r.status.message();
      };
    };
    reader.Read(FileRange::WholeFile(dir_ / "blocker"), 1 << 20, 7, add("blocker"));
    ASSERT_TRUE(Eventually([&] { return store_->ranges().size() == 1; }));
    for (SampleId id = 0; id < 6; ++id) {
      const FileRange r = catalog_->location(id);
      ASSERT_TRUE(r.partial);
      reader.Read(r, 1 << 20, r.length, add(catalog_->relpath(id)));
    }
    EXPECT_EQ(reader.Stats().queued, 6u);
    store_->Open();
    ASSERT_TRUE(Eventually([&] {
      std::lock_guard lock(mu);
      return got.size() == 7;
    }));
    results_ = got;
    stats_ = reader.Stats();
  }

  // The members the store's reads (after the blocker) covered, one string
  // of their digits each.
  std::vector<std::string> Groups() {
    std::vector<std::string> groups;
    const std::vector<FileRange> ranges = store_->ranges();
    for (size_t i = 1; i < ranges.size(); ++i) {
      std::string g;
      for (SampleId id = 0; id < 6; ++id) {
        const FileRange m = catalog_->location(id);
        if (m.offset >= ranges[i].offset &&
            m.offset + m.length <= ranges[i].offset + ranges[i].length) {
          g += std::to_string(id);
        }
      }
      groups.push_back(g);
    }
    return groups;
  }

  TempDir dir_;
  std::unique_ptr<Catalog> catalog_;
  std::shared_ptr<GatedStore> store_ = std::make_shared<GatedStore>();
  std::map<std::string, std::string> results_;
  SourceReaderStats stats_;
};

TEST_F(ShardTest, NeighbouringMembersAreReadAsOneRange) {
  Write(0);
  ReadAll(Options(1, 10s));
  EXPECT_EQ(Groups(), std::vector<std::string>{"012345"});
  EXPECT_EQ(results_["blocker"], "blocker");
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(results_["a.tar/k" + std::to_string(i) + ".jpg"],
              std::string(3000, static_cast<char>('a' + i)));
  }
  EXPECT_EQ(stats_.coalesced, 5u);
  EXPECT_EQ(stats_.reads, 7u);
  EXPECT_EQ(stats_.bytes, 7u + 6 * 3000);
  EXPECT_EQ(stats_.bytes_in_flight, 0u);  // all freed, the gaps never held
}

// A gap past coalesce_max_gap (256 KiB by default) splits the run.
TEST_F(ShardTest, AWideGapIsNotRead) {
  Write(300 << 10);
  ReadAll(Options(1, 10s));
  EXPECT_EQ(Groups(), (std::vector<std::string>{"012", "345"}));
  EXPECT_EQ(stats_.coalesced, 4u);
  EXPECT_EQ(results_["a.tar/k4.jpg"], std::string(3000, 'e'));
}

// A run holds no more than fits in flight beside what is held.
TEST_F(ShardTest, ARunStaysWithinTheBytesInFlight) {
  Write(0);
  SourceReaderOptions o = Options(1, 10s);
  o.max_bytes_in_flight = 2 * 3000 + 1000;
  ReadAll(o);
  EXPECT_EQ(Groups(), (std::vector<std::string>{"01", "23", "45"}));
  EXPECT_EQ(stats_.coalesced, 3u);
}

// The run's read fails for each of its members: here the shard changed
// since the scan, so no member is served from it.
TEST_F(ShardTest, AFailedRunFailsEachMember) {
  Write(0);
  WriteFile(dir_ / "shards/a.tar", "rewritten");
  ReadAll(Options(1, 10s));
  EXPECT_EQ(Groups().size(), 1u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_NE(results_["a.tar/k" + std::to_string(i) + ".jpg"].find("changed since the scan"),
              std::string::npos);
  }
  EXPECT_EQ(stats_.bytes_in_flight, 0u);
}

// A run whose read never returns fails each member at its one deadline,
// frees what they counted in flight, and leaves its shard stuck once.
TEST_F(ShardTest, ARunPastItsDeadlineFailsEachMember) {
  Write(0);
  SourceReaderOptions o = Options(1, 300ms);
  o.store = store_;  // held until Open(): the blocker, then the run
  Results results;
  {
    SourceReader reader(o);
    reader.Read(FileRange::WholeFile(dir_ / "blocker"), 1 << 20, 7, results.Add());
    ASSERT_TRUE(Eventually([&] { return store_->ranges().size() == 1; }));
    for (SampleId id = 0; id < 6; ++id) {
      const FileRange r = catalog_->location(id);
      reader.Read(r, 1 << 20, r.length, results.Add());
    }
    // The blocker times out, its replacement takes the six as one run.
    ASSERT_TRUE(Eventually([&] { return results.size() == 7; }));
    EXPECT_EQ(Groups(), std::vector<std::string>{"012345"});
    for (size_t i = 0; i < 7; ++i) {
      const SourceReader::Result r = results.Take(i);
      EXPECT_TRUE(r.stuck);
      EXPECT_NE(r.status.message().find("read_timeout"), std::string::npos) << r.status.message();
    }
    SourceReaderStats st = reader.Stats();
    EXPECT_EQ(st.timed_out, 7u);
    EXPECT_EQ(st.stuck_threads, 2u);
    EXPECT_EQ(st.bytes_in_flight, 0u);
    // The shard's path is stuck: another member fails at once.
    reader.Read(catalog_->location(0), 1 << 20, 3000, results.Add());
    ASSERT_EQ(results.size(), 8u);
    EXPECT_NE(results.Take(7).status.message().find("still blocked"), std::string::npos);
  }
  store_->Open();  // the detached threads return and end
}

// A SOURCE on joaderfs-stuck-fs (tests/tools/stuck_fs.c): reads of "stuck1"
// and "stuck2" never return until the filesystem goes; "good" reads.
class StuckSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "no /dev/fuse";
    ::mkdir((dir_ / "root").c_str(), 0755);
    ::mkdir((dir_ / "mnt").c_str(), 0755);
    WriteFile(dir_ / "root/good", "good bytes");
    WriteFile(dir_ / "root/stuck1", "never read");
    WriteFile(dir_ / "root/stuck2", "never read");
    const std::string root = dir_ / "root", mnt = dir_ / "mnt";
    pid_ = fork();
    if (pid_ == 0) {
      execl(JOADERFS_STUCK_FS, JOADERFS_STUCK_FS, root.c_str(), "stuck1,stuck2", mnt.c_str(), "-f",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    ASSERT_GT(pid_, 0);
    struct stat st {};
    ASSERT_TRUE(Eventually([&] { return ::stat((dir_ / "mnt/good").c_str(), &st) == 0; }))
        << "joaderfs-stuck-fs did not mount";
  }
  void TearDown() override {
    if (pid_ <= 0) return;
    // Killing it fails the reads still blocked (the connection is gone).
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    const std::string cmd = "fusermount3 -u -z " + (dir_ / "mnt") + " 2>/dev/null";
    EXPECT_GE(std::system(cmd.c_str()), 0);
  }
  FileRange At(const std::string& name) { return FileRange::WholeFile(dir_ / ("mnt/" + name)); }

  TempDir dir_;
  pid_t pid_ = -1;
};

TEST_F(StuckSourceTest, ABlockedReadFailsAtItsDeadlineAndItsThreadIsReplaced) {
  SourceReader reader(Options(1, 300ms));
  Results results;
  const auto start = std::chrono::steady_clock::now();
  reader.Read(At("stuck1"), 1 << 20, 0, results.Add());
  reader.Read(At("good"), 1 << 20, 0, results.Add());  // queued behind it on the one thread
  ASSERT_TRUE(Eventually([&] { return results.size() == 2; }));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  // The replacement thread may finish good's read before the watchdog has
  // called back the failed one: match them by outcome, not by order.
  SourceReader::Result late = results.Take(0);
  SourceReader::Result good = results.Take(1);
  if (late.status.ok()) std::swap(late, good);
  EXPECT_EQ(late.status.code(), Status::Code::kIOError);
  EXPECT_NE(late.status.message().find("read_timeout"), std::string::npos) << late.status.message();
  EXPECT_TRUE(late.stuck);
  ASSERT_TRUE(good.status.ok()) << good.status.message();
  EXPECT_EQ(*good.bytes, "good bytes");
  SourceReaderStats st = reader.Stats();
  EXPECT_EQ(st.timed_out, 1u);
  EXPECT_EQ(st.stuck_threads, 1u);
  EXPECT_EQ(st.threads, 2u);

  // The same path again fails at once, taking no thread.
  reader.Read(At("stuck1"), 1 << 20, 0, results.Add());
  ASSERT_EQ(results.size(), 3u);
  SourceReader::Result again = results.Take(2);
  EXPECT_TRUE(again.stuck);
  EXPECT_NE(again.status.message().find("still blocked"), std::string::npos)
      << again.status.message();
  EXPECT_EQ(reader.Stats().threads, 2u);
}

TEST_F(StuckSourceTest, PastTheCapOfStuckThreadsReadsFailAtOnce) {
  SourceReader reader(Options(1, 200ms, /*max_extra_threads=*/1));
  Results results;
  reader.Read(At("stuck1"), 1 << 20, 0, results.Add());
  ASSERT_TRUE(Eventually([&] { return results.size() == 1; }));
  reader.Read(At("stuck2"), 1 << 20, 0, results.Add());  // on the replacement
  ASSERT_TRUE(Eventually([&] { return results.size() == 2; }));
  EXPECT_EQ(reader.Stats().stuck_threads, 2u);
  reader.Read(At("good"), 1 << 20, 0, results.Add());
  ASSERT_EQ(results.size(), 3u);
  EXPECT_NE(results.Take(2).status.message().find("every I/O thread"), std::string::npos);
}

TEST_F(StuckSourceTest, StopReturnsWhileAReadIsBlocked) {
  Results results;
  {
    SourceReader reader(Options(1, 60s));
    reader.Read(At("stuck1"), 1 << 20, 0, results.Add());
    ASSERT_TRUE(Eventually([&] { return reader.Stats().queued == 0; }));
    std::this_thread::sleep_for(100ms);  // into the read
    const auto start = std::chrono::steady_clock::now();
    reader.Stop();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  }
  // The read fails once its filesystem goes; its thread touches nothing of
  // the reader, and `done` is never called.
  TearDown();
  pid_ = -1;
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(results.size(), 0u);
}

}  // namespace
}  // namespace joaderfs
