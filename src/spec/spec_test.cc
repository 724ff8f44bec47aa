#include "spec/spec.h"

#include "spec/resume_text.h"

#include <gtest/gtest.h>

#include <cmath>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "spec/spec_keys.h"
#include "testing/test_util.h"

namespace joaderfs {
namespace {

using testing::Ids;
using testing::Iota;
using testing::TempDir;

// Ten samples in five classes: c0 = ids 0-2, c1 = 3-4, c2 = 5-8, c3 = 9,
// c4 has no image.
class SpecTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    testing::WriteImageFolder(dir_->path(), {3, 2, 4, 1, 0});
    std::unique_ptr<Catalog> c;
    const Status s = Catalog::Open(dir_->path(), &c);
    ASSERT_TRUE(s.ok()) << s.message();
    catalog_ = c.release();
  }
  static void TearDownTestSuite() {
    delete catalog_;
    delete dir_;
  }

  // Parses `text` over the default spec, expecting success.
  static JobSpec Parse(std::string_view text, const JobSpec& base = JobSpec()) {
    JobSpec out;
    const Status s = ParseJobSpec(text, *catalog_, base, &out);
    EXPECT_TRUE(s.ok()) << "'" << text << "': " << s.message();
    return out;
  }
  static Status ParseStatus(std::string_view text) {
    JobSpec out;
    return ParseJobSpec(text, *catalog_, JobSpec(), &out);
  }
  static std::vector<uint32_t> Resolve(std::string_view text) {
    return Ids(ResolveSubset(Parse(text).subset, *catalog_));
  }

  static TempDir* dir_;
  static Catalog* catalog_;
};

TempDir* SpecTest::dir_ = nullptr;
Catalog* SpecTest::catalog_ = nullptr;

TEST_F(SpecTest, CatalogLayout) {
  ASSERT_EQ(catalog_->size(), 10u);
  ASSERT_EQ(catalog_->num_classes(), 5u);
  EXPECT_EQ(catalog_->label(2), 0);
  EXPECT_EQ(catalog_->label(3), 1);
  EXPECT_EQ(catalog_->label(9), 3);
}

TEST_F(SpecTest, Defaults) {
  const JobSpec spec;
  EXPECT_EQ(spec.subset.kind, SubsetSpec::Kind::kAll);
  EXPECT_EQ(spec.size, 224u);
  EXPECT_EQ(spec.epochs, 0u);
  EXPECT_EQ(spec.window, 64u);
  EXPECT_EQ(Ids(ResolveSubset(spec.subset, *catalog_)), Iota(0, 9));
}

TEST_F(SpecTest, SubsetAll) {
  JobSpec base;
  base.subset.kind = SubsetSpec::Kind::kRange;
  base.subset.ranges = {{1, 2}};
  base.subset.text = "range:1-2";
  const JobSpec spec = Parse("subset=all", base);
  EXPECT_EQ(spec.subset.kind, SubsetSpec::Kind::kAll);
  EXPECT_EQ(Ids(ResolveSubset(spec.subset, *catalog_)), Iota(0, 9));
}

TEST_F(SpecTest, SubsetClassRange) {
  const JobSpec spec = Parse("subset=classes:1-2");
  EXPECT_EQ(spec.subset.kind, SubsetSpec::Kind::kClasses);
  EXPECT_EQ(Ids(ResolveSubset(spec.subset, *catalog_)), Iota(3, 8));
  EXPECT_EQ(Resolve("subset=classes:0-3"), Iota(0, 9));
  // A range ending at the empty class is fine as long as it selects something.
  EXPECT_EQ(Resolve("subset=classes:3-4"), Iota(9, 9));
}

TEST_F(SpecTest, SubsetSeveralClassRanges) {
  EXPECT_EQ(Resolve("subset=classes:0-0,3-3"), (std::vector<uint32_t>{0, 1, 2, 9}));
  EXPECT_EQ(Resolve("subset=classes:2-3,0-1"), Iota(0, 9));
  EXPECT_EQ(Resolve("subset=classes:1-2,2-3"), Iota(3, 9));  // overlapping ranges
}

