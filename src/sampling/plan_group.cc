#include "sampling/plan_group.h"

#include <algorithm>
#include <cassert>
#include <string>

namespace joaderfs {

uint64_t CouplingHorizonFor(const BudgetView& budget) {
  return std::clamp<uint64_t>(budget.SamplesHeld() / 2, 16, 4096);
}

PlanGroup::PlanGroup(const PlanGroupOptions& options)
    : options_(options.cadence),
      derive_horizon_(options.dependent_sampling && options.coupling_horizon == 0),
      coupling_horizon_(options.dependent_sampling ? options.coupling_horizon : 0),
      planner_(options.dependent_sampling
                   ? NewDependentPlanner(options.seed, options.coupling_horizon)
                   : NewIndependentPlanner(options.seed)) {}

PlanGroup::PlanGroup(std::unique_ptr<Planner> planner, CadenceOptions options,
                     uint64_t coupling_horizon)
    : options_(options),
      derive_horizon_(false),
      coupling_horizon_(coupling_horizon),
      planner_(std::move(planner)) {}

JobHandle PlanGroup::AddJob(const Roaring& subset, uint64_t window, uint64_t pick_bytes) {
  return ResumeJob(subset, window, pick_bytes, 0, Roaring());
}

JobHandle PlanGroup::ResumeJob(const Roaring& subset, uint64_t window, uint64_t pick_bytes,
                               uint64_t epoch, const Roaring& done) {
  MutexLock lock(mu_);
  const JobHandle job = next_handle_++;
  if (epoch == 0 && done.isEmpty()) {
    planner_->AddJob(job, subset);
  } else {
    planner_->ResumeJob(job, subset, epoch, done);
  }
  Member& m = members_[job];
  m.subset_size = subset.cardinality();
  m.window = window;
  m.pick_bytes = pick_bytes;
  return job;
}

void PlanGroup::RemoveJob(JobHandle job) {
  MutexLock lock(mu_);
  planner_->RemoveJob(job);
  members_.erase(job);
}

void PlanGroup::StartEpoch(JobHandle job) {
  MutexLock lock(mu_);
  Member& m = members_.at(job);
  assert(m.done == m.subset_size);
  planner_->StartEpoch(job);
  m.planned = m.done = m.unlanded = 0;  // every pick is done, so landed
}

void PlanGroup::StartEpoch(JobHandle job, const Roaring& subset) {
  MutexLock lock(mu_);
  Member& m = members_.at(job);
  assert(m.done == m.subset_size);
  planner_->StartEpoch(job, subset);
  m.subset_size = subset.cardinality();
  m.planned = m.done = m.unlanded = 0;
}

void PlanGroup::SetPaused(JobHandle job, bool paused) {
  MutexLock lock(mu_);
  members_.at(job).paused = paused;
}

void PlanGroup::Landed(JobHandle job) {
  MutexLock lock(mu_);
  Member& m = members_.at(job);
  if (m.unlanded > 0) --m.unlanded;
}

void PlanGroup::Done(JobHandle job, SampleId id) {
  MutexLock lock(mu_);
  Member& m = members_.at(job);
  ++m.done;
  auto it = m.outstanding.find(id);
  if (it != m.outstanding.end() && --it->second == 0) m.outstanding.erase(it);
}

uint64_t PlanGroup::FloorPicks(const Member& m, const BudgetView& budget, uint64_t sharers) const {
  const uint64_t per_pick = std::max<uint64_t>(budget.per_sample + m.pick_bytes, 1);
  const uint64_t share = std::max(PlanOverdraft(budget.budget) / std::max<uint64_t>(sharers, 1),
                                  2 * options_.min_lookahead * budget.per_sample);
  return std::clamp<uint64_t>(share / per_pick, 1, std::max<uint64_t>(options_.min_lookahead, 1));
}

uint64_t PlanGroup::LookaheadLimit(const Member& m, uint64_t floor, bool budget_full) const {
  const uint64_t lookahead = std::max(options_.lookahead, m.window + options_.read_ahead);
  floor = std::min(floor, lookahead);
  if (budget_full) return floor;
  return std::clamp<uint64_t>(2 * m.done, floor, lookahead);
}

bool PlanGroup::Wants(const Member& m, uint64_t below) {
  return !m.paused && m.planned < m.subset_size && m.planned - m.done < below;
}

void PlanGroup::Plan(const BudgetView& budget, std::vector<Pick>* picks,
                     const std::function<bool(JobHandle)>& may_plan) {
  MutexLock lock(mu_);
  if (derive_horizon_) {
    const uint64_t horizon = CouplingHorizonFor(budget);
    if (horizon != coupling_horizon_) {
      coupling_horizon_ = horizon;
      planner_->SetCouplingHorizon(horizon);
    }
  }
  // The committed bytes as the cache last saw them and this call's
  // samples, plus what picks not yet landed will make past what may be in
  // transit.
  uint64_t committed = budget.committed;
  uint64_t unlanded = 0;
  uint64_t sharers = 0;
  for (const auto& [job, m] : members_) {
    unlanded += m.unlanded * m.pick_bytes;
    if (!m.paused && m.planned < m.subset_size) ++sharers;
  }
  const auto full = [&] {
    const uint64_t counted =
        unlanded > options_.transit_bytes ? unlanded - options_.transit_bytes : 0;
    return committed + counted >= budget.budget;
  };
  bool low = false;
  for (const auto& [job, m] : members_) {
    const uint64_t limit = LookaheadLimit(m, FloorPicks(m, budget, sharers), full());
    if (Wants(m, limit - std::max<uint64_t>(limit / 8, 1) + 1)) low = true;
  }
  if (!low) return;
  std::vector<JobHandle> participants;
  std::vector<Pick> round;
  std::vector<SampleId> distinct;
  for (;;) {
    participants.clear();
    for (const auto& [job, m] : members_) {
      if (Wants(m, LookaheadLimit(m, FloorPicks(m, budget, sharers), full())) &&
          (!may_plan || may_plan(job))) {
        participants.push_back(job);
      }
    }
    if (participants.empty()) return;
    round.clear();
    planner_->Round(participants, &round);
    if (round.empty()) return;
    distinct.clear();
    for (const Pick& pick : round) {
      Member& m = members_.at(pick.job);
      ++m.planned;
      ++m.outstanding[pick.id];
      if (m.pick_bytes > 0) ++m.unlanded;
      unlanded += m.pick_bytes;
      picks->push_back(pick);
      if (std::find(distinct.begin(), distinct.end(), pick.id) == distinct.end()) {
        distinct.push_back(pick.id);
      }
    }
    committed += distinct.size() * budget.per_sample;
  }
}

void PlanGroup::Counts(std::span<const SampleId> ids, std::span<uint32_t> counts) const {
  MutexLock lock(mu_);
  for (size_t i = 0; i < ids.size(); ++i) {
    uint32_t count = planner_->RefCount(ids[i]);
    for (const auto& [job, m] : members_) count += m.outstanding.count(ids[i]) ? 1 : 0;
    counts[i] = count;
  }
}

uint64_t PlanGroup::SharedPicks(JobHandle job) const {
  MutexLock lock(mu_);
  return planner_->SharedPicks(job);
}

PlannerStats PlanGroup::Stats() const {
  MutexLock lock(mu_);
  return planner_->Stats();
}

size_t PlanGroup::jobs() const {
  MutexLock lock(mu_);
  return members_.size();
}

}  // namespace joaderfs
