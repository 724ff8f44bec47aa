#include "daemon/options.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/rocksdb_support.h"
#include "daemon/components.h"
#include "daemon/machine.h"
#include "testing/test_util.h"

namespace joaderfs {
namespace {

using testing::TempDir;

// Runs `parse` on "joaderfs -o <opts> <args>..." and frees libfuse's copy.
template <typename Parse>
Status RunParser(Parse parse, const std::string& opts, std::vector<std::string> args,
                 DaemonOptions* o) {
  std::vector<std::string> argv = {"joaderfs"};
  if (!opts.empty()) argv.insert(argv.end(), {"-o", opts});
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> ptrs;
  for (std::string& a : argv) ptrs.push_back(a.data());
  fuse_args fuse{};
  const Status s = parse(static_cast<int>(ptrs.size()), ptrs.data(), o, &fuse);
  fuse_opt_free_args(&fuse);
  return s;
}

Status ParseLine(const std::string& opts, DaemonOptions* o) {
  return RunParser(ParseCommandLine, opts, {"src", "mnt"}, o);
}

TEST(OptionsTest, GoodValues) {
  DaemonOptions o;
  ASSERT_TRUE(ParseLine("ram_cache=512M,disk_cache=2G,threads=3,size=0,base=0,seed=7,lookahead=16,"
                        "job_idle_timeout=0,max_pixels=1000000,cache_dir=none",
                        &o)
                  .ok());
  EXPECT_EQ(o.ram_cache, 512u << 20);
  EXPECT_EQ(o.disk_cache, 2ull << 30);
  EXPECT_EQ(o.threads, 3u);
  EXPECT_EQ(o.size, 0u);
  EXPECT_EQ(o.base, 0u);
  EXPECT_EQ(o.seed, 7u);
  EXPECT_EQ(o.lookahead, 16u);
  EXPECT_EQ(o.job_idle_timeout, 0u);
  EXPECT_EQ(o.max_pixels, 1000000u);
  EXPECT_EQ(o.cache_dir, "");
  EXPECT_EQ(o.source, "src");
  EXPECT_EQ(o.mountpoint, "mnt");
  DaemonOptions defaults;
  ASSERT_TRUE(ParseLine("", &defaults).ok());
  EXPECT_EQ(defaults.max_pixels, kDefaultMaxPixels);
  EXPECT_EQ(defaults.base, 256u);
  EXPECT_EQ(defaults.ram_cache, 0u);  // a quarter of RAM, set by ParseOptions
  ASSERT_TRUE(ParseLine("max_pixels=4294967296,job_idle_timeout=315360000", &o).ok());
  EXPECT_EQ(o.max_pixels, kMaxMaxPixels);
  EXPECT_EQ(o.job_idle_timeout, kMaxIdleTimeout);
}

TEST(OptionsTest, RetryFailed) {
  DaemonOptions o;
  ASSERT_TRUE(ParseLine("", &o).ok());
  EXPECT_EQ(o.retry_failed, 30u);
  ASSERT_TRUE(ParseLine("retry_failed=0", &o).ok());
  EXPECT_EQ(o.retry_failed, 0u);
  ASSERT_TRUE(ParseLine("retry_failed=86400", &o).ok());
  EXPECT_EQ(o.retry_failed, kMaxRetryFailed);
  for (const char* bad :
       {"retry_failed=86401", "retry_failed=-1", "retry_failed=", "retry_failed=1s"}) {
    const Status s = ParseLine(bad, &o);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("retry_failed"), std::string::npos) << s.message();
  }
}

TEST(OptionsTest, ReadTimeout) {
  DaemonOptions o;
  ASSERT_TRUE(ParseLine("", &o).ok());
  EXPECT_EQ(o.read_timeout, 30u);
  ASSERT_TRUE(ParseLine("read_timeout=1", &o).ok());
  EXPECT_EQ(o.read_timeout, 1u);
  ASSERT_TRUE(ParseLine("read_timeout=86400", &o).ok());
  EXPECT_EQ(o.read_timeout, kMaxReadTimeout);
  for (const char* bad :
       {"read_timeout=0", "read_timeout=86401", "read_timeout=", "read_timeout=2s"}) {
    const Status s = ParseLine(bad, &o);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("read_timeout"), std::string::npos) << s.message();
  }
}

