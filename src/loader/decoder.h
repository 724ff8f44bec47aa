// Decodes one image file to RGB uint8: shorter side resized to `size` and
// centre-cropped to size x size (torchvision's Resize(size) then
// CenterCrop(size), same geometry, PIL's bilinear filter), or the original
// size when `size` is 0.
//
// YCbCr and greyscale JPEGs, nearly every training image, go straight
// through libjpeg-turbo, scaled by M/8 (loader/jpeg.h); other formats and
// CMYK JPEGs through libvips. Both end in one resample pass
// (loader/resample.h).
//
// Memory is bounded on every path: the file must be a regular file no larger
// than 8 bytes per allowed pixel plus 1 MiB of metadata, and its width x height,
// read from the header before any pixel is decoded, at most MaxPixels(). A
// decode then holds about 10 bytes per allowed pixel at most (measured at
// 64 Mpx: 7.6 for a PNG, the file and two copies of the RGB picture; 9.6
// for a progressive JPEG at full size, its coefficients and the picture).
//
// Thread-safe; call InitDecoder() once per process first.

#ifndef JOADERFS_LOADER_DECODER_H_
#define JOADERFS_LOADER_DECODER_H_

#include <cstdint>
#include <string>

#include "common/file_range.h"
#include "common/status.h"
#include "loader/decoded_sample.h"

namespace joaderfs {

// Starts libvips. Returns false (with a message) when it cannot.
bool InitDecoder(const char* argv0, std::string* error);

// PIL's MAX_IMAGE_PIXELS (a quarter GiB of RGB): what a PIL-based DataLoader opens
// without a DecompressionBombWarning opens here too.
inline constexpr uint64_t kDefaultMaxPixels = 89'478'485;
// The largest limit that may be set: 2^32, over any JPEG's 65500 x 65500.
inline constexpr uint64_t kMaxMaxPixels = uint64_t{1} << 32;

// The pixel limit of every decode from now on (the mount option
// max_pixels). REQUIRES: 0 < max_pixels <= kMaxMaxPixels.
void SetMaxPixels(uint64_t max_pixels);
uint64_t MaxPixels();

// Fails with IOError for a file that cannot be opened or is not a regular
// file (a FIFO, a device: checked after opening it without blocking), and
// with Corruption for files that are not images, truncated ones, and images
// over MaxPixels().
Status DecodeImage(const std::string& path, uint32_t size, DecodedSample* out);

// The base image of the cache (loader/augment.h cuts every delivery from
// it): a JPEG at the smallest M/8 of its size whose shorter side is at
// least `base` (loader/jpeg.h), any other format at full size; `base` 0
// decodes JPEGs at full size too. Uncropped. Fails as
// DecodeImage() does.
Status DecodeBase(const std::string& path, uint32_t base, DecodedSample* out);
// The same for the image at `range`: a whole file, or a member of a tar
// shard read with one pread() at its offset. `*as_scanned` says whether the
// bytes decoded came from the file the scan saw (`range`'s size,
// modification time and inode, checked on the open descriptor): only such
// a decode may be kept under the scan's fingerprint. A member whose shard
// changed since the scan fails with IOError, and so does a file rewritten
// while it was read.
Status DecodeBase(const FileRange& range, uint32_t base, DecodedSample* out, bool* as_scanned);

// The two halves of the DecodeBase above, for callers that read on threads
// of their own (loader/source_reader.h) so that decode threads never wait on
// I/O: the bytes come from the SOURCE's store (catalog/source_store.h, for
// local files ReadImageBytes), at most MaxImageFileBytes() (a picture within
// MaxPixels() stored raw, 8 bytes a pixel, plus metadata), and
// DecodeBaseFromBytes decodes them; errors name `range`.
uint64_t MaxImageFileBytes();
Status DecodeBaseFromBytes(const FileRange& range, const std::string& bytes, uint32_t base,
                           DecodedSample* out);

}  // namespace joaderfs

#endif  // JOADERFS_LOADER_DECODER_H_
