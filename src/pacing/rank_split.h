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
// An elastic resume (SplitRest) splits what is left of an epoch, once some
// of its ids were consumed under any number of ranks, the same way.
//
// Pure functions; thread-safe.

#ifndef JOADERFS_PACING_RANK_SPLIT_H_
#define JOADERFS_PACING_RANK_SPLIT_H_

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

// The split of the rest of `epoch` among `ranks` ranks once `consumed` was
// consumed (an elastic resume, docs/design.md 2.7: the union of what the
// ranks of an earlier run, of any number, consumed in it). The rest, the
// subset less `consumed`, is split as SplitEpoch splits a subset: in the
// same keyed-hash order of (epoch, id), padded or cut as DistributedSampler
// pads or cuts, rank r taking positions r, r + W, ... So, with M ids left:
//   - every rank gets RankShardSize(M, W, drop_last) ids, ceil(M/W) or
//     floor(M/W);
//   - before padding the shares are disjoint, differ in size by at most
//     one, and together are the rest: without drop_last the ranks short of
//     ceil(M/W) each get one of the first W - (M mod W) ids of the order a
//     second time (delivered twice in the epoch, as DistributedSampler
//     does); with drop_last the last M mod W ids of the order are left out
//     of the epoch;
//   - it is a function of (subset, consumed, epoch, W, drop_last) alone:
//     neither the mount's nor the job's seed, nor timing, enters it;
//   - with nothing consumed it is SplitEpoch.
// Ids of `consumed` outside the subset are ignored. Every share is empty
// when nothing is left, or when drop_last leaves less than one per rank.
// REQUIRES: ranks >= 1. Costs a sort of the rest.
std::vector<Roaring> SplitRest(const Roaring& subset, const Roaring& consumed, uint64_t epoch,
                               uint32_t ranks, bool drop_last);

}  // namespace joaderfs

#endif  // JOADERFS_PACING_RANK_SPLIT_H_
