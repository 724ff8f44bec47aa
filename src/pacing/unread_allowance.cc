#include "pacing/unread_allowance.h"

#include <algorithm>
#include <string>

#include "common/rate_limited_log.h"

namespace joaderfs {

bool UnreadAllowance::LetIn(uint32_t uid, uint64_t bytes, const Asker& asker) {
  Unread& unread = unread_[uid];
  auto queued = std::find_if(unread.starved.begin(), unread.starved.end(),
                             [&](const Waiter& w) { return w.stream == asker.stream; });
  if (queued != unread.starved.end() && !asker.starved) {
    // It has something in flight again: it asks as any stream does.
    unread.starved.erase(queued);
    queued = unread.starved.end();
  }
  // Room set aside for the starved streams turned away before the asker.
  uint64_t ahead = 0;
  for (auto it = unread.starved.begin(); it != queued; ++it) ahead += it->bytes;
  if (unread.bytes < limit_.max_bytes && ahead < limit_.max_bytes - unread.bytes) {
    if (queued != unread.starved.end()) unread.starved.erase(queued);
    unread.bytes += bytes;
    return true;
  }
  if (asker.starved && queued == unread.starved.end()) {
    unread.starved.push_back({asker.stream, bytes});
  }
  if (unread.held_back.insert(asker.group).second) {
    Warnings().Warn("unread allowance, uid " + std::to_string(uid),
                    "uid {} holds {} MiB of unread deliveries, the most "
                    "max_unread_per_user={} MiB allows: its jobs plan no further until read",
                    uid, unread.bytes >> 20, limit_.max_bytes >> 20);
  }
  return false;
}

std::set<PlanGroup*> UnreadAllowance::TakeHeldIfRoom(Unread& unread) const {
  if (unread.bytes >= limit_.max_bytes || unread.held_back.empty()) return {};
  std::set<PlanGroup*> groups = std::move(unread.held_back);
  unread.held_back.clear();
  return groups;
}

std::set<PlanGroup*> UnreadAllowance::Add(uint32_t uid, int64_t delta) {
  auto it = unread_.try_emplace(uid).first;
  Unread& unread = it->second;
  if (delta < 0 && static_cast<uint64_t>(-delta) > unread.bytes) {
    // A charge given back twice: counting on from a wrapped figure would
    // hold the owner's streams for good.
    Warnings().Warn("unread allowance below zero",
                    "uid {}: {} bytes of unread deliveries given back, {} were charged", uid,
                    -delta, unread.bytes);
    unread.bytes = 0;
  } else {
    unread.bytes = static_cast<uint64_t>(static_cast<int64_t>(unread.bytes) + delta);
  }
  std::set<PlanGroup*> groups = TakeHeldIfRoom(unread);
  if (unread.bytes == 0 && unread.held_back.empty() && unread.starved.empty()) unread_.erase(it);
  return groups;
}

std::set<PlanGroup*> UnreadAllowance::Forget(uint32_t uid, const void* stream) {
  auto it = unread_.find(uid);
  if (it == unread_.end()) return {};
  Unread& unread = it->second;
  const auto erased =
      std::erase_if(unread.starved, [&](const Waiter& w) { return w.stream == stream; });
  if (erased == 0) return {};
  return TakeHeldIfRoom(unread);
}

void UnreadAllowance::Forget(PlanGroup* group) {
  for (auto& [uid, unread] : unread_) unread.held_back.erase(group);
}

uint64_t UnreadAllowance::Bytes(uint32_t uid) const {
  auto it = unread_.find(uid);
  return it == unread_.end() ? 0 : it->second.bytes;
}

size_t UnreadAllowance::Starved(uint32_t uid) const {
  auto it = unread_.find(uid);
  return it == unread_.end() ? 0 : it->second.starved.size();
}

}  // namespace joaderfs
