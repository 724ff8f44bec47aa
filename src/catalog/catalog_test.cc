#include "catalog/catalog.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "catalog/manifest.h"
#include "catalog/snapshot.h"
#include "catalog/source_store.h"
#include "common/crc32c.h"
#include "common/hash.h"
#include "testing/test_util.h"

namespace joaderfs {
namespace {
namespace fs = std::filesystem;

using testing::Ids;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

std::vector<std::string> Relpaths(const Catalog& c) {
  std::vector<std::string> out;
  for (SampleId id = 0; id < c.size(); ++id) out.push_back(c.relpath(id));
  return out;
}

std::vector<int64_t> Labels(const Catalog& c) {
  std::vector<int64_t> out;
  for (SampleId id = 0; id < c.size(); ++id) out.push_back(c.label(id));
  return out;
}

std::unique_ptr<Catalog> OpenOk(const std::string& source) {
  std::unique_ptr<Catalog> c;
  const Status s = Catalog::Open(source, &c);
  EXPECT_TRUE(s.ok()) << s.message();
  return c;
}

// SOURCE/<class>/... with classes "a", "a-b", "b" and "c" (no image), plus
// files the catalog must ignore.
void MakeImageFolder(const TempDir& d) {
  WriteFile(d / "b/z.jpg");
  WriteFile(d / "b/a.PNG");
  WriteFile(d / "a-b/c.jpg");
  WriteFile(d / "a/x.jpg");
  WriteFile(d / "a/sub/y.jpeg");
  WriteFile(d / "a/sub/deeper/k.webp");
  WriteFile(d / "a/sub-2/w.bmp");
  // Ignored: hidden files and folders, other extensions, files at the root.
  WriteFile(d / "a/.hidden.jpg");
  WriteFile(d / "a/.thumbs/t.jpg");
  WriteFile(d / "a/notes.txt");
  WriteFile(d / "a/README");
  WriteFile(d / "a/jpg");
  WriteFile(d / "b/archive.jpg.gz");
  WriteFile(d / "root.jpg");
  WriteFile(d / "c/empty.txt");
}

TEST(CatalogTest, ImageFolderOrderAndLabels) {
  TempDir d;
  MakeImageFolder(d);
  auto c = OpenOk(d.path());
  ASSERT_TRUE(c);
  // Classes sorted by name: a=0, a-b=1, b=2, c=3 (no image, still a class).
  // All of "a" (nested folders too, component by component: "sub" before
  // "sub-2" before "x.jpg") come before "a-b".
  const std::vector<std::string> expected = {
      "a/sub/deeper/k.webp", "a/sub/y.jpeg", "a/sub-2/w.bmp", "a/x.jpg",
      "a-b/c.jpg",           "b/a.PNG",      "b/z.jpg"};
  EXPECT_EQ(Relpaths(*c), expected);
  EXPECT_EQ(Labels(*c), (std::vector<int64_t>{0, 0, 0, 0, 1, 2, 2}));
  EXPECT_EQ(c->size(), 7u);
  EXPECT_EQ(c->num_classes(), 4u);
  for (SampleId id = 0; id < c->size(); ++id) {
    EXPECT_EQ(c->path(id), d.path() + "/" + c->relpath(id));
    EXPECT_TRUE(fs::is_regular_file(c->path(id))) << c->path(id);
  }
}

TEST(CatalogTest, ImageFolderSourceIsAbsoluteWithoutTrailingSlash) {
  TempDir d;
  MakeImageFolder(d);
  auto c = OpenOk(d.path() + "/");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->source(), d.path());
  EXPECT_EQ(c->path(0), d.path() + "/a/sub/deeper/k.webp");
}

TEST(CatalogTest, ClassesSortedByNameNotByDiscovery) {
  TempDir d;
  // Created in reverse order; labels must follow the names.
  for (const char* cls : {"zebra", "monkey", "Apple", "ant"}) {
    WriteFile(d / (std::string(cls) + "/img.jpg"));
  }
  auto c = OpenOk(d.path());
  ASSERT_TRUE(c);
  EXPECT_EQ(Relpaths(*c), (std::vector<std::string>{"Apple/img.jpg", "ant/img.jpg",
                                                    "monkey/img.jpg", "zebra/img.jpg"}));
  EXPECT_EQ(Labels(*c), (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(CatalogTest, EmptyClassBetweenOthersShiftsLabels) {
  TempDir d;
  WriteFile(d / "a/1.jpg");
  fs::create_directories(d / "b");
  WriteFile(d / "c/1.jpg");
  auto c = OpenOk(d.path());
  ASSERT_TRUE(c);
  EXPECT_EQ(c->num_classes(), 3u);
  EXPECT_EQ(Labels(*c), (std::vector<int64_t>{0, 2}));
  EXPECT_TRUE(c->IdsWithLabels(1, 1).isEmpty());
}

TEST(CatalogTest, IdsWithLabels) {
  TempDir d;
  MakeImageFolder(d);
  auto c = OpenOk(d.path());
  ASSERT_TRUE(c);
  EXPECT_EQ(Ids(c->IdsWithLabels(0, 0)), (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(Ids(c->IdsWithLabels(1, 2)), (std::vector<uint32_t>{4, 5, 6}));
  EXPECT_EQ(Ids(c->IdsWithLabels(0, 3)), (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(c->IdsWithLabels(3, 3).isEmpty());
  EXPECT_TRUE(c->IdsWithLabels(2, 1).isEmpty());
  EXPECT_TRUE(c->IdsWithLabels(7, 9).isEmpty());
}

TEST(CatalogTest, FindRelpath) {
  TempDir d;
  MakeImageFolder(d);
  auto c = OpenOk(d.path());
  ASSERT_TRUE(c);
  for (SampleId id = 0; id < c->size(); ++id) {
    EXPECT_EQ(c->FindRelpath(c->relpath(id)), id) << c->relpath(id);
  }
  EXPECT_EQ(c->FindRelpath("a/notes.txt"), std::nullopt);
  EXPECT_EQ(c->FindRelpath("a/.hidden.jpg"), std::nullopt);
  EXPECT_EQ(c->FindRelpath("x.jpg"), std::nullopt);
  EXPECT_EQ(c->FindRelpath("a/x"), std::nullopt);
  EXPECT_EQ(c->FindRelpath(""), std::nullopt);
}

TEST(CatalogTest, MissingSourceIsNotFound) {
  TempDir d;
  std::unique_ptr<Catalog> c;
  const Status s = Catalog::Open(d / "does-not-exist", &c);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.message();
  EXPECT_FALSE(c);
}

TEST(CatalogTest, EmptyFolderIsInvalid) {
  TempDir d;
  std::unique_ptr<Catalog> c;
  EXPECT_EQ(Catalog::Open(d.path(), &c).code(), Status::Code::kInvalidArgument);
  EXPECT_FALSE(c);
}

TEST(CatalogTest, FolderWithoutImagesIsInvalid) {
  TempDir d;
  WriteFile(d / "a/notes.txt");
  WriteFile(d / "b/.hidden.jpg");
  fs::create_directories(d / "c");
  WriteFile(d / "top.jpg");
  std::unique_ptr<Catalog> c;
  EXPECT_EQ(Catalog::Open(d.path(), &c).code(), Status::Code::kInvalidArgument);
}

TEST(CatalogTest, ManifestIdsInFileOrder) {
  TempDir d;
  WriteFile(d / "list/train.tsv",
            "img/one.jpg\t3\n"
            "\n"
            "img/two.jpg\t0\r\n"
            "\r\n"
            "other dir/three.png\t1\n"
            "img/../up.jpg\t0");  // no final newline
  auto c = OpenOk(d / "list/train.tsv");
  ASSERT_TRUE(c);
  EXPECT_EQ(Relpaths(*c), (std::vector<std::string>{"img/one.jpg", "img/two.jpg",
                                                    "other dir/three.png", "img/../up.jpg"}));
  EXPECT_EQ(Labels(*c), (std::vector<int64_t>{3, 0, 1, 0}));
  EXPECT_EQ(c->num_classes(), 4u);
  // Paths are relative to the manifest's folder.
  EXPECT_EQ(fs::path(c->path(0)).lexically_normal(), fs::path(d / "list/img/one.jpg"));
  EXPECT_EQ(fs::path(c->path(3)).lexically_normal(), fs::path(d / "list/up.jpg"));
  EXPECT_EQ(c->rejected_paths(), 0u);
  EXPECT_EQ(c->FindRelpath("img/two.jpg"), 1u);
  EXPECT_EQ(c->FindRelpath("other dir/three.png"), 2u);
  EXPECT_EQ(Ids(c->IdsWithLabels(0, 0)), (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(Ids(c->IdsWithLabels(2, 3)), (std::vector<uint32_t>{0}));
}

TEST(CatalogTest, ManifestNeedNotListExistingFilesInOrder) {
  TempDir d;
  WriteFile(d / "m.tsv", "z.jpg\t0\na.jpg\t0\nm.jpg\t1\n");
  auto c = OpenOk(d / "m.tsv");
  ASSERT_TRUE(c);
  EXPECT_EQ(Relpaths(*c), (std::vector<std::string>{"z.jpg", "a.jpg", "m.jpg"}));
  EXPECT_EQ(c->path(1), d.path() + "/a.jpg");
}

TEST(CatalogTest, MalformedManifestLineIsInvalid) {
  const char* const kBad[] = {
      "a.jpg 1\n",            // space instead of a tab
      "a.jpg\n",              // no label
      "a.jpg\t\n",            // empty label
      "a.jpg\tcat\n",         // not a number
      "a.jpg\t-1\n",          // negative
      "a.jpg\t1.5\n",         // not an integer
      "\t1\n",                // no path
      "a.jpg\t1\nb.jpg\t\n",  // second line bad
  };
  for (const char* text : kBad) {
    TempDir d;
    WriteFile(d / "m.tsv", text);
    std::unique_ptr<Catalog> c;
    const Status s = Catalog::Open(d / "m.tsv", &c);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << "manifest: " << text;
    EXPECT_FALSE(c);
  }
}

TEST(CatalogTest, EmptyManifestIsInvalid) {
  for (const char* text : {"", "\n\n", "\r\n"}) {
    TempDir d;
    WriteFile(d / "m.tsv", text);
    std::unique_ptr<Catalog> c;
    EXPECT_EQ(Catalog::Open(d / "m.tsv", &c).code(), Status::Code::kInvalidArgument)
        << "manifest: '" << text << "'";
  }
}

TEST(CatalogTest, ManifestPathsThatLeaveItsFolderAreRejectedAndCounted) {
  TempDir d;
  std::string text =
      "/etc/passwd\t0\n"
      "ok.jpg\t1\n"
      "../next-door/x.jpg\t0\n"
      "a/../../x.jpg\t1\n"
      "a/./../b/../../c.jpg\t0\n"
      "a/../ok2.jpg\t0\n"
      "..\t0\n"
      "./a/b/../../ok3.jpg\t2\n";
  text += std::string("..\0/x.jpg\t0\n", 11);  // the system would read ".."
  WriteFile(d / "m/list.tsv", text);
  auto c = OpenOk(d / "m/list.tsv");
  ASSERT_TRUE(c);
  EXPECT_EQ(Relpaths(*c),
            (std::vector<std::string>{"ok.jpg", "a/../ok2.jpg", "./a/b/../../ok3.jpg"}));
  EXPECT_EQ(Labels(*c), (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(c->rejected_paths(), 6u);
  EXPECT_EQ(c->FindRelpath("ok.jpg"), 0u);
  EXPECT_EQ(c->FindRelpath("/etc/passwd"), std::nullopt);
  // Nothing left: an empty dataset.
  WriteFile(d / "m/bad.tsv", "../a.jpg\t0\n/b.jpg\t0\n");
  std::unique_ptr<Catalog> empty;
  EXPECT_EQ(Catalog::Open(d / "m/bad.tsv", &empty).code(), Status::Code::kInvalidArgument);
}

// An image passed as SOURCE is read as a manifest: the error says so and
// names the layouts.
TEST(CatalogTest, ImageFileSourceSaysItWasReadAsAManifest) {
  TempDir d;
  WriteFile(d / "img000000.jpg", std::string("\xff\xd8\xff\xe0\x00\x10JFIF\x00", 11));
  std::unique_ptr<Catalog> c;
  const Status s = Catalog::Open(d / "img000000.jpg", &c);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("line 1: expected relpath<TAB>label"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("SOURCE is a file, so it was read as a manifest, though it is named "
                             "as an image or shard"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("SOURCE/<class>/<image> (ImageFolder)"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("WebDataset shards SOURCE/*.tar"), std::string::npos) << s.message();
}

TEST(ManifestTest, EscapesFolder) {
  for (const char* inside : {"a.jpg", "a/b.jpg", "a/../b.jpg", "./a.jpg", "a//b.jpg", "a/./b",
                             "a/b/../../c", "...", "..a/b", "a/..b", "a/..", "."}) {
    EXPECT_FALSE(EscapesFolder(inside)) << inside;
  }
  for (const char* outside : {"/a.jpg", "..", "../a.jpg", "a/../../b", "./../a", "a/b/../../..",
                              "//a", "a/../..", "a/./../.."}) {
    EXPECT_TRUE(EscapesFolder(outside)) << outside;
  }
  EXPECT_TRUE(EscapesFolder(std::string_view("a\0b", 3)));
}

TEST(ManifestTest, ParseCountsRejectedLinesAndKeepsOrder) {
  Manifest m;
  ASSERT_TRUE(ParseManifest("x\t1\n../y\t2\r\n\nz\t0", &m).ok());
  ASSERT_EQ(m.entries.size(), 2u);
  EXPECT_EQ(m.entries[0].relpath, "x");
  EXPECT_EQ(m.entries[1].relpath, "z");
  EXPECT_EQ(m.entries[1].label, 0);
  EXPECT_EQ(m.rejected, 1u);
  EXPECT_EQ(m.first_rejected_line, 2u);
  const Status bad = ParseManifest("x\t1\n../y\tq\n", &m);
  EXPECT_EQ(bad.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(bad.message(), "line 2: expected relpath<TAB>label");
}

TEST(ManifestTest, PathsWithControlCharactersAreLeftOutAndCounted) {
  Manifest m;
  ASSERT_TRUE(
      ParseManifest("x\t1\na\rb\t2\r\ntab\there\t3\nesc\x1b[2J\t4\ndel\x7f\t5\nz\t0", &m).ok());
  ASSERT_EQ(m.entries.size(), 2u);
  EXPECT_EQ(m.entries[0].relpath, "x");
  EXPECT_EQ(m.entries[1].relpath, "z");
  EXPECT_EQ(m.unprintable, 4u);
  EXPECT_EQ(m.first_unprintable_line, 2u);
  EXPECT_EQ(m.rejected, 0u);
}

// Runs Catalog::Open(source) on another thread; fails when it has not
// returned within 5 s (a FIFO opened for reading blocks).
Status OpenWithin5s(const std::string& source, std::unique_ptr<Catalog>* out) {
  auto result =
      std::async(std::launch::async, [source, out] { return Catalog::Open(source, out); });
  if (result.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    ADD_FAILURE() << "Catalog::Open(" << source << ") blocked";
    std::ofstream unblock(source);
  }
  return result.get();
}

TEST(CatalogTest, SpecialFilesAreLeftOutAndCounted) {
  TempDir d, elsewhere;
  WriteFile(d / "a/x.jpg");
  ASSERT_EQ(::mkfifo((d / "a/fifo.jpg").c_str(), 0600), 0);
  ASSERT_EQ(::symlink("/dev/zero", (d / "a/zero.jpg").c_str()), 0);
  ASSERT_EQ(::symlink((d / "a/gone.jpg").c_str(), (d / "a/broken.jpg").c_str()), 0);
  // Symlinks to regular files and to class folders on other disks count.
  WriteFile(elsewhere / "b/y.jpg");
  ASSERT_EQ(::symlink((elsewhere / "b").c_str(), (d / "b").c_str()), 0);
  ASSERT_EQ(::symlink((d / "a/x.jpg").c_str(), (d / "a/link.jpg").c_str()), 0);
  std::unique_ptr<Catalog> c;
  ASSERT_TRUE(OpenWithin5s(d.path(), &c).ok());
  EXPECT_EQ(Relpaths(*c), (std::vector<std::string>{"a/link.jpg", "a/x.jpg", "b/y.jpg"}));
  EXPECT_EQ(c->special_files(), 3u);

  // The same files named by a manifest.
  WriteFile(d / "m.tsv", "a/x.jpg\t0\na/fifo.jpg\t0\na/zero.jpg\t1\nb/y.jpg\t1\na\t0\n");
  c.reset();
  ASSERT_TRUE(OpenWithin5s(d / "m.tsv", &c).ok());
  EXPECT_EQ(Relpaths(*c), (std::vector<std::string>{"a/x.jpg", "b/y.jpg"}));
  EXPECT_EQ(Labels(*c), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(c->FindRelpath("b/y.jpg"), 1u);
  EXPECT_EQ(c->special_files(), 3u);

  // A FIFO as SOURCE is refused, not read.
  ASSERT_EQ(::mkfifo((d / "fifo.tsv").c_str(), 0600), 0);
  c.reset();
  EXPECT_EQ(OpenWithin5s(d / "fifo.tsv", &c).code(), Status::Code::kInvalidArgument);
}

// Catalog::Open(source) within 10 s, or the whole test binary exits 1: a
// walk trapped in links would not return at all (or only after growing
// without bound), and a hang must fail the run rather than stall it.
Status OpenUntrapped(const std::string& source, std::unique_ptr<Catalog>* out) {
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> result = done->get_future();
  auto catalog = std::make_shared<std::unique_ptr<Catalog>>();
  std::thread([source, done, catalog] {
    done->set_value(Catalog::Open(source, catalog.get()));
  }).detach();
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    std::fprintf(stderr, "FAILED: Catalog::Open(%s) still scanning after 10 s\n", source.c_str());
    std::fflush(stderr);
    std::_Exit(1);
  }
  const Status s = result.get();
  *out = std::move(*catalog);
  return s;
}

// Symlinks that point at themselves, as a class folder, inside one, or as an
// image: a walk that followed them would never end. Each is skipped and
// counted, and Open() returns within bounded time.
TEST(CatalogTest, SelfLinksAreSkippedAndCounted) {
  TempDir d;
  WriteFile(d / "a/x.jpg");
  ASSERT_EQ(::symlink("self", (d / "a/self").c_str()), 0);
  ASSERT_EQ(::symlink("loop", (d / "loop").c_str()), 0);  // a class name that loops
  ASSERT_EQ(::symlink("me.jpg", (d / "a/me.jpg").c_str()), 0);
  std::unique_ptr<Catalog> c;
  ASSERT_TRUE(OpenUntrapped(d.path(), &c).ok());
  EXPECT_EQ(Relpaths(*c), (std::vector<std::string>{"a/x.jpg"}));
  EXPECT_EQ(c->num_classes(), 1u);
  EXPECT_EQ(c->scan_skips().link_loops, 2u);
  EXPECT_EQ(c->special_files(), 1u);  // me.jpg
}

TEST(CatalogTest, ClassFolderLinkingToItselfAddsNothing) {
  TempDir d;
  WriteFile(d / "a/x.jpg");
  WriteFile(d / "b/y.jpg");
  ASSERT_EQ(::symlink(".", (d / "a/again").c_str()), 0);
  ASSERT_EQ(::symlink((d / "b").c_str(), (d / "b/b").c_str()), 0);
  // A second class linking to the first keeps its label, with no sample.
  ASSERT_EQ(::symlink("a", (d / "c").c_str()), 0);
  std::unique_ptr<Catalog> c;
  ASSERT_TRUE(OpenUntrapped(d.path(), &c).ok());
  EXPECT_EQ(Relpaths(*c), (std::vector<std::string>{"a/x.jpg", "b/y.jpg"}));
  EXPECT_EQ(Labels(*c), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(c->num_classes(), 3u);
  EXPECT_EQ(c->scan_skips().revisits, 3u);
}

TEST(CatalogTest, LinkToAParentIsNotEntered) {
  TempDir d;
  WriteFile(d / "a/x.jpg");
  WriteFile(d / "a/sub/k.jpg");
  WriteFile(d / "b/y.jpg");
  ASSERT_EQ(::symlink("..", (d / "a/up").c_str()), 0);           // SOURCE
  ASSERT_EQ(::symlink("../..", (d / "a/sub/upup").c_str()), 0);  // SOURCE, from deeper
  ASSERT_EQ(::symlink("..", (d / "a/sub/back").c_str()), 0);     // its class folder
  ASSERT_EQ(::symlink("../a/sub", (d / "b/side").c_str()), 0);   // a folder already walked
  std::unique_ptr<Catalog> c;
  ASSERT_TRUE(OpenUntrapped(d.path(), &c).ok());
  EXPECT_EQ(Relpaths(*c), (std::vector<std::string>{"a/sub/k.jpg", "a/x.jpg", "b/y.jpg"}));
  EXPECT_EQ(c->scan_skips().revisits, 4u);
}

TEST(CatalogTest, LoopOfTwoLinksIsSkipped) {
  TempDir d;
  WriteFile(d / "a/x.jpg");
  WriteFile(d / "b/y.jpg");
  // Folders linking to each other, and two links naming each other.
  ASSERT_EQ(::symlink("../b", (d / "a/to-b").c_str()), 0);
  ASSERT_EQ(::symlink("../a", (d / "b/to-a").c_str()), 0);
  ASSERT_EQ(::symlink("two", (d / "a/one").c_str()), 0);
  ASSERT_EQ(::symlink("one", (d / "a/two").c_str()), 0);
  std::unique_ptr<Catalog> c;
  ASSERT_TRUE(OpenUntrapped(d.path(), &c).ok());
  EXPECT_EQ(Relpaths(*c), (std::vector<std::string>{"a/x.jpg", "b/y.jpg"}));
  EXPECT_EQ(c->scan_skips().revisits, 2u);
  EXPECT_EQ(c->scan_skips().link_loops, 2u);
}

TEST(CatalogTest, DanglingLinksAreCounted) {
  TempDir d;
  WriteFile(d / "a/x.jpg");
  ASSERT_EQ(::symlink((d / "nowhere").c_str(), (d / "a/gone").c_str()), 0);
  ASSERT_EQ(::symlink((d / "nowhere").c_str(), (d / "lost-class").c_str()), 0);
  ASSERT_EQ(::symlink((d / "nowhere.jpg").c_str(), (d / "a/gone.jpg").c_str()), 0);
  std::unique_ptr<Catalog> c;
  ASSERT_TRUE(OpenUntrapped(d.path(), &c).ok());
  EXPECT_EQ(Relpaths(*c), (std::vector<std::string>{"a/x.jpg"}));
  EXPECT_EQ(c->scan_skips().broken_links, 2u);
  EXPECT_EQ(c->special_files(), 1u);
}

TEST(CatalogTest, LinkToAFileOutsideSourceIsASample) {
  TempDir d, elsewhere;
  WriteFile(d / "a/x.jpg");
  WriteFile(elsewhere / "far.jpg", "far");
  ASSERT_EQ(::symlink((elsewhere / "far.jpg").c_str(), (d / "a/far.jpg").c_str()), 0);
  std::unique_ptr<Catalog> c;
  ASSERT_TRUE(OpenUntrapped(d.path(), &c).ok());
  EXPECT_EQ(Relpaths(*c), (std::vector<std::string>{"a/far.jpg", "a/x.jpg"}));
  EXPECT_EQ(ReadFile(c->path(0)), "far");
  EXPECT_EQ(c->scan_skips().total(), 0u);
}

// Every folder linking to every folder: without the inode check the walk
// grows as the number of paths, which is exponential in the depth.
TEST(CatalogTest, SourceFullOfLoopsScansInBoundedTime) {
  TempDir d;
  constexpr int kFolders = 12;
  for (int i = 0; i < kFolders; ++i) WriteFile(d / ("c" + std::to_string(i) + "/x.jpg"));
  for (int i = 0; i < kFolders; ++i) {
    for (int j = 0; j < kFolders; ++j) {
      const std::string link = d / ("c" + std::to_string(i) + "/to" + std::to_string(j));
      ASSERT_EQ(::symlink(("../c" + std::to_string(j)).c_str(), link.c_str()), 0);
    }
    ASSERT_EQ(::symlink("..", (d / ("c" + std::to_string(i) + "/up")).c_str()), 0);
  }
  std::unique_ptr<Catalog> c;
  ASSERT_TRUE(OpenUntrapped(d.path(), &c).ok());
  EXPECT_EQ(c->size(), static_cast<size_t>(kFolders));
  EXPECT_EQ(c->scan_skips().revisits, static_cast<uint64_t>(kFolders * (kFolders + 1)));
}

TEST(CatalogTest, FlatSourceNamesTheLayouts) {
  TempDir d;
  WriteFile(d / "a.jpg");
  WriteFile(d / "b.jpg");
  std::unique_ptr<Catalog> c;
  const Status s = Catalog::Open(d.path(), &c);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("2 images but no class folder"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("SOURCE/<class>/<image>"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("manifest"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("WebDataset shards SOURCE/*.tar"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();

  TempDir empty;
  const Status e = Catalog::Open(empty.path(), &c);
  EXPECT_EQ(e.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(e.message().find("holds no image: expected SOURCE/<class>/<image>"), std::string::npos)
      << e.message();
}

uint64_t IdentityOf(const std::string& source) {
  auto c = OpenOk(source);
  return c ? c->identity() : 0;
}

// A ustar archive built in memory: one 512-byte header per member, data
// padded to 512 bytes, two zero blocks at the end.
class TarBuilder {
 public:
  TarBuilder& Add(const std::string& name, const std::string& data) {
    std::string h(512, '\0');
    name.copy(h.data(), std::min<size_t>(name.size(), 100));
    std::snprintf(h.data() + 100, 8, "%07o", 0644);
    std::snprintf(h.data() + 124, 12, "%011llo", static_cast<unsigned long long>(data.size()));
    std::snprintf(h.data() + 136, 12, "%011o", 0);
    h[156] = '0';
    std::memcpy(h.data() + 257,
                "ustar\0"
                "00",
                8);
    std::memset(h.data() + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(h.data() + 148, 8, "%06o", sum);
    offsets_[name] = bytes_.size() + 512;
    bytes_ += h + data + std::string((512 - data.size() % 512) % 512, '\0');
    return *this;
  }
  std::string Bytes() const { return bytes_ + std::string(1024, '\0'); }
  // Where the header of `name` starts.
  size_t HeaderOf(const std::string& name) const { return offsets_.at(name) - 512; }

 private:
  std::string bytes_;
  std::map<std::string, size_t> offsets_;
};

std::string Slice(const FileRange& r) {
  const std::string file = ReadFile(r.path);
  return r.partial ? file.substr(r.offset, r.length) : file;
}

TEST(CatalogTest, TarShardsInNameThenMemberOrder) {
  TempDir d;
  WriteFile(d / "b.tar", TarBuilder().Add("k9.jpg", "nine").Add("k9.cls", "0\n").Bytes());
  WriteFile(d / "a.tar", TarBuilder()
                             .Add("k1.jpg", "one")
                             .Add("k1.cls", " 3 ")
                             .Add("note.txt", "no image")
                             .Add("k2.cls", "1")  // the label before the image
                             .Add("k2.PNG", "two")
                             .Add("k2.txt", "a caption")
                             .Add("k3.jpg", "three")
                             .Add("k3.json", R"({"cls": 2, "cap": "x"})")
                             .Add("dir/k4.seg.webp", "four")  // not an image extension
                             .Bytes());
  WriteFile(d / "notes.md", "ignored");
  auto c = OpenOk(d.path());
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->is_tar());
  EXPECT_EQ(Relpaths(*c), (std::vector<std::string>{"a.tar/k1.jpg", "a.tar/k2.PNG", "a.tar/k3.jpg",
                                                    "b.tar/k9.jpg"}));
  EXPECT_EQ(Labels(*c), (std::vector<int64_t>{3, 1, 2, 0}));
  EXPECT_EQ(c->num_classes(), 4u);
  EXPECT_EQ(c->shard_skips().no_image, 2u);  // note, dir/k4
  EXPECT_EQ(c->shard_skips().unlabeled, 0u);
  EXPECT_EQ(Slice(c->location(0)), "one");
  EXPECT_EQ(Slice(c->location(1)), "two");
  EXPECT_EQ(Slice(c->location(3)), "nine");
  EXPECT_EQ(c->path(3), d / "b.tar");
  EXPECT_EQ(c->FindRelpath("a.tar/k3.jpg"), 2u);
  EXPECT_EQ(c->FindRelpath("b.tar/k9.jpg"), 3u);
  EXPECT_EQ(c->FindRelpath("b.tar/k1.jpg"), std::nullopt);
  EXPECT_EQ(c->FindRelpath("c.tar/k1.jpg"), std::nullopt);
  EXPECT_EQ(Ids(c->IdsWithLabels(1, 2)), (std::vector<uint32_t>{1, 2}));
}

// One shard of 20000 members, each looked up by relpath: a scan of the
// shard per lookup costs 2e8 name comparisons (over a second even at -O2);
// the hash table answers in milliseconds. The bound is 20x what the table
// needs on a loaded machine, so only the quadratic lookup fails it.
TEST(CatalogTest, TarRelpathLookupIsLinearInLookups) {
  TempDir d;
  constexpr int kMembers = 20000;
  TarBuilder t;
  for (int i = 0; i < kMembers; ++i) t.Add("dir/k" + std::to_string(i) + ".jpg", "");
  WriteFile(d / "a.tar", t.Bytes());
  WriteFile(d / "b.tar",
            TarBuilder().Add("dir/k0.jpg", "").Add("dir/k1.jpg", "").Add("dir/k0.jpg", "").Bytes());
  auto c = OpenOk(d.path());
  ASSERT_TRUE(c);
  ASSERT_EQ(c->size(), kMembers + 3u);
  std::vector<std::string> relpaths = Relpaths(*c);
  const auto start = std::chrono::steady_clock::now();
  for (SampleId id = 0; id < kMembers; ++id) ASSERT_EQ(c->FindRelpath(relpaths[id]), id);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 0.25) << "FindRelpath scans the shard";
  // A name repeated in one shard finds its first member, as before.
  EXPECT_EQ(c->FindRelpath("b.tar/dir/k0.jpg"), SampleId{kMembers});
  EXPECT_EQ(c->FindRelpath("b.tar/dir/k1.jpg"), SampleId{kMembers + 1});
  EXPECT_EQ(c->FindRelpath("b.tar/dir/k2.jpg"), std::nullopt);
  EXPECT_EQ(c->FindRelpath("a.tar/dir/k20000.jpg"), std::nullopt);
  EXPECT_EQ(c->FindRelpath("a.tar/"), std::nullopt);
  EXPECT_EQ(c->FindRelpath("a.tar"), std::nullopt);
}

TEST(CatalogTest, TarLabelKeyAndUnlabeledSamples) {
  TempDir d;
  WriteFile(d / "s.tar", TarBuilder()
                             .Add("a.jpg", "a")
                             .Add("a.json", R"({"label": 7})")
                             .Add("b.jpg", "b")
                             .Add("b.json", R"({"label": "x"})")
                             .Add("c.jpg", "c")
                             .Add("c.label", "5")
                             .Bytes());
  CatalogOptions options;
  options.label_key = "label";
  std::unique_ptr<Catalog> c;
  ASSERT_TRUE(Catalog::Open(d.path(), options, &c).ok());
  EXPECT_EQ(Labels(*c), (std::vector<int64_t>{7, -1, 5}));
  EXPECT_EQ(c->shard_skips().unlabeled, 1u);
  EXPECT_EQ(Ids(c->IdsWithLabels(0, 100)), (std::vector<uint32_t>{0, 2}));
}

TEST(CatalogTest, DamagedShardsCostOnlyTheirBadMembers) {
  TempDir d;
  TarBuilder t;
  for (int i = 0; i < 6; ++i) {
    t.Add("k" + std::to_string(i) + ".jpg", std::string(700, static_cast<char>('a' + i)))
        .Add("k" + std::to_string(i) + ".cls", std::to_string(i));
  }
  // A header whose checksum fails: k2 is lost, k3 onwards serve again.
  std::string corrupt = t.Bytes();
  corrupt[t.HeaderOf("k2.jpg") + 10] ^= 0x55;
  WriteFile(d / "a.tar", corrupt);
  // Cut short inside k4's image: k4 and k5 are lost, k0-k3 serve.
  WriteFile(d / "b.tar", t.Bytes().substr(0, t.HeaderOf("k4.jpg") + 512 + 100));
  auto c = OpenOk(d.path());
  ASSERT_TRUE(c);
  EXPECT_EQ(Relpaths(*c),
            (std::vector<std::string>{"a.tar/k0.jpg", "a.tar/k1.jpg", "a.tar/k3.jpg",
                                      "a.tar/k4.jpg", "a.tar/k5.jpg", "b.tar/k0.jpg",
                                      "b.tar/k1.jpg", "b.tar/k2.jpg", "b.tar/k3.jpg"}));
  EXPECT_EQ(Labels(*c), (std::vector<int64_t>{0, 1, 3, 4, 5, 0, 1, 2, 3}));
  EXPECT_EQ(c->shard_skips().damaged, 2u);
  EXPECT_EQ(Slice(c->location(2)), std::string(700, 'd'));
}

TEST(CatalogTest, TarIdentityFollowsTheShards) {
  TempDir d;
  WriteFile(d / "a.tar", TarBuilder().Add("k.jpg", "x").Add("k.cls", "1").Bytes());
  const uint64_t before = IdentityOf(d.path());
  EXPECT_EQ(IdentityOf(d.path()), before);
  WriteFile(d / "a.tar", TarBuilder().Add("k.jpg", "y").Add("k.cls", "2").Bytes());
  EXPECT_NE(IdentityOf(d.path()), before);
}

TEST(CatalogTest, IdentityStableWhenNothingChanges) {
  TempDir d;
  MakeImageFolder(d);
  const uint64_t first = IdentityOf(d.path());
  EXPECT_EQ(IdentityOf(d.path()), first);
  EXPECT_EQ(IdentityOf(d.path() + "/"), first);
}

TEST(CatalogTest, IdentityChangesWhenAFileIsModified) {
  TempDir d;
  MakeImageFolder(d);
  const uint64_t before = IdentityOf(d.path());
  WriteFile(d / "a/x.jpg", "more bytes");
  EXPECT_NE(IdentityOf(d.path()), before);
}

TEST(CatalogTest, IdentityChangesWhenOnlyTheModificationTimeChanges) {
  TempDir d;
  MakeImageFolder(d);
  WriteFile(d / "b/z.jpg", "abcd");
  const uint64_t before = IdentityOf(d.path());
  // Same size, other content: rewritten with a later time.
  WriteFile(d / "b/z.jpg", "wxyz");
  fs::last_write_time(d / "b/z.jpg", fs::last_write_time(d / "b/z.jpg") + std::chrono::seconds(5));
  EXPECT_NE(IdentityOf(d.path()), before);
}

TEST(CatalogTest, IdentityChangesWhenAFileIsAdded) {
  TempDir d;
  MakeImageFolder(d);
  const uint64_t before = IdentityOf(d.path());
  WriteFile(d / "c/new.jpg");
  EXPECT_NE(IdentityOf(d.path()), before);
}

TEST(CatalogTest, IdentityChangesWhenAFileIsRemoved) {
  TempDir d;
  MakeImageFolder(d);
  const uint64_t before = IdentityOf(d.path());
  fs::remove(d / "a/sub/y.jpeg");
  EXPECT_NE(IdentityOf(d.path()), before);
}

TEST(CatalogTest, IdentityChangesWhenAFileIsRenamed) {
  TempDir d;
  MakeImageFolder(d);
  const uint64_t before = IdentityOf(d.path());
  fs::rename(d / "a/x.jpg", d / "a/x2.jpg");
  EXPECT_NE(IdentityOf(d.path()), before);
}

TEST(CatalogTest, ManifestIdentityFollowsLabelsAndFiles) {
  TempDir d;
  WriteFile(d / "img/a.jpg", "a");
  WriteFile(d / "img/b.jpg", "b");
  WriteFile(d / "m.tsv", "img/a.jpg\t0\nimg/b.jpg\t1\n");
  const uint64_t before = IdentityOf(d / "m.tsv");
  EXPECT_EQ(IdentityOf(d / "m.tsv"), before);

  WriteFile(d / "m.tsv", "img/a.jpg\t0\nimg/b.jpg\t2\n");  // a label changed
  const uint64_t relabelled = IdentityOf(d / "m.tsv");
  EXPECT_NE(relabelled, before);

  WriteFile(d / "img/b.jpg", "bigger");  // a listed file changed
  EXPECT_NE(IdentityOf(d / "m.tsv"), relabelled);
}

TEST(CatalogTest, DifferentSourcesWithTheSameFilesDiffer) {
  TempDir d1, d2;
  WriteFile(d1 / "a/x.jpg");
  WriteFile(d2 / "a/x.jpg");
  EXPECT_NE(IdentityOf(d1.path()), IdentityOf(d2.path()));
}

// A name with a control character would forge lines of /dataset/manifest:
// left out wherever it is (a class folder, a file, a tar member, a manifest
// path), each counted; the rest keeps its labels and order.
TEST(CatalogTest, NamesWithControlCharactersAreLeftOutAndCounted) {
  TempDir d;
  WriteFile(d / "a/ok.jpg");
  WriteFile(d / "a/forged.jpg\n0\t0\tx.jpg");
  WriteFile(d / "a/tab\there.jpg");
  WriteFile(d / "a/sub\r/y.jpg");   // a folder: not entered
  WriteFile(d / "b\x1b[1m/z.jpg");  // a class: left out, no label
  WriteFile(d / "c/del\x7f.png");
  WriteFile(d / "c/fine.png");
  auto c = OpenOk(d.path());
  ASSERT_TRUE(c);
  EXPECT_EQ(Relpaths(*c), (std::vector<std::string>{"a/ok.jpg", "c/fine.png"}));
  EXPECT_EQ(Labels(*c), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(c->num_classes(), 2u);
  EXPECT_EQ(c->scan_skips().unprintable, 5u);

  TempDir t;
  WriteFile(
      t / "s.tar",
      TarBuilder().Add("k1.jpg", "one").Add("k\n2.jpg", "two").Add("k3.jpg", "three").Bytes());
  WriteFile(t / "bad\n.tar", TarBuilder().Add("k1.jpg", "one").Bytes());
  auto tar = OpenOk(t.path());
  ASSERT_TRUE(tar);
  EXPECT_EQ(Relpaths(*tar), (std::vector<std::string>{"s.tar/k1.jpg", "s.tar/k3.jpg"}));
  EXPECT_EQ(tar->scan_skips().unprintable, 2u);

  WriteFile(d / "list.tsv", "a/ok.jpg\t0\na/tab\there.jpg\t1\n");
  auto m = OpenOk(d / "list.tsv");
  ASSERT_TRUE(m);
  EXPECT_EQ(Relpaths(*m), (std::vector<std::string>{"a/ok.jpg"}));
  EXPECT_EQ(m->scan_skips().unprintable, 1u);
}

// The fingerprint as the disk tier has stored it since v3: FNV-1a of the
// relpath and its NUL, then label, size, mtime seconds, nanoseconds, inode.
uint64_t ExpectedFingerprint(const std::string& relpath, int64_t label, const FileRange& r) {
  const uint64_t parts[] = {static_cast<uint64_t>(label), r.file_size,
                            static_cast<uint64_t>(r.mtime_ns / 1'000'000'000),
                            static_cast<uint64_t>(r.mtime_ns % 1'000'000'000), r.inode};
  return Fnv1a(Fnv1a(kFnv1aBasis, relpath.c_str(), relpath.size() + 1), parts, sizeof parts);
}

// Each sample's relpath, label, location and fingerprint are what its file
// says, and FindRelpath() finds the first id of each relpath.
void ExpectSamplesMatchTheirFiles(const Catalog& c) {
  for (SampleId id = 0; id < c.size(); ++id) {
    const std::string rel = c.relpath(id);
    const FileRange r = c.location(id);
    EXPECT_EQ(r.path, c.path(id));
    EXPECT_TRUE(c.path(id).ends_with("/" + rel)) << c.path(id);
    struct stat st {};
    if (::stat(r.path.c_str(), &st) == 0) {
      EXPECT_EQ(r.file_size, static_cast<uint64_t>(st.st_size)) << rel;
      EXPECT_EQ(r.mtime_ns, st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec) << rel;
      EXPECT_EQ(r.inode, st.st_ino) << rel;
    } else {
      EXPECT_EQ(r.file_size + r.inode + static_cast<uint64_t>(r.mtime_ns), 0u) << rel;
    }
    EXPECT_EQ(c.fingerprint(id), ExpectedFingerprint(rel, c.label(id), r)) << rel;
    const std::optional<SampleId> found = c.FindRelpath(rel);
    ASSERT_TRUE(found) << rel;
    EXPECT_EQ(c.relpath(*found), rel);
    EXPECT_LE(*found, id);
  }
}

TEST(CompactCatalogTest, ImageFolderSamplesAreWhatTheirFilesSay) {
  TempDir d, outside;
  MakeImageFolder(d);
  WriteFile(outside / "linked/deep/l.jpg", "linked");
  WriteFile(d / "a/tab\there.jpg");
  fs::create_directory_symlink(outside / "linked", d / "b/link");
  WriteFile(d / "b/sizes.jpg", std::string(70'000, 'x'));
  auto c = OpenOk(d.path());
  ASSERT_TRUE(c);
  EXPECT_EQ(Relpaths(*c),
            (std::vector<std::string>{"a/sub/deeper/k.webp", "a/sub/y.jpeg", "a/sub-2/w.bmp",
                                      "a/x.jpg", "a-b/c.jpg", "b/a.PNG", "b/link/deep/l.jpg",
                                      "b/sizes.jpg", "b/z.jpg"}));
  EXPECT_EQ(Labels(*c), (std::vector<int64_t>{0, 0, 0, 0, 1, 2, 2, 2, 2}));
  EXPECT_EQ(c->location(7).file_size, 70'000u);
  ExpectSamplesMatchTheirFiles(*c);
  EXPECT_EQ(c->FindRelpath("a/sub"), std::nullopt);
  EXPECT_EQ(c->FindRelpath("sub/y.jpeg"), std::nullopt);
  EXPECT_EQ(c->FindRelpath("a/sub/y.jpe"), std::nullopt);
  EXPECT_EQ(c->FindRelpath("/a/x.jpg"), std::nullopt);
}

TEST(CompactCatalogTest, ManifestPathsKeepEveryByte) {
  TempDir d;
  WriteFile(d / "top.jpg", "t");
  WriteFile(d / "img/one.jpg", "one");
  WriteFile(d / "m.tsv",
            "top.jpg\t4\n"
            "img//one.jpg\t1\n"
            "./img/one.jpg\t1\n"
            "img/one.jpg\t2\n"
            "img/missing.jpg\t0\n"
            "top.jpg\t3\n");  // a second id for one path
  auto c = OpenOk(d / "m.tsv");
  ASSERT_TRUE(c);
  EXPECT_EQ(Relpaths(*c), (std::vector<std::string>{"top.jpg", "img//one.jpg", "./img/one.jpg",
                                                    "img/one.jpg", "img/missing.jpg", "top.jpg"}));
  EXPECT_EQ(Labels(*c), (std::vector<int64_t>{4, 1, 1, 2, 0, 3}));
  ExpectSamplesMatchTheirFiles(*c);
  EXPECT_EQ(c->FindRelpath("top.jpg"), 0u);  // the first of two
  EXPECT_EQ(c->FindRelpath("img/one.jpg"), 3u);
  EXPECT_EQ(c->location(4).file_size, 0u);
}

// The index costs each sample its name plus a few dozen bytes, with no heap
// block of its own (issue 44: at most 64 bytes a sample in all).
TEST(CompactCatalogTest, IndexBytesPerSample) {
  TempDir d;
  constexpr int kClasses = 20, kPerClass = 500;
  for (int k = 0; k < kClasses; ++k) {
    for (int i = 0; i < kPerClass; ++i) {
      WriteFile(d / ("n0000" + std::to_string(k) + "/img_" + std::to_string(100000 + i) + ".JPEG"));
    }
  }
  auto c = OpenOk(d.path());
  ASSERT_TRUE(c);
  ASSERT_EQ(c->size(), size_t{kClasses} * kPerClass);
  constexpr size_t kName = 15;  // "img_1xxxxx.JPEG"
  // 4 (name offset) + 24 (identity) + 1 (its state) + at most 4 / 0.7 * 2
  // (lookup slots).
  EXPECT_LE(c->index_bytes(), c->size() * (kName + 4 + 24 + 1 + 12)) << c->index_bytes();
}

// A tree's identities are taken after its listing (catalog.h): those of
// 4096 files spread over it before Open() returns, the rest by a pass in
// the background; once it ended, every sample is as a catalog that took
// them all at Open() has it.
TEST(IdentityPassTest, ALargeTreeIsStatedAfterOpen) {
  TempDir d;
  constexpr int kFiles = 10'000;
  for (int i = 0; i < kFiles; ++i) {
    WriteFile(d / ("c" + std::to_string(i % 7) + "/" + std::to_string(i) + ".jpg"),
              std::string(1 + i % 50, 'x'));
  }
  CatalogOptions later;
  later.identities_at_mount = 0;
  std::unique_ptr<Catalog> c;
  ASSERT_TRUE(Catalog::Open(d.path(), later, &c).ok());
  ASSERT_EQ(c->size(), size_t{kFiles});
  // 4096 spread: every third of 10,000.
  for (SampleId id = 0; id < c->size(); id += 3) ASSERT_TRUE(c->identity_known(id)) << id;
  EXPECT_GT(c->mean_image_bytes(), 0u);
  c->WaitForIdentities();
  EXPECT_TRUE(c->identities_settled());
  EXPECT_EQ(c->identities_pending(), 0u);
  auto at_open = OpenOk(d.path());
  ASSERT_TRUE(at_open);
  EXPECT_TRUE(at_open->identities_settled());
  EXPECT_EQ(at_open->identities_pending(), 0u);
  ASSERT_EQ(Relpaths(*c), Relpaths(*at_open));
  for (SampleId id = 0; id < c->size(); ++id) {
    ASSERT_TRUE(c->identity_known(id)) << id;
    ASSERT_EQ(c->fingerprint(id), at_open->fingerprint(id)) << id;
  }
  EXPECT_EQ(c->mean_image_bytes(), at_open->mean_image_bytes());
  ExpectSamplesMatchTheirFiles(*c);

  // Destroyed while its pass runs: the pass stops.
  c.reset();
  ASSERT_TRUE(Catalog::Open(d.path(), later, &c).ok());
  c.reset();
}

// A manifest of a.jpg and `missing`, a file not there at Open(): sample 1
// has no identity.
std::unique_ptr<Catalog> OpenWithAMissingFile(const TempDir& d, const std::string& missing) {
  WriteFile(d / "a.jpg", "a");
  WriteFile(d / "m.tsv", "a.jpg\t0\n" + missing + "\t1\n");
  return OpenOk(d / "m.tsv");
}

// A read of a file whose identity was not taken (here a manifest's file
// missing at Open) gives it the identity of the bytes read, once: a later
// read with another identity is not the sample's.
TEST(IdentityPassTest, AReadTakesTheIdentityNotTakenYet) {
  TempDir d;
  auto c = OpenWithAMissingFile(d, "late.jpg");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->identities_pending(), 0u);  // a manifest's files are stat'ed at Open()
  EXPECT_TRUE(c->identity_known(0));
  EXPECT_FALSE(c->identity_known(1));
  EXPECT_FALSE(c->location(1).checked);
  const uint64_t missing = c->fingerprint(1);
  WriteFile(d / "late.jpg", "late");
  std::string bytes;
  bool as_scanned = true;
  FileStamp seen;
  ASSERT_TRUE(ReadImageBytes(c->location(1), 1 << 20, &bytes, &as_scanned, &seen).ok());
  EXPECT_FALSE(as_scanned);
  EXPECT_EQ(seen.size, 4u);
  EXPECT_TRUE(c->Confirm(1, seen));
  EXPECT_TRUE(c->identity_known(1));
  EXPECT_TRUE(c->location(1).checked);
  EXPECT_NE(c->fingerprint(1), missing);
  ExpectSamplesMatchTheirFiles(*c);
  FileStamp rewritten = seen;
  rewritten.mtime_ns += 1;
  EXPECT_FALSE(c->Confirm(1, rewritten));
  EXPECT_TRUE(c->Confirm(1, seen));
  EXPECT_FALSE(c->Confirm(0, FileStamp{}));  // taken at Open(): compared
}

// Threads racing to take one identity: exactly one sets it, and every
// other compares with that one.
TEST(IdentityPassTest, OneOfRacingReadsSetsTheIdentity) {
  TempDir d;
  auto c = OpenWithAMissingFile(d, "never.jpg");
  ASSERT_TRUE(c);
  ASSERT_FALSE(c->identity_known(1));
  constexpr int kThreads = 8;
  std::vector<int> won(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] { won[t] = c->Confirm(1, {static_cast<uint64_t>(t + 1), 0, 0}); });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(std::count(won.begin(), won.end(), 1), 1);
  const uint64_t size = c->location(1).file_size;
  ASSERT_GE(size, 1u);
  EXPECT_EQ(won[size - 1], 1);
}

// The snapshot in cache_dir (catalog/snapshot.h): a remount lists again
// only the classes whose folders changed, and gives what a full scan gives.
class SnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeImageFolder(d_);
    WriteFile(d_ / "a/sub/more.jpg", "more");
    fs::create_directories(cache_.path());
    // Folders changed within two seconds of a scan are not trusted.
    std::this_thread::sleep_for(std::chrono::milliseconds(2'100));
  }

  std::unique_ptr<Catalog> OpenCached() {
    CatalogOptions o;
    o.cache_dir = cache_.path();
    std::unique_ptr<Catalog> c;
    const Status s = Catalog::Open(d_.path(), o, &c);
    EXPECT_TRUE(s.ok()) << s.message();
    return c;
  }

  std::string SnapshotPath(const Catalog& c) const {
    return SourceFolder(cache_.path(), c.source(), "catalog1");
  }

  // `c` holds what a scan without a snapshot finds now.
  void ExpectAsAFullScan(const Catalog& c) {
    auto full = OpenOk(d_.path());
    ASSERT_TRUE(full);
    EXPECT_EQ(Relpaths(c), Relpaths(*full));
    EXPECT_EQ(Labels(c), Labels(*full));
    EXPECT_EQ(c.num_classes(), full->num_classes());
    EXPECT_EQ(c.identity(), full->identity());
    for (SampleId id = 0; id < c.size() && id < full->size(); ++id) {
      EXPECT_EQ(c.fingerprint(id), full->fingerprint(id)) << c.relpath(id);
    }
    EXPECT_EQ(c.special_files(), full->special_files());
    EXPECT_EQ(c.scan_skips().total(), full->scan_skips().total());
    ExpectSamplesMatchTheirFiles(c);
  }

  TempDir d_, cache_;
  // The root, a, a/sub, a/sub/deeper, a/sub-2, a-b, b, c.
  static constexpr uint64_t kFolders = 8;
};

TEST_F(SnapshotTest, ReusedWhenNothingChanged) {
  auto first = OpenCached();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->folders_listed(), kFolders);
  EXPECT_TRUE(fs::exists(SnapshotPath(*first)));
  auto again = OpenCached();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->folders_listed(), 1u);  // the root only
  EXPECT_EQ(Relpaths(*again), Relpaths(*first));
  EXPECT_EQ(again->identity(), first->identity());
  ExpectAsAFullScan(*again);
}

TEST_F(SnapshotTest, AFolderWithAnAddedOrRemovedFileIsListedAgain) {
  ASSERT_TRUE(OpenCached());
  WriteFile(d_ / "b/new.jpg", "new");
  fs::remove(d_ / "a/sub/deeper/k.webp");
  auto c = OpenCached();
  ASSERT_TRUE(c);
  // The root, b, and class a's five folders.
  EXPECT_EQ(c->folders_listed(), 1u + 1 + 4);
  EXPECT_TRUE(c->FindRelpath("b/new.jpg"));
  EXPECT_FALSE(c->FindRelpath("a/sub/deeper/k.webp"));
  ExpectAsAFullScan(*c);
}

TEST_F(SnapshotTest, AnAddedClassShiftsTheLabelsAfterIt) {
  ASSERT_TRUE(OpenCached());
  WriteFile(d_ / "a-a/new.jpg", "new");
  auto c = OpenCached();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->folders_listed(), 2u);  // the root and the new class
  EXPECT_EQ(c->label(*c->FindRelpath("b/z.jpg")), 3);
  ExpectAsAFullScan(*c);
}

// Files are not trusted: one rewritten in place (its folder's times do not
// move) has its new identity, so no tier serves the old pixels under it.
TEST_F(SnapshotTest, AFileModifiedInPlaceHasItsNewIdentity) {
  auto first = OpenCached();
  ASSERT_TRUE(first);
  const SampleId x = *first->FindRelpath("a/x.jpg");
  {
    std::ofstream out(d_ / "a/x.jpg", std::ios::binary | std::ios::trunc);
    out << "rewritten in place";
  }
  auto c = OpenCached();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->folders_listed(), 1u);
  EXPECT_EQ(c->location(x).file_size, 18u);
  EXPECT_NE(c->fingerprint(x), first->fingerprint(x));
  EXPECT_NE(c->identity(), first->identity());
  ExpectAsAFullScan(*c);
}

TEST_F(SnapshotTest, DamagedSnapshotsAreIgnored) {
  auto first = OpenCached();
  ASSERT_TRUE(first);
  const std::string path = SnapshotPath(*first);
  const std::string good = ReadFile(path);
  ASSERT_GT(good.size(), 64u);
  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x20;
  std::string version = good;
  version[8] = 9;
  TempDir other;
  WriteFile(other / "k/only.jpg");
  CatalogOptions o;
  o.cache_dir = cache_.path();
  std::unique_ptr<Catalog> elsewhere;
  ASSERT_TRUE(Catalog::Open(other.path(), o, &elsewhere).ok());
  const std::string of_another = ReadFile(SnapshotPath(*elsewhere));
  for (const std::string& bad : {flipped, good.substr(0, good.size() - 1), good.substr(0, 10),
                                 version, of_another, std::string()}) {
    WriteFile(path, bad);
    auto c = OpenCached();
    ASSERT_TRUE(c);
    EXPECT_EQ(c->folders_listed(), kFolders);  // a full scan
    ExpectAsAFullScan(*c);
  }
}

// Past its checksum, a crafted snapshot is still bounds-checked: every cut
// of its payload, with a length and checksum to match, is refused.
TEST_F(SnapshotTest, CraftedSnapshotsAreRefused) {
  auto first = OpenCached();
  ASSERT_TRUE(first);
  const std::string good = ReadFile(SnapshotPath(*first));
  constexpr size_t kHeader = 24;
  CatalogSnapshot decoded;
  ASSERT_TRUE(DecodeSnapshot(good, &decoded).ok());
  EXPECT_EQ(decoded.samples.size(), first->size());
  const auto forge = [&](std::string payload) {
    std::string out = good.substr(0, 12);
    const uint64_t length = payload.size();
    const uint32_t crc = Crc32c(payload.data(), payload.size());
    out.append(reinterpret_cast<const char*>(&length), 8);
    out.append(reinterpret_cast<const char*>(&crc), 4);
    return out + payload;
  };
  const std::string payload = good.substr(kHeader);
  ASSERT_TRUE(DecodeSnapshot(forge(payload), &decoded).ok());
  for (size_t cut = 0; cut < payload.size(); ++cut) {
    EXPECT_FALSE(DecodeSnapshot(forge(payload.substr(0, cut)), &decoded).ok()) << cut;
  }
  // The last run names a folder past the table.
  std::string bad_run = payload;
  bad_run[bad_run.size() - 8] = '\x7f';
  EXPECT_FALSE(DecodeSnapshot(forge(bad_run), &decoded).ok());
  // A length that would reach past the file.
  std::string huge = payload;
  huge[7] = '\x7f';
  EXPECT_FALSE(DecodeSnapshot(forge(huge), &decoded).ok());
}

// Names in a snapshot are checked as the walk makes them: one naming a
// file outside SOURCE (or a hidden one) makes its class walked again.
TEST_F(SnapshotTest, CraftedPathsAreNotTrusted) {
  auto first = OpenCached();
  ASSERT_TRUE(first);
  const std::string path = SnapshotPath(*first);
  CatalogSnapshot snapshot;
  ASSERT_TRUE(ReadSnapshotFile(path, &snapshot).ok());
  for (const std::string bad : {"../../../outside.jpg", ".hidden.jpg", "tab\t.jpg"}) {
    SampleTable crafted;
    for (SampleId id = 0; id < snapshot.samples.size(); ++id) {
      const bool swap = snapshot.samples.relpath(id) == "a/x.jpg";
      ASSERT_TRUE(crafted.Add(snapshot.samples.folder(id), swap ? bad : snapshot.samples.name(id),
                              snapshot.samples.label(id)));
    }
    CatalogSnapshot forged;
    forged.source = snapshot.source;
    forged.classes = snapshot.classes;
    forged.samples = std::move(crafted);
    ASSERT_TRUE(WriteSnapshotFile(path, forged).ok());
    auto c = OpenCached();
    ASSERT_TRUE(c);
    EXPECT_EQ(c->folders_listed(), 1u + 4) << bad;  // the root and class a
    EXPECT_FALSE(c->FindRelpath("a/" + bad));
    ExpectAsAFullScan(*c);
  }
}

}  // namespace
}  // namespace joaderfs