TEST_F(SpecTest, SubsetSingleClass) {
  EXPECT_EQ(Resolve("subset=classes:2"), Iota(5, 8));
  EXPECT_EQ(Resolve("subset=classes:0"), Iota(0, 2));
  EXPECT_EQ(Resolve("subset=classes:1,3"), (std::vector<uint32_t>{3, 4, 9}));
}

TEST_F(SpecTest, SubsetIdRange) {
  const JobSpec spec = Parse("subset=range:2-5");
  EXPECT_EQ(spec.subset.kind, SubsetSpec::Kind::kRange);
  EXPECT_EQ(Ids(ResolveSubset(spec.subset, *catalog_)), Iota(2, 5));
  EXPECT_EQ(Resolve("subset=range:0-9"), Iota(0, 9));
  EXPECT_EQ(Resolve("subset=range:7-7"), Iota(7, 7));
}

TEST_F(SpecTest, SubsetRandomSizeIsRoundedFraction) {
  struct Case {
    const char* text;
    uint64_t size;
  };
  for (const Case& c : {Case{"subset=random:0.5:1", 5}, Case{"subset=random:0.72:1", 7},
                        Case{"subset=random:0.68:3", 7}, Case{"subset=random:0.1:9", 1},
                        Case{"subset=random:0.06:9", 1}, Case{"subset=random:1:4", 10}}) {
    const JobSpec spec = Parse(c.text);
    EXPECT_EQ(spec.subset.kind, SubsetSpec::Kind::kRandom) << c.text;
    const Roaring ids = ResolveSubset(spec.subset, *catalog_);
    EXPECT_EQ(ids.cardinality(), c.size) << c.text;
    if (!ids.isEmpty()) {
      EXPECT_LT(ids.maximum(), 10u) << c.text;
    }
  }
}

TEST_F(SpecTest, SubsetRandomIsDeterministic) {
  const JobSpec a = Parse("subset=random:0.5:42");
  const JobSpec b = Parse("subset=random:0.5:42");
  EXPECT_EQ(Ids(ResolveSubset(a.subset, *catalog_)), Ids(ResolveSubset(b.subset, *catalog_)));
  EXPECT_EQ(Ids(ResolveSubset(a.subset, *catalog_)), Ids(ResolveSubset(a.subset, *catalog_)));
}

TEST_F(SpecTest, SubsetRandomSeedsOverlapButDiffer) {
  // 7 of 10: any two such subsets share at least 4 ids.
  const Roaring first = ResolveSubset(Parse("subset=random:0.7:1").subset, *catalog_);
  bool some_differ = false;
  for (int seed = 2; seed <= 6; ++seed) {
    const Roaring other =
        ResolveSubset(Parse("subset=random:0.7:" + std::to_string(seed)).subset, *catalog_);
    EXPECT_EQ(other.cardinality(), 7u);
    EXPECT_GE((first & other).cardinality(), 4u);
    if (!(first == other)) some_differ = true;
  }
  EXPECT_TRUE(some_differ) << "five other seeds all chose the same ids as seed 1";
}

// Floyd's draw, and its complement past half: exactly k ids below n, each
// id as likely as any other (a count per id within 5 sigma over 4000 seeds).
TEST(DrawRandomSubsetTest, DrawsExactlyKUniformly) {
  constexpr uint32_t kN = 20;
  constexpr int kSeeds = 4000;
  for (const uint64_t k : {1u, 5u, 10u, 15u, 19u, 20u}) {
    std::vector<int> counts(kN, 0);
    for (int seed = 0; seed < kSeeds; ++seed) {
      const Roaring ids = DrawRandomSubset(kN, k, static_cast<uint64_t>(seed));
      ASSERT_EQ(ids.cardinality(), k);
      ASSERT_LT(ids.maximum(), kN);
      for (const uint32_t id : ids) ++counts[id];
    }
    const double p = static_cast<double>(k) / kN;
    const double mean = kSeeds * p;
    const double sigma = std::sqrt(kSeeds * p * (1 - p));
    for (uint32_t id = 0; id < kN; ++id) {
      EXPECT_LE(std::abs(counts[id] - mean), 5 * sigma + 1e-9) << "k " << k << " id " << id;
    }
  }
}

