// ScanShard (catalog/tar_index.h) over shards that GNU tar writes in its
// ustar, gnu and pax formats: where each sample's image bytes lie, how
// members group by key, long names, labels, and what damage costs.

#include "catalog/tar_index.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "common/types.h"
#include "testing/test_util.h"

namespace joaderfs {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

struct Sample {
  std::string name;
  uint64_t offset;
  uint64_t length;
  int64_t label;
};

struct Scan {
  Status status;
  ShardCounts counts;
  std::vector<Sample> samples;
};

using Members = std::vector<std::pair<std::string, std::string>>;

// Bytes that never pass for a tar header.
std::string Payload(size_t n, char c) { return std::string(n, c); }

class TarIndexTest : public ::testing::Test {
 protected:
  // Writes `members` in order into a shard with GNU tar's `format`.
  std::string MakeShard(const std::string& format, const Members& members) {
    const fs::path src = fs::path(dir_.path()) / "src";
    fs::remove_all(src);
    std::string command = "tar --format=" + format +
                          " --owner=0 --group=0 --numeric-owner --mtime=@0 -cf '" + Shard() +
                          "' -C '" + src.string() + "'";
    for (const auto& [name, data] : members) {
      fs::create_directories((src / name).parent_path());
      WriteFile((src / name).string(), data);
      command += " '" + name + "'";
    }
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    return Shard();
  }
  std::string Shard() const { return (fs::path(dir_.path()) / "shard.tar").string(); }

  Scan ScanFile(const std::string& path, std::string_view label_key = "cls") {
    Scan scan;
    const int fd = ::open(path.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0) << path;
    struct stat st {};
    EXPECT_EQ(::fstat(fd, &st), 0);
    scan.status =
        ScanShard(fd, static_cast<uint64_t>(st.st_size), label_key, &scan.counts,
                  [&](std::string_view name, uint64_t offset, uint64_t length, int64_t label) {
                    scan.samples.push_back({std::string(name), offset, length, label});
                  });
    ::close(fd);
    return scan;
  }

  static std::vector<std::string> Names(const Scan& scan) {
    std::vector<std::string> names;
    for (const Sample& s : scan.samples) names.push_back(s.name);
    return names;
  }

  // Where the header of member `name` starts in the shard (its name field
  // begins a block).
  static size_t HeaderOf(const std::string& tar, const std::string& name) {
    for (size_t at = 0; at + 512 <= tar.size(); at += 512) {
      if (tar.compare(at, name.size() + 1, std::string(name) + '\0') == 0) return at;
    }
    ADD_FAILURE() << "no header of " << name;
    return 0;
  }

