#include "daemon/scrub_environ.h"

#include <gtest/gtest.h>

#include <string>

namespace joaderfs {
namespace {

TEST(ScrubEnvironmentTest, OverwritesOnlyTheNamedVariables) {
  static constexpr char kBlock[] =
      "PATH=/bin\0AWS_SECRET_ACCESS_KEY=s3cr3t\0AWS_SECRET_ACCESS_KEY_ID=keep\0"
      "HOME=/root\0AWS_SESSION_TOKEN=tok\0AWS_ACCESS_KEY_ID\0XAWS_SESSION_TOKEN=x";
  std::string block(kBlock, sizeof kBlock);  // its last NUL too
  const size_t size = block.size();
  EXPECT_EQ(ScrubEnvironmentBlock(block.data(), block.data() + block.size(), kSecretVariables), 2u);
  EXPECT_EQ(block.size(), size);
  EXPECT_EQ(block.find("s3cr3t"), std::string::npos);
  EXPECT_EQ(block.find("tok\0", 0, 4), std::string::npos);
  EXPECT_EQ(block.find("AWS_SECRET_ACCESS_KEY="), std::string::npos);
  EXPECT_NE(block.find("AWS_SECRET_ACCESS_KEY_ID=keep"), std::string::npos);
  EXPECT_NE(block.find("PATH=/bin"), std::string::npos);
  EXPECT_NE(block.find("HOME=/root"), std::string::npos);
  EXPECT_NE(block.find("XAWS_SESSION_TOKEN=x"), std::string::npos);
  EXPECT_NE(block.find(std::string("\0AWS_ACCESS_KEY_ID\0", 19)), std::string::npos);
}

// A block whose last string lacks its NUL (a cut-short block) is read no
// further than its end.
TEST(ScrubEnvironmentTest, StopsAtTheBlocksEnd) {
  std::string block("A=1\0AWS_SESSION_TOKEN=abc", 25);
  EXPECT_EQ(ScrubEnvironmentBlock(block.data(), block.data() + block.size(), kSecretVariables), 1u);
  EXPECT_EQ(block, std::string("A=1\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 25));
}

}  // namespace
}  // namespace joaderfs