TEST_F(SpecTest, SubsetRandomWholeDatasetIsAll) {
  EXPECT_EQ(Resolve("subset=random:1:123"), Iota(0, 9));
}

TEST_F(SpecTest, BadSubsets) {
  for (const char* text : {"subset=",
                           "subset=All",
                           "subset=everything",
                           "subset=classes",
                           "subset=classes:",
                           "subset=classes:2-1",
                           "subset=classes:0-5",
                           "subset=classes:5",
                           "subset=classes:a-b",
                           "subset=classes:1-2-3",
                           "subset=classes:-1",
                           "subset=classes:1-",
                           "subset=classes:,",
                           "subset=classes:4",  // class 4 has no image
                           "subset=classes:4-4",
                           "subset=range:",
                           "subset=range:0-10",
                           "subset=range:10",
                           "subset=range:5-4",
                           "subset=range:0-1,3-4",
                           "subset=range:x",
                           "subset=random:",
                           "subset=random:0.5",
                           "subset=random:0.5:",
                           "subset=random::1",
                           "subset=random:0:1",
                           "subset=random:-0.5:1",
                           "subset=random:1.5:1",
                           "subset=random:0.5:x",
                           "subset=random:0.5:1:2",
                           "subset=random:nan:1",
                           "subset=random:0.04:1",  // 0 ids
                           "subset=ids:3"}) {
    const Status s = ParseStatus(text);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << text;
    EXPECT_FALSE(s.message().empty()) << text;
  }
}

TEST_F(SpecTest, Size) {
  EXPECT_EQ(Parse("size=0").size, 0u);
  EXPECT_EQ(Parse("size=1").size, 1u);
  EXPECT_EQ(Parse("size=96").size, 96u);
  EXPECT_EQ(Parse("size=8192").size, kMaxSize);
  for (const char* text :
       {"size=8193", "size=-1", "size=", "size=abc", "size=1.5", "size=32px", "size=4294967296"}) {
    EXPECT_EQ(ParseStatus(text).code(), Status::Code::kInvalidArgument) << text;
  }
}

TEST_F(SpecTest, Epochs) {
  EXPECT_EQ(Parse("epochs=1").epochs, 1u);
  EXPECT_EQ(Parse("epochs=90").epochs, 90u);
  for (const char* text : {"epochs=0", "epochs=", "epochs=-1", "epochs=two", "epochs=1.0"}) {
    EXPECT_EQ(ParseStatus(text).code(), Status::Code::kInvalidArgument) << text;
  }
}

// Records number epochs in 32 bits: epochs 0 to 4294967295, no more.
TEST_F(SpecTest, EpochsFitTheRecordsField) {
  EXPECT_EQ(Parse("epochs=4294967296").epochs, 4294967296u);
  for (const char* text : {"epochs=4294967297", "epochs=18446744073709551615"}) {
    const Status s = ParseStatus(text);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << text;
    EXPECT_NE(s.message().find("32 bits"), std::string::npos) << s.message();
  }
}

TEST_F(SpecTest, Window) {
  EXPECT_EQ(Parse("window=1").window, 1u);
  EXPECT_EQ(Parse("window=256").window, 256u);
  EXPECT_EQ(Parse("window=65536").window, kMaxWindow);
  for (const char* text : {"window=0", "window=65537", "window=", "window=-1", "window=x"}) {
    EXPECT_EQ(ParseStatus(text).code(), Status::Code::kInvalidArgument) << text;
  }
}

TEST_F(SpecTest, SyntaxErrors) {
  for (const char* text : {"", " ", "\n\n", " \t\r\n", "size", "size 32", "size=32 epochs", "=32",
                           "colour=red", "Size=32", "size=32 bogus=1", "subset:all"}) {
    const Status s = ParseStatus(text);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << "'" << text << "'";
  }
}

