// FNV-1a, 64-bit: a small, stable hash for fingerprints and folder names
// that must stay the same across runs and builds (std::hash need not).

#ifndef JOADERFS_COMMON_HASH_H_
#define JOADERFS_COMMON_HASH_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace joaderfs {

inline constexpr uint64_t kFnv1aBasis = 0xcbf29ce484222325ULL;

// Continues hash `h` over `n` bytes at `data`; start from kFnv1aBasis.
inline uint64_t Fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

// Where under `cache_dir` SOURCE's `kind` lives (the disk tier's "v3", the
// job store's "jobs1"): <cache_dir>/<FNV-1a of SOURCE, 16 hex digits>-<kind>.
inline std::string SourceFolder(std::string_view cache_dir, std::string_view source,
                                std::string_view kind) {
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx",
                static_cast<unsigned long long>(Fnv1a(kFnv1aBasis, source.data(), source.size())));
  return std::string(cache_dir) + "/" + hash + "-" + std::string(kind);
}

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_HASH_H_
