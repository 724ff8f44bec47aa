// The text of a job's `resume` file (docs/design.md 2.7), judged line by
// line as it is written: `epoch=E` first (blank lines before it ignored),
// then an optional `rank=R`, then the ids consumed in the `ids` file's
// syntax. Each line is judged on its own as soon as it is complete, so a
// shell sees a bad line rejected by the write() that completes it; what
// needs the job (its ranks, epochs=, readers, owner) is judged when the
// whole text is applied (JobManager::Resume).
//
// Not thread-safe: one per resume text being read.

#ifndef JOADERFS_SPEC_RESUME_TEXT_H_
#define JOADERFS_SPEC_RESUME_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include <roaring/roaring.hh>

#include "catalog/catalog.h"
#include "common/status.h"

namespace joaderfs {

class ResumeText {
 public:
  // `catalog` outlives this.
  explicit ResumeText(const Catalog& catalog) : catalog_(catalog) {}

  // Judges the lines of `text`, which ends at a line's end (or at the end
  // of the file: then `last`). InvalidArgument naming the first bad line;
  // after a failure nothing more may be added.
  Status Add(std::string_view text, bool last);
  // After the whole text: InvalidArgument unless an epoch= line came.
  Status Finish() const;

  std::optional<uint64_t> epoch() const { return epoch_; }
  std::optional<uint64_t> rank() const { return rank_; }
  Roaring& ids() { return ids_; }
  const Roaring& ids() const { return ids_; }

 private:
  // Judges one line of the head (epoch=, rank=); false when `line` is the
  // first id line instead.
  Status TakeHeadLine(std::string_view line, bool* taken);

  const Catalog& catalog_;
  size_t lines_ = 0;  // lines judged so far
  std::optional<uint64_t> epoch_, rank_;
  bool in_ids_ = false;  // past the epoch= line and the place of rank=
  Roaring ids_;
};

}  // namespace joaderfs

#endif  // JOADERFS_SPEC_RESUME_TEXT_H_
