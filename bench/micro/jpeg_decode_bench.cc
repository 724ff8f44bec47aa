// The JPEG decode of base images (loader/jpeg.h), the two ways it can run
// a scale whose IDCT libjpeg-turbo has no SIMD for (3/8, 5/8, 6/8, 7/8):
// through loader/jpeg_idct.h's AVX2 kernels at that scale, or decoded at
// the next SIMD scale up and resampled (the path of CPUs without AVX2).
// Every JPEG of an ImageFolder is held in memory; an iteration decodes them
// all, one thread; `per_image` is the CPU time per picture. Pictures whose
// scale is 1/8, 2/8, 4/8 or 8/8 cost the same both ways and are counted, so
// that the figure is what a cold epoch over the folder sees.
//
//   joaderfs-jpeg-decode-bench IMAGEFOLDER [--base N] [benchmark flags], e.g.
//   --benchmark_repetitions=9 --benchmark_enable_random_interleaving=true
//   --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "loader/jpeg.h"
#include "testing/test_util.h"

namespace joaderfs {
namespace {

std::vector<std::string>* files = nullptr;
uint32_t base = 256;

void Decode(benchmark::State& state, OddScaleDecode odd_scale) {
  RgbImage image;
  for (auto _ : state) {
    for (const std::string& file : *files) {
      const Status s = DecodeJpeg(file, base, uint64_t{1} << 40, &image, odd_scale);
      if (!s.ok()) {
        state.SkipWithError(s.message().c_str());
        return;
      }
      benchmark::DoNotOptimize(image.pixels.get());
    }
  }
  state.counters["per_image"] = benchmark::Counter(
      static_cast<double>(files->size()),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void ScaledIdct(benchmark::State& state) { Decode(state, OddScaleDecode::kScaledIdct); }
void SimdScaleResampled(benchmark::State& state) {
  Decode(state, OddScaleDecode::kSimdScaleResampled);
}
BENCHMARK(ScaledIdct)->Unit(benchmark::kMillisecond);
BENCHMARK(SimdScaleResampled)->Unit(benchmark::kMillisecond);

std::vector<std::string> ReadJpegs(const std::string& folder) {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(folder)) {
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() || (ext != ".jpg" && ext != ".jpeg" && ext != ".JPEG")) continue;
    std::string bytes = testing::ReadFile(entry.path());
    if (!bytes.empty()) out.push_back(std::move(bytes));
  }
  return out;
}

}  // namespace
}  // namespace joaderfs

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::string folder;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--base") == 0 && i + 1 < argc) {
      joaderfs::base = static_cast<uint32_t>(std::strtoul(argv[++i], nullptr, 10));
    } else {
      folder = argv[i];
    }
  }
  if (folder.empty()) {
    std::fprintf(stderr, "usage: %s IMAGEFOLDER [--base N] [benchmark flags]\n", argv[0]);
    return 2;
  }
  std::vector<std::string> jpegs = joaderfs::ReadJpegs(folder);
  if (jpegs.empty()) {
    std::fprintf(stderr, "no JPEGs under %s\n", folder.c_str());
    return 2;
  }
  std::fprintf(stderr, "%zu JPEGs, base %u\n", jpegs.size(), joaderfs::base);
  joaderfs::files = &jpegs;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
