// SSE4.1 and AVX2 kernels (see resample_kernels.h). Each function carries
// its instruction set as a target attribute, so the file builds for any
// x86-64 and the resampler picks a set at run time.
//
// Both sets multiply with pmaddwd: pairs of int16 samples times a pair of
// int16 weights, summed into int32. Vertically the pairs are the same
// column of two rows (16 columns per AVX2 step); horizontally they are the
// same channel of two neighbouring pixels, gathered by one pshufb into
// (R0 R1 G0 G1 B0 B1 0 0), so one step makes one RGB pixel's two taps
// (two pixels, one per 128-bit half, with AVX2).

#include "loader/resample_kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#include <cstring>

namespace joaderfs::resample_internal {
namespace {

#define JOADERFS_SSE41 __attribute__((target("sse4.1")))
#define JOADERFS_AVX2 __attribute__((target("avx2")))

// (w[0], w[1]) in every 32-bit lane, as pmaddwd wants them.
JOADERFS_SSE41 inline __m128i WeightPair(const int16_t* w) {
  int32_t pair;
  std::memcpy(&pair, w, sizeof pair);
  return _mm_set1_epi32(pair);
}

JOADERFS_SSE41 inline __m128i LoadBytes(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

// Output x's weights for its first pair of taps; pair k is 2 k vectors on.
inline const __m128i* OutputWeights(const HorizontalTaps& h, uint32_t x, uint32_t npairs) {
  return reinterpret_cast<const __m128i*>(h.pair_weights[size_t{x / 2} * npairs].lanes[x % 2]);
}

// Sums one output pixel's taps: (R, G, B, 0) in int32, plus `round`.
// `pair_bytes` is two pixels' size (6 for u8 rows, 12 for int16 ones);
// `gather` puts channel c of pixels 0 and 1 side by side in int16 lanes.
// kPairs > 0 fixes the number of pairs (the common 1 to 3, unrolled).
template <int kPairs>
JOADERFS_SSE41 inline __m128i SumPixel(const uint8_t* p, size_t pair_bytes, const __m128i* w,
                                       uint32_t npairs, __m128i gather, __m128i round) {
  const uint32_t n = kPairs > 0 ? kPairs : npairs;
  __m128i acc = round;
  for (uint32_t k = 0; k < n; ++k, p += pair_bytes, w += 2) {
    const __m128i px = _mm_shuffle_epi8(LoadBytes(p), gather);
    acc = _mm_add_epi32(acc, _mm_madd_epi16(px, _mm_load_si128(w)));
  }
  return acc;
}

// Bytes r0 g0 b0 r1 g1 b1 -> int16 r0 r1 g0 g1 b0 b1 0 0.
JOADERFS_SSE41 inline __m128i GatherBytePairs() {
  return _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
}

// int16 r0 g0 b0 r1 g1 b1 -> r0 r1 g0 g1 b0 b1 0 0.
JOADERFS_SSE41 inline __m128i GatherInt16Pairs() {
  return _mm_setr_epi8(0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1);
}

template <int kPairs>
JOADERFS_SSE41 void HorizontalToMidLoop(const uint8_t* row, const HorizontalTaps& h, int16_t* out) {
  const __m128i gather = GatherBytePairs();
  const __m128i round = _mm_set1_epi32(1 << (kMidShift - 1));
  const uint32_t npairs = h.padded / 2, count = h.count;
  const uint32_t* first = h.first;
  for (uint32_t x = 0; x < count; ++x) {
    const __m128i acc = SumPixel<kPairs>(row + size_t{first[x]} * 3, 6, OutputWeights(h, x, npairs),
                                         npairs, gather, round);
    const __m128i v = _mm_srai_epi32(acc, kMidShift);
    // Four int16 (R G B 0): the 0 lands where the next pixel's R goes.
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + size_t{x} * 3), _mm_packs_epi32(v, v));
  }
}

JOADERFS_SSE41 void HorizontalToMidSse41(const uint8_t* row, const HorizontalTaps& h,
                                         int16_t* out) {
  switch (h.padded / 2) {
    case 1: return HorizontalToMidLoop<1>(row, h, out);
    case 2: return HorizontalToMidLoop<2>(row, h, out);
    case 3: return HorizontalToMidLoop<3>(row, h, out);
    default: return HorizontalToMidLoop<0>(row, h, out);
  }
}

// Output pixel x of an int16 row, in int32 (R, G, B, 0) scaled to bytes.
template <int kPairs>
JOADERFS_SSE41 inline __m128i ScaledPixel(const uint8_t* row_bytes, const HorizontalTaps& h,
                                          uint32_t x, uint32_t npairs, __m128i gather,
                                          __m128i round) {
  const __m128i acc = SumPixel<kPairs>(row_bytes + size_t{h.first[x]} * 6, 12,
                                       OutputWeights(h, x, npairs), npairs, gather, round);
  return _mm_srai_epi32(acc, kOutShift);
}

// Four pixels a step, stored as 16 bytes of which 12 are theirs (the
// rest is overwritten by the next step, or is room past the row).
template <int kPairs>
JOADERFS_SSE41 void HorizontalToPixelsLoop(const int16_t* row, const HorizontalTaps& h,
                                           uint8_t* out) {
  const __m128i gather = GatherInt16Pairs();
  const __m128i round = _mm_set1_epi32(1 << (kOutShift - 1));
  // Bytes R0 G0 B0 0 R1 G1 B1 0 ... -> R0 G0 B0 R1 G1 B1 ...
  const __m128i compact = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  const uint32_t npairs = h.padded / 2, count = h.count;
  const auto* bytes = reinterpret_cast<const uint8_t*>(row);
  for (uint32_t x = 0; x < count; x += 4) {
    const __m128i v01 =
        _mm_packs_epi32(ScaledPixel<kPairs>(bytes, h, x, npairs, gather, round),
                        ScaledPixel<kPairs>(bytes, h, x + 1, npairs, gather, round));
    const __m128i v23 =
        _mm_packs_epi32(ScaledPixel<kPairs>(bytes, h, x + 2, npairs, gather, round),
                        ScaledPixel<kPairs>(bytes, h, x + 3, npairs, gather, round));
    const __m128i rgb = _mm_shuffle_epi8(_mm_packus_epi16(v01, v23), compact);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + size_t{x} * 3), rgb);
  }
}