// A typo gets the mount options' hint (common/parse.h DidYouMean); a key
// near none gets none.
TEST_F(SpecTest, UnknownKeyNamesTheNearestKey) {
  EXPECT_EQ(ParseStatus("epoch=2").message(), "unknown key 'epoch' (did you mean epochs?)");
  EXPECT_EQ(ParseStatus("szie=32").message(), "unknown key 'szie' (did you mean size?)");
  EXPECT_EQ(ParseStatus("droplast=1").message(),
            "unknown key 'droplast' (did you mean drop_last?)");
  EXPECT_EQ(ParseStatus("colour=red").message(), "unknown key 'colour'");
}

TEST_F(SpecTest, SeparatorsAreSpacesAndNewlines) {
  const JobSpec spec = Parse("  subset=classes:1\nsize=32   epochs=2\r\n\twindow=8\n\n");
  EXPECT_EQ(spec.subset.kind, SubsetSpec::Kind::kClasses);
  EXPECT_EQ(spec.size, 32u);
  EXPECT_EQ(spec.epochs, 2u);
  EXPECT_EQ(spec.window, 8u);
}

TEST_F(SpecTest, KeysNotNamedKeepTheirBaseValue) {
  JobSpec base = Parse("subset=classes:2 size=96 epochs=3 window=5");
  const JobSpec spec = Parse("window=7", base);
  EXPECT_EQ(spec.window, 7u);
  EXPECT_EQ(spec.size, 96u);
  EXPECT_EQ(spec.epochs, 3u);
  EXPECT_EQ(spec.subset.kind, SubsetSpec::Kind::kClasses);
  EXPECT_EQ(spec.subset.text, base.subset.text);
  EXPECT_EQ(Ids(ResolveSubset(spec.subset, *catalog_)), Iota(5, 8));

  const JobSpec only_subset = Parse("subset=range:0-1", base);
  EXPECT_EQ(only_subset.size, 96u);
  EXPECT_EQ(only_subset.epochs, 3u);
  EXPECT_EQ(only_subset.window, 5u);
  EXPECT_EQ(Ids(ResolveSubset(only_subset.subset, *catalog_)), Iota(0, 1));
}

TEST_F(SpecTest, FailedParseLeavesOutputAlone) {
  JobSpec out = Parse("size=48 epochs=4");
  const JobSpec before = out;
  EXPECT_FALSE(ParseJobSpec("size=64 epochs=0", *catalog_, JobSpec(), &out).ok());
  EXPECT_EQ(out.size, before.size);
  EXPECT_EQ(out.epochs, before.epochs);
  EXPECT_EQ(out.window, before.window);
}

