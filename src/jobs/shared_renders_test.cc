#include "jobs/shared_renders.h"

#include <gtest/gtest.h>

#include <cstring>
#include <latch>
#include <thread>

#include "testing/test_util.h"

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
  renders.Hold(5, 224);  // two jobs planned id 5
  renders.Hold(5, 224);
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
  renders.Drop(5, 224);
  EXPECT_EQ(renders.Render(base, Centre(1), 224, 0, 5, nullptr), a);
  renders.Drop(5, 224);
  EXPECT_EQ(renders.held_ids(), 0u);
  renders.Hold(5, 224);
  EXPECT_NE(renders.Render(base, Centre(1), 224, 0, 5, nullptr), a);
  EXPECT_EQ(renders.renders(), 3u);
}

// Renders kept for a peer: the planner's needs are a table the test sets.
class KeptRendersTest : public ::testing::Test {
 protected:
  // A job renders `id` and is done with it while a peer still needs it.
  void KeptForAPeer(SharedRenders* renders, SampleId id) {
    table_.needed[id] = 1;
    renders->Hold(id, 224);
    renders->Render(base_, Centre(1), 224, 0, id, live_);
    renders->Drop(id, 224);
  }

  static constexpr uint64_t kOne = 224 * 224 * 3;  // a render's bytes
  testing::NeededCounts table_;
  std::shared_ptr<std::atomic<uint64_t>> live_ = std::make_shared<std::atomic<uint64_t>>(0);
  SamplePtr base_ = Base(300, 256, 7);
};

TEST_F(KeptRendersTest, APeerFarBehindTakesTheLeadersRender) {
  // The leader is done with id 5 before the laggard plans it: the render
  // is kept while the planner says a job still needs the id.
  SharedRenders renders(&table_, 1 << 20);
  renders.Hold(5, 224);
  SamplePtr a = renders.Render(base_, Centre(1), 224, 0, 5, live_);
  table_.needed[5] = 1;  // the laggard's
  renders.Drop(5, 224);
  EXPECT_EQ(renders.kept_bytes(), kOne);
  renders.Hold(5, 224);
  EXPECT_EQ(renders.kept_bytes(), 0u) << "held again: no longer only kept";
  EXPECT_EQ(renders.Render(base_, Centre(2), 224, 1, 5, live_), a);
  EXPECT_EQ(renders.renders(), 1u);
  EXPECT_EQ(renders.reused(), 1u);
  table_.needed.erase(5);  // it was the last to need it
  renders.Drop(5, 224);
  EXPECT_EQ(renders.kept_bytes(), 0u);
  a.reset();
  EXPECT_EQ(live_->load(), 0u) << "freed with the last job that needed it";
}

TEST_F(KeptRendersTest, StayWithinTheirBytesOldestOut) {
  SharedRenders renders(&table_, 2 * kOne);
  for (SampleId id = 0; id < 3; ++id) KeptForAPeer(&renders, id);
  EXPECT_EQ(renders.kept_bytes(), 2 * kOne);
  EXPECT_EQ(live_->load(), 2 * kOne) << "the oldest went";
  renders.Hold(0, 224);
  renders.Render(base_, Centre(2), 224, 0, 0, live_);
  renders.Hold(2, 224);
  renders.Render(base_, Centre(2), 224, 0, 2, live_);
  EXPECT_EQ(renders.renders(), 4u) << "id 0 cut again, id 2 taken";
  EXPECT_EQ(renders.reused(), 1u);
}

TEST_F(KeptRendersTest, TrimFreesWhatNoJobNeedsAnyMore) {
  SharedRenders renders(&table_, 1 << 20);
  for (SampleId id = 0; id < 2; ++id) KeptForAPeer(&renders, id);
  // The peer's job went: only id 1 is still needed (by another).
  table_.needed.erase(0);
  renders.Trim();
  EXPECT_EQ(renders.kept_bytes(), kOne);
  EXPECT_EQ(live_->load(), kOne);
  table_.needed.clear();
  renders.Trim();
  EXPECT_EQ(live_->load(), 0u);
}