TEST(OptionsTest, RemoteCache) {
  DaemonOptions o;
  ASSERT_TRUE(ParseLine("", &o).ok());
  EXPECT_TRUE(o.remote_cache.empty());
  EXPECT_EQ(o.remote_publish, UINT64_MAX);
  ASSERT_TRUE(
      ParseLine("remote_cache=memcached://10.0.0.1:11211+node2:11212,remote_publish=2G", &o).ok());
  EXPECT_EQ(o.remote_cache, (std::vector<std::string>{"10.0.0.1:11211", "node2:11212"}));
  EXPECT_EQ(o.remote_publish, 2ull << 30);
  ASSERT_TRUE(ParseLine("remote_cache=none", &o).ok());
  EXPECT_TRUE(o.remote_cache.empty());
  for (const char* bad :
       {"remote_cache=redis://a:1", "remote_cache=memcached://", "remote_cache=memcached://a",
        "remote_cache=memcached://a:0", "remote_cache=memcached://:5",
        "remote_cache=memcached://a:1+", "remote_cache=memcached://a:65536", "remote_publish=0",
        "remote_publish=lots"}) {
    const Status s = ParseLine(bad, &o);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find(std::string(bad).substr(0, 12)), std::string::npos) << s.message();
  }
}

// s3:// SOURCEs: the store's options, and the reads in flight sized from
// its round trip unless source_reads= says.
TEST(OptionsTest, ObjectStoreOptions) {
  DaemonOptions o;
  ASSERT_TRUE(
      ParseLine("s3_endpoint=http://127.0.0.1:9000,s3_region=eu-west-1,source_reads=64", &o).ok());
  EXPECT_EQ(o.s3_endpoint, "http://127.0.0.1:9000");
  EXPECT_EQ(o.s3_region, "eu-west-1");
  EXPECT_EQ(o.source_reads, 64u);
  ASSERT_TRUE(ParseLine("s3_credentials=/etc/joaderfs/s3.credentials,s3_profile=train-2", &o).ok());
  EXPECT_EQ(o.s3_credentials, "/etc/joaderfs/s3.credentials");
  EXPECT_EQ(o.s3_profile, "train-2");
  for (const char* bad : {"s3_endpoint=minio:9000", "s3_region=EU West",
                          "s3_region=", "source_reads=0", "source_reads=1025",
                          "s3_credentials=", "s3_profile=", "s3_profile=a b", "s3_profile=[x]"}) {
    EXPECT_EQ(ParseLine(bad, &o).code(), Status::Code::kInvalidArgument) << bad;
  }
  using std::chrono::microseconds;
  EXPECT_EQ(DefaultSourceReads(4, microseconds(0)), 4u);        // local files
  EXPECT_EQ(DefaultSourceReads(4, microseconds(1500)), 4u);     // below one decode
  EXPECT_EQ(DefaultSourceReads(4, microseconds(20'000)), 44u);  // 20 ms: 11 per thread
  EXPECT_EQ(DefaultSourceReads(64, microseconds(100'000)), 256u);
}

// source_in_flight=: a size, else room for the reads in effect (sized from
// the round trip) of the mean image four times over, 64 MiB-1 GiB.
TEST(OptionsTest, SourceInFlight) {
  DaemonOptions o;
  EXPECT_EQ(o.source_in_flight, 0u);  // the default, sized at mount
  ASSERT_TRUE(ParseLine("source_in_flight=96M", &o).ok());
  EXPECT_EQ(o.source_in_flight, uint64_t{96} << 20);
  for (const char* bad : {"source_in_flight=0", "source_in_flight=lots", "source_in_flight="}) {
    const Status s = ParseLine(bad, &o);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("source_in_flight"), std::string::npos) << s.message();
  }
  constexpr uint64_t kMiB = 1 << 20;
  EXPECT_EQ(DefaultSourceInFlight(2, 110'000), 64 * kMiB);  // local files: the floor
  // 20 ms away with 16 decode threads: 176 reads of 110 KB, four times over.
  const unsigned reads = DefaultSourceReads(16, std::chrono::microseconds(20'000));
  EXPECT_EQ(reads, 176u);
  EXPECT_EQ(DefaultSourceInFlight(reads, 110'000), 4u * 176 * 110'000);
  EXPECT_GT(DefaultSourceInFlight(reads, 110'000), 64 * kMiB);
  EXPECT_EQ(DefaultSourceInFlight(256, 4 * kMiB), 1024 * kMiB);            // the cap
  EXPECT_EQ(DefaultSourceInFlight(1024, uint64_t{4} << 30), 1024 * kMiB);  // no overflow
  EXPECT_EQ(DefaultSourceInFlight(4, 0), 64 * kMiB);
}

TEST(OptionsTest, PerUserLimits) {
  DaemonOptions o;
  ASSERT_TRUE(ParseLine("", &o).ok());
  EXPECT_EQ(o.max_jobs_per_user, 64u);
  EXPECT_EQ(o.max_streams_per_user, 1024u);
  EXPECT_EQ(o.max_readers_per_user, 256u);
  EXPECT_FALSE(o.limit_root);
  ASSERT_TRUE(ParseLine("max_jobs_per_user=1,max_streams_per_user=1048576,"
                        "max_readers_per_user=7,limit_root=1",
                        &o)
                  .ok());
  EXPECT_EQ(o.max_jobs_per_user, 1u);
  EXPECT_EQ(o.max_streams_per_user, kMaxPerUserLimit);
  EXPECT_EQ(o.max_readers_per_user, 7u);
  EXPECT_TRUE(o.limit_root);
  for (const char* bad :
       {"max_jobs_per_user=0", "max_jobs_per_user=1048577",
        "max_streams_per_user=", "max_streams_per_user=-1", "max_readers_per_user=x",
        "max_readers_per_user=4294967297", "limit_root=2", "limit_root=yes", "limit_root="}) {
    const Status s = ParseLine(bad, &o);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    const std::string key = std::string(bad).substr(0, std::string(bad).find('='));
    EXPECT_NE(s.message().find(key), std::string::npos) << s.message();
  }
}

// /proc/self/cgroup and the limit files, as the kernel writes them.
TEST(OptionsTest, CgroupMemoryLimit) {
  std::map<std::string, std::string> files;
  auto read = [&](const std::string& path) -> std::optional<std::string> {
    auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
  // v2: the lowest limit on the path to the root; "max" is none.
  files = {{"/sys/fs/cgroup/user.slice/memory.max", "8589934592\n"},
           {"/sys/fs/cgroup/user.slice/job/memory.max", "max\n"}};
  EXPECT_EQ(CgroupMemoryLimit("0::/user.slice/job\n", read), 8ULL << 30);
  files["/sys/fs/cgroup/user.slice/job/memory.max"] = "2147483648\n";
  EXPECT_EQ(CgroupMemoryLimit("0::/user.slice/job\n", read), 2ULL << 30);
  // A container: its own cgroup is the root of its namespace.
  files = {{"/sys/fs/cgroup/memory.max", "1073741824\n"}};
  EXPECT_EQ(CgroupMemoryLimit("0::/\n", read), 1ULL << 30);
  // v1, memory alone or among other controllers; v1's "unlimited".
  const std::string v1 = "5:cpu,cpuacct:/\n4:memory:/docker/abc\n0::/\n";
  files = {{"/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "536870912\n"},
           {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"}};
  EXPECT_EQ(CgroupMemoryLimit(v1, read), 512ULL << 20);
  EXPECT_EQ(CgroupMemoryLimit("4:blkio,memory:/docker/abc\n", read), 512ULL << 20);
  files.erase("/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes");
  EXPECT_EQ(CgroupMemoryLimit(v1, read), std::nullopt);
  // No cgroup, nothing readable, or nonsense: no limit.
  EXPECT_EQ(CgroupMemoryLimit("", read), std::nullopt);
  EXPECT_EQ(CgroupMemoryLimit("garbage\n1:name=systemd:/x\n", read), std::nullopt);
  files = {{"/sys/fs/cgroup/a/memory.max", "lots\n"}};
  EXPECT_EQ(CgroupMemoryLimit("0::/a\n", read), std::nullopt);

  EXPECT_EQ(DefaultRamCache(24ULL << 30, std::nullopt), 6ULL << 30);
  EXPECT_EQ(DefaultRamCache(24ULL << 30, 2ULL << 30), 512ULL << 20);
  EXPECT_EQ(DefaultRamCache(24ULL << 30, 64ULL << 30), 6ULL << 30);
}

// max_unread_per_user follows the memory the daemon may use: a fixed 2G
// would let one user's readers OOM a 300 MiB cgroup.
TEST(OptionsTest, DefaultUnreadPerUser) {
  EXPECT_EQ(DefaultUnreadPerUser(75ULL << 20), 75ULL << 19);
  EXPECT_EQ(DefaultUnreadPerUser(6ULL << 30), 2ULL << 30);
  DaemonOptions o;
  ASSERT_TRUE(ParseLine("", &o).ok());
  EXPECT_EQ(o.max_unread_per_user, 0u);  // derived once ram_cache is known
}

TEST(OptionsTest, DefaultDiskCache) {
  DaemonOptions o;
  ASSERT_TRUE(ParseLine("", &o).ok());
  EXPECT_EQ(o.disk_cache, 0u);  // sized at mount
  // 256 x 341 x 3 bytes, plus 1/8.
  EXPECT_EQ(DecodedSampleEstimate(256), uint64_t{256} * 256 * 4 / 3 * 3 * 9 / 8);
  EXPECT_EQ(DecodedSampleEstimate(0), 1u << 20);
  const uint64_t set = 10000 * DecodedSampleEstimate(256);
  DiskCacheSizing d = DefaultDiskCache(10000, 256, 1ULL << 40);  // room to spare
  EXPECT_EQ(d.budget, set);
  EXPECT_EQ(d.decoded_estimate, set);
  // 80% of the room the two databases (index, job store) leave.
  const auto databases = [](uint64_t samples) {
    return 2 * (kRocksDbWorkingBytes + samples * kRocksDbBytesPerSample);
  };
  d = DefaultDiskCache(10000, 256, 1ULL << 30);
  EXPECT_EQ(d.budget, ((1ULL << 30) - databases(10000)) / 10 * 8);
  EXPECT_EQ(d.decoded_estimate, set);
  d = DefaultDiskCache(10, 64, 1ULL << 40);  // a floor for tiny sets
  EXPECT_EQ(d.budget, 64ULL << 20);
  d = DefaultDiskCache(10, 64, 50ULL << 20);  // but never past the room
  EXPECT_EQ(d.budget, ((50ULL << 20) - databases(10)) / 10 * 8);
  // The probe's 40 MiB cache filesystem: the tier plus its databases fit.
  d = DefaultDiskCache(200, 256, 40ULL << 20);
  EXPECT_LE(d.budget + databases(200), 40ULL << 20);
  EXPECT_EQ(DefaultDiskCache(10, 64, 10ULL << 20).budget, 1u << 20);  // no room: a token tier
  EXPECT_EQ(DefaultDiskCache(10, 64, 0).budget, 1u << 20);
}

// Each bad value is a one-line InvalidArgument that names the option.
TEST(OptionsTest, EdgeValuesAreRefused) {
  for (const char* bad : {"ram_cache=0",
                          "ram_cache=0G",
                          "ram_cache=banana",
                          "ram_cache=",
                          "disk_cache=0",
                          "disk_cache=-1",
                          "threads=0",
                          "threads=1025",
                          "size=8193",
                          "base=8193",
                          "base=x",
                          "lookahead=0",
                          "job_idle_timeout=315360001",
                          "job_idle_timeout=18446744073709551615",
                          "max_pixels=0",
                          "max_pixels=4294967297",
                          "max_pixels=100M",
                          "seed=-1",
                          "cache_dir=",
                          "log=",
                          "log_level=loud",
                          "sampler=x",
                          "ram_cache=99999999999999999999"}) {
    DaemonOptions o;
    const Status s = ParseLine(bad, &o);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    const std::string key = std::string(bad).substr(0, std::string(bad).find('='));
    EXPECT_NE(s.message().find(key), std::string::npos) << bad << ": " << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  }
  DaemonOptions o;
  EXPECT_EQ(RunParser(ParseCommandLine, "", {"src"}, &o).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(RunParser(ParseCommandLine, "", {"a", "b", "c"}, &o).code(),
            Status::Code::kInvalidArgument);
}

// libfuse decides what it takes; an option nobody takes is refused with the
// nearest valid name, ours or libfuse's.
TEST(OptionsTest, UnknownOptionsNameTheNearestValidOne) {
  const std::pair<const char*, const char*> typos[] = {
      {"ram_cach=1G", "ram_cache"},  {"cachedir=/tmp/x", "cache_dir"},
      {"allow_othr", "allow_other"}, {"nosiud", "nosuid"},
      {"trheads=2", "threads"},      {"log_levle=debug", "log_level"},
  };
  for (const auto& [typo, nearest] : typos) {
    DaemonOptions o;
    const Status s = ParseLine(typo, &o);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << typo;
    EXPECT_NE(s.message().find(typo), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(std::string("did you mean ") + nearest + "?"), std::string::npos)
        << typo << ": " << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  }
  DaemonOptions o;
  const Status far = ParseLine("nosuchoption=1", &o);
  EXPECT_EQ(far.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(far.message().find("unknown option nosuchoption=1"), std::string::npos)
      << far.message();
  EXPECT_EQ(far.message().find("did you mean"), std::string::npos) << far.message();
  const Status two = ParseLine("size=64,ram_cach=1G,allow_othr", &o);
  EXPECT_NE(two.message().find("ram_cache?"), std::string::npos) << two.message();
  EXPECT_NE(two.message().find("allow_other?"), std::string::npos) << two.message();
  // What fstab, mount(8) and mount.fuse3 pass on is libfuse's and passes.
  EXPECT_TRUE(ParseLine("rw,nosuid,nodev,noexec,noatime,allow_other,default_permissions,"
                        "fsname=x,subtype=joaderfs,max_read=131072,dev,suid,ro",
                        &o)
                  .ok());
}

TEST(OptionsTest, MachineChecks) {
  TempDir d;
  testing::WriteFile(d / "src/a/x.jpg");
  DaemonOptions o;
  EXPECT_EQ(RunParser(ParseOptions, "cache_dir=none", {d / "nope", d / "mnt"}, &o).code(),
            Status::Code::kNotFound);

  o = {};
  ASSERT_TRUE(RunParser(ParseOptions, "cache_dir=" + d / "cache", {d / "src", d / "mnt"}, &o).ok());
  const uint64_t ram = uint64_t(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  EXPECT_EQ(o.ram_cache, ram / 4);
  EXPECT_GE(o.threads, 1u);
  EXPECT_EQ(o.cache_dir, d / "cache");

  o = {};
  const Status big = RunParser(ParseOptions, "cache_dir=none,ram_cache=" + std::to_string(ram + 1),
                               {d / "src", d / "mnt"}, &o);
  EXPECT_EQ(big.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(big.message().find("ram_cache"), std::string::npos) << big.message();

  // One sample of the default size must fit a quarter of ram_cache
  // (sampling/plan_group.h): 512 x 512 x 3 bytes is more than 1M / 4.
  o = {};
  const Status huge =
      RunParser(ParseOptions, "cache_dir=none,ram_cache=1M,size=512", {d / "src", d / "mnt"}, &o);
  EXPECT_EQ(huge.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(huge.message().find("size=512"), std::string::npos) << huge.message();
  o = {};
  EXPECT_TRUE(
      RunParser(ParseOptions, "cache_dir=none,ram_cache=1M,size=256", {d / "src", d / "mnt"}, &o)
          .ok());

  // What lies under the mountpoint is hidden once mounted.
  o = {};
  const Status cache_inside =
      RunParser(ParseOptions, "cache_dir=" + d / "mnt/cache", {d / "src", d / "mnt/"}, &o);
  EXPECT_EQ(cache_inside.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(cache_inside.message().find("cache_dir"), std::string::npos) << cache_inside.message();
  EXPECT_FALSE(std::filesystem::exists(d / "mnt/cache"));
  o = {};
  EXPECT_EQ(RunParser(ParseOptions, "cache_dir=none", {d / "src/a", d / "src"}, &o).code(),
            Status::Code::kInvalidArgument);
  // A sibling with a longer name is not inside.
  o = {};
  EXPECT_TRUE(RunParser(ParseOptions, "cache_dir=" + d / "src2", {d / "src", d / "sr"}, &o).ok());
}

}  // namespace
}  // namespace joaderfs
