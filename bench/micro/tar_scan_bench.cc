// The scan of a folder of WebDataset shards: how long Catalog::Open takes
// and what its index holds per sample, beside a plain walk over the same
// tar headers (one pread of 512 bytes per header, data skipped), the least
// any scan must read. Each is run twice; the page cache is warm for all
// but the first walk. Then the relpath lookup an `ids` file of relpaths
// makes (Catalog::FindRelpath), for up to 20000 samples spread over the
// shards, best of 3. Prints one line per figure.
//
//   joaderfs-tar-scan-bench SOURCE

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "catalog/catalog.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

long RssKib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

// Headers read by walking every shard: one pread per header.
uint64_t WalkHeaders(const std::vector<std::string>& shards) {
  uint64_t headers = 0;
  char h[512];
  for (const std::string& path : shards) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    off_t at = 0;
    while (::pread(fd, h, sizeof h, at) == static_cast<ssize_t>(sizeof h) && h[0] != 0) {
      ++headers;
      const uint64_t size = std::strtoull(std::string(h + 124, 12).c_str(), nullptr, 8);
      at += 512 + static_cast<off_t>((size + 511) / 512 * 512);
    }
    ::close(fd);
  }
  return headers;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SOURCE\n", argv[0]);
    return 2;
  }
  std::vector<std::string> shards;
  for (const auto& e : std::filesystem::directory_iterator(argv[1])) {
    if (e.path().extension() == ".tar") shards.push_back(e.path().string());
  }
  std::sort(shards.begin(), shards.end());
  for (int run = 0; run < 2; ++run) {
    const auto start = Clock::now();
    const uint64_t headers = WalkHeaders(shards);
    std::printf("header walk %d: %zu shards, %llu headers, %.3f s\n", run, shards.size(),
                static_cast<unsigned long long>(headers), Seconds(start));
  }
  for (int run = 0; run < 2; ++run) {
    const long rss = RssKib();
    const auto start = Clock::now();
    std::unique_ptr<joaderfs::Catalog> catalog;
    const joaderfs::Status s = joaderfs::Catalog::Open(argv[1], &catalog);
    const double seconds = Seconds(start);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 1;
    }
    const double n = static_cast<double>(catalog->size());
    std::printf(
        "catalog scan %d: %zu samples, %.3f s, index %.1f MiB = %.1f bytes/sample, RSS +%.1f "
        "bytes/sample\n",
        run, catalog->size(), seconds, catalog->index_bytes() / 1048576.0,
        catalog->index_bytes() / n, (RssKib() - rss) * 1024.0 / n);
    if (run == 1) {
      const size_t lookups = std::min<size_t>(catalog->size(), 20000);
      std::vector<std::string> relpaths;
      for (size_t i = 0; i < lookups; ++i) {
        relpaths.push_back(
            catalog->relpath(static_cast<joaderfs::SampleId>(i * (catalog->size() / lookups))));
      }
      double best = 1e9;
      size_t found = 0;
      for (int rep = 0; rep < 3; ++rep) {
        const auto start = Clock::now();
        found = 0;
        for (const std::string& r : relpaths) found += catalog->FindRelpath(r).has_value();
        best = std::min(best, Seconds(start));
      }
      std::printf("relpath lookups: %zu (%zu found), %.4f s, %.2f us each (best of 3)\n", lookups,
                  found, best, best * 1e6 / lookups);
    }
  }
  return 0;
}
