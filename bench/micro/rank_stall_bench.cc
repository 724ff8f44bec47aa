// How long the epoch start of a data-parallel job stalls the other jobs of a
// mount (issue 11): splitting an epoch among ranks sorts the subset, and it
// must not run under the job manager's lock.
//
// A JobManager (no FUSE) over a synthetic catalog of ImageNet's 1281167 ids
// (a manifest naming 64 small JPEGs over and over); a job over 64 of them
// read by one thread, one record per read, RAM hits after its first epoch;
// and per repetition a fresh job with ranks=W over every id, whose rank 0
// is opened and read once (its first epoch begins: its shards are made and
// its shard joins the planner). Prints, per repetition, how long that open
// and first read took and the longest read of the other job that overlapped
// them, then their medians.
//
//   joaderfs-rank-stall-bench [--reps N] [--ranks W]

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cache/sample_cache.h"
#include "catalog/catalog.h"
#include "jobs/job_manager.h"
#include "loader/loader_pool.h"
#include "sampling/plan_group.h"
#include "testing/test_util.h"

namespace joaderfs {
namespace {

using Clock = std::chrono::steady_clock;

// The bench's own calls must work: a failure ends it.
void Must(const Status& s) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s\n", s.message().c_str());
  std::exit(1);
}

constexpr uint32_t kIds = 1281167;
constexpr uint32_t kFiles = 64;
constexpr uint32_t kSize = 16;
constexpr size_t kRecordBytes = 64 + kSize * kSize * 3;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One Read(), waited for: its bytes (none at the end of the stream).
size_t ReadOnce(JobManager* jobs, JobManager::ReaderId reader, uint64_t token) {
  std::promise<size_t> got;
  jobs->Read(reader, kRecordBytes, token, [&](const Status& s, std::span<const iovec> data) {
    size_t bytes = 0;
    for (const iovec& v : data) bytes += v.iov_len;
    got.set_value(s.ok() ? bytes : 0);
  });
  return got.get_future().get();
}

struct Span {
  Clock::time_point start, end;
};

int Run(int reps, uint32_t ranks) {
  testing::TempDir dir("joaderfs_rank_stall");
  std::ofstream manifest(dir.path() + "/manifest.tsv");
  for (uint32_t i = 0; i < kFiles; ++i) {
    testing::WriteNoiseImage(dir.path() + "/img" + std::to_string(i) + ".jpg", 24, 20, i + 1);
  }
  for (uint32_t id = 0; id < kIds; ++id) {
    manifest << "img" << id % kFiles << ".jpg\t" << id % 1000 << "\n";
  }
  manifest.close();
  std::unique_ptr<Catalog> catalog;
  Status s = Catalog::Open(dir.path() + "/manifest.tsv", &catalog);
  if (!s.ok()) {
    std::fprintf(stderr, "catalog: %s\n", s.message().c_str());
    return 1;
  }
  PlanGroupOptions g;
  g.cadence.lookahead = 16;
  PlanGroup group(g);
  LoaderPool pool(2);
  SampleCache cache(catalog.get(), &pool, nullptr, &group, kSize, 256 << 20);
  JobManagerOptions options;
  options.default_size = kSize;
  JobManager jobs(catalog.get(), &cache, &pool, &group, options);
  pool.Start();

  // The other job: reads one record at a time, epoch after epoch.
  Must(jobs.CreateJob("steady", 0));
  Must(jobs.SetSpec("steady", 0, "subset=range:0-" + std::to_string(kFiles - 1)));
  std::atomic<bool> stop{false};
  std::vector<Span> reads;
  std::thread steady([&] {
    uint64_t token = 0;
    while (!stop) {
      JobManager::ReaderId reader;
      Must(jobs.OpenReader("steady", 0, &reader));
      for (;;) {
        const auto start = Clock::now();
        const size_t bytes = ReadOnce(&jobs, reader, ++token);
        reads.push_back({start, Clock::now()});
        if (bytes == 0 || stop) break;
      }
      jobs.CloseReader(reader);
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // its samples cached

  std::vector<Span> starts;
  for (int rep = 0; rep < reps; ++rep) {
    const std::string name = "ddp" + std::to_string(rep);
    Must(jobs.CreateJob(name, 0));
    Must(jobs.SetSpec(name, 0, "ranks=" + std::to_string(ranks)));
    const auto start = Clock::now();
    JobManager::ReaderId reader;
    Must(jobs.OpenReader(name, 0, &reader, 0));
    ReadOnce(&jobs, reader, 1);
    starts.push_back({start, Clock::now()});
    jobs.CloseReader(reader);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    Must(jobs.RemoveJob(name, 0));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  stop = true;
  steady.join();

  std::printf("| rep | ranked open + first read (ms) | longest read of the other job (ms) |\n");
  std::printf("| ---: | ---: | ---: |\n");
  std::vector<double> start_ms, stall_ms;
  for (size_t i = 0; i < starts.size(); ++i) {
    double longest = 0;
    for (const Span& r : reads) {
      if (r.start < starts[i].end && r.end > starts[i].start) {
        longest = std::max(longest, Ms(r.end - r.start));
      }
    }
    start_ms.push_back(Ms(starts[i].end - starts[i].start));
    stall_ms.push_back(longest);
    std::printf("| %zu | %.1f | %.1f |\n", i, start_ms.back(), longest);
  }
  std::vector<double> all;
  for (const Span& r : reads) all.push_back(Ms(r.end - r.start));
  std::printf("| median | %.1f | %.1f |\n", Median(start_ms), Median(stall_ms));
  std::printf("\nthe other job's reads: %zu, median %.3f ms\n", all.size(), Median(all));
  return 0;
}

}  // namespace
}  // namespace joaderfs

int main(int argc, char** argv) {
  int reps = 7;
  uint32_t ranks = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--reps") {
      reps = std::atoi(argv[i + 1]);
    } else if (arg == "--ranks") {
      ranks = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "usage: %s [--reps N] [--ranks W]\n", argv[0]);
      return 2;
    }
  }
  if (reps < 1 || ranks < 1) {
    std::fprintf(stderr, "--reps and --ranks must be positive\n");
    return 2;
  }
  return joaderfs::Run(reps, ranks);
}
