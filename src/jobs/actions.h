// Work decided under the manager's lock and done after it is dropped: cache
// requests (whose callbacks may re-enter the manager), replies to readers,
// the job store's hand-out writes. The only way to make an Actions list is
// an ActionsLock, which takes the lock and, when destroyed, drops it first
// and then runs the list in the order added: no caller can order the two
// wrongly. Functions that decide under the lock take an Actions* and add to
// it.
//
// Not thread-safe: an Actions belongs to the thread whose ActionsLock made
// it, and is added to only under that lock.

#ifndef JOADERFS_JOBS_ACTIONS_H_
#define JOADERFS_JOBS_ACTIONS_H_

#include <functional>
#include <utility>
#include <vector>

#include "common/ranked_mutex.h"

namespace joaderfs {

template <typename M>
class ActionsLock;

class Actions {
 public:
  Actions(const Actions&) = delete;
  Actions& operator=(const Actions&) = delete;
  void Add(std::function<void()> action) { actions_.push_back(std::move(action)); }

 private:
  template <typename M>
  friend class ActionsLock;
  Actions() = default;
  ~Actions() = default;
  void Run() {
    for (auto& action : actions_) action();
  }

  std::vector<std::function<void()>> actions_;
};

// Holds `mu` for its scope, and owns the Actions decided under it, which
// run once `mu` is dropped, as the scope ends.
template <typename M>
class SCOPED_CAPABILITY ActionsLock {
 public:
  explicit ActionsLock(M& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~ActionsLock() RELEASE() {
    mu_.unlock();
    actions_.Run();
  }
  ActionsLock(const ActionsLock&) = delete;
  ActionsLock& operator=(const ActionsLock&) = delete;

  Actions* actions() { return &actions_; }

 private:
  M& mu_;
  Actions actions_;
};

}  // namespace joaderfs

#endif  // JOADERFS_JOBS_ACTIONS_H_
