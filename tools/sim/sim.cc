#include "sim/sim.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/parse.h"
#include "common/random.h"
#include "sampling/id_sets.h"
#include "sampling/plan_group.h"

namespace joaderfs {
namespace {

std::vector<std::string_view> Split(std::string_view s, char separator) {
  std::vector<std::string_view> parts;
  for (;;) {
    const size_t at = s.find(separator);
    parts.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return parts;
    s.remove_prefix(at + 1);
  }
}

bool ParseIdRange(std::string_view s, SampleId* first, SampleId* last) {
  const size_t dash = s.find('-');
  if (dash == std::string_view::npos) return false;
  const auto a = ParseUint(s.substr(0, dash));
  const auto b = ParseUint(s.substr(dash + 1));
  constexpr uint64_t kMax = std::numeric_limits<SampleId>::max();
  if (!a || !b || *a > *b || *b > kMax) return false;
  *first = static_cast<SampleId>(*a);
  *last = static_cast<SampleId>(*b);
  return true;
}

Status ParseJob(std::string_view text, Roaring* subset) {
  auto bad = [text] {
    return Status::InvalidArgument("bad job '" + std::string(text) +
                                   "': expected A-B or sample:A-B:K:SEED");
  };
  SampleId first, last;
  constexpr std::string_view kSample = "sample:";
  if (!text.starts_with(kSample)) {
    if (!ParseIdRange(text, &first, &last)) return bad();
    *subset = IdRange(first, last);
    return Status::Ok();
  }
  const std::vector<std::string_view> fields = Split(text.substr(kSample.size()), ':');
  if (fields.size() != 3 || !ParseIdRange(fields[0], &first, &last)) {
    return bad();
  }
  const auto count = ParseUint(fields[1]);
  const auto seed = ParseUint(fields[2]);
  if (!count || !seed || *count == 0 || *count > static_cast<uint64_t>(last) - first + 1) {
    return bad();
  }
  *subset = IdSample(first, last, *count, *seed);
  return Status::Ok();
}

std::unique_ptr<Planner> MakePlanner(Sampler sampler, uint64_t seed) {
  return sampler == Sampler::kDependent ? NewDependentPlanner(seed) : NewIndependentPlanner(seed);
}

// Sees each round's picks with every job's current epoch.
using RoundFn =
    std::function<void(const std::vector<Pick>& picks, const std::vector<uint32_t>& epoch_of)>;

// Plays the ticks described in sim.h until every job has run `epochs`
// epochs. `counts_changed` runs after arrivals and epoch starts, which
// raise many RefCounts at once.
void PlayTicks(Planner& planner, std::span<const SimJob> jobs, uint32_t epochs,
               const RoundFn& on_round, const std::function<void()>& counts_changed) {
  enum class State { kWaiting, kActive, kDone };
  const size_t n = jobs.size();
  std::vector<State> state(n, State::kWaiting);
  std::vector<double> credit(n, 0);
  std::vector<uint32_t> epoch(n, 0);
  // Speeds such as 0.1 accumulate rounding error; a round of credit is
  // whole within this slack.
  constexpr double kSlack = 1e-9;
  size_t done = 0;
  std::vector<JobHandle> participants;
  std::vector<Pick> picks;
  for (uint64_t tick = 0; done < n; ++tick) {
    bool arrived = false;
    bool any_active = false;
    uint64_t next_start = std::numeric_limits<uint64_t>::max();
    for (size_t j = 0; j < n; ++j) {
      if (state[j] == State::kWaiting && jobs[j].start <= tick) {
        planner.AddJob(static_cast<JobHandle>(j), jobs[j].subset);
        state[j] = State::kActive;
        arrived = true;
      }
      if (state[j] == State::kActive) {
        credit[j] += jobs[j].speed;
        any_active = true;
      } else if (state[j] == State::kWaiting) {
        next_start = std::min(next_start, jobs[j].start);
      }
    }
    if (!any_active) {
      tick = next_start - 1;  // nothing runs until the next arrival
      continue;
    }
    if (arrived) counts_changed();
    for (;;) {
      participants.clear();
      for (size_t j = 0; j < n; ++j) {
        if (state[j] == State::kActive && credit[j] >= 1 - kSlack) {
          participants.push_back(static_cast<JobHandle>(j));
        }
      }
      if (participants.empty()) break;
      picks.clear();
      planner.Round(participants, &picks);
      on_round(picks, epoch);
      bool restarted = false;
      for (JobHandle j : participants) {
        credit[j] -= 1;
        if (planner.Remaining(j) > 0) continue;
        if (++epoch[j] < epochs) {
          planner.StartEpoch(j);
          restarted = true;
        } else {
          planner.RemoveJob(j);
          state[j] = State::kDone;
          ++done;
        }
      }
      if (restarted) counts_changed();
    }
  }
}

}  // namespace

Status ParseJobs(std::string_view spec, std::vector<SimJob>* jobs) {
  jobs->clear();
  for (std::string_view text : Split(spec, ';')) {
    SimJob job;
    Status status = ParseJob(text, &job.subset);
    if (!status.ok()) return status;
    jobs->push_back(std::move(job));
  }
  return Status::Ok();
}

MissCount SimulateMisses(std::span<const SimJob> jobs, Sampler sampler, EvictionKind policy,
                         size_t cache_size, uint64_t seed) {
  auto planner = MakePlanner(sampler, seed);
  CountBoundedCache cache(
      cache_size,
      NewEvictionPolicy(
          policy, [&](SampleId id) { return planner->RefCount(id); }, MixSeed(seed, 1)));
  MissCount count;
  Roaring all;
  for (const SimJob& job : jobs) all |= job.subset;
  count.union_size = all.cardinality();
  std::vector<SampleId> distinct;
  PlayTicks(
      *planner, jobs, 1,
      [&](const std::vector<Pick>& picks, const std::vector<uint32_t>&) {
        count.requests += picks.size();
        distinct.clear();
        for (const Pick& p : picks) {
          if (std::find(distinct.begin(), distinct.end(), p.id) == distinct.end()) {
            distinct.push_back(p.id);
          }
        }
        for (SampleId id : distinct) {
          if (cache.Access(id)) cache.Refresh(id);  // its count just fell
        }
      },
      [&] { cache.RefreshAll(); });
  count.misses = cache.misses();
  return count;
}

namespace {

// The RAM tier for SimulateCadence: `capacity` samples, planned samples
// pinned (never evicted, and allowed past the capacity as in the daemon),
// the others evicted by RefCnt.
class PinningCache {
 public:
  PinningCache(uint64_t capacity, const PlanGroup& group)
      : capacity_(capacity), policy_(NewRefCntPolicy([&group](SampleId id) {
          uint32_t count = 0;
          group.Counts(std::span(&id, 1), std::span(&count, 1));
          return count;
        })) {}

