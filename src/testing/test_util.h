// Helpers shared by the unit tests. Test support only: links gtest, and
// reports problems as gtest failures.
//
//   TempDir                A fresh folder under the system temp folder,
//                          removed with its contents at the end of the scope.
//   AddDecoderEnvironment  Registers a gtest Environment that runs
//                          InitDecoder() (libvips) once before the tests.
//   WriteImage             Writes an image with libvips, the format (and its
//   WriteSolidImage        options, "a.jpg[Q=100]") from the name: pixels
//   WriteNoiseImage        from a function, one colour, or seeded noise.
//   WriteFile, ReadFile    Whole-file bytes, e.g. placeholders or damaged
//                          copies of images.
//   WriteImageFolder       A small ImageFolder dataset: class folders "c<k>"
//                          of samples "img<i>.jpg".
//   PoolGate               Holds every thread of a LoaderPool until released,
//                          so that a test decides when decodes may run.
//   Eventually             Polls a condition until it holds or time is up.
//   Ids, Iota              Id lists to compare with EXPECT_EQ.
//   NeededCounts           The jobs' needs of each id as the planning group
//                          would answer them (RefCounts), set by the test.

#ifndef JOADERFS_TESTING_TEST_UTIL_H_
#define JOADERFS_TESTING_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <roaring/roaring.hh>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cache/ref_counts.h"
#include "loader/loader_pool.h"

namespace joaderfs::testing {

// A fresh folder "<prefix>.XXXXXX" under the system temp folder, removed
// with everything in it when destroyed.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "joaderfs_test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // The path of `rel` inside the folder.
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

// Registers (once per call) a gtest Environment that calls
// InitDecoder(argv0) before the first test and fails the run if it cannot.
// Use it at namespace scope in a test file that decodes:
//   ::testing::Environment* const kDecoderEnvironment =
//       testing::AddDecoderEnvironment("decoder_test");
::testing::Environment* AddDecoderEnvironment(const std::string& argv0);

using Rgb = std::array<uint8_t, 3>;
using PixelFn = std::function<uint8_t(int x, int y, int band)>;

// Writes a `width` x `height` image of `bands` uchar bands (1 grey, 2 grey +
// alpha, 3 RGB, 4 RGBA), pixel values from `f`, with libvips; the format and
// its options come from the name, e.g. "a.jpg[Q=100]".
void WriteImage(const std::string& path, int width, int height, int bands, const PixelFn& f);

// An RGB image of one colour.
void WriteSolidImage(const std::string& path, int width, int height, Rgb colour);

// An RGB image of deterministic noise (the bytes of std::mt19937(seed)), so
// that JPEGs have real entropy-coded data.
void WriteNoiseImage(const std::string& path, int width, int height, uint32_t seed = 1);

// Writes `content` to `path`, replacing it and making its folders.
void WriteFile(const std::string& path, const std::string& content = "");

// The bytes of `path`; empty when it cannot be read.
std::string ReadFile(const std::string& path);

// Writes one sample of WriteImageFolder; `index` counts the samples over all
// classes, from 0.
using SampleWriter = std::function<void(const std::string& path, int index)>;

// Builds an ImageFolder dataset under `root`: class k is the folder "c<k>"
// holding counts[k] samples "img0.jpg", "img1.jpg"... (an empty folder for a
// count of 0). `write` makes each sample; by default a placeholder file "x",
// enough for a Catalog but not an image.
void WriteImageFolder(const std::string& root, const std::vector<int>& counts,
                      const SampleWriter& write = nullptr);

// The jobs' needs, as the planning group would answer them (0 for ids not
// listed): the input of what the cache tiers and shared renders keep.
class NeededCounts final : public RefCounts {
 public:
  void Counts(std::span<const SampleId> ids, std::span<uint32_t> counts) const override {
    for (size_t i = 0; i < ids.size(); ++i) {
      auto it = needed.find(ids[i]);
      counts[i] = it == needed.end() ? 0 : it->second;
    }
  }
  std::map<SampleId, uint32_t> needed;
};

// Occupies `threads` threads of `pool` (all of them, normally) until
// Release() or destruction, so that a test decides when decodes may run.
class PoolGate {
 public:
  PoolGate(LoaderPool* pool, unsigned threads);
  ~PoolGate();
  PoolGate(const PoolGate&) = delete;
  PoolGate& operator=(const PoolGate&) = delete;

  void Release();

 private:
  std::promise<void> release_;
  std::shared_future<void> released_;
  bool done_ = false;
};

// Polls `done` every millisecond until it holds (true) or `timeout` has
// passed (false).
template <typename Pred>
bool Eventually(Pred done, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// The members of `r`, ascending.
std::vector<uint32_t> Ids(const Roaring& r);

// first, first + 1, ..., last; empty when last < first.
std::vector<uint32_t> Iota(uint32_t first, uint32_t last);

}  // namespace joaderfs::testing

#endif  // JOADERFS_TESTING_TEST_UTIL_H_
