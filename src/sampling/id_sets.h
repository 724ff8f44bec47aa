// Building subsets of sample ids: ranges and seeded random samples, as the
// simulator, the benchmarks and the tests describe jobs.
//
// Thread-safety: pure functions.

#ifndef JOADERFS_SAMPLING_ID_SETS_H_
#define JOADERFS_SAMPLING_ID_SETS_H_

#include <cstdint>

#include <roaring/roaring.hh>

#include "sampling/planner.h"

namespace joaderfs {

// Ids first..last inclusive. REQUIRES: first <= last.
Roaring IdRange(SampleId first, SampleId last);

// `count` ids drawn uniformly without replacement from first..last, the
// same for the same seed on every platform (Floyd's algorithm over Rng).
// REQUIRES: first <= last, count <= last - first + 1.
Roaring IdSample(SampleId first, SampleId last, uint64_t count, uint64_t seed);

}  // namespace joaderfs

#endif  // JOADERFS_SAMPLING_ID_SETS_H_
