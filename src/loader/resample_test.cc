#include "loader/resample.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace joaderfs {
namespace {

std::vector<uint8_t> Resample(const std::vector<uint8_t>& src, uint32_t w, uint32_t h,
                              const ResizeCrop& plan) {
  std::vector<uint8_t> out(size_t{plan.width} * plan.height * 3);
  ResampleRgb(src.data(), w, h, plan, out.data());
  return out;
}

// torchvision: Resize(size) gives the shorter side `size` and the longer
// int(size * long / short); CenterCrop offsets are int(round(d / 2.0)).
TEST(ResizeCropTest, WideImage) {
  const ResizeCrop p = PlanResizeCrop(300, 200, 64);
  EXPECT_EQ(p.resized_width, 96u);
  EXPECT_EQ(p.resized_height, 64u);
  EXPECT_EQ(p.width, 64u);
  EXPECT_EQ(p.height, 64u);
  EXPECT_EQ(p.left, 16u);
  EXPECT_EQ(p.top, 0u);
}

TEST(ResizeCropTest, TallImageTruncatesTheLongerSide) {
  const ResizeCrop p = PlanResizeCrop(250, 333, 224);  // 224 * 333 / 250 = 298.4
  EXPECT_EQ(p.resized_width, 224u);
  EXPECT_EQ(p.resized_height, 298u);
  EXPECT_EQ(p.left, 0u);
  EXPECT_EQ(p.top, 37u);
}

TEST(ResizeCropTest, OddMarginsRoundHalfToEven) {
  EXPECT_EQ(PlanResizeCrop(201, 100, 100).left, 50u);  // round(50.5) == 50
  EXPECT_EQ(PlanResizeCrop(203, 100, 100).left, 52u);  // round(51.5) == 52
  EXPECT_EQ(PlanResizeCrop(100, 205, 100).top, 52u);   // round(52.5) == 52
}

TEST(ResizeCropTest, SmallImagesAreEnlarged) {
  const ResizeCrop p = PlanResizeCrop(50, 40, 64);
  EXPECT_EQ(p.resized_width, 80u);
  EXPECT_EQ(p.resized_height, 64u);
  EXPECT_EQ(p.left, 8u);
}

TEST(ResampleTest, SameSizeIsACopy) {
  std::vector<uint8_t> src(16 * 16 * 3);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7);
  EXPECT_EQ(Resample(src, 16, 16, PlanResizeCrop(16, 16, 16)), src);
}

TEST(ResampleTest, ConstantStaysConstant) {
  for (uint32_t size : {5u, 32u, 100u}) {
    std::vector<uint8_t> src(37 * 23 * 3);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(10 + 100 * (i % 3));
    const std::vector<uint8_t> out = Resample(src, 37, 23, PlanResizeCrop(37, 23, size));
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_EQ(out[i], 10 + 100 * (i % 3)) << "size " << size << " byte " << i;
    }
  }
}

// A symmetric filter keeps a linear ramp linear: away from the borders,
// output x of a 2x shrink sits at source position 2x + 1 (pixel centres).
TEST(ResampleTest, ShrinkKeepsARampInTheInterior) {
  const uint32_t w = 64, h = 8;
  std::vector<uint8_t> src(w * h * 3);
  for (uint32_t y = 0; y < h; ++y) {
    for (uint32_t x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) src[(y * w + x) * 3 + c] = static_cast<uint8_t>(3 * x + c);
    }
  }
  const ResizeCrop p = PlanResizeCrop(w, h, 4);  // 32 x 4, cropped to 4 x 4 in the middle
  ResizeCrop full = p;
  full.left = 0;
  full.width = p.resized_width;
  const std::vector<uint8_t> out = Resample(src, w, h, full);
  for (uint32_t x = 2; x + 2 < full.width; ++x) {
    for (int c = 0; c < 3; ++c) {
      const double expected = 3.0 * (2 * x + 0.5) + c;
      EXPECT_NEAR(out[x * 3 + c], expected, 0.51) << "x " << x << " channel " << c;
    }
  }
}

// The decoder may hand over the picture already scaled down: the crop must
// come from the same place of the picture.
TEST(ResampleTest, ScaledSourceGivesTheSameCrop) {
  const uint32_t w = 160, h = 120;
  std::vector<uint8_t> full(w * h * 3), half((w / 2) * (h / 2) * 3);
  auto value = [](double x, double y, int c) { return static_cast<uint8_t>(x + 0.5 * y + 20 * c); };
  for (uint32_t y = 0; y < h; ++y) {
    for (uint32_t x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) full[(y * w + x) * 3 + c] = value(x + 0.5, y + 0.5, c);
    }
  }
  for (uint32_t y = 0; y < h / 2; ++y) {
    for (uint32_t x = 0; x < w / 2; ++x) {
      for (int c = 0; c < 3; ++c) half[(y * (w / 2) + x) * 3 + c] = value(2 * x + 1, 2 * y + 1, c);
    }
  }
  const ResizeCrop p = PlanResizeCrop(w, h, 30);
  const std::vector<uint8_t> a = Resample(full, w, h, p), b = Resample(half, w / 2, h / 2, p);
  ASSERT_EQ(a.size(), b.size());
  for (uint32_t y = 1; y + 1 < p.height; ++y) {
    for (uint32_t x = 1; x + 1 < p.width; ++x) {
      for (int c = 0; c < 3; ++c) {
        const size_t i = (size_t{y} * p.width + x) * 3 + c;
        EXPECT_NEAR(a[i], b[i], 1) << "x " << x << " y " << y;
      }
    }
  }
}

}  // namespace
}  // namespace joaderfs
