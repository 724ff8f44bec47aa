// The JPEG decode of base images (loader/jpeg.h), the two ways it can run
// a scale whose IDCT libjpeg-turbo has no SIMD for (3/8, 5/8, 6/8, 7/8):
// through loader/jpeg_idct.h's AVX2 kernels at that scale, or decoded at
// the next SIMD scale up and resampled (the path of CPUs without AVX2).
// Every JPEG of an ImageFolder is held in memory; an iteration decodes them
// all, one thread; `per_image` is the CPU time per picture. Pictures whose
// scale is 1/8, 2/8, 4/8 or 8/8 cost the same both ways and are counted, so
// that the figure is what a cold epoch over the folder sees.
//
// Beside them, what bounds a cold sample from below, through the same
// libjpeg-turbo: `EntropyOnly`, the Huffman decoding of the whole picture
// that any base image costs (jpeg_read_coefficients, no IDCT), and
// `CropWindow`, the work of tf.data's decode_and_crop_jpeg for a
// RandomResizedCrop window (torchvision's draw, fixed seed): full scale,
// the IDCT cut to the window's columns (jpeg_crop_scanline), the rows above
// it skipped and none decoded below it.
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

#include <jpeglib.h>

#include "loader/augment.h"
#include "loader/jpeg.h"
#include "testing/test_util.h"

namespace joaderfs {
namespace {

std::vector<std::string>* files = nullptr;
uint32_t base = 256;

void SetPerImage(benchmark::State& state) {
  state.counters["per_image"] = benchmark::Counter(
      static_cast<double>(files->size()),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

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
  SetPerImage(state);
}

void ScaledIdct(benchmark::State& state) { Decode(state, OddScaleDecode::kScaledIdct); }
void SimdScaleResampled(benchmark::State& state) {
  Decode(state, OddScaleDecode::kSimdScaleResampled);
}
BENCHMARK(ScaledIdct)->Unit(benchmark::kMillisecond);
BENCHMARK(SimdScaleResampled)->Unit(benchmark::kMillisecond);

// EntropyOnly and CropWindow (see the top). Their files are generated
// photos or an ImageFolder the caller trusts: libjpeg's errors exit.
void StartDecompress(jpeg_decompress_struct* cinfo, jpeg_error_mgr* errors,
                     const std::string& file) {
  cinfo->err = jpeg_std_error(errors);
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, reinterpret_cast<const unsigned char*>(file.data()), file.size());
  jpeg_read_header(cinfo, TRUE);
}

void EntropyOnly(benchmark::State& state) {
  for (auto _ : state) {
    for (const std::string& file : *files) {
      jpeg_decompress_struct cinfo;
      jpeg_error_mgr errors;
      StartDecompress(&cinfo, &errors, file);
      benchmark::DoNotOptimize(jpeg_read_coefficients(&cinfo));
      jpeg_finish_decompress(&cinfo);
      jpeg_destroy_decompress(&cinfo);
    }
  }
  SetPerImage(state);
}

void CropWindow(benchmark::State& state) {
  AugmentSpec spec;
  spec.crop = AugmentSpec::Crop::kRandom;
  AugmentRandom random(7);
  std::vector<uint8_t> row;
  for (auto _ : state) {
    for (const std::string& file : *files) {
      jpeg_decompress_struct cinfo;
      jpeg_error_mgr errors;
      StartDecompress(&cinfo, &errors, file);
      cinfo.out_color_space = JCS_RGB;
      jpeg_start_decompress(&cinfo);
      const PixelBox box =
          RandomResizedCropBox(cinfo.output_width, cinfo.output_height, spec, &random);
      JDIMENSION left = box.left, width = box.width;
      jpeg_crop_scanline(&cinfo, &left, &width);
      row.resize(size_t{cinfo.output_width} * 3);
      jpeg_skip_scanlines(&cinfo, box.top);
      for (uint32_t y = 0; y < box.height; ++y) {
        JSAMPROW out = row.data();
        jpeg_read_scanlines(&cinfo, &out, 1);
      }
      benchmark::DoNotOptimize(row.data());
      jpeg_destroy_decompress(&cinfo);  // the rows below the window: never decoded
    }
  }
  SetPerImage(state);
}
BENCHMARK(EntropyOnly)->Unit(benchmark::kMillisecond);
BENCHMARK(CropWindow)->Unit(benchmark::kMillisecond);

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
