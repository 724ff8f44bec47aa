// Scaled inverse DCTs for libjpeg-turbo's M/8 decodes, with AVX2.
//
// libjpeg-turbo (2.1 and 3.0) has SIMD IDCTs for output blocks of 1, 2, 4
// and 8 samples a side only. A decode at 3/8, 5/8, 6/8 or 7/8 runs its plain
// C IDCTs, 3x3 to 7x7 (and 6x6 to 14x14 for 4:2:0 chroma, which it upsamples
// inside the IDCT), and costs more than a full-size decode. These replace
// them, one kernel per output size: the block's dequantised coefficients
// (those below the output size) through two matrix passes of int16 weights,
// pmaddwd pairs as in loader/resample_kernels_x86.cc.
//
// The arithmetic is libjpeg's: output sample n of a side of S samples is the
// 8-point IDCT's basis evaluated at S evenly spaced points, cos((2n + 1) k pi
// / 2S), over the frequencies k < min(S, 8); a flat block gives the same
// value at every size. Rounding differs from libjpeg's own C kernels: a
// sample may differ from theirs by one, rarely two (loader/jpeg_idct_test.cc
// bounds it).
//
// Stateless functions over read-only tables; thread-safe.

#ifndef JOADERFS_LOADER_JPEG_IDCT_H_
#define JOADERFS_LOADER_JPEG_IDCT_H_

// jpeglib.h needs size_t and FILE declared first.
#include <cstddef>
#include <cstdio>

#include <jpeglib.h>

namespace joaderfs {

// libjpeg's per-block IDCT method (jpegint.h's inverse_DCT_method_ptr,
// not installed): dequantises and transforms one block of coefficients,
// writing S rows of S samples at output_buf[row] + output_col.
using JpegIdctMethod = void (*)(j_decompress_ptr cinfo, jpeg_component_info* component,
                                JCOEFPTR coefficients, JSAMPARRAY output_buf,
                                JDIMENSION output_col);

// The kernel for blocks of `size` samples a side, or nullptr where
// libjpeg's own is the one to use: sizes 1, 2, 4, 8 (SIMD there already),
// 9, 11, 13, 15, 16, or a CPU without AVX2.
JpegIdctMethod ScaledIdctFor(int size);

// Puts the kernels in place of libjpeg's for every component of a
// decompression that jpeg_start_decompress has begun, if all of its
// components' sizes have one; false (nothing changed) otherwise, or where
// the module's slots are not all filled. It writes libjpeg's IDCT module
// (jpegint.h's struct jpeg_inverse_dct, whose layout has not changed since
// libjpeg 6b), which jpeg_start_decompress filled and the output pass only
// reads. Call it before the first jpeg_read_scanlines.
bool InstallScaledIdct(j_decompress_ptr cinfo);

// Whether every component's size, as jpeg_calc_output_dimensions set it,
// has a kernel: what InstallScaledIdct needs once jpeg_start_decompress
// has run.
bool HasScaledIdct(j_decompress_ptr cinfo);

}  // namespace joaderfs

#endif  // JOADERFS_LOADER_JPEG_IDCT_H_
