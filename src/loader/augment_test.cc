#include "loader/augment.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace joaderfs {
namespace {

SamplePtr Picture(uint32_t width, uint32_t height) {
  auto s = std::make_shared<DecodedSample>();
  s->width = width;
  s->height = height;
  s->pixels = std::shared_ptr<uint8_t>(new uint8_t[s->bytes()], std::default_delete<uint8_t[]>());
  for (uint64_t i = 0; i < s->bytes(); ++i) s->pixels.get()[i] = static_cast<uint8_t>(i * 7 % 251);
  return s;
}

AugmentSpec RandomCrop(double flip, uint64_t seed) {
  AugmentSpec a;
  a.crop = AugmentSpec::Crop::kRandom;
  a.flip = flip;
  a.seed = seed;
  return a;
}

TEST(AugmentTest, SameKeySameAugmentation) {
  const AugmentSpec a = RandomCrop(0.5, 7);
  for (uint64_t id = 0; id < 50; ++id) {
    const Augmentation x = ChooseAugmentation(a, 3, id, 300, 200);
    const Augmentation y = ChooseAugmentation(a, 3, id, 300, 200);
    EXPECT_EQ(x.box.left, y.box.left);
    EXPECT_EQ(x.box.top, y.box.top);
    EXPECT_EQ(x.box.width, y.box.width);
    EXPECT_EQ(x.box.height, y.box.height);
    EXPECT_EQ(x.flipped, y.flipped);
  }
}

// Another seed, epoch or id gives other boxes (most of the time).
TEST(AugmentTest, OtherKeysOtherAugmentations) {
  const AugmentSpec a = RandomCrop(0.5, 7);
  const AugmentSpec b = RandomCrop(0.5, 8);
  int same_seed = 0, same_epoch = 0;
  for (uint64_t id = 0; id < 100; ++id) {
    const PixelBox x = ChooseAugmentation(a, 0, id, 300, 200).box;
    const PixelBox y = ChooseAugmentation(b, 0, id, 300, 200).box;
    const PixelBox z = ChooseAugmentation(a, 1, id, 300, 200).box;
    same_seed += x.left == y.left && x.top == y.top && x.width == y.width;
    same_epoch += x.left == z.left && x.top == z.top && x.width == z.width;
  }
  EXPECT_LT(same_seed, 5);
  EXPECT_LT(same_epoch, 5);
}

TEST(AugmentTest, BoxesStayInsideThePicture) {
  AugmentSpec a = RandomCrop(0, 1);
  for (uint32_t w : {1u, 3u, 17u, 640u}) {
    for (uint32_t h : {1u, 5u, 480u}) {
      for (uint64_t id = 0; id < 200; ++id) {
        const PixelBox b = ChooseAugmentation(a, 0, id, w, h).box;
        ASSERT_GT(b.width, 0u);
        ASSERT_GT(b.height, 0u);
        ASSERT_LE(b.left + b.width, w);
        ASSERT_LE(b.top + b.height, h);
      }
    }
  }
}

// torchvision's fallback: no try fits a 1000 x 10 picture with ratio
// 0.75-1.333, so the box is the centre crop at the largest allowed ratio.
TEST(AugmentTest, FallbackIsTorchvisionsCentreCrop) {
  const PixelBox b = ChooseAugmentation(RandomCrop(0, 3), 0, 0, 1000, 10).box;
  EXPECT_EQ(b.height, 10u);
  EXPECT_EQ(b.width, 13u);  // round(10 * 4 / 3)
  EXPECT_EQ(b.left, (1000u - 13u) / 2);
  EXPECT_EQ(b.top, 0u);
}

TEST(AugmentTest, EvaluationJobOfSizeZeroGetsTheBaseItself) {
  const SamplePtr base = Picture(40, 30);
  EXPECT_EQ(RenderDelivery(base, AugmentSpec(), 0, 0, 0).get(), base.get());
}

TEST(AugmentTest, FlipOneMirrorsFlipZero) {
  const SamplePtr base = Picture(40, 30);
  for (AugmentSpec::Crop crop : {AugmentSpec::Crop::kCenter, AugmentSpec::Crop::kRandom}) {
    AugmentSpec plain = RandomCrop(0, 5);
    plain.crop = crop;
    AugmentSpec flipped = plain;
    flipped.flip = 1;
    for (uint32_t size : {0u, 16u}) {
      const SamplePtr x = RenderDelivery(base, plain, size, 2, 9);
      const SamplePtr y = RenderDelivery(base, flipped, size, 2, 9);
      ASSERT_EQ(x->width, y->width);
      ASSERT_EQ(x->height, y->height);
      EXPECT_EQ(y->record_flags & kRecordFlipped, kRecordFlipped);
      EXPECT_EQ(x->record_flags & kRecordFlipped, 0u);
      EXPECT_EQ(x->record_box, y->record_box);
      for (uint32_t r = 0; r < x->height; ++r) {
        for (uint32_t c = 0; c < x->width; ++c) {
          const uint8_t* p = x->pixels.get() + (size_t{r} * x->width + c) * 3;
          const uint8_t* q = y->pixels.get() + (size_t{r} * x->width + (x->width - 1 - c)) * 3;
          ASSERT_EQ(std::memcmp(p, q, 3), 0) << "row " << r << " col " << c;
        }
      }
    }
  }
}

// A random crop of size 0 is the box itself, copied pixel for pixel, and
// the record names the box.
TEST(AugmentTest, RandomCropOfSizeZeroCopiesTheBox) {
  const SamplePtr base = Picture(64, 48);
  const SamplePtr out = RenderDelivery(base, RandomCrop(0, 11), 0, 0, 4);
  const PixelBox b = ChooseAugmentation(RandomCrop(0, 11), 0, 4, 64, 48).box;
  ASSERT_EQ(out->width, b.width);
  ASSERT_EQ(out->height, b.height);
  EXPECT_EQ(out->record_flags, kRecordCropBox);
  EXPECT_EQ(out->record_box, uint64_t{b.left} | uint64_t{b.top} << 16 | uint64_t{b.width} << 32 |
                                 uint64_t{b.height} << 48);
  for (uint32_t r = 0; r < b.height; ++r) {
    EXPECT_EQ(std::memcmp(out->pixels.get() + size_t{r} * b.width * 3,
                          base->pixels.get() + (size_t{b.top + r} * 64 + b.left) * 3,
                          size_t{b.width} * 3),
              0)
        << "row " << r;
  }
}

TEST(AugmentTest, RenderedBytesAreCountedUntilFreed) {
  auto live = std::make_shared<std::atomic<uint64_t>>(0);
  {
    const SamplePtr out = RenderDelivery(Picture(40, 30), RandomCrop(0, 1), 16, 0, 0, live);
    EXPECT_EQ(live->load(), 16u * 16 * 3);
  }
  EXPECT_EQ(live->load(), 0u);
}

}  // namespace
}  // namespace joaderfs
