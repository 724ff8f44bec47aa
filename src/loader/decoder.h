// Decodes one image file to RGB uint8: shorter side resized to `size` and
// centre-cropped to size x size (torchvision's Resize(size) then
// CenterCrop(size), same geometry, PIL's bilinear filter), or the original
// size when `size` is 0.
//
// YCbCr and greyscale JPEGs, nearly every training image, go straight
// through libjpeg-turbo with IDCT scaling (loader/jpeg.h); other formats and
// CMYK JPEGs through libvips. Both end in one resample pass
// (loader/resample.h).
//
// Thread-safe; call InitDecoder() once per process first.

#ifndef JOADERFS_LOADER_DECODER_H_
#define JOADERFS_LOADER_DECODER_H_

#include <cstdint>
#include <string>

#include "common/status.h"
#include "loader/decoded_sample.h"

namespace joaderfs {

// Starts libvips. Returns false (with a message) when it cannot.
bool InitDecoder(const char* argv0, std::string* error);

// Fails with Corruption for files that are not images, or truncated ones.
Status DecodeImage(const std::string& path, uint32_t size, DecodedSample* out);

}  // namespace joaderfs

#endif  // JOADERFS_LOADER_DECODER_H_
