// CPU per sample of the ways a sample can be made: a decode (libjpeg-turbo
// or libvips, then the resample) against a disk-tier hit (RocksDB read,
// checksums), on one thread, over a real dataset. Prints a table of the
// medians of --reps passes and their ratio (issue 4's target: a hit costs at
// most a fifth of a decode).
//
//   joaderfs-sample-cost-bench SOURCE CACHE_DIR [--size N] [--reps N]
//
// CACHE_DIR is a daemon's cache_dir; samples missing from it are written
// first (a pass of decodes), so the hit pass reads every sample.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "thread_cpu.h"
#include "cache/disk_cache.h"
#include "sampling/plan_groups.h"
#include "catalog/catalog.h"
#include "loader/decoder.h"

namespace joaderfs {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Run(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s SOURCE CACHE_DIR [--size N] [--reps N]\n", argv[0]);
    return 2;
  }
  uint32_t size = 224;
  int reps = 5;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--size") size = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    if (std::string(argv[i]) == "--reps") reps = std::max(1, std::atoi(argv[i + 1]));
  }
  std::string error;
  if (!InitDecoder(argv[0], &error)) {
    std::fprintf(stderr, "libvips: %s\n", error.c_str());
    return 1;
  }
  std::unique_ptr<Catalog> catalog;
  Status s = Catalog::Open(argv[1], &catalog);
  std::unique_ptr<DiskCache> disk;
  const PlanGroups no_jobs({});
  if (s.ok()) s = DiskCache::Open(argv[2], catalog.get(), &no_jobs, uint64_t{1} << 40, &disk);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  const auto n = static_cast<SampleId>(catalog->size());
  for (SampleId id = 0; id < n; ++id) {
    DecodedSample probe;
    if (disk->Get(size, id, &probe).ok()) continue;
    auto sample = std::make_shared<DecodedSample>();
    if (DecodeImage(catalog->path(id), size, sample.get()).ok()) disk->PutAsync(size, id, sample);
  }
  disk->Flush();

  std::vector<double> hit_ms, decode_ms;
  for (int r = 0; r < reps; ++r) {
    uint64_t hits = 0;
    const double t0 = ThreadCpuSeconds();
    for (SampleId id = 0; id < n; ++id) {
      DecodedSample sample;
      hits += disk->Get(size, id, &sample).ok();
    }
    const double t1 = ThreadCpuSeconds();
    for (SampleId id = 0; id < n; ++id) {
      DecodedSample sample;
      DecodeImage(catalog->path(id), size, &sample);
    }
    const double t2 = ThreadCpuSeconds();
    if (hits != n) {
      std::fprintf(stderr, "only %llu of %u samples were on disk\n",
                   static_cast<unsigned long long>(hits), n);
      return 1;
    }
    hit_ms.push_back((t1 - t0) * 1000 / n);
    decode_ms.push_back((t2 - t1) * 1000 / n);
  }
  std::printf("%u samples, size %u, medians of %d passes (thread CPU time)\n\n", n, size, reps);
  std::printf("| figure | CPU ms per sample |\n| --- | ---: |\n");
  std::printf("| decode | %.3f |\n| disk-tier hit | %.3f |\n", Median(decode_ms), Median(hit_ms));
  std::vector<double> ratios;
  for (int r = 0; r < reps; ++r) ratios.push_back(hit_ms[r] / decode_ms[r]);
  std::printf("| hit / decode | %.3f |\n", Median(ratios));
  return 0;
}

}  // namespace
}  // namespace joaderfs

int main(int argc, char** argv) { return joaderfs::Run(argc, argv); }
