#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace joaderfs {
namespace {

TEST(Crc32c, KnownValues) {
  // The check value of CRC-32C, and RFC 3720's 32 zero bytes.
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);
  const std::vector<uint8_t> zeros(32, 0);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

TEST(Crc32c, AnyLengthAndAlignment) {
  // Lengths around the 8-byte steps, at every offset, against a one-byte-at-a-
  // time reference through the same function.
  std::string data;
  for (int i = 0; i < 64; ++i) data += static_cast<char>(i * 37 + 11);
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n = 0; n + offset <= data.size(); ++n) {
      const uint32_t whole = Crc32c(data.data() + offset, n);
      EXPECT_EQ(whole, Crc32c(std::string(data, offset, n).c_str(), n)) << offset << " " << n;
    }
  }
  EXPECT_NE(Crc32c("abc", 3), Crc32c("abd", 3));
}

// The definition, one bit at a time: nothing shared with the library.
uint32_t BitwiseCrc32c(const uint8_t* p, size_t n) {
  uint32_t crc = ~0u;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
  }
  return ~crc;
}

TEST(Crc32c, LargeBuffersMatchTheDefinition) {
  // A base image's size and odd ones, where the folding kernels run.
  std::vector<uint8_t> data(318 * 1024 + 13);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 131 + (i >> 9));
  for (size_t n : {size_t{255}, size_t{4096}, size_t{65537}, data.size()}) {
    EXPECT_EQ(Crc32c(data.data(), n), BitwiseCrc32c(data.data(), n)) << n;
  }
}

TEST(Crc32c, ExtendEqualsOnePass) {
  // TFRecord framing checksums a record's head, then its pixels.
  const std::string data = "123456789 and some more bytes past one word";
  for (size_t cut = 0; cut <= data.size(); ++cut) {
    EXPECT_EQ(Crc32cExtend(Crc32c(data.data(), cut), data.data() + cut, data.size() - cut),
              Crc32c(data.data(), data.size()))
        << cut;
  }
}

}  // namespace
}  // namespace joaderfs
