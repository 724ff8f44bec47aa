#include "loader/resample.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <vector>

namespace joaderfs {
namespace {

// Python's round() of x / 2: halves go to the even neighbour.
uint32_t HalfRoundedToEven(uint32_t x) {
  const uint32_t half = x / 2;
  return (x % 2 == 1 && half % 2 == 1) ? half + 1 : half;
}

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

AxisWeights Weights(uint32_t source, uint32_t resized, uint32_t offset, uint32_t count) {
  const double scale = static_cast<double>(source) / resized;
  // The triangle spans one output sample either side: `radius` source samples.
  const double radius = std::max(scale, 1.0);
  AxisWeights a;
  a.taps = std::min(static_cast<uint32_t>(std::ceil(radius)) * 2 + 1, source);
  a.first.resize(count);
  a.weights.assign(size_t{count} * a.taps, 0.0f);
  for (uint32_t o = 0; o < count; ++o) {
    const double centre = (offset + o + 0.5) * scale;
    const auto lo = static_cast<uint32_t>(std::max(0.0, std::floor(centre - radius + 0.5)));
    const auto hi = static_cast<uint32_t>(
        std::min(static_cast<double>(source), std::floor(centre + radius + 0.5)));
    assert(hi > lo && hi - lo <= a.taps);
    const uint32_t first = std::min(lo, source - a.taps);
    float* w = &a.weights[size_t{o} * a.taps];
    double sum = 0;
    for (uint32_t i = lo; i < hi; ++i) {
      const double d = std::abs((i + 0.5 - centre) / radius);
      w[i - first] = static_cast<float>(d < 1.0 ? 1.0 - d : 0.0);
      sum += w[i - first];
    }
    for (uint32_t i = 0; i < a.taps; ++i) w[i] = static_cast<float>(w[i] / sum);
    a.first[o] = first;
  }
  return a;
}

uint8_t ToByte(float v) { return static_cast<uint8_t>(std::clamp(v + 0.5f, 0.0f, 255.0f)); }

}  // namespace

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
                 const ResizeCrop& plan, uint8_t* dst) {
  const AxisWeights xs = Weights(src_width, plan.resized_width, plan.left, plan.width);
  const AxisWeights ys = Weights(src_height, plan.resized_height, plan.top, plan.height);
  // Horizontal pass over the source rows the vertical pass reads.
  const uint32_t row0 = ys.first.front();
  const uint32_t rows = ys.first.back() + ys.taps - row0;
  const size_t out_row = size_t{plan.width} * 3;
  std::vector<float> wide(size_t{rows} * out_row);
  for (uint32_t r = 0; r < rows; ++r) {
    const uint8_t* in = src + size_t{row0 + r} * src_width * 3;
    float* out = &wide[r * out_row];
    for (uint32_t x = 0; x < plan.width; ++x) {
      const float* w = &xs.weights[size_t{x} * xs.taps];
      const uint8_t* p = in + size_t{xs.first[x]} * 3;
      float c0 = 0, c1 = 0, c2 = 0;
      for (uint32_t t = 0; t < xs.taps; ++t, p += 3) {
        c0 += w[t] * p[0];
        c1 += w[t] * p[1];
        c2 += w[t] * p[2];
      }
      out[x * 3] = c0;
      out[x * 3 + 1] = c1;
      out[x * 3 + 2] = c2;
    }
  }
  // Vertical pass, one output row at a time.
  std::vector<float> acc(out_row);
  for (uint32_t y = 0; y < plan.height; ++y) {
    const float* w = &ys.weights[size_t{y} * ys.taps];
    const uint32_t first = ys.first[y] - row0;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (uint32_t t = 0; t < ys.taps; ++t) {
      if (w[t] == 0.0f) continue;
      const float* in = &wide[size_t{first + t} * out_row];
      for (size_t i = 0; i < out_row; ++i) acc[i] += w[t] * in[i];
    }
    uint8_t* out = dst + y * out_row;
    for (size_t i = 0; i < out_row; ++i) out[i] = ToByte(acc[i]);
  }
}

}  // namespace joaderfs
