#include "loader/resample.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "loader/resample_kernels.h"

namespace joaderfs {
namespace {

using resample_internal::HorizontalTaps;
using resample_internal::Kernels;

// Python's round() of x / 2: halves go to the even neighbour.
uint32_t HalfRoundedToEven(uint32_t x) {
  const uint32_t half = x / 2;
  return (x % 2 == 1 && half % 2 == 1) ? half + 1 : half;
}

// The fixed-point weights of one axis. Output o reads `taps` source samples
// from lo + first[o]; all of them lie in [lo, hi). Every output has the same
// number of taps (windows moved inside the limits at the ends, zero-padded),
// so that the loops over them have a fixed length. Weights are laid out
// `padded` apart (taps rounded up to even, for the pair-wise SIMD kernels).
struct AxisWeights {
  uint32_t taps = 0;
  uint32_t padded = 0;
  uint32_t lo = 0;
  uint32_t hi = 0;
  std::vector<uint32_t> first;
  std::vector<int16_t> weights;
};

// What a thread reuses from one picture to the next: after the largest one
// it has rendered, resampling allocates nothing.
struct Scratch {
  AxisWeights xs, ys;
  std::vector<double> exact;      // one axis' float weights, before quantising
  std::vector<uint32_t> windows;  // one axis' (first weighed, first nonzero, end) triples
  // The first pass' output. Not a vector: resizing one up value-initialises,
  // and a crop's mid rows after a base resample's single row would be
  // zero-filled on every delivery, only to be overwritten.
  std::unique_ptr<int16_t[]> mid;
  size_t mid_capacity = 0;
  std::vector<uint8_t> row;      // a source row copied where SIMD loads would overrun
  std::vector<uint8_t> out_row;  // an output row, room for a SIMD kernel's whole groups
  std::vector<uint32_t> first;   // HorizontalTaps::first
  std::vector<resample_internal::TapPairWeights> pair_weights;  // HorizontalTaps::pair_weights
};

// Room for `n` mid values, contents undefined.
int16_t* MidRoom(Scratch* scratch, size_t n) {
  if (n > scratch->mid_capacity) {
    scratch->mid.reset(new int16_t[n]);
    scratch->mid_capacity = n;
  }
  return scratch->mid.get();
}

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

// Output o is centred at source coordinate origin + (o + 0.5) * scale and
// reads only source samples in [lo_limit, hi_limit): the whole axis for a
// resize, the crop box for a crop that is then resized (torchvision crops
// before it resizes, so nothing outside the box bleeds in). `mirror`
// reverses the outputs: a horizontal flip costs nothing. The filter is the
// reference's (testing/resample_reference.cc) in double, then quantised.
void Weights(double origin, double scale, uint32_t lo_limit, uint32_t hi_limit, uint32_t count,
             bool mirror, Scratch* scratch, AxisWeights* a) {
  // The triangle spans one output sample either side: `radius` source samples.
  const double radius = std::max(scale, 1.0);
  const uint32_t window =
      std::min(static_cast<uint32_t>(std::ceil(radius)) * 2 + 1, hi_limit - lo_limit);
  std::vector<double>& exact = scratch->exact;
  std::vector<uint32_t>& windows = scratch->windows;
  exact.assign(size_t{count} * window, 0.0);
  windows.resize(size_t{count} * 3);
  // The exact weights, and how many taps the widest output needs: only
  // samples strictly inside the triangle count (the edges weigh 0).
  a->taps = 1;
  const double inverse_radius = 1.0 / radius;
  for (uint32_t o = 0; o < count; ++o) {
    const double centre = origin + (o + 0.5) * scale;
    uint32_t lo = static_cast<uint32_t>(
        std::max(static_cast<double>(lo_limit), std::floor(centre - radius + 0.5)));
    uint32_t hi = static_cast<uint32_t>(
        std::min(static_cast<double>(hi_limit), std::floor(centre + radius + 0.5)));
    assert(hi > lo && hi - lo <= window);
    double* w = &exact[size_t{o} * window];
    double sum = 0;
    for (uint32_t i = lo; i < hi; ++i) {
      const double d = std::abs(i + 0.5 - centre) * inverse_radius;
      w[i - lo] = d < 1.0 ? 1.0 - d : 0.0;
      sum += w[i - lo];
    }
    const double inverse_sum = 1.0 / sum;
    for (uint32_t i = lo; i < hi; ++i) w[i - lo] *= inverse_sum;
    while (hi > lo + 1 && w[hi - 1 - lo] == 0.0) --hi;
    uint32_t skip = 0;
    while (lo + skip + 1 < hi && w[skip] == 0.0) ++skip;
    windows[o * 3] = lo;
    windows[o * 3 + 1] = lo + skip;
    windows[o * 3 + 2] = hi;
    a->taps = std::max(a->taps, hi - lo - skip);
  }
  a->padded = (a->taps + 1) & ~1u;
  a->first.resize(count);
  a->weights.assign(size_t{count} * a->padded, 0);
  a->lo = UINT32_MAX;
  a->hi = 0;
  for (uint32_t o = 0; o < count; ++o) {
    const uint32_t* window_of = &windows[size_t{o} * 3];
    const uint32_t lo = window_of[1], hi = window_of[2];
    const uint32_t first = std::min(lo, hi_limit - a->taps);
    const uint32_t slot = mirror ? count - 1 - o : o;
    const double* w = &exact[size_t{o} * window];  // w[i - window_of[0]] weighs sample i
    int16_t* q = &a->weights[size_t{slot} * a->padded];
    // Round each weight, then give the rounding's remainder to the largest,
    // so that they sum to exactly one.
    constexpr int32_t kOne = 1 << resample_internal::kWeightBits;
    int32_t sum = 0;
    uint32_t largest = lo;
    for (uint32_t i = lo; i < hi; ++i) {
      const double weight = w[i - window_of[0]];
      q[i - first] = static_cast<int16_t>(weight * kOne + 0.5);  // weights are >= 0
      sum += q[i - first];
      if (weight > w[largest - window_of[0]]) largest = i;
    }
    q[largest - first] = static_cast<int16_t>(q[largest - first] + kOne - sum);
    a->first[slot] = first;
    a->lo = std::min(a->lo, first);
    a->hi = std::max(a->hi, first + a->taps);
  }
  for (uint32_t& f : a->first) f -= a->lo;
}

const Kernels& KernelsFor(SimdLevel level) {
#if defined(__x86_64__) || defined(__i386__)
  if (level == SimdLevel::kAvx2) return resample_internal::kAvx2Kernels;
  if (level == SimdLevel::kSse41) return resample_internal::kSse41Kernels;
#endif
  (void)level;
  return resample_internal::kPortableKernels;
}

// Relative costs of the AVX2 kernels, roughly (joaderfs-sample-cost-bench
// forces each order; the choice matters up to 2x for boxes much taller or
// wider than the output, little near square): a horizontal step makes one
// pixel's two taps; a vertical one, 16 samples' two taps.
constexpr double kHorizontalStepCost = 1.0;
constexpr double kVerticalStepCost = 2.0;
// Horizontal first keeps every mid row the vertical windows read (about
// 0.5 MiB for 224 x 224 from a 256 base): bigger pictures go vertical first,
// which needs one row, so that a thread's scratch stays small.
constexpr size_t kMaxMidBytes = size_t{1} << 20;

bool HorizontalFirstIsCheaper(const AxisWeights& xs, const AxisWeights& ys, uint32_t width,
                              uint32_t height) {
  const size_t mid_bytes = (ys.hi - ys.lo) * resample_internal::OutputRoom(width) * sizeof(int16_t);
  if (mid_bytes > kMaxMidBytes) return false;
  const double horizontal_row = static_cast<double>(width) * (xs.padded / 2) * kHorizontalStepCost;
  const double vertical_step = kVerticalStepCost * ((ys.taps + 1) / 2) / 16;
  const double vertical_first = height * (3.0 * (xs.hi - xs.lo) * vertical_step + horizontal_row);
  const double horizontal_first =
      (ys.hi - ys.lo) * horizontal_row + 3.0 * height * width * vertical_step;
  return horizontal_first < vertical_first;
}

// Separable resample of `width` x `height` outputs from the weights of each
// axis. `rows_end` is the source row below which the picture's buffer
// surely holds every row (to keep SIMD loads inside it).
//
// Vertical first: one output row at a time, the vertical pass makes one
// row of mid samples over the columns the horizontal pass reads, and the
// horizontal pass turns it into the output row. Horizontal first: every
// source row the vertical windows read is resampled to `width` once (as the
// output rows come to need it), then each output row is a vertical pass
// over those. The first does fewer horizontal steps when the crop is taller
// than the output, the second when it is shorter.
void Resample(const uint8_t* src, uint32_t src_width, uint32_t rows_end, const AxisWeights& xs,
              const AxisWeights& ys, uint32_t width, uint32_t height, uint8_t* dst,
              const ResampleTuning& tuning, Scratch* scratch) {
  const Kernels& kernels = KernelsFor(tuning.simd);
  // The SIMD kernels' layout: whole groups of outputs, the extra ones at
  // pixel 0 with weight 0.
  const uint32_t npairs = xs.padded / 2;
  const uint32_t groups_width = resample_internal::RoundUpToGroup(width);
  scratch->pair_weights.assign(size_t{groups_width / 2} * npairs, {});
  for (uint32_t x = 0; x < width; ++x) {
    for (uint32_t k = 0; k < npairs; ++k) {
      int16_t* lanes = scratch->pair_weights[size_t{x / 2} * npairs + k].lanes[x % 2];
      for (int lane = 0; lane < 8; ++lane) {
        lanes[lane] = xs.weights[size_t{x} * xs.padded + k * 2 + lane % 2];
      }
    }
  }
  scratch->first.assign(groups_width, 0);
  std::copy(xs.first.begin(), xs.first.end(), scratch->first.begin());
  const HorizontalTaps h{xs.weights.data(),
                         scratch->pair_weights.data(),
                         scratch->first.data(),
                         xs.taps,
                         xs.padded,
                         width};
  const size_t src_stride = size_t{src_width} * 3;
  const size_t span = size_t{xs.hi - xs.lo} * 3;  // source bytes of a row that outputs read
  const size_t out_stride = size_t{width} * 3;
  const bool horizontal_first =
      tuning.order == PassOrder::kHorizontalFirst ||
      (tuning.order == PassOrder::kCheaper && HorizontalFirstIsCheaper(xs, ys, width, height));
  if (!horizontal_first) {
    // The horizontal kernel reads the padded tap (weight 0) and 16 bytes at
    // each pair: zeros past the span.
    const size_t padding = 3 + resample_internal::kHorizontalOverread;
    int16_t* mid = MidRoom(scratch, span + padding);
    std::fill(mid + span, mid + span + padding, 0);
    scratch->out_row.resize(resample_internal::OutputRoom(width));
    for (uint32_t y = 0; y < height; ++y) {
      const uint8_t* rows = src + size_t{ys.lo + ys.first[y]} * src_stride + size_t{xs.lo} * 3;
      kernels.vertical_to_mid(rows, src_stride, &ys.weights[size_t{y} * ys.padded], ys.taps, span,
                              mid);
      kernels.horizontal_to_pixels(mid, h, scratch->out_row.data());
      std::memcpy(dst + y * out_stride, scratch->out_row.data(), out_stride);
    }
    return;
  }
  // Mid rows of `width` pixels, room for the kernel's whole groups.
  const size_t mid_stride = resample_internal::OutputRoom(width);
  int16_t* mid = MidRoom(scratch, (ys.hi - ys.lo) * mid_stride);
  // A source row is read up to the padded tap and the 16 bytes loaded there.
  const size_t read_bytes = span + 3 + resample_internal::kHorizontalOverread;
  const size_t buffer_bytes = size_t{rows_end} * src_stride;
  uint32_t done = 0;  // mid rows made
  for (uint32_t y = 0; y < height; ++y) {
    for (; done < ys.first[y] + ys.taps; ++done) {
      const size_t offset = size_t{ys.lo + done} * src_stride + size_t{xs.lo} * 3;
      const uint8_t* row = src + offset;
      if (offset + read_bytes > buffer_bytes) {
        scratch->row.assign(read_bytes, 0);
        std::memcpy(scratch->row.data(), row, span);
        row = scratch->row.data();
      }
      kernels.horizontal_to_mid(row, h, &mid[size_t{done} * mid_stride]);
    }
    kernels.vertical_to_pixels(&mid[size_t{ys.first[y]} * mid_stride], mid_stride,
                               &ys.weights[size_t{y} * ys.padded], ys.taps, out_stride,
                               dst + y * out_stride);
  }
}

SimdLevel DetectSimdLevel() {
  SimdLevel level = SimdLevel::kPortable;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) {
    level = SimdLevel::kAvx2;
  } else if (__builtin_cpu_supports("sse4.1")) {
    level = SimdLevel::kSse41;
  }
#endif
  spdlog::info("resampler: {} kernels", SimdLevelName(level));
  return level;
}

}  // namespace

