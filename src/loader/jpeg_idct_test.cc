#include "loader/jpeg_idct.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "loader/resample.h"
#include "testing/test_util.h"

namespace joaderfs {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteImage;

// A picture at M/8 through libjpeg, with its own IDCTs or with ours.
struct Scaled {
  uint32_t width = 0, height = 0;
  std::vector<int> block_sizes;  // each component's IDCT output size
  bool installed = false;
  std::vector<uint8_t> pixels;  // the JPEG's components (YCbCr, grey)
};

Scaled DecodeAtScale(const std::string& file, unsigned m, bool ours) {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr errors;
  cinfo.err = jpeg_std_error(&errors);  // the test images are valid
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(file.data()), file.size());
  jpeg_read_header(&cinfo, TRUE);
  // The IDCT's own output: no colour conversion to widen a rounding step
  // (4:2:0 chroma is upsampled inside the IDCT, so nothing else runs).
  cinfo.out_color_space = cinfo.jpeg_color_space;
  cinfo.scale_num = m;
  cinfo.scale_denom = 8;
  jpeg_start_decompress(&cinfo);
  Scaled s;
  s.width = cinfo.output_width;
  s.height = cinfo.output_height;
  for (int ci = 0; ci < cinfo.num_components; ++ci) {
    s.block_sizes.push_back(cinfo.comp_info[ci].DCT_scaled_size);
  }
  s.installed = ours && InstallScaledIdct(&cinfo);
  const size_t stride = size_t{s.width} * cinfo.output_components;
  s.pixels.resize(stride * s.height);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = s.pixels.data() + cinfo.output_scanline * stride;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return s;
}

// A photo-like picture: smooth shapes at several scales, edges, and a
// little noise, so that blocks carry both low and high frequencies.
int PhotoLike(int x, int y, int band, std::mt19937* noise) {
  const double v = 128 + 60 * std::sin(x * 0.05 + band) * std::cos(y * 0.07) +
                   30 * std::sin((x + 2 * y) * 0.31 + band * 2) + ((x / 23 + y / 17) % 2) * 25 +
                   static_cast<int>((*noise)() % 21) - 10;
  return std::clamp(static_cast<int>(v), 0, 255);
}

// Each kernel against the IDCT in double precision (jpeg_idct.h's
// definition) over random blocks with coefficients of a photo's range, dense
// and zero past a row and a column:
// every sample within 1 of the exact value rounded, clamped to 0..255.
TEST(JpegIdctTest, KernelsAreTheExactIdctRounded) {
  if (BestSimdLevel() != SimdLevel::kAvx2) GTEST_SKIP() << "no AVX2: libjpeg's kernels stay";
  const double pi = 3.14159265358979323846;
  std::mt19937 random(11);
  JQUANT_TBL table{};
  jpeg_component_info component{};
  component.quant_table = &table;
  for (const int size : {3, 5, 6, 7, 10, 12, 14}) {
    SCOPED_TRACE("size " + std::to_string(size));
    const JpegIdctMethod idct = ScaledIdctFor(size);
    ASSERT_NE(idct, nullptr);
    const auto basis = [&](int k, int n) {
      return 0.5 * std::cos((2 * n + 1) * k * pi / (2.0 * size)) *
             (k == 0 ? 1 / std::sqrt(2.0) : 1);
    };
    int largest = 0;
    for (int block = 0; block < 600; ++block) {
      alignas(32) JCOEF coefficients[64];
      for (int i = 0; i < 64; ++i) {
        table.quantval[i] = static_cast<UINT16>(1 + random() % 16);
        // DC across its range, AC smaller the higher the frequency.
        const int range = i == 0 ? 1024 : 256 / (1 + i / 8 + i % 8);
        coefficients[i] = static_cast<JCOEF>(static_cast<int>(random() % (2 * range + 1)) - range);
      }
      // Most blocks of a photo are zero past a few rows and columns: the
      // kernels then skip them, so cut two blocks of three short.
      if (block % 3 != 0) {
        const int rows = 1 + static_cast<int>(random() % 8),
                  columns = 1 + static_cast<int>(random() % 8);
        for (int i = 0; i < 64; ++i) {
          if (i / 8 >= rows || i % 8 >= columns) coefficients[i] = 0;
        }
      }
      if (block % 7 == 0)
        coefficients[0] =
            static_cast<JCOEF>(block % 2 ? 4000 / table.quantval[0] : -4000 / table.quantval[0]);
      JSAMPLE out[16][24] = {};
      JSAMPROW rows[16];
      for (int n = 0; n < 16; ++n) rows[n] = out[n];
      idct(nullptr, &component, coefficients, rows, 4);
      for (int y = 0; y < size; ++y) {
        for (int x = 0; x < size; ++x) {
          double f = 128;
          for (int v = 0; v < std::min(size, 8); ++v) {
            for (int u = 0; u < std::min(size, 8); ++u) {
              f += basis(u, x) * basis(v, y) * coefficients[v * 8 + u] * table.quantval[v * 8 + u];
            }
          }
          const int exact = std::clamp(static_cast<int>(std::lround(f)), 0, 255);
          largest = std::max(largest, std::abs(int{out[y][x + 4]} - exact));
        }
        // Exactly `size` samples written, at output_col.
        for (int x = 0; x < 24; ++x) {
          if (x < 4 || x >= size + 4) {
            ASSERT_EQ(out[y][x], 0) << "row " << y << " sample " << x;
          }
        }
      }
    }
    EXPECT_LE(largest, 1);
  }
}

