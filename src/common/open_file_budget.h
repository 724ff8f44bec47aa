// The bytes that each uid's open handles of control and rendered files
// hold (docs/design.md 2.2 "Jobs and owners"), bounded per uid so that no
// user's open files grow the daemon without limit. Root is exempt unless
// `limit_root`.
//
// Thread-safe: a leaf lock, taken under no other and calling nothing.

#ifndef JOADERFS_COMMON_OPEN_FILE_BUDGET_H_
#define JOADERFS_COMMON_OPEN_FILE_BUDGET_H_

#include <cstdint>
#include <unordered_map>

#include "common/ranked_mutex.h"
#include "common/status.h"

namespace joaderfs {

// What an open handle costs besides the bytes it holds (the handle, the
// kernel's and libfuse's state for it), charged per open file.
inline constexpr uint64_t kOpenFileBytes = 1024;

class OpenFileBudget {
 public:
  OpenFileBudget(uint64_t max_bytes, bool limit_root)
      : max_bytes_(max_bytes), limit_root_(limit_root) {}

  // Charges `bytes` to `uid`; Quota, naming the limit and charging
  // nothing, where that would take a limited uid past it.
  Status Charge(uint32_t uid, uint64_t bytes);
  // Gives back `bytes` of what Charge took for `uid`.
  void Release(uint32_t uid, uint64_t bytes);
  uint64_t Held(uint32_t uid) const;

 private:
  const uint64_t max_bytes_;
  const bool limit_root_;
  mutable Mutex mu_;
  std::unordered_map<uint32_t, uint64_t> held_ GUARDED_BY(mu_);
};

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_OPEN_FILE_BUDGET_H_
