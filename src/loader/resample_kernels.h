// The inner loops of loader/resample.cc, in fixed point, once portable and
// once per x86 instruction set (SSE4.1, AVX2). Internal to the resampler.
//
// Arithmetic (Pillow-SIMD's scheme, with a wider intermediate): weights are
// int16 that sum to exactly 1 << kWeightBits per output (so a constant
// picture stays constant and a 1:1 resize is a copy); the first pass turns
// 8-bit pixels into "mid" samples, the value times 1 << kMidBits in int16;
// the second pass turns those into 8-bit pixels, rounded to nearest. All
// weights are non-negative, so every sum fits int32 (16320 x 16384 at most)
// and no clamp is needed before the final pack. Integer sums do not depend
// on their order: every kernel set gives the same bytes, and a mirrored
// layout of the weights gives exactly the mirrored picture.
//
// Pixels are packed RGB (3 bytes). A horizontal pass reads each output's
// taps in pairs: a SIMD kernel loads 16 bytes at each pair, so it may read
// up to kHorizontalOverread bytes past the last pair's pixels. It makes
// whole groups of kOutputGroup outputs (those past `count` from pixel 0 with
// weight 0) and stores them in 16-byte pieces: its output row needs room
// for OutputRoom(count) elements. Callers give padded rows. Vertical
// kernels read and write exactly `n` samples. Stateless functions;
// thread-safe.

#ifndef JOADERFS_LOADER_RESAMPLE_KERNELS_H_
#define JOADERFS_LOADER_RESAMPLE_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace joaderfs::resample_internal {

inline constexpr int kWeightBits = 14;
inline constexpr int kMidBits = 6;
// Shifts that end each pass (the first drops kWeightBits - kMidBits bits).
inline constexpr int kMidShift = kWeightBits - kMidBits;
inline constexpr int kOutShift = kWeightBits + kMidBits;
// Bytes a SIMD horizontal kernel may read past its last pair of pixels.
inline constexpr size_t kHorizontalOverread = 16;
// Outputs a SIMD horizontal kernel makes at a time.
inline constexpr uint32_t kOutputGroup = 8;
inline constexpr uint32_t RoundUpToGroup(uint32_t count) {
  return (count + kOutputGroup - 1) / kOutputGroup * kOutputGroup;
}
// Elements (bytes or int16) a horizontal kernel's output row needs.
inline constexpr size_t OutputRoom(uint32_t count) {
  return size_t{RoundUpToGroup(count)} * 3 + 16;
}

// The weights of two neighbouring outputs for one pair of taps, as pmaddwd
// wants them: each output's (w0, w1) four times over.
struct alignas(32) TapPairWeights {
  int16_t lanes[2][8];
};

// One axis of a horizontal pass over a row.
struct HorizontalTaps {
  const int16_t* weights;  // `padded` per output; those past `taps` are 0
  // The same for SIMD kernels: [(x / 2) * padded / 2 + k] holds pair k of
  // outputs x and x + 1 (x even), RoundUpToGroup(count) outputs.
  const TapPairWeights* pair_weights;
  // Per output (RoundUpToGroup(count) of them): its first pixel, counted
  // from the row pointer.
  const uint32_t* first;
  uint32_t taps;    // pixels an output reads
  uint32_t padded;  // taps rounded up to even (SIMD reads pairs)
  uint32_t count;   // outputs
};

// out[3x + c] for x < count, c < 3, from row pixels first[x] .. + taps.
using HorizontalToMid = void (*)(const uint8_t* row, const HorizontalTaps& h, int16_t* out);
using HorizontalToPixels = void (*)(const int16_t* row, const HorizontalTaps& h, uint8_t* out);
// out[i] = sum over t < taps of weights[t] * rows[t * stride + i], i < n
// (stride in elements).
using VerticalToMid = void (*)(const uint8_t* rows, size_t stride, const int16_t* weights,
                               uint32_t taps, size_t n, int16_t* out);
using VerticalToPixels = void (*)(const int16_t* rows, size_t stride, const int16_t* weights,
                                  uint32_t taps, size_t n, uint8_t* out);

struct Kernels {
  HorizontalToMid horizontal_to_mid;
  HorizontalToPixels horizontal_to_pixels;
  VerticalToMid vertical_to_mid;
  VerticalToPixels vertical_to_pixels;
};

// Plain C++ (what non-x86 builds use; GCC vectorises the vertical loops).
extern const Kernels kPortableKernels;

#if defined(__x86_64__) || defined(__i386__)
// REQUIRES: the CPU has the instruction set (__builtin_cpu_supports).
extern const Kernels kSse41Kernels;
extern const Kernels kAvx2Kernels;
#endif

// The portable vertical loops, which the SIMD kernels finish rows with.
void VerticalToMidPortable(const uint8_t* rows, size_t stride, const int16_t* weights,
                           uint32_t taps, size_t n, int16_t* out);
void VerticalToPixelsPortable(const int16_t* rows, size_t stride, const int16_t* weights,
                              uint32_t taps, size_t n, uint8_t* out);

}  // namespace joaderfs::resample_internal

#endif  // JOADERFS_LOADER_RESAMPLE_KERNELS_H_
