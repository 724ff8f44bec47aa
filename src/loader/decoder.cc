#include "loader/decoder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vips/vips.h>
#include <vips/vector.h>  // vips_vector_set_enabled: not in vips.h

#include <cerrno>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

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

// The largest JPEG shrink factor (1, 2, 4, 8) that keeps the shorter side at
// least `size`, so the final resize still only shrinks.
int JpegShrink(int width, int height, uint32_t size) {
  const int shorter = std::min(width, height);
  int shrink = 1;
  while (shrink < 8 && shorter / (shrink * 2) >= static_cast<int>(size)) shrink *= 2;
  return shrink;
}

// JPEG files start with an SOI marker followed by another marker.
bool IsJpeg(const std::string& file) {
  return file.size() >= 3 && static_cast<uint8_t>(file[0]) == 0xff &&
         static_cast<uint8_t>(file[1]) == 0xd8 && static_cast<uint8_t>(file[2]) == 0xff;
}

bool ReadFile(const std::string& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return false;
  }
  out->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out->size()) {
    const ssize_t n = ::read(fd, out->data() + done, out->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  out->resize(done);
  return true;
}

}  // namespace

bool InitDecoder(const char* argv0, std::string* error) {
  if (VIPS_INIT(argv0) != 0) {
    *error = vips_error_buffer();
    return false;
  }
  // The loader pool runs one decode per thread; libvips' own threads and
  // operation cache would only add contention and memory.
  vips_concurrency_set(1);
  vips_cache_set_max(0);
  // libvips 8.14 compiles liborc programs for every resize; liborc 0.4.33
  // frees their code memory without its lock, and concurrent decodes then
  // corrupt the heap (a crash every few thousand decodes on 2+ threads).
  // The plain C paths measure no slower here.
  vips_vector_set_enabled(FALSE);
  return true;
}

Status DecodeImage(const std::string& path, uint32_t size, DecodedSample* out) {
  // The file is read once into memory and decoded from there: opening it by
  // name makes libvips probe every loader and reopen the file, which cost
  // more than the decode itself for ImageNet-sized JPEGs. The buffer must
  // outlive the images that read it, so it is declared before the chain.
  std::string file;
  if (!ReadFile(path, &file)) return Status::IOError(path + ": " + std::strerror(errno));
  ImageChain chain;
  const bool jpeg = IsJpeg(file);
  VipsImage* im = nullptr;
  if (jpeg) {
    if (vips_jpegload_buffer(file.data(), file.size(), &im, "access", VIPS_ACCESS_SEQUENTIAL,
                             "fail_on", VIPS_FAIL_ON_TRUNCATED, nullptr) != 0) {
      return VipsFailure(path);
    }
  } else {
    im = vips_image_new_from_buffer(file.data(), file.size(), "", "access",
                                    VIPS_ACCESS_SEQUENTIAL, "fail_on", VIPS_FAIL_ON_TRUNCATED,
                                    nullptr);
    if (!im) return VipsFailure(path);
  }
  chain.Keep(im);
  if (size > 0) {
    const int shrink = jpeg ? JpegShrink(im->Xsize, im->Ysize, size) : 1;
    if (shrink > 1) {
      if (vips_jpegload_buffer(file.data(), file.size(), &im, "shrink", shrink, "access",
                               VIPS_ACCESS_SEQUENTIAL, "fail_on", VIPS_FAIL_ON_TRUNCATED,
                               nullptr) != 0) {
        return VipsFailure(path);
      }
      chain.Keep(im);
    }
    const double scale = static_cast<double>(size) / std::min(im->Xsize, im->Ysize);
    VipsImage* resized = nullptr;
    if (vips_resize(im, &resized, scale, "kernel", VIPS_KERNEL_LINEAR, nullptr) != 0) {
      return VipsFailure(path);
    }
    im = chain.Keep(resized);
    const int side = static_cast<int>(size);
    const int crop_w = std::min(side, im->Xsize), crop_h = std::min(side, im->Ysize);
    VipsImage* cropped = nullptr;
    if (vips_extract_area(im, &cropped, (im->Xsize - crop_w + 1) / 2,
                          (im->Ysize - crop_h + 1) / 2, crop_w, crop_h, nullptr) != 0) {
      return VipsFailure(path);
    }
    im = chain.Keep(cropped);
  }
  // To 3-band sRGB uint8 whatever came in: grey, CMYK, 16-bit, alpha.
  if (im->Type != VIPS_INTERPRETATION_sRGB) {
    VipsImage* rgb = nullptr;
    if (vips_colourspace(im, &rgb, VIPS_INTERPRETATION_sRGB, nullptr) != 0) return VipsFailure(path);
    im = chain.Keep(rgb);
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

  out->height = static_cast<uint32_t>(im->Ysize);
  out->width = static_cast<uint32_t>(im->Xsize);
  out->channels = 3;
  size_t bytes = 0;
  void* pixels = vips_image_write_to_memory(im, &bytes);
  if (!pixels) return VipsFailure(path);
  out->pixels = std::shared_ptr<uint8_t>(static_cast<uint8_t*>(pixels), g_free);
  if (bytes != out->bytes()) return Status::Corruption(path + ": unexpected pixel buffer size");
  return Status::Ok();
}

}  // namespace joaderfs
