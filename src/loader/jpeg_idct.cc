#include "loader/jpeg_idct.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "loader/resample.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace joaderfs {
namespace {

// libjpeg's IDCT module (jpegint.h): one method per component, by index.
struct IdctModule {
  void (*start_pass)(j_decompress_ptr cinfo);
  JpegIdctMethod methods[MAX_COMPONENTS];
};

#if defined(__x86_64__) || defined(__i386__)

#define JOADERFS_AVX2 __attribute__((target("avx2")))

// Weights are the basis times 1 << kWeightBits; the first pass keeps
// kPassBits fraction bits of its sums (as int16, for the second pmaddwd).
constexpr int kWeightBits = 14;
constexpr int kPassBits = 3;
constexpr int kFirstShift = kWeightBits - kPassBits;
constexpr int kSecondShift = kWeightBits + kPassBits;

// The weights of one output size S: frequencies k < min(S, 8) to samples
// n < S. The first pass (along rows) takes coefficient pairs (k, k + 1)
// against 8 samples a vector, two vectors (halves) for S > 8; the second
// (down columns) takes pairs of first-pass rows against one output row.
struct Basis {
  alignas(32) int16_t rows[4][2][16];  // [pair][half]: (w(2p, n), w(2p + 1, n)) for n = 8 half + j
  int32_t columns[16][4];              // [n][pair]: w(2p, n) | w(2p + 1, n) << 16
};

// cos((2n + 1) k pi / 2S) / 2, times 1 / sqrt(2) for k = 0: a flat block of
// DC value D is D / 8 everywhere, as in libjpeg's IDCT at any size.
int16_t Weight(int size, int k, int n) {
  if (k >= std::min(size, 8) || n >= size) return 0;
  const double pi = 3.14159265358979323846;
  double w = 0.5 * std::cos((2 * n + 1) * k * pi / (2.0 * size));
  if (k == 0) w /= std::sqrt(2.0);
  return static_cast<int16_t>(std::lround(w * (1 << kWeightBits)));
}

Basis MakeBasis(int size) {
  Basis b{};
  for (int p = 0; p < 4; ++p) {
    for (int n = 0; n < 16; ++n) {
      b.rows[p][n / 8][(n % 8) * 2] = Weight(size, 2 * p, n);
      b.rows[p][n / 8][(n % 8) * 2 + 1] = Weight(size, 2 * p + 1, n);
      b.columns[n][p] = static_cast<int32_t>(
          static_cast<uint16_t>(Weight(size, 2 * p, n)) |
          static_cast<uint32_t>(static_cast<uint16_t>(Weight(size, 2 * p + 1, n))) << 16);
    }
  }
  return b;
}

template <int kSize>
const Basis kBasis = MakeBasis(kSize);

// The transform of one block whose coefficients are zero from row and
// column 2 kUsed on (the common sparse block does a third of the work).
template <int kSize, int kUsed>
JOADERFS_AVX2 void Transform(const int16_t* dequantised, JSAMPARRAY output_buf,
                             JDIMENSION output_col) {
  constexpr int kFrequencies = kSize < 8 ? kSize : 8;
  constexpr int kRows = 2 * kUsed < kFrequencies ? 2 * kUsed : kFrequencies;
  constexpr int kHalves = (kSize + 7) / 8;
  const Basis& basis = kBasis<kSize>;
  // First pass: row v's samples n, as int32, kPassBits fraction bits.
  __m256i rows[8][kHalves];
  const __m256i first_round = _mm256_set1_epi32(1 << (kFirstShift - 1));
  for (int v = 0; v < kRows; ++v) {
    for (int h = 0; h < kHalves; ++h) rows[v][h] = first_round;
    for (int p = 0; p < kUsed; ++p) {
      int32_t pair;
      std::memcpy(&pair, dequantised + v * 8 + 2 * p, sizeof pair);
      const __m256i c = _mm256_set1_epi32(pair);
      for (int h = 0; h < kHalves; ++h) {
        const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(basis.rows[p][h]));
        rows[v][h] = _mm256_add_epi32(rows[v][h], _mm256_madd_epi16(c, w));
      }
    }
    for (int h = 0; h < kHalves; ++h) rows[v][h] = _mm256_srai_epi32(rows[v][h], kFirstShift);
  }
  // Pairs of rows (v, v + 1) interleaved per sample as int16, saturated.
  const __m256i interleave =
      _mm256_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15,  //
                       0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
  __m256i pairs[kUsed][kHalves];
  for (int p = 0; p < kUsed; ++p) {
    for (int h = 0; h < kHalves; ++h) {
      const __m256i next = 2 * p + 1 < kRows ? rows[2 * p + 1][h] : _mm256_setzero_si256();
      pairs[p][h] = _mm256_shuffle_epi8(_mm256_packs_epi32(rows[2 * p][h], next), interleave);
    }
  }
  // Second pass: output row n, centred on 128 and clamped by the packs.
  const __m256i second_round = _mm256_set1_epi32((128 << kSecondShift) + (1 << (kSecondShift - 1)));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int n = 0; n < kSize; ++n) {
    __m256i out[2];
    for (int h = 0; h < kHalves; ++h) {
      __m256i acc = second_round;
      for (int p = 0; p < kUsed; ++p) {
        acc = _mm256_add_epi32(
            acc, _mm256_madd_epi16(pairs[p][h], _mm256_set1_epi32(basis.columns[n][p])));
      }
      out[h] = _mm256_srai_epi32(acc, kSecondShift);
    }
    if (kHalves == 1) out[1] = out[0];
    const __m256i words = _mm256_packs_epi32(out[0], out[1]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(words, words), order);
    alignas(16) uint8_t samples[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(samples), _mm256_castsi256_si128(bytes));
    std::memcpy(output_buf[n] + output_col, samples, kSize);
  }
}

