// What a disk tier full of small entries costs a restart (issue 44, item
// 4): how long DiskCache::Open takes over a tier holding every sample of
// SOURCE, how long until its background rebuild is done, and the
// RSS it adds per cached sample over a fresh (empty) tier's open; and how
// many writes a burst of PutAsync drops. Each open runs in a child process
// of its own, so that one open's heap never flatters the next; prints the
// medians of --reps against the targets.
//
//   joaderfs-disk-index-bench SOURCE CACHE_DIR [--reps N] [--samples N]
//
// SOURCE: an ImageFolder (the tier never decodes: any file contents do); one
// of --samples placeholder files (131072) is made where it does not exist.
// CACHE_DIR is filled with one 16x16 sample per file first, unless it holds
// them already.

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cache/disk_cache.h"
#include "catalog/catalog.h"

namespace joaderfs {
namespace {

constexpr uint32_t kBase = 16;
constexpr uint32_t kSide = 16;

struct NoJobs final : RefCounts {
  void Counts(std::span<const SampleId>, std::span<uint32_t> counts) const override {
    std::fill(counts.begin(), counts.end(), 0);
  }
};

uint64_t RssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) << 10;
  }
  return 0;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

SamplePtr Sample(uint8_t value) {
  auto s = std::make_shared<DecodedSample>();
  s->height = s->width = kSide;
  s->pixels.reset(new uint8_t[s->bytes()], std::default_delete<uint8_t[]>());
  std::memset(s->pixels.get(), value, s->bytes());
  return s;
}

// One open, in this (child) process: seconds to Open, seconds to the
// rebuild's end, RSS added by Open+rebuild, entries, and a check that every
// sample is served.
struct OpenFigures {
  double open_s = 0, ready_s = 0;
  double rss_bytes = 0;
  double entries = 0, served = 0;
  double hit_us = 0;  // wall time per Get of a stored sample, index and slot read
};

OpenFigures OpenOnce(const Catalog& catalog, const std::string& dir, bool read_all) {
  NoJobs counts;
  OpenFigures f;
  const uint64_t rss0 = RssBytes();
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<DiskCache> cache;
  Status s = DiskCache::Open(dir, &catalog, &counts, kBase, 1ULL << 40, &cache);
  if (!s.ok()) {
    std::fprintf(stderr, "open: %s\n", s.message().c_str());
    std::exit(1);
  }
  f.open_s = Seconds(start);
  cache->WaitForRebuild();
  f.ready_s = Seconds(start);
  f.rss_bytes = static_cast<double>(RssBytes()) - static_cast<double>(rss0);
  f.entries = static_cast<double>(cache->Stats().entries);
  if (read_all) {
    DecodedSample out;
    const auto reads = std::chrono::steady_clock::now();
    for (SampleId id = 0; id < catalog.size(); ++id) f.served += cache->Get(id, &out).ok();
    f.hit_us = Seconds(reads) * 1e6 / static_cast<double>(catalog.size());
  }
  return f;
}

// Runs OpenOnce in a child process and reads its figures back.
OpenFigures OpenInChild(const Catalog& catalog, const std::string& dir, bool read_all) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) std::exit(1);
  std::fflush(stdout);  // or the child prints it again
  const pid_t pid = fork();
  if (pid == 0) {
    close(pipe_fds[0]);
    const OpenFigures f = OpenOnce(catalog, dir, read_all);
    const ssize_t n = write(pipe_fds[1], &f, sizeof(f));
    _exit(n == sizeof(f) ? 0 : 1);
  }
  close(pipe_fds[1]);
  OpenFigures f;
  const ssize_t n = read(pipe_fds[0], &f, sizeof(f));
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (n != sizeof(f) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "child failed\n");
    std::exit(1);
  }
  return f;
}

// Placeholder files, 1024 a class, each of distinct bytes.
void MakeSource(const std::string& source, size_t samples) {
  const std::string partial = source + ".partial";
  std::filesystem::remove_all(partial);
  for (size_t i = 0; i < samples; ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "/c%04zu", i / 1024);
    const std::string folder = partial + name;
    if (i % 1024 == 0) std::filesystem::create_directories(folder);
    std::snprintf(name, sizeof(name), "/img%07zu.jpg", i);
    std::ofstream(folder + name, std::ios::binary) << "\xff\xd8\xff" << i;
  }
  std::filesystem::rename(partial, source);
}

