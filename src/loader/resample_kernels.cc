#include "loader/resample_kernels.h"

#include <algorithm>

namespace joaderfs::resample_internal {
namespace {

// One output row from a row of `In` (bytes, or the passes' int16 middle):
// three channels interleaved, `h.taps` weights an output.
template <typename In, typename Out, int kShift>
void HorizontalPortable(const In* row, const HorizontalTaps& h, Out* out) {
  const int16_t* w = h.weights;
  for (uint32_t x = 0; x < h.count; ++x, w += h.padded, out += 3) {
    const In* p = row + size_t{h.first[x]} * 3;
    int32_t c0 = 1 << (kShift - 1), c1 = c0, c2 = c0;
    for (uint32_t t = 0; t < h.taps; ++t, p += 3) {
      c0 += w[t] * p[0];
      c1 += w[t] * p[1];
      c2 += w[t] * p[2];
    }
    out[0] = static_cast<Out>(c0 >> kShift);
    out[1] = static_cast<Out>(c1 >> kShift);
    out[2] = static_cast<Out>(c2 >> kShift);
  }
}

}  // namespace

// Row by row into int32 sums, a chunk of columns at a time: loops that
// GCC vectorises for any target.
constexpr size_t kChunk = 512;

template <typename In>
void VerticalSums(const In* rows, size_t stride, const int16_t* weights, uint32_t taps, size_t n,
                  int32_t round, int32_t* __restrict sums) {
  for (size_t i = 0; i < n; ++i) sums[i] = round;
  for (uint32_t t = 0; t < taps; ++t) {
    const In* __restrict row = rows + t * stride;
    const int32_t w = weights[t];
    for (size_t i = 0; i < n; ++i) sums[i] += w * row[i];
  }
}

template <typename In, typename Out, int kShift>
void VerticalPortable(const In* rows, size_t stride, const int16_t* weights, uint32_t taps,
                      size_t n, Out* out) {
  int32_t sums[kChunk];
  for (size_t start = 0; start < n; start += kChunk) {
    const size_t m = std::min(kChunk, n - start);
    VerticalSums(rows + start, stride, weights, taps, m, 1 << (kShift - 1), sums);
    for (size_t i = 0; i < m; ++i) out[start + i] = static_cast<Out>(sums[i] >> kShift);
  }
}

void VerticalToMidPortable(const uint8_t* rows, size_t stride, const int16_t* weights,
                           uint32_t taps, size_t n, int16_t* out) {
  VerticalPortable<uint8_t, int16_t, kMidShift>(rows, stride, weights, taps, n, out);
}

void VerticalToPixelsPortable(const int16_t* rows, size_t stride, const int16_t* weights,
                              uint32_t taps, size_t n, uint8_t* out) {
  VerticalPortable<int16_t, uint8_t, kOutShift>(rows, stride, weights, taps, n, out);
}

const Kernels kPortableKernels = {HorizontalPortable<uint8_t, int16_t, kMidShift>,
                                  HorizontalPortable<int16_t, uint8_t, kOutShift>,
                                  VerticalToMidPortable, VerticalToPixelsPortable};

}  // namespace joaderfs::resample_internal
