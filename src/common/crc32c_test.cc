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
