#include "common/parse.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>

namespace joaderfs {
namespace {

constexpr uint64_t kMax = UINT64_MAX;

TEST(ParseUintTest, AcceptsDecimalDigits) {
  EXPECT_EQ(ParseUint("0"), 0u);
  EXPECT_EQ(ParseUint("7"), 7u);
  EXPECT_EQ(ParseUint("000123"), 123u);
  EXPECT_EQ(ParseUint("18446744073709551615"), kMax);
}

TEST(ParseUintTest, RejectsOverflow) {
  EXPECT_EQ(ParseUint("18446744073709551616"), std::nullopt);
  EXPECT_EQ(ParseUint("99999999999999999999999"), std::nullopt);
}

TEST(ParseUintTest, RejectsGarbage) {
  for (const char* s : {"", "-1", "+1", " 1", "1 ", "1x", "x1", "0x10", "1.0", "1e3", "١"}) {
    EXPECT_EQ(ParseUint(s), std::nullopt) << "'" << s << "'";
  }
}

TEST(ParseSizeTest, PlainBytes) {
  EXPECT_EQ(ParseSize("0"), 0u);
  EXPECT_EQ(ParseSize("1048576"), 1048576u);
  EXPECT_EQ(ParseSize("18446744073709551615"), kMax);
}

TEST(ParseSizeTest, SuffixesArePowersOf1024) {
  EXPECT_EQ(ParseSize("1K"), 1024u);
  EXPECT_EQ(ParseSize("512M"), 512ull << 20);
  EXPECT_EQ(ParseSize("8G"), 8ull << 30);
  EXPECT_EQ(ParseSize("3T"), 3ull << 40);
  EXPECT_EQ(ParseSize("0G"), 0u);
}

TEST(ParseSizeTest, SuffixesAreCaseInsensitive) {
  EXPECT_EQ(ParseSize("2k"), 2048u);
  EXPECT_EQ(ParseSize("2m"), 2ull << 20);
  EXPECT_EQ(ParseSize("2g"), 2ull << 30);
  EXPECT_EQ(ParseSize("2t"), 2ull << 40);
}

TEST(ParseSizeTest, OptionalBAndIBAfterTheUnit) {
  EXPECT_EQ(ParseSize("100B"), 100u);
  EXPECT_EQ(ParseSize("100b"), 100u);
  EXPECT_EQ(ParseSize("4KB"), 4096u);
  EXPECT_EQ(ParseSize("4KiB"), 4096u);
  EXPECT_EQ(ParseSize("4kib"), 4096u);
  EXPECT_EQ(ParseSize("8GiB"), 8ull << 30);
  EXPECT_EQ(ParseSize("8gb"), 8ull << 30);
  EXPECT_EQ(ParseSize("1TiB"), 1ull << 40);
}

TEST(ParseSizeTest, RejectsOverflow) {
  EXPECT_EQ(ParseSize("16777215T"), 16777215ull << 40);
  EXPECT_EQ(ParseSize("16777216T"), std::nullopt);  // 2^64
  EXPECT_EQ(ParseSize("18014398509481983K"), 18014398509481983ull << 10);
  EXPECT_EQ(ParseSize("18014398509481984K"), std::nullopt);
  EXPECT_EQ(ParseSize("18446744073709551615K"), std::nullopt);
  EXPECT_EQ(ParseSize("18446744073709551616"), std::nullopt);
}

TEST(ParseSizeTest, RejectsGarbage) {
  for (const char* s :
       {"",   "K",   "G",   "-1G",  "+1G",   " 1G", "1G ", "1 G", "1.5G", "1P", "1E",
        "1X", "1iB", "1KK", "1KBB", "1KiBB", "1Gi", "1BK", "G1",  "1K2",  "one"}) {
    EXPECT_EQ(ParseSize(s), std::nullopt) << "'" << s << "'";
  }
}

TEST(ParseDoubleTest, AcceptsDecimals) {
  EXPECT_EQ(ParseDouble("0.5"), 0.5);
  EXPECT_EQ(ParseDouble("1"), 1.0);
  EXPECT_EQ(ParseDouble("0"), 0.0);
  EXPECT_EQ(ParseDouble("0.125"), 0.125);
  EXPECT_EQ(ParseDouble("12.75"), 12.75);
}

TEST(ParseDoubleTest, RejectsGarbage) {
  for (const char* s :
       {"", " 0.5", "0.5 ", "0.5x", "x", "0,5", "inf", "nan", "1e999", "--1", "0.5.5"}) {
    EXPECT_EQ(ParseDouble(s), std::nullopt) << "'" << s << "'";
  }
}

}  // namespace
}  // namespace joaderfs