JOADERFS_SSE41 void HorizontalToPixelsSse41(const int16_t* row, const HorizontalTaps& h,
                                            uint8_t* out) {
  switch (h.padded / 2) {
    case 1: return HorizontalToPixelsLoop<1>(row, h, out);
    case 2: return HorizontalToPixelsLoop<2>(row, h, out);
    case 3: return HorizontalToPixelsLoop<3>(row, h, out);
    default: return HorizontalToPixelsLoop<0>(row, h, out);
  }
}

// AVX2 horizontal kernels: two output pixels a step, one in each 128-bit
// half (their weights side by side in TapPairWeights).

// Outputs x and x + 1 (x even): (R, G, B, 0) of each half, in int32.
template <int kPairs>
JOADERFS_AVX2 inline __m256i SumTwoPixels(const uint8_t* p0, const uint8_t* p1, size_t pair_bytes,
                                          const TapPairWeights* w, uint32_t npairs, __m256i gather,
                                          __m256i round) {
  const uint32_t n = kPairs > 0 ? kPairs : npairs;
  __m256i acc = round;
  for (uint32_t k = 0; k < n; ++k, p0 += pair_bytes, p1 += pair_bytes) {
    const __m256i px =
        _mm256_inserti128_si256(_mm256_castsi128_si256(LoadBytes(p0)), LoadBytes(p1), 1);
    const __m256i wk = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + k));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(px, gather), wk));
  }
  return acc;
}

template <int kPairs>
JOADERFS_AVX2 void HorizontalToMidAvx2Loop(const uint8_t* row, const HorizontalTaps& h,
                                           int16_t* out) {
  const __m256i gather = _mm256_broadcastsi128_si256(GatherBytePairs());
  const __m256i round = _mm256_set1_epi32(1 << (kMidShift - 1));
  // Per half, int16 R0 G0 B0 0 R1 G1 B1 0 -> R0 G0 B0 R1 G1 B1.
  const __m256i compact = _mm256_broadcastsi128_si256(
      _mm_setr_epi8(0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13, -1, -1, -1, -1));
  const uint32_t npairs = h.padded / 2, count = h.count;
  const uint32_t* first = h.first;
  // Four pixels a step: 2 x 6 int16 stored as 2 x 8.
  for (uint32_t x = 0; x < count; x += 4) {
    const TapPairWeights* w = h.pair_weights + size_t{x / 2} * npairs;
    const __m256i a = SumTwoPixels<kPairs>(
        row + size_t{first[x]} * 3, row + size_t{first[x + 1]} * 3, 6, w, npairs, gather, round);
    const __m256i b =
        SumTwoPixels<kPairs>(row + size_t{first[x + 2]} * 3, row + size_t{first[x + 3]} * 3, 6,
                             w + npairs, npairs, gather, round);
    // Quads x | x + 2 || x + 1 | x + 3, put in order, then compacted.
    __m256i v =
        _mm256_packs_epi32(_mm256_srai_epi32(a, kMidShift), _mm256_srai_epi32(b, kMidShift));
    v = _mm256_shuffle_epi8(_mm256_permute4x64_epi64(v, 0xd8), compact);
    int16_t* o = out + size_t{x} * 3;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm256_castsi256_si128(v));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 6), _mm256_extracti128_si256(v, 1));
  }
}

