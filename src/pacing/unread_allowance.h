// The per-uid allowance of unread deliveries (docs/design.md 2.2
// "Limits"): the bytes a job owner's streams may hold in picks planned and
// not yet handed out (at their rendered size) and in its readers' queues.
// Past it, its streams plan nothing more until they are read: the groups
// they sat out in plan again once the owner falls below it.
//
// The room that reads free goes first to the owner's starved streams (a
// reader open, nothing in flight), in the order they were turned away, and
// only then to streams that would plan further ahead: a stream that asks
// first cannot keep the room while another one of the same owner waits
// with nothing to read (docs/design.md 2.2, the rule that keeps a uid's
// streams alive).
//
// Not thread-safe: Lanes owns one, guarded by the manager's lock
// (jobs/lanes.h), and does the planning it asks for.

#ifndef JOADERFS_PACING_UNREAD_ALLOWANCE_H_
#define JOADERFS_PACING_UNREAD_ALLOWANCE_H_

#include <cstdint>
#include <deque>
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

  // A stream asking for room: an opaque key (its lane), the group it plans
  // in, and whether it is starved: it has a reader and nothing in flight,
  // so that it cannot go on without room.
  struct Asker {
    const void* stream = nullptr;
    PlanGroup* group = nullptr;
    bool starved = false;
  };
  // The stream would plan (or fetch) a pick of `bytes`: charges it and
  // says yes, or says no and remembers its group to plan again (with one
  // rate-limited warning). Yes needs `uid` below the allowance once the
  // picks of the starved streams queued before the asker are set aside
  // (all of them for a stream that is not starved); a starved stream said
  // no to joins the queue.
  bool LetIn(uint32_t uid, uint64_t bytes, const Asker& asker);
  // Adds `delta` to `uid`'s unread bytes. Returns the groups its streams
  // sat out in, for the caller to plan again, once they are below the
  // allowance (each once).
  [[nodiscard]] std::set<PlanGroup*> Add(uint32_t uid, int64_t delta);
  // `stream` waits no more (its readers went, it was released or dropped):
  // it leaves `uid`'s queue. Returns the groups to plan again if that
  // gives room to the streams behind it.
  [[nodiscard]] std::set<PlanGroup*> Forget(uint32_t uid, const void* stream);
  // Bytes of unread deliveries `uid`'s jobs hold.
  uint64_t Bytes(uint32_t uid) const;
  // `uid`'s starved streams waiting for room.
  size_t Starved(uint32_t uid) const;
  // `group` is going (a `group=` lane's own): no owner waits on it.
  void Forget(PlanGroup* group);

 private:
  struct Waiter {
    const void* stream;
    uint64_t bytes;  // its next pick's
  };
  // By job owner: unread bytes, the groups that held its streams back, and
  // its starved streams in the order they were turned away.
  struct Unread {
    uint64_t bytes = 0;
    std::set<PlanGroup*> held_back;
    std::deque<Waiter> starved;
  };
  // The held groups to plan again if `unread` is below the allowance.
  std::set<PlanGroup*> TakeHeldIfRoom(Unread& unread) const;

  const UnreadLimit limit_;
  std::unordered_map<uint32_t, Unread> unread_;
};

}  // namespace joaderfs

#endif  // JOADERFS_PACING_UNREAD_ALLOWANCE_H_
