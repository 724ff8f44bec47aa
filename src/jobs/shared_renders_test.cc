#include "jobs/shared_renders.h"

#include <gtest/gtest.h>

#include <cstring>
#include <latch>
#include <thread>

namespace joaderfs {
namespace {

SamplePtr Base(uint32_t width, uint32_t height, uint8_t seed) {
  auto s = std::make_shared<DecodedSample>();
  s->width = width;
  s->height = height;
  s->pixels = std::shared_ptr<uint8_t>(new uint8_t[s->bytes()], std::default_delete<uint8_t[]>());
  for (uint64_t i = 0; i < s->bytes(); ++i) s->pixels.get()[i] = static_cast<uint8_t>(i * seed);
  return s;
}

AugmentSpec Centre(uint64_t seed, double flip = 0) {
  AugmentSpec spec;
  spec.seed = seed;
  spec.flip = flip;
  return spec;
}

bool SamePixels(const SamplePtr& a, const SamplePtr& b) {
  return a->width == b->width && a->height == b->height && a->record_flags == b->record_flags &&
         std::memcmp(a->pixels.get(), b->pixels.get(), a->bytes()) == 0;
}

TEST(SharedRenders, IdenticalCentreCropsAreRenderedOnceWhileHeld) {
  SharedRenders renders;
  const SamplePtr base = Base(300, 256, 7);
  renders.Hold(5);  // two jobs planned id 5
  renders.Hold(5);
  const SamplePtr a = renders.Render(base, Centre(1), 224, 0, 5, nullptr);
  const SamplePtr b = renders.Render(base, Centre(2), 224, 3, 5, nullptr);
  EXPECT_EQ(a, b) << "the same base, size and flip";
  EXPECT_EQ(renders.renders(), 1u);
  EXPECT_EQ(renders.reused(), 1u);
  EXPECT_TRUE(SamePixels(a, RenderDelivery(base, Centre(9), 224, 0, 5)));
  // Another size is another picture.
  const SamplePtr c = renders.Render(base, Centre(1), 112, 0, 5, nullptr);
  EXPECT_NE(c, a);
  EXPECT_EQ(c->width, 112u);
  // Kept until the last holder is done, then made again.
  renders.Drop(5);
  EXPECT_EQ(renders.Render(base, Centre(1), 224, 0, 5, nullptr), a);
  renders.Drop(5);
  EXPECT_EQ(renders.held_ids(), 0u);
  renders.Hold(5);
  EXPECT_NE(renders.Render(base, Centre(1), 224, 0, 5, nullptr), a);
  EXPECT_EQ(renders.renders(), 3u);
}

TEST(SharedRenders, UnheldIdsKeepNothing) {
  SharedRenders renders;
  const SamplePtr base = Base(300, 256, 7);
  auto live = std::make_shared<std::atomic<uint64_t>>(0);
  const SamplePtr a = renders.Render(base, Centre(1), 224, 0, 5, live);
  const SamplePtr b = renders.Render(base, Centre(1), 224, 0, 5, live);
  EXPECT_NE(a, b);
  EXPECT_EQ(renders.held_ids(), 0u);
  renders.Hold(6);
  renders.Render(base, Centre(1), 224, 0, 6, live);
  EXPECT_EQ(live->load(), 3u * 224 * 224 * 3) << "id 6's render is kept";
  renders.Drop(6);
  EXPECT_EQ(live->load(), 2u * 224 * 224 * 3) << "and freed with the last drop";
}

TEST(SharedRenders, FlipsShareOnlyWhenTheyAgree) {
  SharedRenders renders;
  renders.Hold(5);
  const SamplePtr base = Base(300, 256, 3);
  const SamplePtr plain = renders.Render(base, Centre(1, 0), 224, 0, 5, nullptr);
  const SamplePtr mirrored = renders.Render(base, Centre(1, 1), 224, 0, 5, nullptr);
  EXPECT_NE(plain, mirrored);
  EXPECT_EQ(mirrored->record_flags, kRecordFlipped);
  EXPECT_EQ(renders.Render(base, Centre(2, 1), 224, 4, 5, nullptr), mirrored);
  EXPECT_TRUE(SamePixels(mirrored, RenderDelivery(base, Centre(3, 1), 224, 0, 5)));
}

TEST(SharedRenders, RandomCropsAreNeverShared) {
  SharedRenders renders;
  renders.Hold(5);
  const SamplePtr base = Base(300, 256, 3);
  AugmentSpec random = Centre(1);
  random.crop = AugmentSpec::Crop::kRandom;
  const SamplePtr a = renders.Render(base, random, 224, 0, 5, nullptr);
  const SamplePtr b = renders.Render(base, random, 224, 0, 5, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(renders.renders(), 2u);
  EXPECT_EQ(renders.reused(), 0u);
}

TEST(SharedRenders, ARedecodedBaseIsNeverServedAnOldRender) {
  SharedRenders renders;
  renders.Hold(5);
  const SamplePtr base = Base(300, 256, 3);
  const SamplePtr old = renders.Render(base, Centre(1), 224, 0, 5, nullptr);
  // The same id decoded again (its file changed): never the old render.
  const SamplePtr changed = Base(300, 256, 11);
  const SamplePtr b = renders.Render(changed, Centre(1), 224, 0, 5, nullptr);
  EXPECT_NE(b, old);
  EXPECT_TRUE(SamePixels(b, RenderDelivery(changed, Centre(1), 224, 0, 5)));
  EXPECT_EQ(renders.Render(changed, Centre(2), 224, 0, 5, nullptr), b);
}

TEST(SharedRenders, HitsAtOnceCutThePictureOnce) {
  // Two jobs' hits on one id reach two loader threads together: one cuts,
  // the other takes that cut. 40 rounds, so that the two overlap in most.
  const SamplePtr base = Base(2000, 1500, 5);  // a cut long enough to overlap
  for (int round = 0; round < 40; ++round) {
    SharedRenders renders;
    renders.Hold(5);
    renders.Hold(5);
    std::latch start(2);
    SamplePtr got[2];
    std::thread threads[2];
    for (int t = 0; t < 2; ++t) {
      threads[t] = std::thread([&, t] {
        start.arrive_and_wait();
        got[t] = renders.Render(base, Centre(t + 1), 224, 0, 5, nullptr);
      });
    }
    for (auto& thread : threads) thread.join();
    ASSERT_EQ(got[0], got[1]) << "round " << round;
    ASSERT_EQ(renders.renders(), 1u) << "round " << round;
    ASSERT_EQ(renders.reused(), 1u) << "round " << round;
  }
}

}  // namespace
}  // namespace joaderfs
