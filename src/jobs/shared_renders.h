// SharedRenders: one render of a base image for every job that would make
// the same one.
//
// A centre crop's delivery is a function of the base image, the size and
// whether it is flipped (loader/augment.h), so jobs with the evaluation
// transform at one size, or whose flips agree, would render identical
// pictures: without sharing, N identical jobs resample every image N times.
// A render is kept while some job that could take it (one whose centre
// crops have its size) still holds its sample id planned (Hold/Drop pair
// with the job manager's pins in the RAM tier), so the jobs that planned an
// id together, as dependent sampling makes identical jobs do, render it
// once; a sweep of many sizes keeps no job's render for the others, which
// could never take it. Jobs drift apart, though: a reader the scheduler
// holds back, or a batch read later, puts a peer more than its planned
// queue behind, and it plans the id only after the leader is done with it.
// So once the last holder is done, the renders are kept on while the
// planner says some job still needs the id this epoch (the RefCounts the
// RAM tier evicts base images by), within `keep_bytes`, oldest out first,
// and a Hold of the id takes them back. Without this, two identical jobs
// on a loaded 2-core machine shared 116 of 600 renders. Their bytes count
// in the job manager's rendered bytes as long as they live. Random crops
// are never shared: their boxes differ by job.
//
// Two jobs' hits on one id reach the loader threads at once: the first to
// come claims the picture and cuts it, the other waits for that cut (a
// render is a millisecond or so, and it waits on nothing) instead of making
// the same picture again.
//
// Thread-safe: one mutex of its own, a leaf of the lock order (renders run
// outside it, on loader threads, and the RefCounts are asked outside it).

#ifndef JOADERFS_JOBS_SHARED_RENDERS_H_
#define JOADERFS_JOBS_SHARED_RENDERS_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/ref_counts.h"
#include "common/ranked_mutex.h"
#include "loader/augment.h"
#include "loader/decoded_sample.h"

namespace joaderfs {

class SharedRenders {
 public:
  // `needs` (outliving this) says which ids jobs still need; renders of ids
  // no job holds are kept for them within `keep_bytes`. Without `needs` (or
  // with 0 bytes) renders go with the last holder.
  explicit SharedRenders(const RefCounts* needs = nullptr, uint64_t keep_bytes = 0)
      : needs_(needs), keep_bytes_(keep_bytes) {}

  // The mount's `keep_bytes` for a RAM tier of `ram_budget` bytes: renders
  // kept for lagging peers may take a sixteenth of it, at 224 px a lag of
  // about a tenth of the base images it holds.
  static constexpr uint64_t KeepBytesFor(uint64_t ram_budget) { return ram_budget / 16; }

  // What a job's renders could be shared by: jobs whose centre crops have
  // its size. Random crops, and size-0 jobs that take the base image as it
  // is, share nothing.
  static constexpr uint32_t kSharesNothing = UINT32_MAX;
  static uint32_t ShareKey(const AugmentSpec& spec, uint32_t size, bool renders) {
    return renders && spec.crop != AugmentSpec::Crop::kRandom ? size : kSharesNothing;
  }

  // A job whose renders have ShareKey `key` planned `id` (Hold) or is done
  // with it (Drop): each Hold is matched by one Drop with the same key.
  void Hold(uint64_t id, uint32_t key);
  void Drop(uint64_t id, uint32_t key);
  // Frees the kept renders of ids no job needs any more (their jobs took
  // them, ended their epoch or went): called once a second.
  void Trim();

  // RenderDelivery(base, spec, size, epoch, id, live_bytes), or the same
  // picture another job rendered from this very base image.
  SamplePtr Render(const SamplePtr& base, const AugmentSpec& spec, uint32_t size, uint64_t epoch,
                   uint64_t id, const std::shared_ptr<std::atomic<uint64_t>>& live_bytes);

  uint64_t renders() const { return renders_.load(std::memory_order_relaxed); }
  uint64_t reused() const { return reused_.load(std::memory_order_relaxed); }
  // Ids held, with or without renders kept.
  size_t held_ids() const;
  // Bytes of renders kept for ids nobody holds.
  uint64_t kept_bytes() const;

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
    // Holders by share key (kSharesNothing left out): a few.
    std::vector<std::pair<uint32_t, uint32_t>> by_size;
    std::vector<Variant> variants;  // one per size held and flip
  };
  struct Kept {
    std::vector<Variant> variants;  // each with its render
    uint64_t bytes = 0;
    std::list<uint64_t>::iterator age;  // in kept_order_
  };

  // Keeps `variants` of `id`, which no job of their size holds, beside any
  // kept already, pushing the oldest kept out past keep_bytes_ into `gone`
  // (freed by the caller after the lock).
  void Keep(uint64_t id, std::vector<Variant> variants, std::vector<Variant>* gone) REQUIRES(mu_);
  void Forget(std::unordered_map<uint64_t, Kept>::iterator it, std::vector<Variant>* gone)
      REQUIRES(mu_);

  const RefCounts* const needs_;
  const uint64_t keep_bytes_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Held> held_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Kept> kept_ GUARDED_BY(mu_);
  std::list<uint64_t> kept_order_ GUARDED_BY(mu_);  // oldest first
  uint64_t kept_bytes_ GUARDED_BY(mu_) = 0;
  std::condition_variable_any rendered_;  // a claimed variant was cut
  std::atomic<uint64_t> renders_{0};
  std::atomic<uint64_t> reused_{0};
};

}  // namespace joaderfs

#endif  // JOADERFS_JOBS_SHARED_RENDERS_H_
