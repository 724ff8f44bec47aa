#include "daemon/options.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

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
  for (const char* bad : {"retry_failed=86401", "retry_failed=-1", "retry_failed=", "retry_failed=1s"}) {
    const Status s = ParseLine(bad, &o);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("retry_failed"), std::string::npos) << s.message();
  }
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
