// FNV-1a, 64-bit: a small, stable hash for fingerprints and folder names
// that must stay the same across runs and builds (std::hash need not).

#ifndef JOADERFS_COMMON_HASH_H_
#define JOADERFS_COMMON_HASH_H_

#include <cstddef>
#include <cstdint>

namespace joaderfs {

inline constexpr uint64_t kFnv1aBasis = 0xcbf29ce484222325ULL;

// Continues hash `h` over `n` bytes at `data`; start from kFnv1aBasis.
inline uint64_t Fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_HASH_H_