JOADERFS_AVX2 void HorizontalToMidAvx2(const uint8_t* row, const HorizontalTaps& h, int16_t* out) {
  switch (h.padded / 2) {
    case 1: return HorizontalToMidAvx2Loop<1>(row, h, out);
    case 2: return HorizontalToMidAvx2Loop<2>(row, h, out);
    case 3: return HorizontalToMidAvx2Loop<3>(row, h, out);
    default: return HorizontalToMidAvx2Loop<0>(row, h, out);
  }
}

template <int kPairs>
JOADERFS_AVX2 inline __m256i ScaledTwoPixels(const uint8_t* row_bytes, const HorizontalTaps& h,
                                             uint32_t x, uint32_t npairs, __m256i gather,
                                             __m256i round) {
  const __m256i acc = SumTwoPixels<kPairs>(
      row_bytes + size_t{h.first[x]} * 6, row_bytes + size_t{h.first[x + 1]} * 6, 12,
      h.pair_weights + size_t{x / 2} * npairs, npairs, gather, round);
  return _mm256_srai_epi32(acc, kOutShift);
}

template <int kPairs>
JOADERFS_AVX2 void HorizontalToPixelsAvx2Loop(const int16_t* row, const HorizontalTaps& h,
                                              uint8_t* out) {
  const __m256i gather = _mm256_broadcastsi128_si256(GatherInt16Pairs());
  const __m256i round = _mm256_set1_epi32(1 << (kOutShift - 1));
  const __m256i compact = _mm256_broadcastsi128_si256(
      _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1));
  // Bytes of pixels x, x + 2, x + 4, x + 6 || x + 1, x + 3, ... back in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const uint32_t npairs = h.padded / 2, count = h.count;
  const auto* bytes = reinterpret_cast<const uint8_t*>(row);
  // Eight pixels a step, stored as 2 x 16 bytes of which 2 x 12 are theirs.
  for (uint32_t x = 0; x < count; x += 8) {
    const __m256i ab =
        _mm256_packs_epi32(ScaledTwoPixels<kPairs>(bytes, h, x, npairs, gather, round),
                           ScaledTwoPixels<kPairs>(bytes, h, x + 2, npairs, gather, round));
    const __m256i cd =
        _mm256_packs_epi32(ScaledTwoPixels<kPairs>(bytes, h, x + 4, npairs, gather, round),
                           ScaledTwoPixels<kPairs>(bytes, h, x + 6, npairs, gather, round));
    const __m256i rgb = _mm256_shuffle_epi8(
        _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), order), compact);
    uint8_t* o = out + size_t{x} * 3;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm256_castsi256_si128(rgb));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 12), _mm256_extracti128_si256(rgb, 1));
  }
}

JOADERFS_AVX2 void HorizontalToPixelsAvx2(const int16_t* row, const HorizontalTaps& h,
                                          uint8_t* out) {
  switch (h.padded / 2) {
    case 1: return HorizontalToPixelsAvx2Loop<1>(row, h, out);
    case 2: return HorizontalToPixelsAvx2Loop<2>(row, h, out);
    case 3: return HorizontalToPixelsAvx2Loop<3>(row, h, out);
    default: return HorizontalToPixelsAvx2Loop<0>(row, h, out);
  }
}