TEST_F(SpecTest, ToStringShowsOneKeyPerLine) {
  const JobSpec spec = Parse("subset=classes:0-1,3 size=32 epochs=2 window=8");
  const std::string text = spec.ToString();
  EXPECT_NE(text.find("subset=classes:0-1,3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("size=32\n"), std::string::npos) << text;
  EXPECT_NE(text.find("epochs=2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("window=8\n"), std::string::npos) << text;
  EXPECT_NE(text.find("crop=center\n"), std::string::npos) << text;
  EXPECT_NE(text.find("flip=0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("seed=0\n"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 7) << text;
}

// spec/spec_keys.h is the list of keys: the parser knows each one, and the
// spec file shows no other.
TEST_F(SpecTest, KeysAreTheTableOfSpecKeys) {
  std::set<std::string> names;
  for (const SpecKeyInfo& key : kSpecKeys) {
    names.emplace(key.name);
    JobSpec out;
    const Status s = ParseJobSpec(std::string(key.name) + "=?", *catalog_, JobSpec(), &out);
    EXPECT_FALSE(s.ok()) << key.name;
    EXPECT_EQ(s.message().find("unknown key"), std::string::npos) << s.message();
  }
  const JobSpec spec = Parse("subset=classes:0-1 epochs=2 ranks=2 crop=random flip=0.5");
  const std::string text = spec.ToString();
  for (size_t at = 0; at < text.size(); at = text.find('\n', at) + 1) {
    const std::string key = text.substr(at, text.find('=', at) - at);
    EXPECT_TRUE(names.count(key)) << key << " is not in spec/spec_keys.h";
  }
}

TEST_F(SpecTest, ToStringRoundTrips) {
  for (const char* text :
       {"subset=all", "subset=classes:0-1,3 size=32 epochs=2 window=8",
        "subset=classes:2 size=0 window=1", "subset=range:3-7 epochs=5 window=65536",
        "subset=random:0.5:77 size=8192", "size=17", "size=17 format=tfrecord"}) {
    const JobSpec spec = Parse(text);
    // Parsed back over a base that differs in every field but epochs: the
    // file leaves out `epochs` when unlimited (there is no value to write),
    // and the daemon parses every write over the defaults, where it is
    // unlimited.
    JobSpec other = Parse("subset=range:0-0 size=5 window=3");
    JobSpec back;
    const Status s = ParseJobSpec(spec.ToString(), *catalog_, other, &back);
    EXPECT_TRUE(s.ok()) << "'" << text << "' shows as '" << spec.ToString()
                        << "', which does not parse: " << s.message();
    if (!s.ok()) continue;
    EXPECT_EQ(back.subset.kind, spec.subset.kind) << text;
    EXPECT_EQ(back.subset.text, spec.subset.text) << text;
    EXPECT_EQ(Ids(ResolveSubset(back.subset, *catalog_)),
              Ids(ResolveSubset(spec.subset, *catalog_)))
        << text;
    EXPECT_EQ(back.size, spec.size) << text;
    EXPECT_EQ(back.epochs, spec.epochs) << text;
    EXPECT_EQ(back.window, spec.window) << text;
    EXPECT_EQ(back.format, spec.format) << text;
    EXPECT_EQ(back.ToString(), spec.ToString()) << text;
  }
}

TEST_F(SpecTest, Group) {
  EXPECT_EQ(Parse("size=8").group, "");
  EXPECT_EQ(Parse("size=8").ToString().find("group"), std::string::npos);
  const JobSpec spec = Parse("group=sweep-1.a_B seed=4");
  EXPECT_EQ(spec.group, "sweep-1.a_B");
  EXPECT_NE(spec.ToString().find("\ngroup=sweep-1.a_B\n"), std::string::npos);
  JobSpec back;
  ASSERT_TRUE(ParseJobSpec(spec.ToString(), *catalog_, JobSpec(), &back).ok());
  EXPECT_EQ(back.group, spec.group);
  for (const std::string& bad : {std::string("group="), std::string("group=a/b"),
                                 std::string("group=a b"), "group=" + std::string(65, 'g')}) {
    JobSpec out;
    const Status s = ParseJobSpec(bad, *catalog_, JobSpec(), &out);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
  }
}

TEST_F(SpecTest, Format) {
  EXPECT_EQ(Parse("size=8").format, RecordFormat::kPlain);
  EXPECT_EQ(Parse("format=tfrecord").format, RecordFormat::kTfRecord);
  EXPECT_EQ(Parse("format=plain").format, RecordFormat::kPlain);
  // The default is not shown, as for an unlimited `epochs`.
  EXPECT_EQ(Parse("size=8").ToString().find("format"), std::string::npos);
  EXPECT_NE(Parse("format=tfrecord").ToString().find("\nformat=tfrecord\n"), std::string::npos);
  JobSpec out;
  const Status s = ParseJobSpec("format=tfrecords", *catalog_, JobSpec(), &out);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("format=tfrecords"), std::string::npos) << s.message();
}

TEST_F(SpecTest, ParseIdListIdsAndRelpaths) {
  Roaring ids;
  const Status s = ParseIdList("3\n\nc2/img1.jpg\n7\r\n9\n3\n", *catalog_, &ids);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(Ids(ids), (std::vector<uint32_t>{3, 6, 7, 9}));
}

TEST_F(SpecTest, ParseIdListWithoutFinalNewline) {
  Roaring ids;
  ASSERT_TRUE(ParseIdList("0\nc3/img0.jpg", *catalog_, &ids).ok());
  EXPECT_EQ(Ids(ids), (std::vector<uint32_t>{0, 9}));
}

TEST_F(SpecTest, ParseIdListRejectsUnknownLines) {
  for (const char* text : {"10\n", "0\n-1\n", "0\nc9/img0.jpg\n", "c0/img0\n", "0x1\n", "1 2\n"}) {
    Roaring ids;
    ids.add(42);
    const Status s = ParseIdList(text, *catalog_, &ids);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << text;
    EXPECT_EQ(Ids(ids), (std::vector<uint32_t>{42})) << "output changed on failure: " << text;
  }
}

TEST_F(SpecTest, ParseIdListNamesTheBadLine) {
  Roaring ids;
  const Status s = ParseIdList("1\n2\nnot-a-sample\n3\n", *catalog_, &ids);
  ASSERT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("not-a-sample"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("ids: line 3: 'not-a-sample'"), 0u) << s.message();
  // Counted from the first line of the file, which `text` need not start.
  const Status later = ParseIdList("1\nbad\n", *catalog_, &ids, 7, "resume");
  EXPECT_EQ(later.message().find("resume: line 8: 'bad'"), 0u) << later.message();
}

// Each line of a resume file is judged alone as it comes, counted across
// the pieces it is given in.
TEST_F(SpecTest, ResumeTextJudgesEachLineAlone) {
  ResumeText t(*catalog_);
  EXPECT_TRUE(t.Add("\nepoch=3\n", false).ok());
  EXPECT_TRUE(t.Add("rank=1\n0\n", false).ok());
  EXPECT_TRUE(t.Add("2", true).ok());
  ASSERT_TRUE(t.Finish().ok());
  EXPECT_EQ(t.epoch(), 3u);
  EXPECT_EQ(t.rank(), 1u);
  EXPECT_EQ(Ids(t.ids()), (std::vector<uint32_t>{0, 2}));

  EXPECT_EQ(ResumeText(*catalog_).Add("hello world\n", false).message(),
            "resume: line 1: expected epoch=E on the first line, got 'hello world'");
  ResumeText late(*catalog_);
  EXPECT_TRUE(late.Add("epoch=1\n1\n", false).ok());
  EXPECT_EQ(late.Add("rank=2\n", false).message(),
            "resume: line 3: 'rank=2' is neither an id nor a relpath");
  EXPECT_EQ(ResumeText(*catalog_).Add("epoch=1\nrank=x\n", false).message(),
            "resume: line 2: rank= expects a number, got 'rank=x'");
  EXPECT_NE(ResumeText(*catalog_).Add("epoch=4294967296\n", false).message().find("32 bits"),
            std::string::npos);
  EXPECT_FALSE(ResumeText(*catalog_).Finish().ok());  // no epoch= line
}

TEST(JobNameTest, Valid) {
  for (const char* name :
       {"a", "Z", "0", "resnet18-lr0.1", "A_b.c-9", "...", "-", "_x_", ".hidden", "a..b"}) {
    EXPECT_TRUE(IsValidJobName(name)) << name;
  }
  EXPECT_TRUE(IsValidJobName(std::string(64, 'x')));
}

TEST(JobNameTest, Invalid) {
  for (const char* name : {"", ".", "..", "a/b", "/", "a b", " a", "a\n", "a\tb", "a:b", "a*",
                           "caf\xc3\xa9", "a\\b", "a@b", "a+b"}) {
    EXPECT_FALSE(IsValidJobName(name)) << "'" << name << "'";
  }
  EXPECT_FALSE(IsValidJobName(std::string(65, 'x')));
  EXPECT_FALSE(IsValidJobName(std::string_view("a\0b", 3)));
}

}  // namespace
}  // namespace joaderfs