template <typename Field>
double Median(const std::vector<OpenFigures>& runs, Field field) {
  std::vector<double> v;
  for (const OpenFigures& f : runs) v.push_back(f.*field);
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s SOURCE CACHE_DIR [--reps N]\n", argv[0]);
    return 2;
  }
  const std::string source = argv[1], dir = argv[2];
  int reps = 3;
  size_t samples = 131072;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--samples") == 0) samples = std::strtoull(argv[i + 1], nullptr, 10);
  }
  if (!std::filesystem::exists(source)) MakeSource(source, samples);
  std::unique_ptr<Catalog> catalog;
  Status s = Catalog::Open(source, &catalog);
  if (!s.ok()) {
    std::fprintf(stderr, "catalog: %s\n", s.message().c_str());
    return 1;
  }
  const size_t n = catalog->size();
  NoJobs counts;

  // A burst: every sample queued at once into a fresh tier (as a RAM
  // tier's write-through of a fast epoch would, at worst).
  const std::string burst_dir = dir + "/burst";
  std::filesystem::remove_all(burst_dir);
  std::filesystem::create_directories(burst_dir);
  DiskCacheStats burst;
  double burst_s = 0;
  const size_t burst_n = std::min<size_t>(n, 16384);
  {
    std::unique_ptr<DiskCache> cache;
    s = DiskCache::Open(burst_dir, catalog.get(), &counts, kBase, 1ULL << 40, &cache);
    if (!s.ok()) return 1;
    const auto start = std::chrono::steady_clock::now();
    for (SampleId id = 0; id < burst_n; ++id) cache->PutAsync(id, Sample(id & 0xff));
    cache->Flush();
    burst_s = Seconds(start);
    burst = cache->Stats();
  }
  std::filesystem::remove_all(burst_dir);

  // Fill the tier (paced by Flush, so that nothing is dropped).
  const std::string full_dir = dir + "/full";
  {
    std::unique_ptr<DiskCache> cache;
    s = DiskCache::Open(full_dir, catalog.get(), &counts, kBase, 1ULL << 40, &cache);
    if (!s.ok()) return 1;
    const auto start = std::chrono::steady_clock::now();
    cache->WaitForRebuild();
    if (cache->Stats().entries < n) {
      for (SampleId id = 0; id < n; ++id) {
        cache->PutAsync(id, Sample(id & 0xff));
        if (id % 256 == 255) cache->Flush();
      }
      cache->Flush();
      std::printf("filled %zu samples in %.1f s\n", n, Seconds(start));
    }
  }
  const std::string empty_dir = dir + "/empty";
  std::filesystem::remove_all(empty_dir);

  std::vector<OpenFigures> fresh, full;
  for (int r = 0; r < reps; ++r) {
    std::filesystem::remove_all(empty_dir);
    fresh.push_back(OpenInChild(*catalog, empty_dir, false));
    full.push_back(OpenInChild(*catalog, full_dir, r == 0));
  }
  const double per_sample =
      (Median(full, &OpenFigures::rss_bytes) - Median(fresh, &OpenFigures::rss_bytes)) /
      static_cast<double>(n);
  std::printf("disk tier of %zu samples (16x16), medians of %d, each open in a child process\n", n,
              reps);
  std::printf("%-44s %12s %12s\n", "figure", "measured", "target");
  std::printf("%-44s %12.3f %12s\n", "Open() of the full tier, s",
              Median(full, &OpenFigures::open_s), "<= 1.0");
  std::printf("%-44s %12.3f %12s\n", "Open() until rebuilt, s", Median(full, &OpenFigures::ready_s),
              "-");
  std::printf("%-44s %12.3f %12s\n", "Open() of an empty tier, s",
              Median(fresh, &OpenFigures::open_s), "-");
  std::printf("%-44s %12.1f %12s\n", "RSS added, full tier, MiB",
              Median(full, &OpenFigures::rss_bytes) / (1 << 20), "-");
  std::printf("%-44s %12.1f %12s\n", "RSS added, empty tier, MiB",
              Median(fresh, &OpenFigures::rss_bytes) / (1 << 20), "-");
  std::printf("%-44s %12.1f %12s\n", "RSS per cached sample over empty, bytes", per_sample,
              "<= 128");
  std::printf("%-44s %12.0f %12zu\n", "entries after rebuild", Median(full, &OpenFigures::entries),
              n);
  std::printf("%-44s %12.0f %12zu\n", "samples served after reopen", full[0].served, n);
  std::printf("%-44s %12.2f %12s\n", "Get of a stored sample, us", full[0].hit_us, "-");
  std::printf("%-44s %12llu %12s\n", "burst of PutAsync: write_drops",
              static_cast<unsigned long long>(burst.write_drops), "0");
  std::printf("%-44s %12llu %12zu\n", "burst of PutAsync: writes",
              static_cast<unsigned long long>(burst.writes), burst_n);
  std::printf("%-44s %12.3f %12s\n", "burst: seconds to written", burst_s, "-");
  return 0;
}

}  // namespace
}  // namespace joaderfs

int main(int argc, char** argv) { return joaderfs::Main(argc, argv); }