TEST_F(KeptRendersTest, NothingIsKeptOfAnEvictedBase) {
  // A base image no longer in RAM comes back as another object, which
  // never matches: its renders are not worth keeping.
  table_.needed[5] = 1;
  SharedRenders renders(&table_, 1 << 20);
  renders.Hold(5, 224);
  renders.Render(base_, Centre(1), 224, 0, 5, nullptr);
  base_.reset();
  renders.Drop(5, 224);
  EXPECT_EQ(renders.kept_bytes(), 0u);
}

TEST(SharedRenders, UnheldIdsKeepNothing) {
  SharedRenders renders;
  const SamplePtr base = Base(300, 256, 7);
  auto live = std::make_shared<std::atomic<uint64_t>>(0);
  const SamplePtr a = renders.Render(base, Centre(1), 224, 0, 5, live);
  const SamplePtr b = renders.Render(base, Centre(1), 224, 0, 5, live);
  EXPECT_NE(a, b);
  EXPECT_EQ(renders.held_ids(), 0u);
  renders.Hold(6, 224);
  renders.Render(base, Centre(1), 224, 0, 6, live);
  EXPECT_EQ(live->load(), 3u * 224 * 224 * 3) << "id 6's render is kept";
  renders.Drop(6, 224);
  EXPECT_EQ(live->load(), 2u * 224 * 224 * 3) << "and freed with the last drop";
}

// A sweep of sizes: a job's render is kept only while a job of its size
// holds the id. The 112 job that still holds id 5 could never take the 224
// job's render, so it goes with the 224 job's drop (kept within the budget
// where a job still needs the id), and a render of a size nobody holds is
// never kept.
TEST(SharedRenders, ARenderIsKeptOnlyForJobsOfItsSize) {
  SharedRenders renders;
  const SamplePtr base = Base(300, 256, 7);
  auto live = std::make_shared<std::atomic<uint64_t>>(0);
  renders.Hold(5, 224);
  renders.Hold(5, 112);
  renders.Render(base, Centre(1), 224, 0, 5, live);
  renders.Render(base, Centre(1), 112, 0, 5, live);
  renders.Render(base, Centre(1), 96, 0, 5, live);
  EXPECT_EQ(live->load(), 224u * 224 * 3 + 112 * 112 * 3) << "96: no holder of that size";
  renders.Drop(5, 224);
  EXPECT_EQ(live->load(), 112u * 112 * 3) << "the 224 render went with its last holder";
  EXPECT_EQ(renders.held_ids(), 1u);
  renders.Drop(5, 112);
  EXPECT_EQ(live->load(), 0u);
  EXPECT_EQ(renders.held_ids(), 0u);
}

TEST_F(KeptRendersTest, ASizesLastHolderKeepsItsRenderForAPeerOfThatSize) {
  SharedRenders renders(&table_, 1 << 20);
  table_.needed[5] = 1;
  renders.Hold(5, 224);
  renders.Hold(5, 112);
  const SamplePtr a = renders.Render(base_, Centre(1), 224, 0, 5, live_);
  renders.Drop(5, 224);
  EXPECT_EQ(renders.kept_bytes(), kOne) << "kept while the 112 job holds the id";
  renders.Hold(5, 224);  // the laggard of size 224
  EXPECT_EQ(renders.kept_bytes(), 0u);
  EXPECT_EQ(renders.Render(base_, Centre(2), 224, 1, 5, live_), a);
  renders.Drop(5, 224);
  renders.Drop(5, 112);
}

TEST(SharedRenders, FlipsShareOnlyWhenTheyAgree) {
  SharedRenders renders;
  renders.Hold(5, 224);
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
  renders.Hold(5, SharedRenders::kSharesNothing);
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
  renders.Hold(5, 224);
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
    renders.Hold(5, 224);
    renders.Hold(5, 224);
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
