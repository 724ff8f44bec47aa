// The protocol of a job's control files, `spec`, `ids` and `resume`, as one
// open handle sees it: what a write means, how partial lines are buffered,
// how much a handle may hold, and when the job changes. The fs/ layer only
// translates: it opens a ControlFile per handle and passes each write and
// flush through.
//
//   spec    each write holds whole key=value pairs and replaces the spec
//           with everything written through the handle so far;
//   ids     complete lines are parsed as they come (a line is one id or
//           path, at most kMaxIdsLine bytes; errors count lines from the
//           open); the subset is set on flush, a last line without a
//           newline included;
//   resume  each complete line is judged alone by the write that completes
//           it (spec/resume_text.h) and kept parsed: the handle holds a
//           partial line (at most kMaxIdsLine bytes) and the ids, at most
//           kMaxResumeBytes written in all; the whole is applied on flush,
//           where what needs the job is judged.
//
// Once the job has started, spec and ids may still be written with what
// the job has (a rerun of the same script); a write that differs is Busy.
//
// What a handle holds (its bytes, parsed ids, and a fixed cost for the
// handle itself) is charged to the uid that opened it in the job manager's
// open_file_bytes(): an open, or a write, that would take that uid past it
// fails with Quota (EDQUOT), so no user's handles grow the daemon without
// bound.
//
// A rejected write or flush leaves the job as it was, and the handle
// changes nothing any more. Its reason becomes the job's error (its `error`
// file and status; JobManager::NoteWrite) until a good write to the same
// file; it is logged, rate-limited per uid and file.
//
// Not thread-safe: one per open handle, which the kernel serialises; the
// JobManager it calls is thread-safe.

#ifndef JOADERFS_CONTROL_CONTROL_FILES_H_
#define JOADERFS_CONTROL_CONTROL_FILES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "jobs/job_manager.h"

namespace joaderfs {

// An ids or resume line is one id or path.
inline constexpr size_t kMaxIdsLine = 4096;
// A resume file lists the ids of at most one epoch.
inline constexpr size_t kMaxResumeBytes = 256 << 20;

class ControlFile {
 public:
  enum class Kind { kSpec, kIds, kResume };

  // Opens the job's `kind` file for `uid`; `flags` are open(2)'s. spec opens
  // for reading by anyone and for writing by whoever may change the job;
  // ids and resume are write-only, for whoever may change the job (resume:
  // its owner, even once started). `jobs` outlives the file.
  static Status Open(Kind kind, JobManager* jobs, const std::string& job, uint32_t uid, int flags,
                     std::unique_ptr<ControlFile>* file);
  // Whether `uid` may truncate the file (a shell's `>`), which changes
  // nothing: the content is what gets written.
  static Status CheckTruncate(Kind kind, JobManager* jobs, const std::string& job, uint32_t uid);
  // The file's name in the job's folder.
  static const char* Name(Kind kind);

  virtual ~ControlFile();

  Status Write(uint32_t uid, std::string_view data);
  Status Flush(uint32_t uid);
  // What a read of the handle returns: the spec (as opened, then as
  // written), or the bytes held for a later flush.
  const std::string& content() const { return content_; }

 protected:
  ControlFile(Kind kind, JobManager* jobs, std::string job, uint32_t opener)
      : kind_(kind), jobs_(jobs), job_(std::move(job)), opener_(opener) {}

  virtual Status DoWrite(uint32_t uid, std::string_view data) = 0;
  // Bytes the handle holds beside content_ (parsed ids).
  virtual uint64_t ParsedBytes() const { return 0; }
  // Called once per flush that follows a write.
  virtual Status DoFlush(uint32_t /*uid*/) { return Status::Ok(); }

  const Kind kind_;
  JobManager* const jobs_;
  const std::string job_;
  std::string content_;

 private:
  // Logs the rejection of a write or flush by `uid`, rate-limited.
  void Reject(uint32_t uid, const Status& s);
  // Charges `bytes` more to the opener: Quota, charging nothing, past its
  // open_file_bytes() limit.
  Status Charge(uint64_t bytes);
  // Brings the charge to what the handle holds now: Quota where that is
  // more than was charged and past the limit.
  Status Settle();

  const uint32_t opener_;
  uint64_t charged_ = 0;
  bool wrote_ = false;     // since the last flush
  bool rejected_ = false;  // a write failed: the handle changes nothing any more
};

}  // namespace joaderfs

#endif  // JOADERFS_CONTROL_CONTROL_FILES_H_
