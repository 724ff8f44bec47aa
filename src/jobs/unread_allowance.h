// The per-uid allowance of unread deliveries (docs/design.md 2.2
// "Limits"): the bytes a job owner's streams may hold in picks planned and
// not yet handed out (at their rendered size) and in its readers' queues.
// Past it, its streams plan nothing more until they are read: the groups
// they sat out in plan again once the owner falls below it.
//
// Not thread-safe: Lanes owns one, guarded by the manager's lock
// (jobs/lanes.h), and does the planning it asks for.

#ifndef JOADERFS_JOBS_UNREAD_ALLOWANCE_H_
#define JOADERFS_JOBS_UNREAD_ALLOWANCE_H_

#include <cstdint>
#include <set>
#include <unordered_map>

#include "sampling/plan_group.h"

namespace joaderfs {

struct UnreadLimit {
  uint64_t max_bytes = uint64_t{2} << 30;
  bool limit_root = false;  // root's jobs are exempt unless set
};

class UnreadAllowance {
 public:
  explicit UnreadAllowance(UnreadLimit limit) : limit_(limit) {}

  // Whether the allowance may hold back `uid`'s streams.
  bool Limited(uint32_t uid) const { return uid != 0 || limit_.limit_root; }
  // A stream of `uid` would plan a pick of `bytes` in `group`: charges it
  // and says yes, or, with `uid` at its allowance, says no and remembers
  // `group` to plan again (with one rate-limited warning per group held).
  bool LetIn(uint32_t uid, uint64_t bytes, PlanGroup* group);
  // Adds `delta` to `uid`'s unread bytes. Returns the groups its streams
  // sat out in, for the caller to plan again, once they fall below the
  // allowance (each once).
  [[nodiscard]] std::set<PlanGroup*> Add(uint32_t uid, int64_t delta);
  // Bytes of unread deliveries `uid`'s jobs hold.
  uint64_t Bytes(uint32_t uid) const;
  // `group` is going (a `group=` lane's own): no owner waits on it.
  void Forget(PlanGroup* group);

 private:
  const UnreadLimit limit_;
  // By job owner: unread bytes, and the groups that held its streams back.
  struct Unread {
    uint64_t bytes = 0;
    std::set<PlanGroup*> held_back;
  };
  std::unordered_map<uint32_t, Unread> unread_;
};

}  // namespace joaderfs

#endif  // JOADERFS_JOBS_UNREAD_ALLOWANCE_H_
