#include "fs/render.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "catalog/catalog.h"
#include "testing/test_util.h"

namespace joaderfs {
namespace {

// 3000 samples in 3 classes: three blocks of ids, the last one short.
class ManifestViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteImageFolder(dir_.path(), {1000, 1500, 500});
    ASSERT_TRUE(Catalog::Open(dir_.path(), &catalog_).ok());
    for (SampleId id = 0; id < catalog_->size(); ++id) {
      whole_ += std::to_string(id) + "\t" + std::to_string(catalog_->label(id)) + "\t" +
                catalog_->relpath(id) + "\n";
    }
  }
  testing::TempDir dir_;
  std::unique_ptr<Catalog> catalog_;
  std::string whole_;  // the manifest as one rendering would make it
};

TEST_F(ManifestViewTest, ReadsInAnyPiecesGiveTheWholeManifest) {
  const ManifestView view(catalog_.get());
  ASSERT_EQ(view.size(), whole_.size());
  for (const size_t piece : {1, 7, 4096, 40000, 131072, 10000000}) {
    std::string read;
    for (uint64_t at = 0; at < view.size(); at += piece) view.Read(at, piece, &read);
    EXPECT_EQ(read, whole_) << "pieces of " << piece;
  }
  std::string past;
  view.Read(view.size(), 100, &past);
  view.Read(view.size() + 5, 100, &past);
  EXPECT_TRUE(past.empty());
  std::string tail;
  view.Read(view.size() - 3, 100, &tail);
  EXPECT_EQ(tail, whole_.substr(whole_.size() - 3));
}

}  // namespace
}  // namespace joaderfs
