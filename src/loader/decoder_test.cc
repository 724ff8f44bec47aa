#include "loader/decoder.h"

#include <gtest/gtest.h>
#include <vips/vips.h>

// vector.h needs vips.h first.
#include <vips/vector.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "loader/jpeg.h"
#include "testing/test_util.h"

namespace joaderfs {
namespace {

using testing::ReadFile;
using testing::Rgb;
using testing::TempDir;
using testing::WriteFile;
using testing::WriteImage;
using testing::WriteNoiseImage;
using testing::WriteSolidImage;

::testing::Environment* const kDecoderEnvironment = testing::AddDecoderEnvironment("decoder_test");

Rgb PixelAt(const DecodedSample& s, uint32_t x, uint32_t y) {
  const uint8_t* p = s.pixels.get() + (static_cast<size_t>(y) * s.width + x) * s.channels;
  return {p[0], p[1], p[2]};
}

// Every pixel of `s` is within `tolerance` of `c`.
::testing::AssertionResult AllPixelsNear(const DecodedSample& s, Rgb c, int tolerance) {
  for (uint32_t y = 0; y < s.height; ++y) {
    for (uint32_t x = 0; x < s.width; ++x) {
      const Rgb p = PixelAt(s, x, y);
      for (int b = 0; b < 3; ++b) {
        if (std::abs(int{p[b]} - int{c[b]}) > tolerance) {
          return ::testing::AssertionFailure()
                 << "pixel (" << x << "," << y << ") = (" << int{p[0]} << "," << int{p[1]} << ","
                 << int{p[2]} << "), expected (" << int{c[0]} << "," << int{c[1]} << ","
                 << int{c[2]} << ") +-" << tolerance;
        }
      }
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult Near(Rgb p, Rgb c, int tolerance) {
  for (int b = 0; b < 3; ++b) {
    if (std::abs(int{p[b]} - int{c[b]}) > tolerance) {
      return ::testing::AssertionFailure()
             << "(" << int{p[0]} << "," << int{p[1]} << "," << int{p[2]} << ") vs (" << int{c[0]}
             << "," << int{c[1]} << "," << int{c[2]} << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

DecodedSample DecodeOk(const std::string& path, uint32_t size) {
  DecodedSample s;
  const Status st = DecodeImage(path, size, &s);
  EXPECT_TRUE(st.ok()) << path << " size " << size << ": " << st.message();
  return s;
}

TEST(DecoderTest, OutputIsSizeBySizeRgb) {
  TempDir d;
  struct Dims {
    int width, height;
  };
  const Dims dims[] = {{640, 480}, {480, 640}, {97, 131}, {300, 300}, {1000, 333},
                       {225, 449}, {449, 225}, {64, 48},  {3, 2},     {1, 1}};
  for (const Dims& dim : dims) {
    for (const char* ext : {".jpg", ".png"}) {
      const std::string path =
          d / (std::to_string(dim.width) + "x" + std::to_string(dim.height) + ext);
      WriteNoiseImage(path, dim.width, dim.height);
      for (uint32_t size : {224u, 32u, 1u}) {
        const DecodedSample s = DecodeOk(path, size);
        EXPECT_EQ(s.width, size) << path << " size " << size;
        EXPECT_EQ(s.height, size) << path << " size " << size;
        EXPECT_EQ(s.channels, 3u) << path;
        EXPECT_EQ(s.bytes(), uint64_t{size} * size * 3) << path;
        EXPECT_NE(s.pixels, nullptr) << path;
      }
    }
  }
}

TEST(DecoderTest, SizeZeroKeepsOriginalDimensions) {
  TempDir d;
  for (const char* ext : {".jpg", ".png"}) {
    const std::string path = d / (std::string("img") + ext);
    WriteNoiseImage(path, 97, 131);
    const DecodedSample s = DecodeOk(path, 0);
    EXPECT_EQ(s.width, 97u) << ext;
    EXPECT_EQ(s.height, 131u) << ext;
    EXPECT_EQ(s.channels, 3u) << ext;
    EXPECT_EQ(s.bytes(), 97u * 131u * 3u) << ext;
  }
}

TEST(DecoderTest, LosslessPixelsAreExactAtOriginalSize) {
  TempDir d;
  const std::string path = d / "pattern.png";
  auto f = [](int x, int y, int b) { return static_cast<uint8_t>(x * 7 + y * 13 + b * 50); };
  WriteImage(path, 23, 17, 3, f);
  const DecodedSample s = DecodeOk(path, 0);
  ASSERT_EQ(s.width, 23u);
  ASSERT_EQ(s.height, 17u);
  // HWC, row-major, RGB.
  for (int y = 0; y < 17; ++y) {
    for (int x = 0; x < 23; ++x) {
      for (int b = 0; b < 3; ++b) {
        ASSERT_EQ(s.pixels.get()[(y * 23 + x) * 3 + b], f(x, y, b))
            << "x=" << x << " y=" << y << " band=" << b;
      }
    }
  }
}

TEST(DecoderTest, ConstantColourSurvivesDecodeAndResize) {
  TempDir d;
  const Rgb colour = {200, 30, 60};
  const std::string jpg = d / "c.jpg";
  WriteSolidImage(jpg + "[Q=100]", 64, 48, colour);
  const std::string png = d / "c.png";
  WriteSolidImage(png, 64, 48, colour);
  const std::string big = d / "big.jpg";
  WriteSolidImage(big + "[Q=100]", 1200, 900, colour);  // shrink-on-load path
  for (const std::string& path : {jpg, png, big}) {
    for (uint32_t size : {0u, 32u, 100u, 224u}) {
      const DecodedSample s = DecodeOk(path, size);
      EXPECT_TRUE(AllPixelsNear(s, colour, 2)) << path << " size " << size;
    }
  }
}

TEST(DecoderTest, ResizeThenCentreCropWide) {
  // 200 x 100: left half colour A, right half B. Resized to 50 the image is
  // 100 x 50 and the centre crop keeps columns 25-74: half A, half B.
  TempDir d;
  const Rgb a = {200, 30, 60}, b = {20, 180, 240};
  const std::string path = d / "wide.png";
  WriteImage(path, 200, 100, 3, [&](int x, int, int band) { return x < 100 ? a[band] : b[band]; });
  const DecodedSample s = DecodeOk(path, 50);
  ASSERT_EQ(s.width, 50u);
  ASSERT_EQ(s.height, 50u);
  for (uint32_t y : {0u, 25u, 49u}) {
    EXPECT_TRUE(Near(PixelAt(s, 0, y), a, 2)) << "y=" << y;
    EXPECT_TRUE(Near(PixelAt(s, 20, y), a, 2)) << "y=" << y;
    EXPECT_TRUE(Near(PixelAt(s, 29, y), b, 2)) << "y=" << y;
    EXPECT_TRUE(Near(PixelAt(s, 49, y), b, 2)) << "y=" << y;
  }
}

TEST(DecoderTest, ResizeThenCentreCropTall) {
  // 60 x 180: rows 0-49 colour A, 50-129 B, 130-179 C. Resized to 30 it is
  // 30 x 90 (B on rows 25-64) and the centre crop keeps rows 30-59: all B,
  // with 5 rows of margin for the resize filter.
  TempDir d;
  const Rgb a = {250, 0, 0}, b = {0, 250, 0}, c = {0, 0, 250};
  const std::string path = d / "tall.png";
  WriteImage(path, 60, 180, 3, [&](int, int y, int band) {
    return y < 50 ? a[band] : y < 130 ? b[band] : c[band];
  });
  const DecodedSample s = DecodeOk(path, 30);
  ASSERT_EQ(s.width, 30u);
  ASSERT_EQ(s.height, 30u);
  EXPECT_TRUE(AllPixelsNear(s, b, 2));
}

TEST(DecoderTest, ShrinkOnLoadKeepsGeometry) {
  // A large JPEG takes the shrink-on-load path; the halves must still land
  // left and right of the centre.
  TempDir d;
  const Rgb a = {220, 40, 40}, b = {40, 40, 220};
  const std::string path = d / "large.jpg";
  WriteImage(path + "[Q=95]", 1600, 800, 3,
             [&](int x, int, int band) { return x < 800 ? a[band] : b[band]; });
  const DecodedSample s = DecodeOk(path, 100);
  ASSERT_EQ(s.width, 100u);
  ASSERT_EQ(s.height, 100u);
  EXPECT_TRUE(Near(PixelAt(s, 10, 50), a, 6));
  EXPECT_TRUE(Near(PixelAt(s, 40, 50), a, 6));
  EXPECT_TRUE(Near(PixelAt(s, 60, 50), b, 6));
  EXPECT_TRUE(Near(PixelAt(s, 90, 50), b, 6));
}

// A base at an M/8 whose IDCT libjpeg-turbo has no SIMD for (3/8, 5/8...)
// has libjpeg's M/8 size and the picture where it was (a gradient, so a
// misplaced or mis-sized picture shows), both ways it can be decoded: by
// loader/jpeg_idct.h's kernels (DecodeBase on an AVX2 CPU), and at the SIMD
// scale above it, resampled (the path without AVX2).
TEST(DecoderTest, BaseAtAnOddScaleHasItsSizeAndItsPixels) {
  TempDir d;
  struct Case {
    uint32_t width, height, base, scaled_width, scaled_height;
  };
  // 5/8 (decoded at 8/8) and 3/8 (decoded at 4/8).
  for (const Case c : {Case{640, 480, 300, 400, 300}, Case{800, 600, 220, 300, 225}}) {
    SCOPED_TRACE(std::to_string(c.width) + "x" + std::to_string(c.height));
    const std::string path = d / ("gradient" + std::to_string(c.width) + ".jpg");
    WriteImage(path + "[Q=98]", c.width, c.height, 3, [&](int x, int y, int band) {
      return band == 0 ? 255 * x / int(c.width) : band == 1 ? 255 * y / int(c.height) : 128;
    });
    const auto check = [&](uint32_t width, uint32_t height, const uint8_t* pixels) {
      ASSERT_EQ(width, c.scaled_width);
      ASSERT_EQ(height, c.scaled_height);
      for (uint32_t y = 2; y + 2 < height; y += 37) {
        for (uint32_t x = 2; x + 2 < width; x += 41) {
          const double fx = (x + 0.5) * c.width / width, fy = (y + 0.5) * c.height / height;
          const Rgb expected = {uint8_t(255 * fx / c.width), uint8_t(255 * fy / c.height), 128};
          const uint8_t* p = pixels + (size_t{y} * width + x) * 3;
          EXPECT_TRUE(Near({p[0], p[1], p[2]}, expected, 4)) << "at " << x << "," << y;
        }
      }
    };
    DecodedSample s;
    ASSERT_TRUE(DecodeBase(path, c.base, &s).ok());
    check(s.width, s.height, s.pixels.get());
    RgbImage resampled;
    ASSERT_TRUE(DecodeJpeg(ReadFile(path), c.base, uint64_t{1} << 30, &resampled,
                           OddScaleDecode::kSimdScaleResampled)
                    .ok());
    check(resampled.width, resampled.height, resampled.pixels.get());
  }
}

TEST(DecoderTest, GreyBecomesThreeChannels) {
  TempDir d;
  const std::string jpg = d / "grey.jpg";
  WriteImage(jpg + "[Q=100]", 40, 30, 1, [](int, int, int) { return uint8_t{77}; });
  const std::string png = d / "grey.png";
  WriteImage(png, 40, 30, 1, [](int, int, int) { return uint8_t{77}; });
  for (const std::string& path : {jpg, png}) {
    for (uint32_t size : {0u, 16u}) {
      const DecodedSample s = DecodeOk(path, size);
      EXPECT_EQ(s.channels, 3u) << path;
      EXPECT_EQ(s.width, size ? size : 40u) << path;
      EXPECT_EQ(s.height, size ? size : 30u) << path;
      EXPECT_EQ(s.bytes(), uint64_t{s.width} * s.height * 3) << path;
      EXPECT_TRUE(AllPixelsNear(s, {77, 77, 77}, 2)) << path << " size " << size;
    }
  }
}

TEST(DecoderTest, GreyWithAlphaBecomesThreeChannels) {
  TempDir d;
  const std::string path = d / "ga.png";
  WriteImage(path, 20, 20, 2, [](int, int, int b) { return b == 0 ? uint8_t{150} : uint8_t{255}; });
  for (uint32_t size : {0u, 8u}) {
    const DecodedSample s = DecodeOk(path, size);
    EXPECT_EQ(s.channels, 3u);
    EXPECT_EQ(s.bytes(), uint64_t{s.width} * s.height * 3);
    EXPECT_TRUE(AllPixelsNear(s, {150, 150, 150}, 2)) << "size " << size;
  }
}

TEST(DecoderTest, RgbaBecomesThreeChannels) {
  TempDir d;
  const Rgb colour = {10, 120, 230};
  const std::string path = d / "rgba.png";
  WriteImage(path, 30, 20, 4, [&](int, int, int b) { return b < 3 ? colour[b] : uint8_t{255}; });
  for (uint32_t size : {0u, 12u}) {
    const DecodedSample s = DecodeOk(path, size);
    EXPECT_EQ(s.channels, 3u);
    EXPECT_EQ(s.width, size ? size : 30u);
    EXPECT_EQ(s.height, size ? size : 20u);
    EXPECT_EQ(s.bytes(), uint64_t{s.width} * s.height * 3);
    EXPECT_TRUE(AllPixelsNear(s, colour, 2)) << "size " << size;
  }
}

TEST(DecoderTest, SixteenBitBecomesEightBit) {
  TempDir d;
  const std::string path = d / "deep.png";
  const uint16_t c16[3] = {257 * 200, 257 * 30, 257 * 60};
  std::vector<uint16_t> buf(16 * 12 * 3);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = c16[i % 3];
  VipsImage* im =
      vips_image_new_from_memory_copy(buf.data(), buf.size() * 2, 16, 12, 3, VIPS_FORMAT_USHORT);
  ASSERT_NE(im, nullptr);
  VipsImage* rgb16 = nullptr;
  ASSERT_EQ(vips_copy(im, &rgb16, "interpretation", VIPS_INTERPRETATION_RGB16, nullptr), 0);
  g_object_unref(im);
  const int rc = vips_image_write_to_file(rgb16, path.c_str(), nullptr);
  g_object_unref(rgb16);
  ASSERT_EQ(rc, 0) << vips_error_buffer();
  const DecodedSample s = DecodeOk(path, 0);
  EXPECT_EQ(s.width, 16u);
  EXPECT_EQ(s.height, 12u);
  EXPECT_EQ(s.channels, 3u);
  EXPECT_TRUE(AllPixelsNear(s, {200, 30, 60}, 2));
}

// CMYK JPEGs are left to libvips, which converts them with its colour
// profiles.
TEST(DecoderTest, CmykJpegBecomesRgb) {
  TempDir d;
  const std::string path = d / "cmyk.jpg";
  std::vector<uint8_t> ink(80 * 60 * 4, 0);  // no ink: white
  VipsImage* im =
      vips_image_new_from_memory_copy(ink.data(), ink.size(), 80, 60, 4, VIPS_FORMAT_UCHAR);
  ASSERT_NE(im, nullptr);
  im->Type = VIPS_INTERPRETATION_CMYK;
  ASSERT_EQ(vips_image_write_to_file(im, path.c_str(), nullptr), 0) << vips_error_buffer();
  g_object_unref(im);
  VipsImage* header = vips_image_new_from_file(path.c_str(), nullptr);
  ASSERT_NE(header, nullptr);
  ASSERT_EQ(header->Type, VIPS_INTERPRETATION_CMYK) << "the test image is not CMYK";
  g_object_unref(header);

  const DecodedSample s = DecodeOk(path, 32);
  EXPECT_EQ(s.width, 32u);
  EXPECT_EQ(s.height, 32u);
  EXPECT_TRUE(AllPixelsNear(s, {255, 255, 255}, 8));
}

TEST(DecoderTest, TruncatedJpegIsCorruption) {
  TempDir d;
  const std::string whole = d / "whole.jpg";
  WriteNoiseImage(whole, 256, 256);
  const std::string bytes = ReadFile(whole);
  ASSERT_GT(bytes.size(), 10000u);
  const std::string cut = d / "cut.jpg";
  WriteFile(cut, bytes.substr(0, bytes.size() / 2));
  for (uint32_t size : {0u, 32u, 224u}) {
    DecodedSample s;
    const Status st = DecodeImage(cut, size, &s);
    EXPECT_EQ(st.code(), Status::Code::kCorruption) << "size " << size << ": " << st.message();
  }
  // The whole file is fine.
  DecodeOk(whole, 32);
}

TEST(DecoderTest, TruncatedPngIsCorruption) {
  TempDir d;
  const std::string whole = d / "whole.png";
  WriteNoiseImage(whole, 128, 128);
  const std::string bytes = ReadFile(whole);
  const std::string cut = d / "cut.png";
  WriteFile(cut, bytes.substr(0, bytes.size() / 2));
  for (uint32_t size : {0u, 32u}) {
    DecodedSample s;
    const Status st = DecodeImage(cut, size, &s);
    EXPECT_EQ(st.code(), Status::Code::kCorruption) << "size " << size << ": " << st.message();
  }
}

TEST(DecoderTest, NonImageIsCorruption) {
  TempDir d;
  const std::string text = d / "notes.jpg";
  WriteFile(text, "this is not an image, whatever its name says\n");
  const std::string empty = d / "empty.png";
  WriteFile(empty, "");
  const std::string header_only = d / "header.jpg";
  WriteFile(header_only, std::string("\xff\xd8\xff\xe0", 4));
  for (const std::string& path : {text, empty, header_only}) {
    for (uint32_t size : {0u, 224u}) {
      DecodedSample s;
      const Status st = DecodeImage(path, size, &s);
      EXPECT_EQ(st.code(), Status::Code::kCorruption) << path << ": " << st.message();
      EXPECT_FALSE(st.message().empty());
    }
  }
}

TEST(DecoderTest, MissingFileFails) {
  TempDir d;
  DecodedSample s;
  EXPECT_FALSE(DecodeImage(d / "nope.jpg", 32, &s).ok());
}

TEST(DecoderTest, DeterministicAndThreadSafe) {
  TempDir d;
  std::vector<std::string> paths;
  for (int i = 0; i < 4; ++i) {
    paths.push_back(d / ("n" + std::to_string(i) + (i % 2 ? ".png" : ".jpg")));
    WriteNoiseImage(paths.back(), 300 + 10 * i, 200, static_cast<uint32_t>(i + 1));
  }
  std::vector<std::string> expected;
  for (const auto& p : paths) {
    const DecodedSample s = DecodeOk(p, 64);
    expected.emplace_back(reinterpret_cast<const char*>(s.pixels.get()), s.bytes());
  }
  std::vector<std::string> got(paths.size() * 4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] {
      DecodedSample s;
      if (DecodeImage(paths[t % paths.size()], 64, &s).ok()) {
        got[t].assign(reinterpret_cast<const char*>(s.pixels.get()), s.bytes());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t t = 0; t < got.size(); ++t) {
    EXPECT_TRUE(got[t] == expected[t % paths.size()]) << "thread " << t;
  }
}

// libvips' liborc paths corrupt the heap when resizes run on several
// threads, so InitDecoder turns them off: with them on, about one run in
// twenty of 6,000 decodes on 8 threads crashed. Too rare for a stress test
// to catch reliably, hence this check of the setting itself.
TEST(DecoderTest, InitTurnsOffLibvipsVectorPaths) { EXPECT_FALSE(vips_vector_isenabled()); }

// A sustained load of concurrent decodes gives every thread the same pixels
// as a decode on its own.

TEST(DecoderTest, ManyConcurrentResizesStayCorrect) {
  TempDir d;
  std::vector<std::string> paths;
  std::vector<std::string> expected;
  for (int i = 0; i < 8; ++i) {
    paths.push_back(d / ("n" + std::to_string(i) + ".jpg"));
    WriteNoiseImage(paths.back(), 160 + 7 * i, 120 + 5 * i, static_cast<uint32_t>(i + 1));
    const DecodedSample s = DecodeOk(paths.back(), 37);
    expected.emplace_back(reinterpret_cast<const char*>(s.pixels.get()), s.bytes());
  }
  constexpr int kThreads = 6, kRounds = 400;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        const size_t i = static_cast<size_t>(t + r) % paths.size();
        DecodedSample s;
        if (!DecodeImage(paths[i], 37, &s).ok() ||
            std::string(reinterpret_cast<const char*>(s.pixels.get()), s.bytes()) != expected[i]) {
          ++mismatches[t];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace joaderfs