// A component before its first scan has no quantisation table: its blocks
// are flat grey, as libjpeg's kernels make them from the zeroed table.
TEST(JpegIdctTest, AComponentWithNoTableYetIsGrey) {
  if (BestSimdLevel() != SimdLevel::kAvx2) GTEST_SKIP() << "no AVX2: libjpeg's kernels stay";
  jpeg_component_info component{};
  alignas(32) JCOEF coefficients[64];
  for (int i = 0; i < 64; ++i) coefficients[i] = static_cast<JCOEF>(i * 3 - 90);
  JSAMPLE out[16][16] = {};
  JSAMPROW rows[16];
  for (int n = 0; n < 16; ++n) rows[n] = out[n];
  ScaledIdctFor(12)(nullptr, &component, coefficients, rows, 0);
  for (int y = 0; y < 12; ++y) {
    for (int x = 0; x < 12; ++x) ASSERT_EQ(out[y][x], 128) << y << "," << x;
  }
}

// Ours against libjpeg's own kernels at every scale they replace, for
// 4:4:4, 4:2:0 (whose chroma libjpeg upsamples in 2M x 2M IDCTs), grey and
// progressive JPEGs of sizes that leave partial blocks at the edges: a sample differs by
// at most 1 (2-3.5 % of them do), rounding alone.
TEST(JpegIdctTest, MatchesLibjpegsOwnKernelsAtEveryScaleTheyReplace) {
  if (BestSimdLevel() != SimdLevel::kAvx2) GTEST_SKIP() << "no AVX2: libjpeg's kernels stay";
  TempDir d;
  struct Encoding {
    const char* name;
    const char* options;
    int bands;
    bool subsampled;
  };
  for (const Encoding e :
       {Encoding{"444", "[Q=95]", 3, false}, Encoding{"420", "[Q=75,subsample-mode=on]", 3, true},
        Encoding{"grey", "[Q=90]", 1, false},
        Encoding{"progressive", "[Q=90,interlace]", 3, false}}) {
    for (const bool noise_only : {false, true}) {
      const std::string path = d / (std::string(e.name) + (noise_only ? "-noise" : "") + ".jpg");
      std::mt19937 noise(7);
      WriteImage(path + e.options, 203, 157, e.bands, [&](int x, int y, int band) {
        return noise_only ? static_cast<int>(noise() % 256) : PhotoLike(x, y, band, &noise);
      });
      const std::string file = ReadFile(path);
      for (const unsigned m : {3u, 5u, 6u, 7u}) {
        SCOPED_TRACE(std::string(e.name) + (noise_only ? " noise" : " photo") + " at " +
                     std::to_string(m) + "/8");
        const Scaled theirs = DecodeAtScale(file, m, false);
        const Scaled ours = DecodeAtScale(file, m, true);
        ASSERT_TRUE(ours.installed);
        ASSERT_EQ(ours.width, theirs.width);
        ASSERT_EQ(ours.height, theirs.height);
        const int chroma = e.subsampled ? 2 * static_cast<int>(m) : static_cast<int>(m);
        for (size_t ci = 0; ci < ours.block_sizes.size(); ++ci) {
          EXPECT_EQ(ours.block_sizes[ci], ci == 0 ? static_cast<int>(m) : chroma);
        }
        int largest = 0;
        double total = 0;
        for (size_t i = 0; i < ours.pixels.size(); ++i) {
          const int diff = std::abs(int{ours.pixels[i]} - int{theirs.pixels[i]});
          largest = std::max(largest, diff);
          total += diff;
        }
        EXPECT_LE(largest, 1);
        EXPECT_LT(total / ours.pixels.size(), 0.05);
        // The two round differently: identical pictures would mean ours
        // never ran.
        EXPECT_GT(total, 0);
      }
    }
  }
}

// Sizes libjpeg-turbo does in SIMD itself, and sizes no M/8 decode asks
// for, keep libjpeg's kernels.
TEST(JpegIdctTest, OnlyTheSizesWithoutSimdInLibjpegAreReplaced) {
  for (const int size : {1, 2, 4, 8, 9, 11, 16}) EXPECT_EQ(ScaledIdctFor(size), nullptr) << size;
  if (BestSimdLevel() != SimdLevel::kAvx2) GTEST_SKIP() << "no AVX2: libjpeg's kernels stay";
  for (const int size : {3, 5, 6, 7, 10, 12, 14}) EXPECT_NE(ScaledIdctFor(size), nullptr) << size;
}

}  // namespace
}  // namespace joaderfs
