// JPEG decoding straight through libjpeg-turbo (the library libvips itself
// decodes JPEGs with), for the common case: a YCbCr or greyscale JPEG held
// in memory, to packed RGB, scaled down by M/8 (M = 1..8, as small as keeps
// the shorter side at least `min_shorter`) by the IDCT on the way.
// libjpeg-turbo's IDCTs for 1/8, 2/8, 4/8 and 8/8 are SIMD; its others are
// plain C and dearer than a full-size decode, so those run
// loader/jpeg_idct.h's AVX2 kernels instead, or, on a CPU without AVX2, the
// picture is decoded at the next SIMD scale up and resampled
// (loader/resample.h) to the M/8 size.
//
// Going around libvips here halves the cost of a 224 x 224 sample: its
// per-image pipeline (threads, regions, GObject properties) cost more than
// the decode itself at these sizes.

#ifndef JOADERFS_LOADER_JPEG_H_
#define JOADERFS_LOADER_JPEG_H_

#include <cstdint>
#include <memory>
#include <string_view>

#include "common/status.h"

namespace joaderfs {

struct RgbImage {
  uint32_t width = 0;  // as decoded (scaled)
  uint32_t height = 0;
  uint32_t full_width = 0;  // as stored in the file
  uint32_t full_height = 0;
  std::unique_ptr<uint8_t[]> pixels;  // width * height * 3
};

// How a decode at 3/8, 5/8, 6/8 or 7/8 runs: kScaledIdct where the CPU has
// the kernels (else as kSimdScaleResampled); the other for tests and
// benchmarks of the fallback.
enum class OddScaleDecode { kScaledIdct, kSimdScaleResampled };

// Fails with Corruption (libjpeg's message) for broken or truncated data and
// for pictures of more than `max_pixels` pixels (checked from the header,
// before decoding), and with InvalidArgument for JPEGs this path does not
// take (CMYK, YCCK): decode those another way.
Status DecodeJpeg(std::string_view file, uint32_t min_shorter, uint64_t max_pixels, RgbImage* out,
                  OddScaleDecode odd_scale = OddScaleDecode::kScaledIdct);

}  // namespace joaderfs

#endif  // JOADERFS_LOADER_JPEG_H_
