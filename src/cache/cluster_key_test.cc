#include "cache/cluster_key.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <memory>

#include "cache/memcached_client.h"
#include "testing/test_util.h"

namespace joaderfs {
namespace {

DecodedSample Picture(uint8_t fill) {
  DecodedSample s;
  s.height = 4;
  s.width = 5;
  s.channels = 3;
  std::shared_ptr<uint8_t> p(new uint8_t[s.bytes()], std::default_delete<uint8_t[]>());
  std::memset(p.get(), fill, s.bytes());
  s.pixels = p;
  return s;
}

ClusterKey KeyFrom(const std::string& dir, const std::string& hex, mode_t mode = 0600) {
  const std::string path = dir + "/key";
  std::ofstream(path) << hex << "\n";
  chmod(path.c_str(), mode);
  ClusterKey k;
  EXPECT_TRUE(ClusterKey::Load(path, &k).ok());
  return k;
}

TEST(ClusterKeyTest, SealedValuesOpenOnlyForTheirKeyAndMaterial) {
  testing::TempDir dir;
  const ClusterKey key = KeyFrom(dir.path(), std::string(64, 'a'));
  const ClusterKey other = KeyFrom(dir.path(), std::string(64, 'b'));
  const std::string value = key.Seal("material", Picture(7));
  DecodedSample out;
  ASSERT_TRUE(key.Open("material", value, &out).ok());
  EXPECT_EQ(out.height, 4u);
  EXPECT_EQ(out.width, 5u);
  EXPECT_EQ(out.pixels.get()[59], 7);
  EXPECT_FALSE(key.Open("other material", value, &out).ok()) << "a swapped value opened";
  EXPECT_FALSE(other.Open("material", value, &out).ok()) << "another key opened it";
  EXPECT_FALSE(ClusterKey::Insecure().Open("material", value, &out).ok());
  for (size_t at = 0; at < value.size(); ++at) {
    std::string damaged = value;
    damaged[at] ^= 1;
    EXPECT_FALSE(key.Open("material", damaged, &out).ok()) << "byte " << at;
  }
  EXPECT_FALSE(key.Open("material", value.substr(0, value.size() - 1), &out).ok());
  EXPECT_FALSE(key.Open("material", "", &out).ok());
  EXPECT_NE(key.ValueName("material"), other.ValueName("material"));
  EXPECT_NE(key.ValueName("material"), key.ValueName("materiaL"));
}

TEST(ClusterKeyTest, LeasesVerifyOnlyUnderTheirNameAndKey) {
  testing::TempDir dir;
  const ClusterKey key = KeyFrom(dir.path(), std::string(64, 'c'));
  const std::string lease = key.Lease("jfs2l:x", 12345);
  EXPECT_EQ(key.LeaseExpiry("jfs2l:x", lease), 12345);
  EXPECT_EQ(key.LeaseExpiry("jfs2l:y", lease), -1);
  EXPECT_EQ(ClusterKey::Insecure().LeaseExpiry("jfs2l:x", lease), -1);
  EXPECT_EQ(key.LeaseExpiry("jfs2l:x", "1"), -1);
  std::string later = lease;
  later[0] ^= 1;  // a forger moves the expiry
  EXPECT_EQ(key.LeaseExpiry("jfs2l:x", later), -1);
}

TEST(ClusterKeyTest, KeyFilesOthersCanReadOrThatHoldNoKeyAreRefused) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/key";
  ClusterKey k;
  std::ofstream(path) << std::string(64, 'd');
  chmod(path.c_str(), 0644);
  const Status open = ClusterKey::Load(path, &k);
  EXPECT_FALSE(open.ok());
  EXPECT_NE(open.message().find("chmod 600"), std::string::npos) << open.message();
  for (const std::string& text : {std::string(63, 'd'), std::string(64, 'g'), std::string()}) {
    std::ofstream(path) << text;
    chmod(path.c_str(), 0600);
    EXPECT_FALSE(ClusterKey::Load(path, &k).ok()) << text;
  }
  EXPECT_FALSE(ClusterKey::Load(dir.path() + "/missing", &k).ok());
}

TEST(MemcachedClientTest, ValueLinesAreCheckedBeforeAnythingIsAllocated) {
  EXPECT_EQ(ParseValueLine("VA 10", 100), 10);
  EXPECT_EQ(ParseValueLine("VA 10 k jfs2:ab", 100), 10);
  EXPECT_EQ(ParseValueLine("VA 3000000000", 100), -2);
  EXPECT_EQ(ParseValueLine("VA 99999999999999999999999", 100), -1);
  EXPECT_EQ(ParseValueLine("VA -1", 100), -1);
  EXPECT_EQ(ParseValueLine("VA", 100), -1);
  EXPECT_EQ(ParseValueLine("END", 100), -1);
  EXPECT_EQ(ParseValueLine("VALUE k 0 10", 100), -1);
}

}  // namespace
}  // namespace joaderfs