  TempDir dir_;
};

class TarFormatTest : public TarIndexTest, public ::testing::WithParamInterface<const char*> {};

// Each sample's offset and length are its image member's bytes in the file;
// a key's members make one sample, labelled by its `cls` member before its
// json's field.
TEST_P(TarFormatTest, SamplesLocateTheirImageBytes) {
  const Members members = {
      {"k1.jpg", Payload(700, 'a')},
      {"k1.cls", "3\n"},
      {"k2.png", Payload(1, 'b')},
      {"k2.json", R"({"cls": 5, "x": [1]})"},
      {"k3.txt", "no image"},
      {"k4.webp", Payload(1500, 'c')},
      {"k5.JPEG", Payload(512, 'd')},
      {"k5.cls", "7"},
      {"k5.json", R"({"cls": 9})"},
      {"dir/k6.jpg", Payload(1024, 'e')},
      {"dir/k6.cls", "0"},
      {"k6.jpg", Payload(3, 'f')},
  };
  const std::string shard = MakeShard(GetParam(), members);
  const Scan scan = ScanFile(shard);
  ASSERT_TRUE(scan.status.ok()) << scan.status.message();
  EXPECT_EQ(Names(scan), (std::vector<std::string>{"k1.jpg", "k2.png", "k4.webp", "k5.JPEG",
                                                   "dir/k6.jpg", "k6.jpg"}));
  const std::string bytes = ReadFile(shard);
  const std::vector<int64_t> labels = {3, 5, -1, 7, 0, -1};
  for (size_t i = 0; i < scan.samples.size() && i < labels.size(); ++i) {
    const Sample& s = scan.samples[i];
    SCOPED_TRACE(s.name);
    std::string want;
    for (const auto& [name, data] : members) {
      if (name == s.name) want = data;
    }
    EXPECT_EQ(s.offset % 512, 0u);
    ASSERT_LE(s.offset + s.length, bytes.size());
    EXPECT_EQ(bytes.substr(s.offset, s.length), want);
    EXPECT_EQ(s.label, labels[i]);
  }
  EXPECT_EQ(scan.counts.no_image, 1u);   // k3
  EXPECT_EQ(scan.counts.unlabeled, 2u);  // k4, k6
  EXPECT_EQ(scan.counts.damaged, 0u);
  EXPECT_EQ(scan.counts.too_large, 0u);
}

// Names past ustar's 100 bytes: ustar's prefix field, GNU's 'L' members and
// pax's path records all give the full name, and the key the label member
// shares.
TEST_P(TarFormatTest, LongNamesAreWhole) {
  const std::string dir = std::string(120, 'd') + "/";
  const std::string image = dir + "sample.jpg";
  const std::string ok = "ok.jpg";
  const std::string shard = MakeShard(
      GetParam(), {{image, Payload(600, 'a')}, {dir + "sample.cls", "4"}, {ok, Payload(5, 'b')}});
  const Scan scan = ScanFile(shard);
  ASSERT_TRUE(scan.status.ok()) << scan.status.message();
  ASSERT_EQ(Names(scan), (std::vector<std::string>{image, ok}));
  EXPECT_EQ(scan.samples[0].label, 4);
  EXPECT_EQ(ReadFile(shard).substr(scan.samples[0].offset, scan.samples[0].length),
            Payload(600, 'a'));
  EXPECT_EQ(scan.counts.damaged, 0u);
}

INSTANTIATE_TEST_SUITE_P(GnuTar, TarFormatTest, ::testing::Values("ustar", "gnu", "pax"));

// Past ustar's 255 bytes only GNU and pax can name a member.
TEST_F(TarIndexTest, NamesLongerThanUstarHolds) {
  const std::string image = std::string(200, 'a') + "/" + std::string(90, 'b') + "/k.jpg";
  for (const char* format : {"gnu", "pax"}) {
    SCOPED_TRACE(format);
    const Scan scan = ScanFile(MakeShard(format, {{image, "x"}, {"k2.jpg", "y"}}));
    EXPECT_EQ(Names(scan), (std::vector<std::string>{image, "k2.jpg"}));
  }
}

// A label is an integer in 0..kMaxLabel; anything else leaves the sample
// unlabeled (-1), kept.
TEST_F(TarIndexTest, LabelsOutOfRangeAreNone) {
  const std::vector<std::pair<std::string, int64_t>> cases = {
      {"-1", -1},
      {std::to_string(kMaxLabel + 1), -1},
      {std::to_string(kMaxLabel), kMaxLabel},
      {"99999999999999999999999", -1},
      {"abc", -1},
      {"", -1},
      {" 12 \n", 12},
      {"1.5", -1},
  };
  Members members;
  for (size_t i = 0; i < cases.size(); ++i) {
    members.push_back({"k" + std::to_string(i) + ".jpg", "x"});
    members.push_back({"k" + std::to_string(i) + ".cls", cases[i].first});
  }
  // JSON fields: an integer in range, else none.
  const std::vector<std::pair<std::string, int64_t>> json = {
      {R"({"cls": 1099511627776})", -1},
      {R"({"cls": "4"})", -1},
      {R"({"cls": -3})", -1},
      {R"({"cls": 6})", 6},
      {"not json", -1},
      {R"([6])", -1},
  };
  for (size_t i = 0; i < json.size(); ++i) {
    members.push_back({"j" + std::to_string(i) + ".jpg", "x"});
    members.push_back({"j" + std::to_string(i) + ".json", json[i].first});
  }
  const Scan scan = ScanFile(MakeShard("gnu", members));
  ASSERT_EQ(scan.samples.size(), cases.size() + json.size());
  uint64_t unlabeled = 0;
  for (size_t i = 0; i < scan.samples.size(); ++i) {
    const auto& [text, label] = i < cases.size() ? cases[i] : json[i - cases.size()];
    EXPECT_EQ(scan.samples[i].label, label) << scan.samples[i].name << ": '" << text << "'";
    unlabeled += label < 0;
  }
  EXPECT_EQ(scan.counts.unlabeled, unlabeled);

  // Another label key: the member with that extension, or the json field.
  const Scan by_json = ScanFile(MakeShard("gnu", {{"a.jpg", "x"}, {"a.json", R"({"y": 8})"}}), "y");
  ASSERT_EQ(by_json.samples.size(), 1u);
  EXPECT_EQ(by_json.samples[0].label, 8);
}

Members ThreeSamples() {
  return {{"k1.jpg", Payload(600, 'a')},  {"k1.cls", "1"},
          {"k2.jpg", Payload(2000, 'b')}, {"k2.cls", "2"},
          {"k3.jpg", Payload(3000, 'c')}, {"k3.cls", "3"}};
}

// A shard cut short loses its last sample only, wherever the cut falls.
TEST_F(TarIndexTest, ACutShardServesAllButItsLastSample) {
  const std::string full = ReadFile(MakeShard("gnu", ThreeSamples()));
  const size_t k3 = HeaderOf(full, "k3.jpg");
  const size_t k3_cls = HeaderOf(full, "k3.cls");
  for (size_t cut : {k3 + 512 + 1000, k3_cls + 512 + 512, k3_cls + 100, k3 + 512}) {
    SCOPED_TRACE(cut);
    WriteFile(Shard(), full.substr(0, cut));
    const Scan scan = ScanFile(Shard());
    ASSERT_TRUE(scan.status.ok()) << scan.status.message();
    EXPECT_EQ(Names(scan), (std::vector<std::string>{"k1.jpg", "k2.jpg"}));
    EXPECT_EQ(scan.counts.damaged, 1u);
  }
  WriteFile(Shard(), full);
  EXPECT_EQ(ScanFile(Shard()).samples.size(), 3u);
}

// A header whose checksum fails costs its member: the scan finds the next
// valid header and the samples after it serve.
TEST_F(TarIndexTest, ACorruptHeaderCostsOnlyItsMember) {
  std::string tar = ReadFile(MakeShard("gnu", ThreeSamples()));
  tar[HeaderOf(tar, "k2.cls") + 1] ^= 0x20;  // a byte of its name
  WriteFile(Shard(), tar);
  const Scan scan = ScanFile(Shard());
  ASSERT_TRUE(scan.status.ok()) << scan.status.message();
  ASSERT_EQ(Names(scan), (std::vector<std::string>{"k1.jpg", "k2.jpg", "k3.jpg"}));
  EXPECT_EQ(scan.samples[1].label, -1) << "its label member was lost";
  EXPECT_EQ(scan.samples[2].label, 3);
  EXPECT_EQ(scan.counts.damaged, 1u);

  // A size field that is not a number is damage too.
  tar = ReadFile(MakeShard("gnu", ThreeSamples()));
  std::memcpy(tar.data() + HeaderOf(tar, "k1.cls") + 124, "zzzzzzzzzzz", 11);
  // Fix its checksum so that only the size is wrong.
  const size_t h = HeaderOf(tar, "k1.cls");
  std::memset(tar.data() + h + 148, ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(tar[h + i]);
  std::snprintf(tar.data() + h + 148, 8, "%06o", sum);
  WriteFile(Shard(), tar);
  const Scan sized = ScanFile(Shard());
  EXPECT_EQ(Names(sized), (std::vector<std::string>{"k1.jpg", "k2.jpg", "k3.jpg"}));
  EXPECT_EQ(sized.counts.damaged, 1u);
}

TEST_F(TarIndexTest, AnUnreadableFileFails) {
  const int fd = ::open(dir_.path().c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  ShardCounts counts;
  const Status s = ScanShard(fd, 4096, "cls", &counts, [](auto, auto, auto, auto) {
    ADD_FAILURE() << "a sample from a folder";
  });
  ::close(fd);
  EXPECT_EQ(s.code(), Status::Code::kIOError);
}

}  // namespace
}  // namespace joaderfs
