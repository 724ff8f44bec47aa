// RefCounts: what the cache tiers ask of the planners to choose victims.
//
// Implemented by the mount's planning group (sampling/plan_group.h), whose
// lock ranks below the tiers' (common/ranked_mutex.h): the tiers call it
// under their own locks, and it never calls back up.

#ifndef JOADERFS_CACHE_REF_COUNTS_H_
#define JOADERFS_CACHE_REF_COUNTS_H_

#include <cstdint>
#include <span>

#include "common/types.h"

namespace joaderfs {

class RefCounts {
 public:
  virtual ~RefCounts() = default;
  // Fills counts[i] with how many jobs still need ids[i] in their current
  // epoch, samples planned and not yet delivered included. Thread-safe.
  virtual void Counts(std::span<const SampleId> ids, std::span<uint32_t> counts) const = 0;
};

}  // namespace joaderfs

#endif  // JOADERFS_CACHE_REF_COUNTS_H_