SimdLevel BestSimdLevel() {
  static const SimdLevel level = DetectSimdLevel();
  return level;
}

const char* SimdLevelName(SimdLevel level) {
  switch (level) {
    case SimdLevel::kPortable: return "portable";
    case SimdLevel::kSse41: return "sse4.1";
    case SimdLevel::kAvx2: return "avx2";
  }
  return "?";
}

ResizeCrop PlanResizeCrop(uint32_t width, uint32_t height, uint32_t size) {
  ResizeCrop p;
  // torchvision truncates the longer side: int(size * long / short).
  if (width <= height) {
    p.resized_width = size;
    p.resized_height = static_cast<uint32_t>(uint64_t{size} * height / width);
  } else {
    p.resized_height = size;
    p.resized_width = static_cast<uint32_t>(uint64_t{size} * width / height);
  }
  p.width = std::min(size, p.resized_width);
  p.height = std::min(size, p.resized_height);
  p.left = HalfRoundedToEven(p.resized_width - p.width);
  p.top = HalfRoundedToEven(p.resized_height - p.height);
  return p;
}

void ResampleRgb(const uint8_t* src, uint32_t src_width, uint32_t src_height,
                 const ResizeCrop& plan, uint8_t* dst, bool mirror, const ResampleTuning& tuning) {
  Scratch& s = ThreadScratch();
  const double x_scale = static_cast<double>(src_width) / plan.resized_width;
  const double y_scale = static_cast<double>(src_height) / plan.resized_height;
  Weights(plan.left * x_scale, x_scale, 0, src_width, plan.width, mirror, &s, &s.xs);
  Weights(plan.top * y_scale, y_scale, 0, src_height, plan.height, false, &s, &s.ys);
  Resample(src, src_width, src_height, s.xs, s.ys, plan.width, plan.height, dst, tuning, &s);
}

void ResampleRgb(const uint8_t* src, uint32_t src_width, uint32_t src_height,
                 const ResizeCrop& plan, uint8_t* dst, bool mirror) {
  ResampleRgb(src, src_width, src_height, plan, dst, mirror, ResampleTuning());
}

void ResampleBox(const uint8_t* src, uint32_t src_width, const PixelBox& box, uint32_t width,
                 uint32_t height, uint8_t* dst, bool mirror, const ResampleTuning& tuning) {
  Scratch& s = ThreadScratch();
  const double x_scale = static_cast<double>(box.width) / width;
  const double y_scale = static_cast<double>(box.height) / height;
  Weights(box.left, x_scale, box.left, box.left + box.width, width, mirror, &s, &s.xs);
  Weights(box.top, y_scale, box.top, box.top + box.height, height, false, &s, &s.ys);
  Resample(src, src_width, box.top + box.height, s.xs, s.ys, width, height, dst, tuning, &s);
}

void ResampleBox(const uint8_t* src, uint32_t src_width, const PixelBox& box, uint32_t width,
                 uint32_t height, uint8_t* dst, bool mirror) {
  ResampleBox(src, src_width, box, width, height, dst, mirror, ResampleTuning());
}

}  // namespace joaderfs
