// Deterministic random numbers: the same seed gives the same draws on every
// platform and standard library (std::uniform_int_distribution does not
// promise that), so orders are reproducible from the mount's seed.

#ifndef JOADERFS_COMMON_RANDOM_H_
#define JOADERFS_COMMON_RANDOM_H_

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace joaderfs {

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  uint64_t Next() { return engine_(); }

  // Uniform in [0, n). REQUIRES: n > 0. Lemire's unbiased multiply-shift.
  uint64_t Below(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(engine_()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = -n % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(engine_()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Uniform in [0, 1).
  double Unit() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

  template <typename T>
  void Shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[Below(i)]);
  }

 private:
  std::mt19937_64 engine_;
};

// Mixes two words into a seed (splitmix64 finaliser), to derive per-job
// streams from the mount's seed.
inline uint64_t MixSeed(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9e3779b97f4a7c15ULL * (b + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_RANDOM_H_
