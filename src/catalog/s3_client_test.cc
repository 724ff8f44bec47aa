#include "catalog/s3_client.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "testing/test_util.h"

namespace joaderfs {
namespace {

using testing::TempDir;
using testing::WriteFile;

TEST(ListingBoundTest, KeepsKeysBelowThePrefixInOrder) {
  ListingBound bound("data/");
  EXPECT_TRUE(bound.Take("data/a/1.jpg"));
  EXPECT_TRUE(bound.Take("data/a/2.jpg"));
  EXPECT_FALSE(bound.Take("data"));           // shorter than the prefix
  EXPECT_FALSE(bound.Take("d"));              // ditto
  EXPECT_FALSE(bound.Take("other/a/3.jpg"));  // outside it
  EXPECT_FALSE(bound.Take("data/a/2.jpg"));   // repeated
  EXPECT_FALSE(bound.Take("data/a/1.jpg"));   // out of order
  EXPECT_TRUE(bound.Take("data/b/1.jpg"));
  // UTF-8 binary order: bytes compare unsigned, so "\xc3..." follows "z".
  EXPECT_TRUE(bound.Take("data/z"));
  EXPECT_TRUE(bound.Take("data/\xc3\xa9"));
  EXPECT_EQ(bound.keys(), 5u);
  EXPECT_EQ(bound.stray(), 5u);
  EXPECT_TRUE(bound.EndPage(false, "").ok());
  EXPECT_EQ(bound.pages(), 1u);
}

TEST(ListingBoundTest, EmptyPrefixTakesEveryKeyOnce) {
  ListingBound bound("");
  EXPECT_TRUE(bound.Take("a"));
  EXPECT_TRUE(bound.Take("b"));
  EXPECT_FALSE(bound.Take("b"));
  EXPECT_EQ(bound.stray(), 1u);
}

TEST(ListingBoundTest, RepeatedTokenEndsTheListing) {
  ListingBound bound("p/");
  ASSERT_TRUE(bound.Take("p/1"));
  ASSERT_TRUE(bound.EndPage(true, "t1").ok());
  ASSERT_TRUE(bound.Take("p/2"));
  ASSERT_TRUE(bound.EndPage(true, "t2").ok());
  const Status s = bound.EndPage(true, "t1");  // a token given before
  EXPECT_EQ(s.code(), Status::Code::kIOError);
  EXPECT_NE(s.message().find("page 3 hands out a continuation token given before"),
            std::string::npos)
      << s.message();
}

TEST(ListingBoundTest, TruncatedPageWithoutTokenFails) {
  ListingBound bound("");
  EXPECT_EQ(bound.EndPage(true, "").code(), Status::Code::kIOError);
}

// Fresh tokens for pages that add nothing (the same keys again, or none):
// past kIdlePages more pages than keys, the listing fails.
TEST(ListingBoundTest, PagesThatDoNotAdvanceEndTheListing) {
  ListingBound bound("p/");
  ASSERT_TRUE(bound.Take("p/a"));
  ASSERT_TRUE(bound.Take("p/b"));
  Status s;
  uint64_t page = 0;
  while (s.ok() && page < 10 * ListingBound::kIdlePages) {
    bound.Take("p/a");
    bound.Take("p/b");
    s = bound.EndPage(true, "token" + std::to_string(page++));
  }
  EXPECT_EQ(s.code(), Status::Code::kIOError);
  EXPECT_EQ(bound.pages(), ListingBound::kIdlePages + 3);
  EXPECT_NE(s.message().find("the listing does not advance"), std::string::npos) << s.message();
  EXPECT_EQ(bound.keys(), 2u);
}

// A listing that advances a key a page runs on: S3 may answer short pages.
TEST(ListingBoundTest, ShortPagesThatAdvanceRunOn) {
  ListingBound bound("");
  for (int page = 0; page < 5000; ++page) {
    ASSERT_TRUE(bound.Take("k" + std::to_string(100000 + page)));
    ASSERT_TRUE(bound.EndPage(true, "t" + std::to_string(page)).ok()) << page;
  }
  EXPECT_TRUE(bound.EndPage(false, "").ok());
}

// Sets an environment variable for one test (unset: nullopt).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

constexpr char kCredentials[] =
    "[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key = default-secret\n"
    "# a comment\n[train]\naws_access_key_id=AKTRAIN\naws_secret_access_key=train-secret\n"
    "aws_session_token = train-token\n";

TEST(S3CredentialsTest, NamedFileMustBeItsOwnersAlone) {
  TempDir d;
  const std::string file = d / "credentials";
  WriteFile(file, kCredentials);
  ScopedEnv key("AWS_ACCESS_KEY_ID", "AKENV"), secret("AWS_SECRET_ACCESS_KEY", "env-secret");
  ScopedEnv profile("AWS_PROFILE", std::nullopt);
  S3Credentials c;
  for (mode_t mode : {0644, 0640, 0604, 0620, 0602}) {
    ASSERT_EQ(::chmod(file.c_str(), mode), 0);
    const Status s = LoadS3Credentials({file, ""}, &c);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << mode;
    EXPECT_NE(s.message().find("chmod 600"), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find("secret"), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos);
    EXPECT_TRUE(c.secret_key.empty());
  }
  ASSERT_EQ(::chmod(file.c_str(), 0600), 0);
  // The file's keys, not the environment's.
  ASSERT_TRUE(LoadS3Credentials({file, ""}, &c).ok());
  EXPECT_EQ(c.access_key, "AKDEFAULT");
  EXPECT_EQ(c.secret_key, "default-secret");
  ASSERT_TRUE(LoadS3Credentials({file, "train"}, &c).ok());
  EXPECT_EQ(c.access_key, "AKTRAIN");
  EXPECT_EQ(c.session_token, "train-token");
  const Status missing = LoadS3Credentials({file, "nope"}, &c);
  EXPECT_EQ(missing.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(missing.message().find("has no profile [nope]"), std::string::npos)
      << missing.message();
  EXPECT_EQ(LoadS3Credentials({d / "none", ""}, &c).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(LoadS3Credentials({d.path(), ""}, &c).code(), Status::Code::kInvalidArgument);
}

TEST(S3CredentialsTest, EnvironmentUnlessAnOptionIsGiven) {
  TempDir d;
  WriteFile(d / ".aws/credentials", kCredentials);
  ScopedEnv home("HOME", d.path()), file("AWS_SHARED_CREDENTIALS_FILE", std::nullopt);
  ScopedEnv profile("AWS_PROFILE", std::nullopt), token("AWS_SESSION_TOKEN", std::nullopt);
  ScopedEnv key("AWS_ACCESS_KEY_ID", "AKENV"), secret("AWS_SECRET_ACCESS_KEY", "env-secret");
  S3Credentials c;
  ASSERT_TRUE(LoadS3Credentials({}, &c).ok());
  EXPECT_EQ(c.access_key, "AKENV");
  // s3_profile= names a profile of ~/.aws/credentials (mode not checked).
  ASSERT_TRUE(LoadS3Credentials({"", "train"}, &c).ok());
  EXPECT_EQ(c.access_key, "AKTRAIN");
}

// mount(8) runs its helper without HOME: ~ is the passwd entry's home.
TEST(S3CredentialsTest, NoHomeVariableLooksInThePasswdHome) {
  ScopedEnv home("HOME", std::nullopt), file("AWS_SHARED_CREDENTIALS_FILE", std::nullopt);
  ScopedEnv key("AWS_ACCESS_KEY_ID", std::nullopt), secret("AWS_SECRET_ACCESS_KEY", std::nullopt);
  ScopedEnv profile("AWS_PROFILE", "joaderfs-test-no-such-profile");
  S3Credentials c;
  const Status s = LoadS3Credentials({}, &c);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("/.aws/credentials"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find(" /.aws/credentials"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace joaderfs
