#include "jobs/unread_allowance.h"

#include <string>

#include "common/rate_limited_log.h"

namespace joaderfs {

bool UnreadAllowance::LetIn(uint32_t uid, uint64_t bytes, PlanGroup* group) {
  Unread& unread = unread_[uid];
  if (unread.bytes >= limit_.max_bytes) {
    if (unread.held_back.insert(group).second) {
      Warnings().Warn("unread allowance, uid " + std::to_string(uid),
                      "uid {} holds {} MiB of unread deliveries, the most "
                      "max_unread_per_user={} MiB allows: its jobs plan no further until read",
                      uid, unread.bytes >> 20, limit_.max_bytes >> 20);
    }
    return false;
  }
  unread.bytes += bytes;
  return true;
}

std::set<PlanGroup*> UnreadAllowance::Add(uint32_t uid, int64_t delta) {
  auto it = unread_.try_emplace(uid).first;
  Unread& unread = it->second;
  unread.bytes = static_cast<uint64_t>(static_cast<int64_t>(unread.bytes) + delta);
  if (unread.bytes < limit_.max_bytes && !unread.held_back.empty()) {
    std::set<PlanGroup*> groups = std::move(unread.held_back);
    unread.held_back.clear();
    return groups;
  }
  if (unread.bytes == 0 && unread.held_back.empty()) unread_.erase(it);
  return {};
}

void UnreadAllowance::Forget(PlanGroup* group) {
  for (auto& [uid, unread] : unread_) unread.held_back.erase(group);
}

uint64_t UnreadAllowance::Bytes(uint32_t uid) const {
  auto it = unread_.find(uid);
  return it == unread_.end() ? 0 : it->second.bytes;
}

}  // namespace joaderfs
