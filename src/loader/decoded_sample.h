// A decoded sample: HWC RGB uint8 pixels. Immutable once built, so that many
// readers and the cache can share one through shared_ptr.

#ifndef JOADERFS_LOADER_DECODED_SAMPLE_H_
#define JOADERFS_LOADER_DECODED_SAMPLE_H_

#include <cstdint>
#include <memory>

namespace joaderfs {

struct DecodedSample {
  uint32_t height = 0;
  uint32_t width = 0;
  uint32_t channels = 3;
  // Owned with whatever deleter matches its allocator (libvips' g_free).
  std::shared_ptr<uint8_t> pixels;
  // How a delivery was cut from its base image (loader/augment.h), for the
  // record header's flags and crop_box fields; 0 for cache entries.
  uint32_t record_flags = 0;
  uint64_t record_box = 0;

  uint64_t bytes() const { return uint64_t{height} * width * channels; }
};

using SamplePtr = std::shared_ptr<const DecodedSample>;

// Bytes of a `size` x `size` RGB picture: a delivery of that size.
inline uint64_t SquareSampleBytes(uint32_t size) { return uint64_t{size} * size * 3; }

}  // namespace joaderfs

#endif  // JOADERFS_LOADER_DECODED_SAMPLE_H_
