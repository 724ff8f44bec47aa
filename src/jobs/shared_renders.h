// SharedRenders: one render of a base image for every job that would make
// the same one.
//
// A centre crop's delivery is a function of the base image, the size and
// whether it is flipped (loader/augment.h), so jobs with the evaluation
// transform at one size, or whose flips agree, would render identical
// pictures: without sharing, N identical jobs resample every image N times.
// A render is kept while some job still holds its sample id planned
// (Hold/Drop pair with the job manager's pins in the RAM tier), so the
// jobs that planned an id together, as dependent sampling makes identical
// jobs do, render it once; once the last of them is done with the id its
// renders go. Their bytes count in the job manager's rendered bytes as long
// as they live. Random crops are never shared: their boxes differ by job.
//
// Two jobs' hits on one id reach the loader threads at once: the first to
// come claims the picture and cuts it, the other waits for that cut (a
// render is a millisecond or so, and it waits on nothing) instead of making
// the same picture again.
//
// Thread-safe: one mutex of its own, a leaf of the lock order (renders run
// outside it, on loader threads).

#ifndef JOADERFS_JOBS_SHARED_RENDERS_H_
#define JOADERFS_JOBS_SHARED_RENDERS_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/ranked_mutex.h"
#include "loader/augment.h"
#include "loader/decoded_sample.h"

namespace joaderfs {

class SharedRenders {
 public:
  // A job planned `id` (Hold) or is done with it (Drop): each Hold is
  // matched by one Drop.
  void Hold(uint64_t id);
  void Drop(uint64_t id);

  // RenderDelivery(base, spec, size, epoch, id, live_bytes), or the same
  // picture another job rendered from this very base image.
  SamplePtr Render(const SamplePtr& base, const AugmentSpec& spec, uint32_t size, uint64_t epoch,
                   uint64_t id, const std::shared_ptr<std::atomic<uint64_t>>& live_bytes);

  uint64_t renders() const { return renders_.load(std::memory_order_relaxed); }
  uint64_t reused() const { return reused_.load(std::memory_order_relaxed); }
  // Ids held, with or without renders kept.
  size_t held_ids() const;

 private:
  struct Variant {
    uint32_t size = 0;
    bool flipped = false;
    // The base image it was cut from: a re-decoded base (the file changed,
    // or it was evicted and loaded again) is another object, never matched.
    std::weak_ptr<const DecodedSample> base;
    SamplePtr render;  // null while a loader thread cuts it
  };
  struct Held {
    uint32_t holders = 0;
    std::vector<Variant> variants;  // a few: one per size and flip in use
  };

  mutable Mutex mu_;
  std::unordered_map<uint64_t, Held> held_ GUARDED_BY(mu_);
  std::condition_variable_any rendered_;  // a claimed variant was cut
  std::atomic<uint64_t> renders_{0};
  std::atomic<uint64_t> reused_{0};
};

}  // namespace joaderfs

#endif  // JOADERFS_JOBS_SHARED_RENDERS_H_
