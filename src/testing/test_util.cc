#include "testing/test_util.h"

#include <stdlib.h>
#include <vips/vips.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <system_error>
#include <utility>

#include "loader/decoder.h"

namespace joaderfs::testing {
namespace {

namespace fs = std::filesystem;

class DecoderEnvironment : public ::testing::Environment {
 public:
  explicit DecoderEnvironment(std::string argv0) : argv0_(std::move(argv0)) {}

  void SetUp() override {
    std::string error;
    ASSERT_TRUE(InitDecoder(argv0_.c_str(), &error)) << error;
  }

 private:
  const std::string argv0_;
};

// Writes `buf` (`width` x `height` x `bands` uchar, row-major, interleaved).
void WriteBuffer(const std::string& path, const std::vector<uint8_t>& buf, int width, int height,
                 int bands) {
  VipsImage* im = vips_image_new_from_memory_copy(buf.data(), buf.size(), width, height, bands,
                                                  VIPS_FORMAT_UCHAR);
  ASSERT_NE(im, nullptr) << vips_error_buffer();
  const int rc = vips_image_write_to_file(im, path.c_str(), nullptr);
  g_object_unref(im);
  ASSERT_EQ(rc, 0) << path << ": " << vips_error_buffer();
}

}  // namespace

TempDir::TempDir(const std::string& prefix) {
  std::string templ = (fs::temp_directory_path() / (prefix + ".XXXXXX")).string();
  if (::mkdtemp(templ.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

::testing::Environment* AddDecoderEnvironment(const std::string& argv0) {
  return ::testing::AddGlobalTestEnvironment(new DecoderEnvironment(argv0));
}

void WriteImage(const std::string& path, int width, int height, int bands, const PixelFn& f) {
  std::vector<uint8_t> buf(static_cast<size_t>(width) * height * bands);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int b = 0; b < bands; ++b) {
        buf[(static_cast<size_t>(y) * width + x) * bands + b] = f(x, y, b);
      }
    }
  }
  WriteBuffer(path, buf, width, height, bands);
}

void WriteSolidImage(const std::string& path, int width, int height, Rgb colour) {
  WriteImage(path, width, height, 3, [colour](int, int, int b) { return colour[b]; });
}

void WriteNoiseImage(const std::string& path, int width, int height, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> buf(static_cast<size_t>(width) * height * 3);
  for (auto& v : buf) v = static_cast<uint8_t>(rng());
  WriteBuffer(path, buf, width, height, 3);
}

void WriteFile(const std::string& path, const std::string& content) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  ASSERT_TRUE(out.good()) << path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteImageFolder(const std::string& root, const std::vector<int>& counts,
                      const SampleWriter& write) {
  int index = 0;
  for (size_t c = 0; c < counts.size(); ++c) {
    const std::string cls = root + "/c" + std::to_string(c);
    fs::create_directories(cls);
    for (int i = 0; i < counts[c]; ++i, ++index) {
      const std::string path = cls + "/img" + std::to_string(i) + ".jpg";
      if (write) {
        write(path, index);
      } else {
        WriteFile(path, "x");
      }
    }
  }
}

PoolGate::PoolGate(LoaderPool* pool, unsigned threads) : released_(release_.get_future().share()) {
  std::vector<std::future<void>> started;
  for (unsigned i = 0; i < threads; ++i) {
    auto p = std::make_shared<std::promise<void>>();
    started.push_back(p->get_future());
    pool->Submit([p, f = released_] {
      p->set_value();
      f.wait();
    });
  }
  for (auto& f : started) {
    if (f.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      ADD_FAILURE() << "pool did not start";
    }
  }
}

PoolGate::~PoolGate() { Release(); }

void PoolGate::Release() {
  if (!done_) release_.set_value();
  done_ = true;
}

std::vector<uint32_t> Ids(const Roaring& r) {
  std::vector<uint32_t> out;
  for (uint32_t v : r) out.push_back(v);
  return out;
}

std::vector<uint32_t> Iota(uint32_t first, uint32_t last) {
  std::vector<uint32_t> out;
  for (uint64_t i = first; i <= last; ++i) out.push_back(static_cast<uint32_t>(i));
  return out;
}

}  // namespace joaderfs::testing
