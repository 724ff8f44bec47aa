#include "common/open_file_budget.h"

#include <algorithm>
#include <string>

namespace joaderfs {

Status OpenFileBudget::Charge(uint32_t uid, uint64_t bytes) {
  MutexLock lock(mu_);
  const auto it = held_.find(uid);
  const uint64_t held = it == held_.end() ? 0 : it->second;
  if ((uid != 0 || limit_root_) && held + bytes > max_bytes_) {
    return Status::Quota("uid " + std::to_string(uid) + "'s open files of the mount hold " +
                         std::to_string(held) + " bytes, at its limit of " +
                         std::to_string(max_bytes_) + " (max_unread_per_user / 8)");
  }
  held_[uid] = held + bytes;
  return Status::Ok();
}

void OpenFileBudget::Release(uint32_t uid, uint64_t bytes) {
  MutexLock lock(mu_);
  const auto it = held_.find(uid);
  if (it == held_.end()) return;
  it->second -= std::min(it->second, bytes);
  if (it->second == 0) held_.erase(it);
}

uint64_t OpenFileBudget::Held(uint32_t uid) const {
  MutexLock lock(mu_);
  const auto it = held_.find(uid);
  return it == held_.end() ? 0 : it->second;
}

}  // namespace joaderfs
