// JPEG decoding straight through libjpeg-turbo (the library libvips itself
// decodes JPEGs with), for the common case: a YCbCr or greyscale JPEG held
// in memory, to packed RGB. The IDCT scales the picture down by M/8 on the
// way (M = 1..8, as small as keeps the shorter side at least `min_shorter`),
// which is most of the saving when the output is much smaller.
//
// Going around libvips here halves the cost of a 224 x 224 sample: its
// per-image pipeline (threads, regions, GObject properties) cost more than
// the decode itself at these sizes.

#ifndef JOADERFS_LOADER_JPEG_H_
#define JOADERFS_LOADER_JPEG_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace joaderfs {

// Leaves the bytes of a resize() as they are, not zeroed: a decode writes
// every one, and zeroing a fresh base image first cost a pass over it.
template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using PixelBuffer = std::vector<uint8_t, UninitializedAllocator<uint8_t>>;

struct RgbImage {
  uint32_t width = 0;  // as decoded (scaled)
  uint32_t height = 0;
  uint32_t full_width = 0;  // as stored in the file
  uint32_t full_height = 0;
  PixelBuffer pixels;  // width * height * 3
};

// Fails with Corruption (libjpeg's message) for broken or truncated data and
// for pictures of more than `max_pixels` pixels (checked from the header,
// before decoding), and with InvalidArgument for JPEGs this path does not
// take (CMYK, YCCK): decode those another way.
Status DecodeJpeg(std::string_view file, uint32_t min_shorter, uint64_t max_pixels, RgbImage* out);

}  // namespace joaderfs

#endif  // JOADERFS_LOADER_JPEG_H_
