// The control files' protocol as one open handle sees it (control/
// control_files.h), over a real JobManager and catalog: what a write means,
// how partial lines wait for the flush, the caps, who may open, and that a
// rejected handle changes nothing any more.

#include "control/control_files.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "testing/test_util.h"

namespace joaderfs {
namespace {

using Kind = ControlFile::Kind;

constexpr uint32_t kOwner = 1000;
constexpr uint32_t kOther = 1001;
// A uid's open files may hold max_unread / 8: this many bytes here.
constexpr uint64_t kHandleRoom = 64 << 10;

// Two classes of four tiny JPEGs: c0 holds ids 0-3, c1 ids 4-7.
class ControlFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteImageFolder(dir_.path(), {4, 4}, [](const std::string& path, int index) {
      testing::WriteNoiseImage(path, 8, 8, static_cast<uint32_t>(index + 1));
    });
    const Status s = Catalog::Open(dir_.path(), &catalog_);
    ASSERT_TRUE(s.ok()) << s.message();
    group_ = std::make_unique<PlanGroup>(PlanGroupOptions{});
    pool_ = std::make_unique<LoaderPool>(1);
    cache_ = std::make_unique<SampleCache>(catalog_.get(), pool_.get(), nullptr, group_.get(), 16,
                                           8 << 20);
    JobManagerOptions options;
    options.default_size = 16;
    options.limits.max_unread = 8 * kHandleRoom;
    jobs_ = std::make_unique<JobManager>(catalog_.get(), cache_.get(), pool_.get(), group_.get(),
                                         options);
    pool_->Start();
    ASSERT_TRUE(jobs_->CreateJob("j", kOwner).ok());
  }
  void TearDown() override {
    cache_->StopReads();
    pool_.reset();
    jobs_.reset();
    cache_.reset();
    group_.reset();
  }

  std::unique_ptr<ControlFile> Open(Kind kind, uint32_t uid = kOwner,
                                    int flags = O_WRONLY | O_TRUNC) {
    std::unique_ptr<ControlFile> file;
    const Status s = ControlFile::Open(kind, jobs_.get(), "j", uid, flags, &file);
    EXPECT_TRUE(s.ok()) << s.message();
    return file;
  }
  std::string Spec() {
    std::string text;
    EXPECT_TRUE(jobs_->GetSpec("j", &text).ok());
    return text;
  }
  uint64_t SubsetSize() {
    JobStatus st;
    EXPECT_TRUE(jobs_->GetJobStatus("j", &st).ok());
    return st.subset_size;
  }
  std::string Error() {
    std::string text;
    EXPECT_TRUE(jobs_->GetError("j", &text).ok());
    return text;
  }

  testing::TempDir dir_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<PlanGroup> group_;
  std::unique_ptr<LoaderPool> pool_;
  std::unique_ptr<SampleCache> cache_;
  std::unique_ptr<JobManager> jobs_;
};

// Each spec write replaces the spec with everything written through the
// handle so far, so `printf 'size=32 ' ; printf 'window=4'` sets both.
TEST_F(ControlFileTest, SpecWritesAddUpWithinTheHandle) {
  auto spec = Open(Kind::kSpec);
  EXPECT_EQ(spec->content(), "") << "a truncating writer starts from nothing";
  ASSERT_TRUE(spec->Write(kOwner, "size=32 ").ok());
  EXPECT_NE(Spec().find("size=32"), std::string::npos) << Spec();
  ASSERT_TRUE(spec->Write(kOwner, "window=4").ok());
  EXPECT_NE(Spec().find("size=32"), std::string::npos) << Spec();
  EXPECT_NE(Spec().find("window=4"), std::string::npos) << Spec();
  EXPECT_EQ(spec->content(), "size=32 window=4");
  ASSERT_TRUE(spec->Flush(kOwner).ok());

  // An appending writer starts from the spec as it is; a reader reads it.
  auto append = Open(Kind::kSpec, kOwner, O_WRONLY | O_APPEND);
  EXPECT_EQ(append->content(), Spec());
  auto reader = Open(Kind::kSpec, kOther, O_RDONLY);
  EXPECT_EQ(reader->content(), Spec());
}

