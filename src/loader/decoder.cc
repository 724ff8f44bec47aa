#include "loader/decoder.h"

#include <vips/vips.h>

// vips_vector_set_enabled is not in vips.h; vector.h needs vips.h first.
#include <vips/vector.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "catalog/source_store.h"
#include "common/populate_pages.h"
#include "loader/jpeg.h"
#include "loader/resample.h"

namespace joaderfs {
namespace {

// Owns the VipsImages of one decode; unrefs them all at the end.
class ImageChain {
 public:
  ~ImageChain() {
    for (VipsImage* im : images_) g_object_unref(im);
  }
  VipsImage* Keep(VipsImage* im) {
    images_.push_back(im);
    return im;
  }

 private:
  std::vector<VipsImage*> images_;
};

Status VipsFailure(const std::string& path) {
  std::string message = vips_error_buffer();
  vips_error_clear();
  while (!message.empty() && message.back() == '\n') message.pop_back();
  std::replace(message.begin(), message.end(), '\n', ' ');
  return Status::Corruption(path + ": " + message);
}

// JPEG files start with an SOI marker followed by another marker.
bool IsJpeg(const std::string& file) {
  return file.size() >= 3 && static_cast<uint8_t>(file[0]) == 0xff &&
         static_cast<uint8_t>(file[1]) == 0xd8 && static_cast<uint8_t>(file[2]) == 0xff;
}

std::atomic<uint64_t> max_pixels{kDefaultMaxPixels};

// Room for headers, EXIF, ICC profiles beyond the pixels in an image file.
constexpr uint64_t kMetadataBytes = 1 << 20;

}  // namespace

uint64_t MaxImageFileBytes() { return MaxPixels() * 8 + kMetadataBytes; }

void SetMaxPixels(uint64_t limit) { max_pixels.store(limit, std::memory_order_relaxed); }

uint64_t MaxPixels() { return max_pixels.load(std::memory_order_relaxed); }

bool InitDecoder(const char* argv0, std::string* error) {
  if (VIPS_INIT(argv0) != 0) {
    *error = vips_error_buffer();
    return false;
  }
  // The loader pool runs one decode per thread; libvips' own threads and
  // operation cache would only add contention and memory.
  vips_concurrency_set(1);
  vips_cache_set_max(0);
  // libvips 8.14 compiles liborc programs for its vector paths (resize,
  // convolution, some conversions); liborc 0.4.33 frees their code memory
  // without its lock, and concurrent operations then corrupt the heap (a
  // crash every few thousand resizes on 2+ threads). The plain C paths
  // measured no slower here.
  vips_vector_set_enabled(FALSE);
  return true;
}

namespace {

// Any image libvips can open, at full size, to packed RGB, if it has at
// most `limit` pixels.
Status DecodeWithVips(const std::string& path, const std::string& file, uint64_t limit,
                      RgbImage* rgb) {
  ImageChain chain;
  // Reads the header only: pixels are decoded when written out below.
  VipsImage* im =
      vips_image_new_from_buffer(file.data(), file.size(), "", "access", VIPS_ACCESS_SEQUENTIAL,
                                 "fail_on", VIPS_FAIL_ON_TRUNCATED, nullptr);
  if (!im) return VipsFailure(path);
  chain.Keep(im);
  if (uint64_t(im->Xsize) * uint64_t(im->Ysize) > limit) {
    return Status::Corruption(path + ": image of " + std::to_string(im->Xsize) + "x" +
                              std::to_string(im->Ysize) +
                              " pixels exceeds max_pixels=" + std::to_string(limit));
  }
  // To 3-band sRGB uint8 whatever came in: grey, CMYK, 16-bit, alpha.
  if (im->Type != VIPS_INTERPRETATION_sRGB) {
    VipsImage* srgb = nullptr;
    if (vips_colourspace(im, &srgb, VIPS_INTERPRETATION_sRGB, nullptr) != 0) {
      return VipsFailure(path);
    }
    im = chain.Keep(srgb);
  }
  if (im->Bands > 3) {
    VipsImage* three = nullptr;
    if (vips_extract_band(im, &three, 0, "n", 3, nullptr) != 0) return VipsFailure(path);
    im = chain.Keep(three);
  }
  if (im->BandFmt != VIPS_FORMAT_UCHAR) {
    VipsImage* u8 = nullptr;
    if (vips_cast(im, &u8, VIPS_FORMAT_UCHAR, nullptr) != 0) return VipsFailure(path);
    im = chain.Keep(u8);
  }
  if (im->Bands != 3) return Status::Corruption(path + ": cannot convert to RGB");
  rgb->width = rgb->full_width = static_cast<uint32_t>(im->Xsize);
  rgb->height = rgb->full_height = static_cast<uint32_t>(im->Ysize);
  size_t bytes = 0;
  auto* pixels = static_cast<uint8_t*>(vips_image_write_to_memory(im, &bytes));
  if (!pixels) return VipsFailure(path);
  if (bytes != size_t{rgb->width} * rgb->height * 3) {
    g_free(pixels);
    return Status::Corruption(path + ": unexpected pixel buffer size");
  }
  rgb->pixels.reset(new uint8_t[bytes]);
  PopulatePages(rgb->pixels.get(), bytes);  // a base the cache keeps: fresh memory
  std::memcpy(rgb->pixels.get(), pixels, bytes);
  g_free(pixels);
  return Status::Ok();
}

}  // namespace

namespace {

std::string ImageName(const FileRange& range) {
  return range.partial ? range.path + "@" + std::to_string(range.offset) : range.path;
}

// The picture in `file` at the smallest JPEG M/8 scale whose shorter side
// is at least `min_shorter` (0: full size), or at full size for other
// formats. `name` is what errors call it.
Status DecodeRgb(const std::string& name, const std::string& file, uint32_t min_shorter,
                 RgbImage* rgb) {
  const uint64_t limit = MaxPixels();
  Status s = Status::InvalidArgument("not a JPEG");
  if (IsJpeg(file)) {
    s = DecodeJpeg(file, min_shorter, limit, rgb);
    if (s.code() == Status::Code::kCorruption) return Status::Corruption(name + ": " + s.message());
  }
  if (!s.ok()) return DecodeWithVips(name, file, limit, rgb);
  return Status::Ok();
}

// The same, read first. The file is read once into memory and decoded from
// there: opening it by name makes libvips probe every loader and reopen it.
Status DecodeRgb(const FileRange& range, uint32_t min_shorter, RgbImage* rgb, bool* as_scanned) {
  std::string file;
  Status s = ReadImageBytes(range, MaxImageFileBytes(), &file, as_scanned);
  if (!s.ok()) return s;
  return DecodeRgb(ImageName(range), file, min_shorter, rgb);
}

void TakePixels(RgbImage* rgb, DecodedSample* out) {
  out->channels = 3;
  out->width = rgb->width;
  out->height = rgb->height;
  out->pixels = std::shared_ptr<uint8_t>(rgb->pixels.release(), std::default_delete<uint8_t[]>());
}

}  // namespace

Status DecodeImage(const std::string& path, uint32_t size, DecodedSample* out) {
  RgbImage rgb;
  bool as_scanned = false;
  Status s = DecodeRgb(FileRange::WholeFile(path), size, &rgb, &as_scanned);
  if (!s.ok()) return s;
  if (size == 0) {
    TakePixels(&rgb, out);
    return Status::Ok();
  }
  out->channels = 3;
  const ResizeCrop plan = PlanResizeCrop(rgb.full_width, rgb.full_height, size);
  out->width = plan.width;
  out->height = plan.height;
  out->pixels =
      std::shared_ptr<uint8_t>(new uint8_t[out->bytes()], std::default_delete<uint8_t[]>());
  ResampleRgb(rgb.pixels.get(), rgb.width, rgb.height, plan, out->pixels.get());
  return Status::Ok();
}

Status DecodeBase(const std::string& path, uint32_t base, DecodedSample* out) {
  bool as_scanned = false;
  return DecodeBase(FileRange::WholeFile(path), base, out, &as_scanned);
}

Status DecodeBase(const FileRange& range, uint32_t base, DecodedSample* out, bool* as_scanned) {
  RgbImage rgb;
  Status s = DecodeRgb(range, base, &rgb, as_scanned);
  if (!s.ok()) return s;
  TakePixels(&rgb, out);
  return Status::Ok();
}

Status DecodeBaseFromBytes(const FileRange& range, const std::string& bytes, uint32_t base,
                           DecodedSample* out) {
  RgbImage rgb;
  Status s = DecodeRgb(ImageName(range), bytes, base, &rgb);
  if (!s.ok()) return s;
  TakePixels(&rgb, out);
  return Status::Ok();
}

}  // namespace joaderfs
