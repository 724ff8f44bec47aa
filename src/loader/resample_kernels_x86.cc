// SSE4.1 and AVX2 kernels (see resample_kernels.h). Each function carries
// its instruction set as a target attribute, so the file builds for any
// x86-64 and the resampler picks a set at run time.
//
// Both sets multiply with pmaddwd: pairs of int16 samples times a pair of
// int16 weights, summed into int32. Vertically the pairs are the same
// column of two rows (16 columns per AVX2 step); horizontally they are the
// same channel of two neighbouring pixels, gathered by one pshufb into
// (R0 R1 G0 G1 B0 B1 0 0), so one step makes one RGB pixel's two taps.
// AVX2 gains little there (its shuffles stay within 128-bit halves), so
// both sets share the 128-bit horizontal kernels.

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

// Sums one output pixel's taps: (R, G, B, 0) in int32, plus `round`.
// `pair_bytes` is two pixels' size (6 for u8 rows, 12 for int16 ones);
// `gather` puts channel c of pixels 0 and 1 side by side in int16 lanes.
// kPairs > 0 fixes the number of pairs (the common 1 to 3, unrolled).
template <int kPairs>
JOADERFS_SSE41 inline __m128i SumPixel(const uint8_t* p, size_t pair_bytes, const __m128i* w,
                                       uint32_t npairs, __m128i gather, __m128i round) {
  const uint32_t n = kPairs > 0 ? kPairs : npairs;
  __m128i acc = round;
  for (uint32_t k = 0; k < n; ++k, p += pair_bytes) {
    const __m128i px = _mm_shuffle_epi8(LoadBytes(p), gather);
    acc = _mm_add_epi32(acc, _mm_madd_epi16(px, _mm_load_si128(w + k)));
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
  const auto* w = reinterpret_cast<const __m128i*>(h.pair_weights);
  for (uint32_t x = 0; x < count; ++x, w += npairs, out += 3) {
    const __m128i acc = SumPixel<kPairs>(row + size_t{first[x]} * 3, 6, w, npairs, gather, round);
    const __m128i v = _mm_srai_epi32(acc, kMidShift);
    // Four int16 (R G B 0): the 0 lands where the next pixel's R goes.
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packs_epi32(v, v));
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
JOADERFS_SSE41 inline __m128i ScaledPixel(const uint8_t* row_bytes, const uint32_t* first,
                                          const __m128i* w, uint32_t x, uint32_t npairs,
                                          __m128i gather, __m128i round) {
  const __m128i acc = SumPixel<kPairs>(row_bytes + size_t{first[x]} * 6, 12, w + size_t{x} * npairs,
                                       npairs, gather, round);
  return _mm_srai_epi32(acc, kOutShift);
}

template <int kPairs>
JOADERFS_SSE41 void HorizontalToPixelsLoop(const int16_t* row, const HorizontalTaps& h,
                                           uint8_t* out) {
  const __m128i gather = GatherInt16Pairs();
  const __m128i round = _mm_set1_epi32(1 << (kOutShift - 1));
  // Bytes R0 G0 B0 0 R1 G1 B1 0 ... -> R0 G0 B0 R1 G1 B1 ...
  const __m128i compact = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  const uint32_t npairs = h.padded / 2, count = h.count;
  const uint32_t* first = h.first;
  const auto* bytes = reinterpret_cast<const uint8_t*>(row);
  const auto* w = reinterpret_cast<const __m128i*>(h.pair_weights);
  uint32_t x = 0;
  // Four pixels a step, stored as 16 bytes of which 12 are theirs: the
  // rest is overwritten by the next step, so stop 2 pixels short of the end.
  for (; x + 6 <= count; x += 4) {
    const __m128i v01 =
        _mm_packs_epi32(ScaledPixel<kPairs>(bytes, first, w, x, npairs, gather, round),
                        ScaledPixel<kPairs>(bytes, first, w, x + 1, npairs, gather, round));
    const __m128i v23 =
        _mm_packs_epi32(ScaledPixel<kPairs>(bytes, first, w, x + 2, npairs, gather, round),
                        ScaledPixel<kPairs>(bytes, first, w, x + 3, npairs, gather, round));
    const __m128i rgb = _mm_shuffle_epi8(_mm_packus_epi16(v01, v23), compact);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + size_t{x} * 3), rgb);
  }
  for (; x < count; ++x) {
    const __m128i v = ScaledPixel<kPairs>(bytes, first, w, x, npairs, gather, round);
    const auto rgb0 =
        static_cast<uint32_t>(_mm_cvtsi128_si32(_mm_packus_epi16(_mm_packs_epi32(v, v), v)));
    std::memcpy(out + size_t{x} * 3, &rgb0, 3);
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

JOADERFS_SSE41 void VerticalToMidSse41(const uint8_t* rows, size_t stride, const int16_t* weights,
                                       uint32_t taps, size_t n, int16_t* out) {
  const __m128i round = _mm_set1_epi32(1 << (kMidShift - 1));
  const __m128i zero = _mm_setzero_si128();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i lo = round, hi = round;
    const uint8_t* p = rows + i;
    uint32_t t = 0;
    for (; t + 1 < taps; t += 2, p += 2 * stride) {
      const __m128i a = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
      const __m128i b =
          _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + stride)));
      const __m128i wp = WeightPair(weights + t);
      lo = _mm_add_epi32(lo, _mm_madd_epi16(_mm_unpacklo_epi16(a, b), wp));
      hi = _mm_add_epi32(hi, _mm_madd_epi16(_mm_unpackhi_epi16(a, b), wp));
    }
    if (t < taps) {
      const __m128i a = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
      const __m128i wp = _mm_set1_epi32(static_cast<uint16_t>(weights[t]));
      lo = _mm_add_epi32(lo, _mm_madd_epi16(_mm_unpacklo_epi16(a, zero), wp));
      hi = _mm_add_epi32(hi, _mm_madd_epi16(_mm_unpackhi_epi16(a, zero), wp));
    }
    const __m128i v = _mm_packs_epi32(_mm_srai_epi32(lo, kMidShift), _mm_srai_epi32(hi, kMidShift));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), v);
  }
  VerticalToMidPortable(rows + i, stride, weights, taps, n - i, out + i);
}

