#include "control/control_files.h"

#include <fcntl.h>

#include <algorithm>

#include "common/printable.h"
#include "common/rate_limited_log.h"
#include "spec/resume_text.h"
#include "spec/spec.h"

namespace joaderfs {
namespace {

class SpecFile : public ControlFile {
 public:
  SpecFile(JobManager* jobs, std::string job, uint32_t opener)
      : ControlFile(Kind::kSpec, jobs, std::move(job), opener) {}

 private:
  Status DoWrite(uint32_t uid, std::string_view data) override {
    std::string candidate = content_ + std::string(data);
    Status s = jobs_->SetSpec(job_, uid, candidate);
    if (s.ok()) content_ = std::move(candidate);
    return s;
  }
};

class IdsFile : public ControlFile {
 public:
  IdsFile(JobManager* jobs, std::string job, uint32_t opener)
      : ControlFile(Kind::kIds, jobs, std::move(job), opener) {}

 private:
  // content_ holds a partial last line; ids_ the complete lines so far,
  // lines_ of them (a shell writes one line per write: errors count lines
  // from the open).
  Status DoWrite(uint32_t uid, std::string_view data) override {
    const size_t end = data.rfind('\n');
    if (end == std::string_view::npos) {
      if (content_.size() + data.size() > kMaxIdsLine) {
        return Status::InvalidArgument("ids: line too long");
      }
      content_.append(data);
      return Status::Ok();
    }
    const std::string lines = content_ + std::string(data.substr(0, end + 1));
    Roaring ids;
    Status s = ParseIdList(lines, jobs_->catalog(), &ids, lines_ + 1);
    if (s.ok()) s = jobs_->CheckWritable(job_, uid, &ids);
    if (s.ok() && data.size() - end - 1 > kMaxIdsLine) {
      s = Status::InvalidArgument("ids: line too long");
    }
    if (!s.ok()) return s;
    ids_ |= ids;
    lines_ += static_cast<size_t>(std::count(lines.begin(), lines.end(), '\n'));
    content_.assign(data.substr(end + 1));
    return Status::Ok();
  }

  Status DoFlush(uint32_t uid) override {
    Roaring last;
    Status s = ParseIdList(content_, jobs_->catalog(), &last, lines_ + 1);
    if (!s.ok()) return s;
    return jobs_->SetIdSubset(job_, uid, ids_ | last);
  }

  uint64_t ParsedBytes() const override { return ids_.getSizeInBytes(); }

  Roaring ids_;
  size_t lines_ = 0;
};

class ResumeFile : public ControlFile {
 public:
  ResumeFile(JobManager* jobs, std::string job, uint32_t opener)
      : ControlFile(Kind::kResume, jobs, std::move(job), opener) {}

 private:
  // content_ holds a partial last line (a line is at most kMaxIdsLine
  // bytes, as in ids); each complete line is judged alone as it comes
  // (ResumeText) and held parsed, the whole judged at flush.
  Status DoWrite(uint32_t, std::string_view data) override {
    if (written_ + data.size() > kMaxResumeBytes) {
      return Status::InvalidArgument("resume: more than " + std::to_string(kMaxResumeBytes) +
                                     " bytes");
    }
    written_ += data.size();
    const size_t end = data.rfind('\n');
    if (end != std::string_view::npos) {
      content_.append(data.substr(0, end + 1));
      if (Status s = text_.Add(content_, /*last=*/false); !s.ok()) return s;
      content_.clear();
      data.remove_prefix(end + 1);
    }
    if (content_.size() + data.size() > kMaxIdsLine) {
      return Status::InvalidArgument("resume: a line longer than " + std::to_string(kMaxIdsLine) +
                                     " bytes");
    }
    content_.append(data);
    return Status::Ok();
  }

  Status DoFlush(uint32_t uid) override {
    if (Status s = text_.Add(content_, /*last=*/true); !s.ok()) return s;
    content_.clear();
    return jobs_->Resume(job_, uid, &text_);
  }

  uint64_t ParsedBytes() const override { return text_.ids().getSizeInBytes(); }

