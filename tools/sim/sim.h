// The cache-miss simulator of the JOADER appendix, on the daemon's own
// planner and eviction-policy code (no FUSE, no decoding): jobs request one
// id per round, a count-bounded cache serves them.
//
// Time runs in ticks. A job arrives at its start tick and gains `speed`
// rounds of credit per tick; within a tick the planner runs rounds, each
// over the jobs holding a whole round of credit, until none does (speeds
// 1:2:3:4 give rounds of 4, 3, 2 and 1 jobs). A job starts its next epoch as
// soon as one ends, and leaves after its last.
//
// Counting misses: the picks of one round are served together, as the
// daemon's single-flight loader does, so an id picked by several jobs in a
// round is one cache access (a miss or a hit) and its other requests are
// hits. The RefCnt policy reads the planner's RefCount after each round.
//
// Thread-safety: pure functions over their arguments.

#ifndef JOADERFS_TOOLS_SIM_SIM_H_
#define JOADERFS_TOOLS_SIM_SIM_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <roaring/roaring.hh>

#include "cache/eviction_policy.h"
#include "common/status.h"
#include "sampling/planner.h"

namespace joaderfs {

struct SimJob {
  Roaring subset;
  double speed = 1;    // rounds per tick
  uint64_t start = 0;  // tick of arrival
};

// Parses a job list: jobs separated by ';', each "A-B" (ids A..B inclusive)
// or "sample:A-B:K:SEED" (K ids drawn from A..B without replacement by
// SEED). Speeds 1 and start 0.
Status ParseJobs(std::string_view spec, std::vector<SimJob>* jobs);

enum class Sampler { kDependent, kIndependent };

struct MissCount {
  uint64_t misses = 0;
  uint64_t requests = 0;    // ids handed to jobs
  uint64_t union_size = 0;  // distinct ids over all jobs: the fewest misses
};

// One epoch of every job with a cache of `cache_size` (>= 1) ids.
MissCount SimulateMisses(std::span<const SimJob> jobs, Sampler sampler, EvictionKind policy,
                         size_t cache_size, uint64_t seed);

// The daemon's cadence (sampling/plan_group.h, the daemon's own code) for
// one epoch of every job: each job's reader takes its oldest planned sample
// with probability `read_probability` * speed / max speed per step (the
// readers' jitter), the group plans after every step with the lookahead,
// slow start and budget floor the daemon uses, and a RAM tier of `ram`
// samples holds planned samples pinned and evicts the rest by RefCnt over
// the group's need counts. A job's `start` is how many samples job 0 has
// read when it arrives; a job stays in its group after its epoch, as the
// daemon's jobs stay until removed. Misses are decodes.
struct CadenceSim {
  uint64_t ram = 1;  // samples
  uint64_t lookahead = 128;
  uint64_t min_lookahead = 8;
  uint64_t window = 64;
  double read_probability = 0.6;
};
MissCount SimulateCadence(std::span<const SimJob> jobs, Sampler sampler, const CadenceSim& cadence,
                          uint64_t seed);

// Every job's order for `epochs` epochs: result[job][epoch] lists the ids
// in delivery order.
std::vector<std::vector<std::vector<SampleId>>> SimulateOrders(std::span<const SimJob> jobs,
                                                               Sampler sampler, uint32_t epochs,
                                                               uint64_t seed);

}  // namespace joaderfs

#endif  // JOADERFS_TOOLS_SIM_SIM_H_
