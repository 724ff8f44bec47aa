#include "sampling/id_sets.h"

#include "common/random.h"

namespace joaderfs {

Roaring IdRange(SampleId first, SampleId last) {
  Roaring ids;
  ids.addRange(first, static_cast<uint64_t>(last) + 1);
  return ids;
}

Roaring IdSample(SampleId first, SampleId last, uint64_t count, uint64_t seed) {
  // Floyd: for j in n-count..n-1 take a uniform t <= j, or j itself when t
  // is already taken; every count-subset is equally likely.
  Rng rng(seed);
  const uint64_t n = static_cast<uint64_t>(last) - first + 1;
  Roaring ids;
  for (uint64_t j = n - count; j < n; ++j) {
    const SampleId candidate = first + static_cast<SampleId>(rng.Below(j + 1));
    ids.add(ids.contains(candidate) ? first + static_cast<SampleId>(j) : candidate);
  }
  return ids;
}

}  // namespace joaderfs
