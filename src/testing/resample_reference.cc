#include "testing/resample_reference.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <vector>

namespace joaderfs::testing {
namespace {

// The weights that make `count` output samples, starting `offset` samples
// into a resized axis of `resized` samples, out of a source axis of
// `source` samples. Output o reads source[first[o], first[o] + taps): every
// output the same number of taps (zero-padded, and windows moved inside the
// source at its ends), so that the loops over them have a fixed length.
struct AxisWeights {
  uint32_t taps = 0;
  std::vector<uint32_t> first;
  std::vector<float> weights;  // taps per output
};

// Output o is centred at source coordinate origin + (o + 0.5) * scale and
// reads only source samples in [lo_limit, hi_limit): the whole axis for a
// resize, the crop box for a crop that is then resized (torchvision crops
// before it resizes, so nothing outside the box bleeds in). `mirror`
// reverses the outputs: a horizontal flip costs nothing.
AxisWeights Weights(double origin, double scale, uint32_t lo_limit, uint32_t hi_limit,
                    uint32_t count, bool mirror) {
  // The triangle spans one output sample either side: `radius` source samples.
  const double radius = std::max(scale, 1.0);
  const uint32_t extent = hi_limit - lo_limit;
  AxisWeights a;
  a.taps = std::min(static_cast<uint32_t>(std::ceil(radius)) * 2 + 1, extent);
  a.first.resize(count);
  a.weights.assign(size_t{count} * a.taps, 0.0f);
  for (uint32_t o = 0; o < count; ++o) {
    const double centre = origin + (o + 0.5) * scale;
    const auto lo = static_cast<uint32_t>(
        std::max(static_cast<double>(lo_limit), std::floor(centre - radius + 0.5)));
    const auto hi = static_cast<uint32_t>(
        std::min(static_cast<double>(hi_limit), std::floor(centre + radius + 0.5)));
    assert(hi > lo && hi - lo <= a.taps);
    const uint32_t first = std::min(lo, hi_limit - a.taps);
    const uint32_t slot = mirror ? count - 1 - o : o;
    float* w = &a.weights[size_t{slot} * a.taps];
    double sum = 0;
    for (uint32_t i = lo; i < hi; ++i) {
      const double d = std::abs((i + 0.5 - centre) / radius);
      w[i - first] = static_cast<float>(d < 1.0 ? 1.0 - d : 0.0);
      sum += w[i - first];
    }
    for (uint32_t i = 0; i < a.taps; ++i) w[i] = static_cast<float>(w[i] / sum);
    a.first[slot] = first;
  }
  return a;
}

uint8_t ToByte(float v) { return static_cast<uint8_t>(std::clamp(v + 0.5f, 0.0f, 255.0f)); }

// acc[i] += weight * in[i]: the bytes cannot alias the floats, which lets
// the compiler vectorise it.
void AccumulateRow(const uint8_t* __restrict in, float weight, size_t n, float* __restrict acc) {
  for (size_t i = 0; i < n; ++i) acc[i] += weight * static_cast<float>(in[i]);
}

// Separable resample: `width` x `height` outputs from the weights of each
// axis, one output row at a time: the vertical pass makes one row of floats
// over the columns the horizontal pass reads (contiguous, so it
// vectorises), and the horizontal pass turns it into the output row. The
// row stays in L1; no picture-sized buffer is allocated.
void Resample(const uint8_t* src, uint32_t src_width, const AxisWeights& xs, const AxisWeights& ys,
              uint32_t width, uint32_t height, uint8_t* dst) {
  uint32_t col0 = UINT32_MAX, col1 = 0;
  for (uint32_t first : xs.first) {
    col0 = std::min(col0, first);
    col1 = std::max(col1, first + xs.taps);
  }
  const size_t span = size_t{col1 - col0} * 3;
  std::vector<float> row(span);
  for (uint32_t y = 0; y < height; ++y) {
    const float* w = &ys.weights[size_t{y} * ys.taps];
    std::fill(row.begin(), row.end(), 0.0f);
    float* acc = row.data();
    for (uint32_t t = 0; t < ys.taps; ++t) {
      if (w[t] == 0.0f) continue;
      AccumulateRow(src + (size_t{ys.first[y] + t} * src_width + col0) * 3, w[t], span, acc);
    }
    uint8_t* out = dst + size_t{y} * width * 3;
    for (uint32_t x = 0; x < width; ++x) {
      const float* wx = &xs.weights[size_t{x} * xs.taps];
      const float* p = acc + size_t{xs.first[x] - col0} * 3;
      float c0 = 0, c1 = 0, c2 = 0;
      for (uint32_t t = 0; t < xs.taps; ++t, p += 3) {
        c0 += wx[t] * p[0];
        c1 += wx[t] * p[1];
        c2 += wx[t] * p[2];
      }
      out[x * 3] = ToByte(c0);
      out[x * 3 + 1] = ToByte(c1);
      out[x * 3 + 2] = ToByte(c2);
    }
  }
}

}  // namespace

void ReferenceResampleRgb(const uint8_t* src, uint32_t src_width, uint32_t src_height,
                          const ResizeCrop& plan, uint8_t* dst, bool mirror) {
  const double x_scale = static_cast<double>(src_width) / plan.resized_width;
  const double y_scale = static_cast<double>(src_height) / plan.resized_height;
  const AxisWeights xs = Weights(plan.left * x_scale, x_scale, 0, src_width, plan.width, mirror);
  const AxisWeights ys = Weights(plan.top * y_scale, y_scale, 0, src_height, plan.height, false);
  Resample(src, src_width, xs, ys, plan.width, plan.height, dst);
}

void ReferenceResampleBox(const uint8_t* src, uint32_t src_width, const PixelBox& box,
                          uint32_t width, uint32_t height, uint8_t* dst, bool mirror) {
  const double x_scale = static_cast<double>(box.width) / width;
  const double y_scale = static_cast<double>(box.height) / height;
  const AxisWeights xs = Weights(box.left, x_scale, box.left, box.left + box.width, width, mirror);
  const AxisWeights ys = Weights(box.top, y_scale, box.top, box.top + box.height, height, false);
  Resample(src, src_width, xs, ys, width, height, dst);
}

}  // namespace joaderfs::testing