// One block: S rows of S samples at output_buf[row] + output_col.
template <int kSize>
JOADERFS_AVX2 void ScaledIdct(j_decompress_ptr, jpeg_component_info* component,
                              JCOEFPTR coefficients, JSAMPARRAY output_buf, JDIMENSION output_col) {
  constexpr int kFrequencies = kSize < 8 ? kSize : 8;
  constexpr int kPairs = (kFrequencies + 1) / 2;
  // Dequantised coefficients of the rows used, two rows a vector. A
  // component with no scan yet has no table: libjpeg's kernels see zeros.
  alignas(32) int16_t dequantised[kPairs * 16];
  const JQUANT_TBL* table = component->quant_table;
  __m256i columns = _mm256_setzero_si256();  // any row's nonzero columns
  int last_pair = 0;                         // the last pair of rows not all zero
  for (int p = 0; p < kPairs; ++p) {
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(coefficients + 16 * p));
    c = table
            ? _mm256_mullo_epi16(
                  c, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(table->quantval + 16 * p)))
            : _mm256_setzero_si256();
    _mm256_store_si256(reinterpret_cast<__m256i*>(dequantised + 16 * p), c);
    const uint32_t zero =
        static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi16(c, _mm256_setzero_si256())));
    if (zero != 0xffffffff) last_pair = p;
    columns = _mm256_or_si256(columns, c);
  }
  const __m128i both =
      _mm_or_si128(_mm256_castsi256_si128(columns), _mm256_extracti128_si256(columns, 1));
  const uint32_t nonzero_columns =
      ~static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi16(both, _mm_setzero_si128()))) &
      0xffff;
  const int last_column = nonzero_columns ? (31 - __builtin_clz(nonzero_columns)) / 2 : 0;
  const int used = std::max(last_pair, last_column / 2) + 1;  // pairs of frequencies
  switch (std::min(used, kPairs)) {
    case 1: return Transform<kSize, 1>(dequantised, output_buf, output_col);
    case 2: return Transform<kSize, 2>(dequantised, output_buf, output_col);
    case 3: return Transform<kSize, std::min(kPairs, 3)>(dequantised, output_buf, output_col);
    default: return Transform<kSize, kPairs>(dequantised, output_buf, output_col);
  }
}

#endif  // x86

}  // namespace

JpegIdctMethod ScaledIdctFor(int size) {
#if defined(__x86_64__) || defined(__i386__)
  if (BestSimdLevel() != SimdLevel::kAvx2) return nullptr;
  switch (size) {
    case 3: return ScaledIdct<3>;
    case 5: return ScaledIdct<5>;
    case 6: return ScaledIdct<6>;
    case 7: return ScaledIdct<7>;
    case 10: return ScaledIdct<10>;
    case 12: return ScaledIdct<12>;
    case 14: return ScaledIdct<14>;
    default: return nullptr;
  }
#else
  (void)size;
  return nullptr;
#endif
}

bool HasScaledIdct(j_decompress_ptr cinfo) {
  for (int ci = 0; ci < cinfo->num_components; ++ci) {
    if (ScaledIdctFor(cinfo->comp_info[ci].DCT_scaled_size) == nullptr) return false;
  }
  return cinfo->num_components > 0;
}

bool InstallScaledIdct(j_decompress_ptr cinfo) {
  if (!HasScaledIdct(cinfo) || cinfo->idct == nullptr) return false;
  auto* module = reinterpret_cast<IdctModule*>(cinfo->idct);
  // jpeg_start_decompress has filled every slot: an empty one means the
  // module is not laid out as this file expects, so leave it be.
  if (module->start_pass == nullptr) return false;
  for (int ci = 0; ci < cinfo->num_components; ++ci) {
    if (module->methods[ci] == nullptr) return false;
  }
  for (int ci = 0; ci < cinfo->num_components; ++ci) {
    module->methods[ci] = ScaledIdctFor(cinfo->comp_info[ci].DCT_scaled_size);
  }
  return true;
}

}  // namespace joaderfs