JOADERFS_SSE41 void VerticalToPixelsSse41(const int16_t* rows, size_t stride,
                                          const int16_t* weights, uint32_t taps, size_t n,
                                          uint8_t* out) {
  const __m128i round = _mm_set1_epi32(1 << (kOutShift - 1));
  const __m128i zero = _mm_setzero_si128();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i lo = round, hi = round;
    const int16_t* p = rows + i;
    uint32_t t = 0;
    for (; t + 1 < taps; t += 2, p += 2 * stride) {
      const __m128i a = LoadBytes(p);
      const __m128i b = LoadBytes(p + stride);
      const __m128i wp = WeightPair(weights + t);
      lo = _mm_add_epi32(lo, _mm_madd_epi16(_mm_unpacklo_epi16(a, b), wp));
      hi = _mm_add_epi32(hi, _mm_madd_epi16(_mm_unpackhi_epi16(a, b), wp));
    }
    if (t < taps) {
      const __m128i a = LoadBytes(p);
      const __m128i wp = _mm_set1_epi32(static_cast<uint16_t>(weights[t]));
      lo = _mm_add_epi32(lo, _mm_madd_epi16(_mm_unpacklo_epi16(a, zero), wp));
      hi = _mm_add_epi32(hi, _mm_madd_epi16(_mm_unpackhi_epi16(a, zero), wp));
    }
    const __m128i v = _mm_packs_epi32(_mm_srai_epi32(lo, kOutShift), _mm_srai_epi32(hi, kOutShift));
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

JOADERFS_AVX2 inline __m256i Widen16(const uint8_t* p) {
  return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

JOADERFS_AVX2 inline __m256i Load256(const int16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

JOADERFS_AVX2 void VerticalToMidAvx2(const uint8_t* rows, size_t stride, const int16_t* weights,
                                     uint32_t taps, size_t n, int16_t* out) {
  const __m256i round = _mm256_set1_epi32(1 << (kMidShift - 1));
  const __m256i zero = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i lo = round, hi = round;
    const uint8_t* p = rows + i;
    uint32_t t = 0;
    for (; t + 1 < taps; t += 2, p += 2 * stride) {
      const __m256i a = Widen16(p);
      const __m256i b = Widen16(p + stride);
      const __m256i wp = WeightPair256(weights + t);
      lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), wp));
      hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), wp));
    }
    if (t < taps) {
      const __m256i a = Widen16(p);
      const __m256i wp = _mm256_set1_epi32(static_cast<uint16_t>(weights[t]));
      lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, zero), wp));
      hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, zero), wp));
    }
    const __m256i v =
        _mm256_packs_epi32(_mm256_srai_epi32(lo, kMidShift), _mm256_srai_epi32(hi, kMidShift));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), v);
  }
  VerticalToMidPortable(rows + i, stride, weights, taps, n - i, out + i);
}

JOADERFS_AVX2 void VerticalToPixelsAvx2(const int16_t* rows, size_t stride, const int16_t* weights,
                                        uint32_t taps, size_t n, uint8_t* out) {
  const __m256i round = _mm256_set1_epi32(1 << (kOutShift - 1));
  const __m256i zero = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i lo = round, hi = round;
    const int16_t* p = rows + i;
    uint32_t t = 0;
    for (; t + 1 < taps; t += 2, p += 2 * stride) {
      const __m256i a = Load256(p);
      const __m256i b = Load256(p + stride);
      const __m256i wp = WeightPair256(weights + t);
      lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), wp));
      hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), wp));
    }
    if (t < taps) {
      const __m256i a = Load256(p);
      const __m256i wp = _mm256_set1_epi32(static_cast<uint16_t>(weights[t]));
      lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, zero), wp));
      hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, zero), wp));
    }
    const __m256i v =
        _mm256_packs_epi32(_mm256_srai_epi32(lo, kOutShift), _mm256_srai_epi32(hi, kOutShift));
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
const Kernels kAvx2Kernels = {HorizontalToMidSse41, HorizontalToPixelsSse41, VerticalToMidAvx2,
                              VerticalToPixelsAvx2};

}  // namespace joaderfs::resample_internal

#endif  // x86
