// Resize-and-centre-crop of packed RGB pixels, with torchvision's geometry:
// Resize(size) scales the shorter side to `size` (the longer one to
// int(size * long / short)), CenterCrop(size) keeps the middle, its offset
// rounded as Python's round() does. Only the kept pixels are computed.
//
// The filter is PIL's bilinear one: a triangle whose width grows with the
// shrink factor, so every source pixel counts when shrinking (antialiased)
// and plain bilinear interpolation when enlarging: torchvision's tensor
// path with antialias=True uses the same filter.
//
// Both entry points can mirror their output (a horizontal flip) at no cost:
// the horizontal weights are simply laid out in reverse.
//
// Fast path (every delivery renders its crop from a cached base image: a
// 224 x 224 random crop in at most 0.3 ms of CPU):
// int16 fixed-point weights (14 bits, summing exactly to one), a 14-bit
// intermediate, SSE4.1 or AVX2 kernels picked at run time (plain C++
// elsewhere: every kernel set gives the same bytes), the two passes in the
// order that does less work for the box, and thread-local scratch (no heap
// allocation once a thread has rendered its largest picture; each thread
// keeps at most about 1 MiB plus a few rows of its widest picture). Results
// are within 1 of the float computation (testing/resample_reference.h pins
// it). docs/augmentation.md has the figures.
//
// Thread-safe: pure functions of their arguments (scratch is per thread).

#ifndef JOADERFS_LOADER_RESAMPLE_H_
#define JOADERFS_LOADER_RESAMPLE_H_

#include <cstdint>

namespace joaderfs {

// The geometry of Resize(size) + CenterCrop(size) on a `width` x `height`
// image: the full resized size and the crop inside it.
struct ResizeCrop {
  uint32_t resized_width = 0;
  uint32_t resized_height = 0;
  uint32_t left = 0;
  uint32_t top = 0;
  uint32_t width = 0;   // of the crop: min(size, resized_width)
  uint32_t height = 0;  // min(size, resized_height)
};

// REQUIRES: width, height and size > 0.
ResizeCrop PlanResizeCrop(uint32_t width, uint32_t height, uint32_t size);

// Writes the crop of `plan` to `dst` (plan.width * plan.height * 3 bytes)
// from `src`, the whole picture at `src_width` x `src_height`: the size the
// plan was made for, or smaller when the decoder already scaled it down.
void ResampleRgb(const uint8_t* src, uint32_t src_width, uint32_t src_height,
                 const ResizeCrop& plan, uint8_t* dst, bool mirror = false);

// A rectangle of a picture, in its pixels.
struct PixelBox {
  uint32_t left = 0;
  uint32_t top = 0;
  uint32_t width = 0;
  uint32_t height = 0;
};

// torchvision's resized_crop(img, top, left, height, width, [height_out,
// width_out], antialias=True): cuts `box` out of `src` (packed RGB,
// `src_width` pixels a row) and resizes it to `width` x `height` into `dst`
// (width * height * 3 bytes), then mirrors it when asked. Only pixels
// inside the box are read. REQUIRES: box inside the picture, all sizes > 0.
void ResampleBox(const uint8_t* src, uint32_t src_width, const PixelBox& box, uint32_t width,
                 uint32_t height, uint8_t* dst, bool mirror = false);

// For tests and benchmarks: the kernels and pass order to use.
enum class SimdLevel { kPortable, kSse41, kAvx2 };
enum class PassOrder { kCheaper, kVerticalFirst, kHorizontalFirst };

// The best kernel set this CPU runs (checked once, logged once).
SimdLevel BestSimdLevel();
const char* SimdLevelName(SimdLevel level);

struct ResampleTuning {
  SimdLevel simd = BestSimdLevel();  // REQUIRES: at most BestSimdLevel()
  PassOrder order = PassOrder::kCheaper;
};

void ResampleRgb(const uint8_t* src, uint32_t src_width, uint32_t src_height,
                 const ResizeCrop& plan, uint8_t* dst, bool mirror, const ResampleTuning& tuning);
void ResampleBox(const uint8_t* src, uint32_t src_width, const PixelBox& box, uint32_t width,
                 uint32_t height, uint8_t* dst, bool mirror, const ResampleTuning& tuning);

}  // namespace joaderfs

#endif  // JOADERFS_LOADER_RESAMPLE_H_