  void Acquire(SampleId id) {
    auto [it, inserted] = pins_.try_emplace(id, 0);
    if (inserted) {
      ++misses_;
    } else if (it->second == 0) {
      policy_->Erase(id);
    }
    ++it->second;
    ++pinned_;
    Evict();
  }

  void Release(SampleId id) {
    auto it = pins_.find(id);
    --pinned_;
    if (--it->second == 0) policy_->Insert(id);
    Evict();
  }

  void RefreshAll() { policy_->RefreshAll(); }
  uint64_t pinned() const { return pinned_; }
  uint64_t misses() const { return misses_; }

 private:
  void Evict() {
    while (pins_.size() > capacity_ && policy_->size() > 0) pins_.erase(policy_->Evict());
  }

  const uint64_t capacity_;
  std::unique_ptr<EvictionPolicy> policy_;
  std::unordered_map<SampleId, uint32_t> pins_;  // cached ids and their pins
  uint64_t pinned_ = 0;                          // pins, counted per pick
  uint64_t misses_ = 0;
};

}  // namespace

MissCount SimulateCadence(std::span<const SimJob> jobs, Sampler sampler, const CadenceSim& sim,
                          uint64_t seed) {
  // The daemon's group, so the planner and its coupling horizon are made
  // from the RAM budget as the daemon makes them.
  PlanGroupOptions options;
  options.cadence.lookahead = sim.lookahead;
  options.cadence.min_lookahead = sim.min_lookahead;
  options.dependent_sampling = sampler == Sampler::kDependent;
  // Mixed as when the group was made per size (size 0): the recorded
  // figures (docs/sim) replay.
  options.seed = MixSeed(seed, 0);
  PlanGroup group(options);
  PinningCache cache(sim.ram, group);
  Rng rng(MixSeed(seed, 2));
  const size_t n = jobs.size();
  double max_speed = 0;
  for (const SimJob& job : jobs) max_speed = std::max(max_speed, job.speed);
  std::vector<JobHandle> handle(n);
  std::unordered_map<JobHandle, size_t> job_of;
  std::vector<bool> arrived(n, false);
  std::vector<std::deque<SampleId>> queue(n);  // planned, not yet read
  std::vector<uint64_t> read(n, 0);
  MissCount count;
  Roaring all;
  for (const SimJob& job : jobs) all |= job.subset;
  count.union_size = all.cardinality();
  size_t finished = 0;
  std::vector<Pick> picks;
  while (finished < n) {
    bool arrivals = false;
    for (size_t j = 0; j < n; ++j) {
      if (!arrived[j] && (j == 0 || read[0] >= jobs[j].start)) {
        handle[j] = group.AddJob(jobs[j].subset, sim.window);
        job_of[handle[j]] = j;
        arrived[j] = true;
        arrivals = true;
      }
    }
    if (arrivals) cache.RefreshAll();
    for (size_t j = 0; j < n; ++j) {
      if (!arrived[j] || queue[j].empty()) continue;
      if (rng.Unit() >= sim.read_probability * jobs[j].speed / max_speed) continue;
      const SampleId id = queue[j].front();
      queue[j].pop_front();
      cache.Release(id);
      group.Done(handle[j], id);
      if (++read[j] == jobs[j].subset.cardinality()) ++finished;
    }
    picks.clear();
    group.Plan({cache.pinned(), sim.ram, 1}, &picks);
    for (const Pick& pick : picks) {
      const size_t j = job_of.at(pick.job);
      queue[j].push_back(pick.id);
      cache.Acquire(pick.id);
      ++count.requests;
    }
  }
  count.misses = cache.misses();
  return count;
}

std::vector<std::vector<std::vector<SampleId>>> SimulateOrders(std::span<const SimJob> jobs,
                                                               Sampler sampler, uint32_t epochs,
                                                               uint64_t seed) {
  auto planner = MakePlanner(sampler, seed);
  std::vector<std::vector<std::vector<SampleId>>> orders(
      jobs.size(), std::vector<std::vector<SampleId>>(epochs));
  PlayTicks(
      *planner, jobs, epochs,
      [&](const std::vector<Pick>& picks, const std::vector<uint32_t>& epoch_of) {
        for (const Pick& p : picks) {
          orders[p.job][epoch_of[p.job]].push_back(p.id);
        }
      },
      [] {});
  return orders;
}

}  // namespace joaderfs
