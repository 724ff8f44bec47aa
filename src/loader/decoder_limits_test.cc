// Hostile and unlucky inputs of the decoder: decompression bombs, and FIFOs
// or devices where an image was.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vips/vips.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <future>
#include <memory>
#include <string>

#include "catalog/catalog.h"
#include "loader/decoder.h"
#include "testing/test_util.h"

namespace joaderfs {
namespace {

using testing::TempDir;
using testing::WriteImageFolder;
using testing::WriteNoiseImage;
using testing::WriteSolidImage;

::testing::Environment* const kDecoderEnvironment =
    testing::AddDecoderEnvironment("decoder_limits_test");

// Restores the default limit when a test that lowers it ends.
class MaxPixelsTest : public ::testing::Test {
 protected:
  ~MaxPixelsTest() override { SetMaxPixels(kDefaultMaxPixels); }
};

// A field of /proc/self/status in KiB, e.g. "VmHWM".
uint64_t ProcStatusKib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1));
  }
  ADD_FAILURE() << field << " not in /proc/self/status";
  return 0;
}

// Makes VmHWM start again from the current RSS (Linux 4.0 and later).
bool ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.close();
  return out.good();
}

TEST_F(MaxPixelsTest, PngBombIsRefusedFromItsHeaderWithBoundedMemory) {
  TempDir d;
  const std::string bomb = d / "bomb.png";
  {
    // 16000 x 16000 black RGB: 768 MB of pixels, well under 1 MB of PNG.
    VipsImage* black = nullptr;
    ASSERT_EQ(vips_black(&black, 16000, 16000, "bands", 3, nullptr), 0);
    const int saved = vips_pngsave(black, bomb.c_str(), nullptr);
    g_object_unref(black);
    ASSERT_EQ(saved, 0) << vips_error_buffer();
  }
  struct stat st {};
  ASSERT_EQ(::stat(bomb.c_str(), &st), 0);
  EXPECT_LT(st.st_size, 1 << 20);

  ASSERT_TRUE(ResetPeakRss());
  const uint64_t before = ProcStatusKib("VmRSS");
  const auto start = std::chrono::steady_clock::now();
  DecodedSample s;
  const Status status = DecodeImage(bomb, 224, &s);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const uint64_t growth_mib = (ProcStatusKib("VmHWM") - before) / 1024;
  EXPECT_EQ(status.code(), Status::Code::kCorruption) << status.message();
  EXPECT_NE(status.message().find("16000x16000 pixels exceeds max_pixels"), std::string::npos)
      << status.message();
  EXPECT_LT(growth_mib, 200u) << "peak RSS grew by " << growth_mib << " MiB";
  EXPECT_LT(seconds, 2.0);
  std::printf("PNG bomb refused in %.3f s, peak RSS growth %llu MiB\n", seconds,
              static_cast<unsigned long long>(growth_mib));

  // A normal image still decodes.
  const std::string fine = d / "fine.png";
  WriteNoiseImage(fine, 640, 480);
  EXPECT_TRUE(DecodeImage(fine, 224, &s).ok());
}

// The limit counts width x height from the header on each path: libjpeg-turbo
// (YCbCr JPEGs) and libvips (PNG, CMYK JPEGs), whatever the output size.
TEST_F(MaxPixelsTest, LimitHoldsOnEveryPath) {
  TempDir d;
  const std::string jpeg = d / "a.jpg", png = d / "a.png", cmyk = d / "cmyk.jpg";
  WriteSolidImage(jpeg, 200, 100, {10, 200, 30});
  WriteSolidImage(png, 200, 100, {10, 200, 30});
  {
    VipsImage* black = nullptr;
    VipsImage* four = nullptr;
    ASSERT_EQ(vips_black(&black, 200, 100, "bands", 4, nullptr), 0);
    ASSERT_EQ(vips_copy(black, &four, "interpretation", VIPS_INTERPRETATION_CMYK, nullptr), 0);
    ASSERT_EQ(vips_jpegsave(four, cmyk.c_str(), nullptr), 0) << vips_error_buffer();
    g_object_unref(four);
    g_object_unref(black);
  }
  for (const std::string& path : {jpeg, png, cmyk}) {
    for (uint32_t size : {0u, 16u}) {
      DecodedSample s;
      SetMaxPixels(200 * 100);
      EXPECT_TRUE(DecodeImage(path, size, &s).ok()) << path;
      SetMaxPixels(200 * 100 - 1);
      const Status st = DecodeImage(path, size, &s);
      EXPECT_EQ(st.code(), Status::Code::kCorruption) << path;
      EXPECT_NE(st.message().find("200x100 pixels exceeds max_pixels=19999"), std::string::npos)
          << st.message();
    }
  }
}

TEST_F(MaxPixelsTest, FileTooLargeForTheLimitIsNotRead) {
  TempDir d;
  const std::string big = d / "big.jpg";
  testing::WriteFile(big, std::string((1 << 20) + 8 * 10 + 1, 'x'));
  SetMaxPixels(10);
  DecodedSample s;
  const Status st = DecodeImage(big, 16, &s);
  EXPECT_EQ(st.code(), Status::Code::kCorruption);
  EXPECT_NE(st.message().find("bytes, over the"), std::string::npos) << st.message();
}

// Runs DecodeImage(path) on another thread; fails (and unblocks it by
// opening the FIFO for writing) when it has not returned within 5 s.
Status DecodeWithin5s(const std::string& path) {
  auto result = std::async(std::launch::async, [path] {
    DecodedSample s;
    return DecodeImage(path, 32, &s);
  });
  if (result.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    ADD_FAILURE() << "DecodeImage(" << path << ") blocked";
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  return result.get();
}

TEST(DecoderSpecialFileTest, FifoOrDeviceIsRefusedWithoutBlocking) {
  TempDir d;
  const std::string fifo = d / "fifo.jpg";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string device = d / "zero.jpg";
  ASSERT_EQ(::symlink("/dev/zero", device.c_str()), 0);
  for (const std::string& path : {fifo, device}) {
    const Status st = DecodeWithin5s(path);
    EXPECT_EQ(st.code(), Status::Code::kIOError) << path << ": " << st.message();
    EXPECT_NE(st.message().find("not a regular file"), std::string::npos) << st.message();
  }
}

// A file the catalog saw as an image, replaced by a FIFO before its decode:
// the sample fails (and is skipped upstream) instead of hanging a thread.
TEST(DecoderSpecialFileTest, ImageReplacedByFifoAfterTheScanFails) {
  TempDir d;
  WriteImageFolder(d.path(), {2}, [](const std::string& path, int) {
    WriteSolidImage(path, 40, 30, {1, 2, 3});
  });
  std::unique_ptr<Catalog> catalog;
  ASSERT_TRUE(Catalog::Open(d.path(), &catalog).ok());
  ASSERT_EQ(catalog->size(), 2u);
  ASSERT_EQ(::unlink(catalog->path(1).c_str()), 0);
  ASSERT_EQ(::mkfifo(catalog->path(1).c_str(), 0600), 0);
  EXPECT_TRUE(DecodeWithin5s(catalog->path(0)).ok());
  const Status st = DecodeWithin5s(catalog->path(1));
  EXPECT_EQ(st.code(), Status::Code::kIOError) << st.message();
}

}  // namespace
}  // namespace joaderfs
