#include "loader/source_reader.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

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
  SourceReader::Result late = results.Take(0);
  EXPECT_EQ(late.status.code(), Status::Code::kIOError);
  EXPECT_NE(late.status.message().find("read_timeout"), std::string::npos) << late.status.message();
  EXPECT_TRUE(late.stuck);
  SourceReader::Result good = results.Take(1);
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
