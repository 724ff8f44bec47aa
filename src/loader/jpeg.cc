#include "loader/jpeg.h"

// jpeglib.h needs size_t and FILE declared first.
#include <algorithm>
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <memory>

#include <jerror.h>
#include <jpeglib.h>

#include "common/populate_pages.h"
#include "loader/jpeg_idct.h"
#include "loader/resample.h"

namespace joaderfs {
namespace {

// libjpeg reports fatal errors through error_exit, which must not return:
// it jumps back to DecodeJpeg. Warnings are ignored as PIL ignores them,
// except a premature end of file, which fails the decode as libvips'
// fail_on=truncated did.
struct ErrorHandler {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  bool truncated = false;
  char message[JMSG_LENGTH_MAX] = {};
};

[[noreturn]] void OnError(j_common_ptr cinfo) {
  auto* handler = reinterpret_cast<ErrorHandler*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, handler->message);
  std::longjmp(handler->jump, 1);
}

void OnMessage(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    reinterpret_cast<ErrorHandler*>(cinfo->err)->truncated = true;
  }
}

// A side of the picture at M/8, as libjpeg sizes it: rounded up.
uint32_t ScaledSide(uint32_t side, unsigned m) {
  return static_cast<uint32_t>((uint64_t{side} * m + 7) / 8);
}

// The smallest M/8 that keeps the scaled shorter side at least
// `min_shorter`; 8/8 when nothing is asked or the image is smaller.
unsigned ScaleNumerator(uint32_t width, uint32_t height, uint32_t min_shorter) {
  if (min_shorter == 0) return 8;
  for (unsigned m = 1; m < 8; ++m) {
    if (ScaledSide(std::min(width, height), m) >= min_shorter) return m;
  }
  return 8;
}

// libjpeg-turbo has SIMD IDCTs for the scales 1/8, 2/8, 4/8 and 8/8 only;
// its others are plain C and cost more than a full-size decode. Where
// loader/jpeg_idct.h has no kernels for them (no AVX2), the picture is
// decoded at the SIMD scale at or above `m` and resampled down to M/8.
unsigned SimdScaleNumerator(unsigned m) {
  for (unsigned s : {1u, 2u, 4u}) {
    if (s >= m) return s;
  }
  return 8;
}

// The picture at the SIMD scale, before it is resampled: one buffer per
// decode thread, kept between decodes up to kKeptScratchBytes (a 8/8
// decode of a 1.2 MP picture) so that its pages are not faulted in again.
constexpr size_t kKeptScratchBytes = size_t{4} << 20;
struct Scratch {
  std::unique_ptr<uint8_t[]> bytes;
  size_t size = 0;
};
thread_local Scratch scratch;

uint8_t* ScratchOf(size_t bytes) {
  if (scratch.size < bytes) {
    scratch.bytes.reset(new uint8_t[bytes]);
    scratch.size = bytes;
  }
  return scratch.bytes.get();
}

void TrimScratch() {
  if (scratch.size > kKeptScratchBytes) {
    scratch.bytes.reset();
    scratch.size = 0;
  }
}

}  // namespace

Status DecodeJpeg(std::string_view file, uint32_t min_shorter, uint64_t max_pixels, RgbImage* out,
                  OddScaleDecode odd_scale) {
  jpeg_decompress_struct cinfo;
  ErrorHandler errors;
  cinfo.err = jpeg_std_error(&errors.mgr);
  errors.mgr.error_exit = OnError;
  errors.mgr.emit_message = OnMessage;
  // Nothing with a destructor may be created between here and the last
  // libjpeg call: a longjmp would skip it.
  if (setjmp(errors.jump) != 0) {
    jpeg_destroy_decompress(&cinfo);
    return Status::Corruption(errors.message);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(file.data()), file.size());
  jpeg_read_header(&cinfo, TRUE);
  // Before anything sized by the picture is allocated: a progressive JPEG
  // holds every coefficient of the full picture however it is scaled.
  if (uint64_t{cinfo.image_width} * cinfo.image_height > max_pixels) {
    std::snprintf(errors.message, sizeof errors.message,
                  "image of %ux%u pixels exceeds max_pixels=%llu", cinfo.image_width,
                  cinfo.image_height, static_cast<unsigned long long>(max_pixels));
    jpeg_destroy_decompress(&cinfo);
    return Status::Corruption(errors.message);
  }
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    return Status::InvalidArgument("CMYK JPEG");
  }
  cinfo.out_color_space = JCS_RGB;
  const unsigned m = ScaleNumerator(cinfo.image_width, cinfo.image_height, min_shorter);
  cinfo.scale_num = m;
  cinfo.scale_denom = 8;
  bool scaled_idct = false;
  if (SimdScaleNumerator(m) != m) {
    jpeg_calc_output_dimensions(&cinfo);  // each component's IDCT size
    scaled_idct = odd_scale == OddScaleDecode::kScaledIdct && HasScaledIdct(&cinfo);
    if (!scaled_idct) cinfo.scale_num = SimdScaleNumerator(m);
  }
  jpeg_start_decompress(&cinfo);
  // Were it refused, libjpeg's own kernels would make the same picture.
  if (scaled_idct) InstallScaledIdct(&cinfo);
  out->full_width = cinfo.image_width;
  out->full_height = cinfo.image_height;
  out->width = ScaledSide(cinfo.image_width, m);
  out->height = ScaledSide(cinfo.image_height, m);
  // Not zeroed: the decode or the resample writes every byte.
  const size_t base_bytes = size_t{out->width} * out->height * 3;
  out->pixels.reset(new uint8_t[base_bytes]);
  PopulatePages(out->pixels.get(), base_bytes);  // a base the cache keeps: fresh memory
  const bool resample = cinfo.scale_num != m;
  uint8_t* decoded = resample ? ScratchOf(size_t{cinfo.output_width} * cinfo.output_height * 3)
                              : out->pixels.get();
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = decoded + size_t{cinfo.output_scanline} * cinfo.output_width * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  const uint32_t decoded_width = cinfo.output_width, decoded_height = cinfo.output_height;
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  if (errors.truncated) return Status::Corruption("premature end of JPEG file");
  if (resample) {
    ResampleBox(decoded, decoded_width, PixelBox{0, 0, decoded_width, decoded_height}, out->width,
                out->height, out->pixels.get());
    TrimScratch();
  }
  return Status::Ok();
}

}  // namespace joaderfs
