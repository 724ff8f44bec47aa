// The float resampler the fast one replaced (main's loader/resample.cc up to
// 05e3a72), kept as the reference that tests pin the fixed-point SIMD path
// against and that joaderfs-sample-cost-bench measures as the baseline.
// Same contract as ResampleRgb and ResampleBox in loader/resample.h; slow
// (doubles per weight, a scalar horizontal pass, heap scratch per call).
// Pure functions; thread-safe.

#ifndef JOADERFS_TESTING_RESAMPLE_REFERENCE_H_
#define JOADERFS_TESTING_RESAMPLE_REFERENCE_H_

#include <cstdint>

#include "loader/resample.h"

namespace joaderfs::testing {

void ReferenceResampleRgb(const uint8_t* src, uint32_t src_width, uint32_t src_height,
                          const ResizeCrop& plan, uint8_t* dst, bool mirror = false);

void ReferenceResampleBox(const uint8_t* src, uint32_t src_width, const PixelBox& box,
                          uint32_t width, uint32_t height, uint8_t* dst, bool mirror = false);

}  // namespace joaderfs::testing

#endif  // JOADERFS_TESTING_RESAMPLE_REFERENCE_H_
