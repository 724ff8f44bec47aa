#include "loader/resample.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "testing/resample_reference.h"

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
  // A smooth ramp within 0..255 (at most 0.8 * 160 + 0.5 * 120 + 40 = 228).
  auto value = [](double x, double y, int c) {
    return static_cast<uint8_t>(0.8 * x + 0.5 * y + 20 * c);
  };
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

// Bytes that end where an unreadable, unwritable page begins: a resampler
// that reads or writes one byte past them crashes the test.
class GuardedBytes {
 public:
  explicit GuardedBytes(size_t n) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    mapped_ = (n + page - 1) / page * page + page;
    base_ = static_cast<uint8_t*>(
        mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(base_, MAP_FAILED);
    EXPECT_EQ(mprotect(base_ + mapped_ - page, page, PROT_NONE), 0);
    data_ = base_ + mapped_ - page - n;
    size_ = n;
  }
  ~GuardedBytes() { munmap(base_, mapped_); }
  GuardedBytes(const GuardedBytes&) = delete;
  GuardedBytes& operator=(const GuardedBytes&) = delete;
  uint8_t* data() { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* base_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t mapped_ = 0;
  size_t size_ = 0;
};

std::vector<SimdLevel> SupportedLevels() {
  std::vector<SimdLevel> levels = {SimdLevel::kPortable};
  if (BestSimdLevel() >= SimdLevel::kSse41) levels.push_back(SimdLevel::kSse41);
  if (BestSimdLevel() >= SimdLevel::kAvx2) levels.push_back(SimdLevel::kAvx2);
  return levels;
}

int MaxAbsDiff(const uint8_t* a, const uint8_t* b, size_t n) {
  int worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(int{a[i]} - int{b[i]}));
  return worst;
}

// Noise (the worst case for rounding), smooth gradients and flat areas.
void FillPicture(std::mt19937* rng, uint8_t* p, uint32_t w, uint32_t h) {
  const int kind = static_cast<int>((*rng)() % 3);
  for (uint32_t y = 0; y < h; ++y) {
    for (uint32_t x = 0; x < w; ++x) {
      for (uint32_t c = 0; c < 3; ++c) {
        const size_t i = (size_t{y} * w + x) * 3 + c;
        if (kind == 0) p[i] = static_cast<uint8_t>((*rng)());
        if (kind == 1) p[i] = static_cast<uint8_t>((x * 5 + y * 3 + c * 70) % 256);
        if (kind == 2) p[i] = (x / 7 + y / 5) % 2 ? 255 : 0;
      }
    }
  }
}

// The fast path against the float reference (main's resampler) on random
// pictures, boxes (touching every edge too), sizes (odd ones, shrinks and
// enlargements) and flips, every kernel set and both pass orders: within 1
// of the reference, and kernel sets byte for byte the same. The pictures
// and outputs end at a guard page, so an overrun crashes.
TEST(ResampleTest, FastPathMatchesTheFloatReference) {
  std::mt19937 rng(20261124);
  auto below = [&rng](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  int worst = 0;
  size_t differing = 0, compared = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const uint32_t w = 1 + below(trial % 10 == 0 ? 9 : 400);
    const uint32_t h = 1 + below(trial % 10 == 1 ? 9 : 400);
    GuardedBytes src(size_t{w} * h * 3);
    FillPicture(&rng, src.data(), w, h);
    PixelBox box;
    box.width = 1 + below(w);
    box.height = 1 + below(h);
    // A third of the boxes touch the right and bottom edges, a third the left and top.
    const int place = trial % 3;
    box.left = place == 0 ? w - box.width : place == 1 ? 0 : below(w - box.width + 1);
    box.top = place == 0 ? h - box.height : place == 1 ? 0 : below(h - box.height + 1);
    const uint32_t out_w = 1 + below(trial % 7 == 0 ? 5 : 300);
    const uint32_t out_h = 1 + below(trial % 7 == 1 ? 5 : 300);
    const bool mirror = rng() % 2;
    const std::string where = "trial " + std::to_string(trial) + ": " + std::to_string(w) + "x" +
                              std::to_string(h) + " box " + std::to_string(box.left) + "," +
                              std::to_string(box.top) + " " + std::to_string(box.width) + "x" +
                              std::to_string(box.height) + " to " + std::to_string(out_w) + "x" +
                              std::to_string(out_h) + (mirror ? " mirrored" : "");
    const size_t n = size_t{out_w} * out_h * 3;
    std::vector<uint8_t> reference(n);
    testing::ReferenceResampleBox(src.data(), w, box, out_w, out_h, reference.data(), mirror);
    for (PassOrder order : {PassOrder::kVerticalFirst, PassOrder::kHorizontalFirst}) {
      std::vector<uint8_t> portable;
      for (SimdLevel level : SupportedLevels()) {
        GuardedBytes out(n);
        ResampleBox(src.data(), w, box, out_w, out_h, out.data(), mirror, {level, order});
        const int diff = MaxAbsDiff(out.data(), reference.data(), n);
        ASSERT_LE(diff, 1) << where << ", " << SimdLevelName(level) << " kernels, "
                           << (order == PassOrder::kVerticalFirst ? "vertical" : "horizontal")
                           << " first";
        worst = std::max(worst, diff);
        if (level == SimdLevel::kPortable) {
          portable.assign(out.data(), out.data() + n);
          for (size_t i = 0; i < n; ++i) differing += out.data()[i] != reference[i];
          compared += n;
        } else {
          ASSERT_EQ(MaxAbsDiff(out.data(), portable.data(), n), 0)
              << where << ": " << SimdLevelName(level) << " kernels differ from portable ones";
        }
      }
    }
  }
  // Off by one only where the float sum sits near a half.
  EXPECT_LT(differing, compared / 100) << differing << " of " << compared << " bytes differ";
  std::printf("worst difference %d, %zu of %zu bytes differ from the float reference\n", worst,
              differing, compared);
}

// The centre-crop entry point against the reference the same way.
TEST(ResampleTest, CentreCropMatchesTheFloatReference) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 100; ++trial) {
    const uint32_t w = 1 + static_cast<uint32_t>(rng() % 400);
    const uint32_t h = 1 + static_cast<uint32_t>(rng() % 400);
    const uint32_t size = 1 + static_cast<uint32_t>(rng() % 300);
    const bool mirror = rng() % 2;
    GuardedBytes src(size_t{w} * h * 3);
    FillPicture(&rng, src.data(), w, h);
    const ResizeCrop plan = PlanResizeCrop(w, h, size);
    const size_t n = size_t{plan.width} * plan.height * 3;
    std::vector<uint8_t> reference(n);
    testing::ReferenceResampleRgb(src.data(), w, h, plan, reference.data(), mirror);
    for (SimdLevel level : SupportedLevels()) {
      for (PassOrder order : {PassOrder::kVerticalFirst, PassOrder::kHorizontalFirst}) {
        GuardedBytes out(n);
        ResampleRgb(src.data(), w, h, plan, out.data(), mirror, {level, order});
        ASSERT_LE(MaxAbsDiff(out.data(), reference.data(), n), 1)
            << "trial " << trial << ": " << w << "x" << h << " to " << size << ", "
            << SimdLevelName(level);
      }
    }
  }
}

}  // namespace
}  // namespace joaderfs
