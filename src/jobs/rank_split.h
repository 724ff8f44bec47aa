// The split of one epoch of a data-parallel job among its ranks (docs/design.md
// 2.6): which rank gets which sample.
//
// The subset is ordered by a keyed hash of (epoch, id) whose key is a
// constant of the format (it depends neither on the job nor on the mount's
// seed), padded as torch.utils.data.DistributedSampler pads (the first ids
// of that order repeated until W divides the length) or cut to a multiple
// of W with drop_last, and rank r takes positions r, r + W, ... of it. So:
//   - every rank gets the same count, ceil(S/W) or floor(S/W);
//   - apart from padding the shards are disjoint and together are the
//     subset, and no shard holds an id twice (padding is shorter than W);
//   - the split is a function of (epoch, subset, W, drop_last) alone: two
//     daemons, or two jobs with the same subset and W on one daemon, get
//     identical shards, so ranks on several machines split each epoch with
//     no traffic between daemons, and two such jobs on one machine keep
//     full sharing (rank r of each draws from the same shard);
//   - the shards change every epoch.
// A shard is a set: the order within it is the planner's (uniform, and
// coupled with the other jobs of the mount).
//
// Pure functions; thread-safe.

#ifndef JOADERFS_JOBS_RANK_SPLIT_H_
#define JOADERFS_JOBS_RANK_SPLIT_H_

#include <cstdint>
#include <vector>

#include <roaring/roaring.hh>

#include "catalog/catalog.h"

namespace joaderfs {

// The ids every rank receives in one epoch: ceil(S/W), or floor(S/W) with
// `drop_last`.
uint64_t RankShardSize(uint64_t subset_size, uint32_t ranks, bool drop_last);

// The shards of `epoch`, by rank. REQUIRES: ranks >= 1, subset not empty.
// Costs a sort of the subset.
std::vector<Roaring> SplitEpoch(const Roaring& subset, uint64_t epoch, uint32_t ranks,
                                bool drop_last);

}  // namespace joaderfs

#endif  // JOADERFS_JOBS_RANK_SPLIT_H_