// What a uid's open handles hold is charged to it: past max_unread / 8 an
// open or a write fails with Quota, naming the limit, and the job keeps what
// it had; closing a handle gives its room back. Root is exempt.
TEST_F(ControlFileTest, WhatAUidsHandlesHoldIsBounded) {
  ASSERT_TRUE(jobs_->SetSpec("j", kOwner, "size=32").ok());
  std::vector<std::unique_ptr<ControlFile>> readers;
  Status s;
  while (s.ok() && readers.size() < 1000) {
    std::unique_ptr<ControlFile> file;
    s = ControlFile::Open(Kind::kSpec, jobs_.get(), "j", kOther, O_RDONLY, &file);
    if (s.ok()) readers.push_back(std::move(file));
  }
  EXPECT_EQ(s.code(), Status::Code::kQuota) << "1000 spec handles of uid kOther, all open";
  EXPECT_NE(s.message().find("max_unread_per_user / 8"), std::string::npos) << s.message();
  EXPECT_GE(readers.size(), kHandleRoom / (2 * kOpenFileBytes));
  EXPECT_LE(jobs_->open_file_bytes().Held(kOther), kHandleRoom);
  // Another uid is charged apart; root is not limited.
  EXPECT_NE(Open(Kind::kSpec, kOwner, O_RDONLY), nullptr);
  std::vector<std::unique_ptr<ControlFile>> roots;
  for (int i = 0; i < 200; ++i) roots.push_back(Open(Kind::kSpec, 0, O_RDONLY));
  // Closing gives the room back.
  readers.clear();
  EXPECT_EQ(jobs_->open_file_bytes().Held(kOther), 0u);

  // A write that would take the writer past its room fails, and the spec
  // stays as it was, with the reason in the error file.
  auto writer = Open(Kind::kSpec);
  ASSERT_TRUE(writer->Write(kOwner, "size=24 ").ok());
  const std::string big(kHandleRoom, ' ');
  s = writer->Write(kOwner, big);
  EXPECT_EQ(s.code(), Status::Code::kQuota) << s.message();
  EXPECT_NE(Spec().find("size=24"), std::string::npos) << Spec();
  EXPECT_NE(Error().find("spec: uid 1000's open files"), std::string::npos) << Error();
  writer.reset();
  EXPECT_EQ(jobs_->open_file_bytes().Held(kOwner), 0u);
}

// ids: complete lines are parsed as they come, the subset is set on flush
// with a last line that lacks its newline.
TEST_F(ControlFileTest, IdsApplyOnFlushWithThePartialLastLine) {
  auto ids = Open(Kind::kIds);
  ASSERT_TRUE(ids->Write(kOwner, "0\n1").ok());
  ASSERT_TRUE(ids->Write(kOwner, "\nc1/").ok());
  EXPECT_EQ(SubsetSize(), 8u) << "nothing applies before the flush";
  EXPECT_EQ(ids->content(), "c1/") << "the partial line is held";
  // The relpath is completed by the next write.
  const std::string relpath = catalog_->relpath(7);
  ASSERT_TRUE(ids->Write(kOwner, relpath.substr(3)).ok());
  ASSERT_TRUE(ids->Flush(kOwner).ok());
  EXPECT_EQ(SubsetSize(), 3u);
  EXPECT_EQ(Error(), "");
}

// Errors name the line counted from the open, across writes.
TEST_F(ControlFileTest, IdsErrorsCountLinesFromTheOpen) {
  auto ids = Open(Kind::kIds);
  ASSERT_TRUE(ids->Write(kOwner, "0\n1\n").ok());
  const Status s = ids->Write(kOwner, "2\nnope\n");
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("line 4"), std::string::npos) << s.message();
  EXPECT_TRUE(Error().starts_with("ids: ")) << Error();
}

// A rejected write poisons the handle: later writes fail and the flush
// applies nothing, not even the good lines written before.
TEST_F(ControlFileTest, ARejectedHandleChangesNothingAnyMore) {
  auto ids = Open(Kind::kIds);
  ASSERT_TRUE(ids->Write(kOwner, "0\n1\n").ok());
  EXPECT_FALSE(ids->Write(kOwner, "99\n").ok());
  EXPECT_FALSE(ids->Write(kOwner, "2\n").ok());
  EXPECT_TRUE(ids->Flush(kOwner).ok()) << "the flush of a rejected handle is not a new error";
  EXPECT_EQ(SubsetSize(), 8u);
  EXPECT_NE(Error().find("99"), std::string::npos) << "the first rejection's reason: " << Error();
}