  ResumeText text_{jobs_->catalog()};
  size_t written_ = 0;
};

}  // namespace

const char* ControlFile::Name(Kind kind) {
  switch (kind) {
    case Kind::kSpec: return "spec";
    case Kind::kIds: return "ids";
    case Kind::kResume: return "resume";
  }
  return "?";
}

Status ControlFile::Open(Kind kind, JobManager* jobs, const std::string& job, uint32_t uid,
                         int flags, std::unique_ptr<ControlFile>* file) {
  const bool writing = (flags & O_ACCMODE) != O_RDONLY;
  Status s;
  switch (kind) {
    case Kind::kSpec:
      file->reset(new SpecFile(jobs, job, uid));
      // A writer starts from nothing (its writes are the new spec), or from
      // the current spec when appending.
      // A started job's spec may be written again unchanged (a rerun of
      // the same script): the write judges it.
      if (writing) s = jobs->CheckOwner(job, uid);
      if (s.ok() && (!writing || (flags & O_APPEND))) s = jobs->GetSpec(job, &(*file)->content_);
      break;
    case Kind::kIds:
      file->reset(new IdsFile(jobs, job, uid));
      s = writing ? jobs->CheckOwner(job, uid) : Status::Permission("ids is write-only");
      break;
    case Kind::kResume:
      file->reset(new ResumeFile(jobs, job, uid));
      s = writing ? jobs->CheckOwner(job, uid) : Status::Permission("resume is write-only");
      break;
  }
  if (s.ok()) s = (*file)->Charge(kOpenFileBytes + (*file)->content_.capacity());
  if (!s.ok()) file->reset();
  return s;
}

ControlFile::~ControlFile() { jobs_->open_file_bytes().Release(opener_, charged_); }

Status ControlFile::Charge(uint64_t bytes) {
  Status s = jobs_->open_file_bytes().Charge(opener_, bytes);
  if (s.ok()) charged_ += bytes;
  return s;
}

Status ControlFile::Settle() {
  const uint64_t held = kOpenFileBytes + content_.capacity() + ParsedBytes();
  if (held > charged_) return Charge(held - charged_);
  jobs_->open_file_bytes().Release(opener_, charged_ - held);
  charged_ = held;
  return Status::Ok();
}

Status ControlFile::CheckTruncate(Kind kind, JobManager* jobs, const std::string& job,
                                  uint32_t uid) {
  // resume may be written after the job started, and spec and ids again
  // unchanged; only the owner's writes (checked at open) count.
  if (kind == Kind::kResume) return Status::Ok();
  return jobs->CheckOwner(job, uid);
}

Status ControlFile::Write(uint32_t uid, std::string_view data) {
  // Nothing of a rejected write, and nothing after it, reaches the job; the
  // job's error keeps the first rejection's reason.
  if (rejected_) {
    Status s = Status::InvalidArgument("an earlier write to this handle was rejected");
    Reject(uid, s);
    return s;
  }
  // A spec grows by what is written, charged first; parsed ids may grow by
  // more (a container per line at worst), charged after the write and
  // before a flush applies them.
  Status s = Charge(data.size() + 64);
  if (s.ok()) s = DoWrite(uid, data);
  const Status settled = Settle();
  if (s.ok()) s = settled;
  if (!s.ok()) {
    rejected_ = true;
    jobs_->NoteWrite(job_, Name(kind_), s);
    Reject(uid, s);
    return s;
  }
  // A spec write applies at once; ids and resume on flush.
  if (kind_ == Kind::kSpec) jobs_->NoteWrite(job_, Name(kind_), s);
  wrote_ = true;
  return s;
}

Status ControlFile::Flush(uint32_t uid) {
  if (!wrote_ || rejected_) return Status::Ok();
  wrote_ = false;
  Status s = DoFlush(uid);
  jobs_->NoteWrite(job_, Name(kind_), s);
  if (!s.ok()) {
    rejected_ = true;
    Reject(uid, s);
  }
  return s;
}

void ControlFile::Reject(uint32_t uid, const Status& s) {
  // Rate-limited per user and file: a user may repeat a bad write as fast
  // as FUSE takes it, and must not hide another user's rejection.
  Warnings().Warn(std::string("rejected write, ") + Name(kind_) + ", uid " + std::to_string(uid),
                  "write to jobs/{}/{} by uid {}: {}", job_, Name(kind_), uid,
                  Printable(s.message()));
}

}  // namespace joaderfs
