#include "spec/resume_text.h"

#include <algorithm>
#include <string>

#include "common/parse.h"
#include "common/printable.h"
#include "records/record.h"
#include "spec/spec.h"

namespace joaderfs {
namespace {

std::string_view Trim(std::string_view line) {
  const size_t start = line.find_first_not_of(" \t\r");
  if (start == std::string_view::npos) return {};
  line.remove_prefix(start);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
    line.remove_suffix(1);
  }
  return line;
}

std::string Shown(std::string_view line) {
  constexpr size_t kShown = 64;
  return line.size() <= kShown ? std::string(line) : std::string(line.substr(0, kShown)) + "...";
}

}  // namespace

Status ResumeText::TakeHeadLine(std::string_view raw, bool* taken) {
  const std::string_view line = Trim(raw);
  const std::string where = "resume: line " + std::to_string(lines_ + 1) + ": ";
  *taken = true;
  if (line.empty()) return Status::Ok();
  if (!epoch_) {
    if (!line.starts_with("epoch=")) {
      return Status::InvalidArgument(where + "expected epoch=E on the first line, got '" +
                                     Shown(line) + "'");
    }
    const auto epoch = ParseUint(line.substr(6));
    if (!epoch) {
      return Status::InvalidArgument(where + "epoch= expects a number, got '" + Shown(line) + "'");
    }
    if (*epoch > kMaxRecordEpoch) {
      return Status::InvalidArgument(where + "epoch=" + std::to_string(*epoch) + " is past " +
                                     std::to_string(kMaxRecordEpoch) +
                                     ", the last epoch a record can name (32 bits)");
    }
    epoch_ = epoch;
    return Status::Ok();
  }
  in_ids_ = true;  // rank= may only follow epoch=
  if (!line.starts_with("rank=")) {
    *taken = false;
    return Status::Ok();
  }
  rank_ = ParseUint(line.substr(5));
  if (!rank_) {
    return Status::InvalidArgument(where + "rank= expects a number, got '" + Shown(line) + "'");
  }
  return Status::Ok();
}

Status ResumeText::Add(std::string_view text, bool last) {
  while (!in_ids_ && !text.empty()) {
    const size_t end = std::min(text.find('\n'), text.size());
    bool taken = false;
    if (Status s = TakeHeadLine(text.substr(0, end), &taken); !s.ok()) return s;
    if (!taken) break;
    ++lines_;
    text.remove_prefix(std::min(end + 1, text.size()));
  }
  if (text.empty()) return Status::Ok();
  Roaring ids;
  if (Status s = ParseIdList(text, catalog_, &ids, lines_ + 1, "resume"); !s.ok()) return s;
  ids_ |= ids;
  lines_ += static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
  if (last && !text.ends_with('\n')) ++lines_;
  return Status::Ok();
}

Status ResumeText::Finish() const {
  if (!epoch_) return Status::InvalidArgument("resume: expected epoch=E on the first line");
  return Status::Ok();
}

}  // namespace joaderfs