// Eight columns of one output row: the weighted sum of `taps` rows of
// `In`, two rows a madd, shifted and packed to int16.
JOADERFS_SSE41 inline __m128i Lanes8(const uint8_t* p) {
  return _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
JOADERFS_SSE41 inline __m128i Lanes8(const int16_t* p) { return LoadBytes(p); }

template <int kShift, typename In>
JOADERFS_SSE41 inline __m128i VerticalStep8(const In* p, size_t stride, const int16_t* weights,
                                            uint32_t taps) {
  __m128i lo = _mm_set1_epi32(1 << (kShift - 1)), hi = lo;
  uint32_t t = 0;
  for (; t + 1 < taps; t += 2, p += 2 * stride) {
    const __m128i a = Lanes8(p);
    const __m128i b = Lanes8(p + stride);
    const __m128i wp = WeightPair(weights + t);
    lo = _mm_add_epi32(lo, _mm_madd_epi16(_mm_unpacklo_epi16(a, b), wp));
    hi = _mm_add_epi32(hi, _mm_madd_epi16(_mm_unpackhi_epi16(a, b), wp));
  }
  if (t < taps) {
    const __m128i a = Lanes8(p);
    const __m128i zero = _mm_setzero_si128();
    const __m128i wp = _mm_set1_epi32(static_cast<uint16_t>(weights[t]));
    lo = _mm_add_epi32(lo, _mm_madd_epi16(_mm_unpacklo_epi16(a, zero), wp));
    hi = _mm_add_epi32(hi, _mm_madd_epi16(_mm_unpackhi_epi16(a, zero), wp));
  }
  return _mm_packs_epi32(_mm_srai_epi32(lo, kShift), _mm_srai_epi32(hi, kShift));
}

JOADERFS_SSE41 void VerticalToMidSse41(const uint8_t* rows, size_t stride, const int16_t* weights,
                                       uint32_t taps, size_t n, int16_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i v = VerticalStep8<kMidShift>(rows + i, stride, weights, taps);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), v);
  }
  VerticalToMidPortable(rows + i, stride, weights, taps, n - i, out + i);
}

JOADERFS_SSE41 void VerticalToPixelsSse41(const int16_t* rows, size_t stride,
                                          const int16_t* weights, uint32_t taps, size_t n,
                                          uint8_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i v = VerticalStep8<kOutShift>(rows + i, stride, weights, taps);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i), _mm_packus_epi16(v, v));
  }
  VerticalToPixelsPortable(rows + i, stride, weights, taps, n - i, out + i);
}

// AVX2 vertical kernels: 16 columns a step. unpacklo/hi and packs work
// within 128-bit halves alike, so packing the two sums restores the order.

JOADERFS_AVX2 inline __m256i WeightPair256(const int16_t* w) {
  int32_t pair;
  std::memcpy(&pair, w, sizeof pair);
  return _mm256_set1_epi32(pair);
}

JOADERFS_AVX2 inline __m256i Lanes16(const uint8_t* p) {
  return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

JOADERFS_AVX2 inline __m256i Lanes16(const int16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Sixteen columns of one output row, as VerticalStep8.
template <int kShift, typename In>
JOADERFS_AVX2 inline __m256i VerticalStep16(const In* p, size_t stride, const int16_t* weights,
                                            uint32_t taps) {
  __m256i lo = _mm256_set1_epi32(1 << (kShift - 1)), hi = lo;
  uint32_t t = 0;
  for (; t + 1 < taps; t += 2, p += 2 * stride) {
    const __m256i a = Lanes16(p);
    const __m256i b = Lanes16(p + stride);
    const __m256i wp = WeightPair256(weights + t);
    lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), wp));
    hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), wp));
  }
  if (t < taps) {
    const __m256i a = Lanes16(p);
    const __m256i zero = _mm256_setzero_si256();
    const __m256i wp = _mm256_set1_epi32(static_cast<uint16_t>(weights[t]));
    lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, zero), wp));
    hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, zero), wp));
  }
  return _mm256_packs_epi32(_mm256_srai_epi32(lo, kShift), _mm256_srai_epi32(hi, kShift));
}

JOADERFS_AVX2 void VerticalToMidAvx2(const uint8_t* rows, size_t stride, const int16_t* weights,
                                     uint32_t taps, size_t n, int16_t* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i v = VerticalStep16<kMidShift>(rows + i, stride, weights, taps);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), v);
  }
  VerticalToMidPortable(rows + i, stride, weights, taps, n - i, out + i);
}

JOADERFS_AVX2 void VerticalToPixelsAvx2(const int16_t* rows, size_t stride, const int16_t* weights,
                                        uint32_t taps, size_t n, uint8_t* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i v = VerticalStep16<kOutShift>(rows + i, stride, weights, taps);
    // packus works per half too: bytes 0-7 | 0-7 | 8-15 | 8-15; keep quads 0 and 2.
    const __m256i bytes = _mm256_permute4x64_epi64(_mm256_packus_epi16(v, v), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(bytes));
  }
  VerticalToPixelsPortable(rows + i, stride, weights, taps, n - i, out + i);
}

#undef JOADERFS_SSE41
#undef JOADERFS_AVX2

}  // namespace

const Kernels kSse41Kernels = {HorizontalToMidSse41, HorizontalToPixelsSse41, VerticalToMidSse41,
                               VerticalToPixelsSse41};
const Kernels kAvx2Kernels = {HorizontalToMidAvx2, HorizontalToPixelsAvx2, VerticalToMidAvx2,
                              VerticalToPixelsAvx2};

}  // namespace joaderfs::resample_internal

#endif  // x86