// A line is at most kMaxIdsLine bytes, whether it is held across writes
// or ends a write.
TEST_F(ControlFileTest, IdsLinesAreCapped) {
  auto held = Open(Kind::kIds);
  ASSERT_TRUE(held->Write(kOwner, std::string(kMaxIdsLine, '1')).ok());
  EXPECT_EQ(held->Write(kOwner, "1").code(), Status::Code::kInvalidArgument);

  auto trailing = Open(Kind::kIds);
  EXPECT_EQ(trailing->Write(kOwner, "0\n" + std::string(kMaxIdsLine + 1, '1')).code(),
            Status::Code::kInvalidArgument);
  EXPECT_TRUE(trailing->Flush(kOwner).ok());
  EXPECT_EQ(SubsetSize(), 8u);
}

// resume: each complete line is judged by the write that completes it, and
// the whole applies on flush.
TEST_F(ControlFileTest, ResumeLinesAreJudgedAsTheyCome) {
  auto resume = Open(Kind::kResume);
  ASSERT_TRUE(resume->Write(kOwner, "epoch=2\n0\n").ok());
  ASSERT_TRUE(resume->Write(kOwner, "1").ok());
  JobStatus st;
  ASSERT_TRUE(jobs_->GetJobStatus("j", &st).ok());
  EXPECT_EQ(st.epoch, 0u) << "nothing applies before the flush";
  ASSERT_TRUE(resume->Flush(kOwner).ok());
  ASSERT_TRUE(jobs_->GetJobStatus("j", &st).ok());
  EXPECT_EQ(st.epoch, 2u);
  EXPECT_EQ(st.remaining, 6u) << "ids 0 and 1 of epoch 2 are consumed";

  auto bad = Open(Kind::kResume);
  ASSERT_TRUE(bad->Write(kOwner, "epoch=3\n").ok());
  EXPECT_EQ(bad->Write(kOwner, "nope\n").code(), Status::Code::kInvalidArgument)
      << "judged at the write, not at the flush";
  EXPECT_TRUE(bad->Flush(kOwner).ok());
  ASSERT_TRUE(jobs_->GetJobStatus("j", &st).ok());
  EXPECT_EQ(st.epoch, 2u);
  EXPECT_TRUE(Error().starts_with("resume: ")) << Error();
}

// Who may open what (docs/design.md 2.2): spec is readable by anyone;
// writing any control file, and truncating spec or ids, is the owner's
// (and root's); ids and resume are write-only.
TEST_F(ControlFileTest, OpenFollowsTheOwnerRule) {
  std::unique_ptr<ControlFile> file;
  for (Kind kind : {Kind::kSpec, Kind::kIds, Kind::kResume}) {
    SCOPED_TRACE(ControlFile::Name(kind));
    EXPECT_EQ(ControlFile::Open(kind, jobs_.get(), "j", kOther, O_WRONLY, &file).code(),
              Status::Code::kPermission);
    EXPECT_EQ(file, nullptr);
    EXPECT_TRUE(ControlFile::Open(kind, jobs_.get(), "j", 0, O_WRONLY, &file).ok());
    EXPECT_TRUE(ControlFile::Open(kind, jobs_.get(), "j", kOwner, O_RDWR, &file).ok());
  }
  EXPECT_TRUE(ControlFile::Open(Kind::kSpec, jobs_.get(), "j", kOther, O_RDONLY, &file).ok());
  EXPECT_EQ(ControlFile::Open(Kind::kIds, jobs_.get(), "j", kOwner, O_RDONLY, &file).code(),
            Status::Code::kPermission);
  EXPECT_EQ(ControlFile::Open(Kind::kResume, jobs_.get(), "j", kOwner, O_RDONLY, &file).code(),
            Status::Code::kPermission);
  EXPECT_EQ(ControlFile::Open(Kind::kSpec, jobs_.get(), "none", kOwner, O_RDONLY, &file).code(),
            Status::Code::kNotFound);

  EXPECT_EQ(ControlFile::CheckTruncate(Kind::kSpec, jobs_.get(), "j", kOther).code(),
            Status::Code::kPermission);
  EXPECT_EQ(ControlFile::CheckTruncate(Kind::kIds, jobs_.get(), "j", kOther).code(),
            Status::Code::kPermission);
  EXPECT_TRUE(ControlFile::CheckTruncate(Kind::kIds, jobs_.get(), "j", kOwner).ok());
  EXPECT_TRUE(ControlFile::CheckTruncate(Kind::kResume, jobs_.get(), "j", kOther).ok())
      << "truncating resume changes nothing; its writes are checked at open";
}

}  // namespace
}  // namespace joaderfs
