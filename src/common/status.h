// Status: the outcome of an operation that can fail, with a message for the
// log. The FUSE layer maps codes to errno once, at the edge (fs/filesystem.cc).

#ifndef JOADERFS_COMMON_STATUS_H_
#define JOADERFS_COMMON_STATUS_H_

#include <string>
#include <utility>

namespace joaderfs {

class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk,
    kInvalidArgument,  // bad spec, option or name
    kNotFound,
    kExists,
    kBusy,         // the job has started: its spec is fixed
    kPermission,   // not the job's owner
    kGone,         // the job was removed under an open reader
    kInterrupted,  // a blocked read was interrupted
    kIOError,
    kCorruption,
    kQuota,    // a per-user limit on jobs or streams (EDQUOT)
    kTooMany,  // a per-user limit on open readers (EMFILE)
  };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status Exists(std::string m) { return {Code::kExists, std::move(m)}; }
  static Status Busy(std::string m) { return {Code::kBusy, std::move(m)}; }
  static Status Permission(std::string m) { return {Code::kPermission, std::move(m)}; }
  static Status Gone(std::string m) { return {Code::kGone, std::move(m)}; }
  static Status Interrupted() { return {Code::kInterrupted, "interrupted"}; }
  static Status IOError(std::string m) { return {Code::kIOError, std::move(m)}; }
  static Status Corruption(std::string m) { return {Code::kCorruption, std::move(m)}; }
  static Status Quota(std::string m) { return {Code::kQuota, std::move(m)}; }
  static Status TooMany(std::string m) { return {Code::kTooMany, std::move(m)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_STATUS_H_
