// Planner benchmarks against the targets of issue 3 (paper figures in
// brackets):
//   - inserting a job: 128 datasets of 1-2 million ids each, inserted one
//     after the other into one planner; time per insert, target <= 0.05 s
//     [JOADER: 0.57 s];
//   - planning: 8 jobs over 1 million ids each, a whole epoch; target >= 1
//     million ids planned per second on one core;
//   - memory: planner state over the jobs' own roaring bitmaps, target <= 3x
//     ("mem_ratio" at the end of the inserts, "peak_mem_ratio" over an
//     epoch, when picks have punched holes into every set). Range subsets
//     are run containers of a few bytes per 64Ki ids, while a set with
//     random holes needs about a bit per id whatever holds it, so the
//     "..._vs_bitsets" counters also compare with the subsets held without
//     run containers.
//   - ranks: splitting one epoch of ImageNet's 1.28 million ids among W
//     ranks (pacing/rank_split.h), which the job manager does once per epoch
//     of a ranked job, under its lock.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/random.h"
#include "pacing/rank_split.h"
#include "sampling/dependent_planner.h"
#include "sampling/id_sets.h"
#include "thread_cpu.h"

namespace joaderfs {
namespace {

constexpr int kDatasets = 128;
constexpr SampleId kUniverse = 2000000;

// Random subsets (the daemon's random:F specs): each id of 0..2M-1 kept with
// probability F, F uniform in [0.5, 1], so 1-2 million ids each.
const std::vector<Roaring>& RandomDatasets() {
  static const std::vector<Roaring> datasets = [] {
    std::vector<Roaring> out;
    Rng rng(42);
    std::vector<SampleId> ids;
    for (int d = 0; d < kDatasets; ++d) {
      const double fraction = 0.5 + 0.5 * rng.Unit();
      ids.clear();
      for (SampleId id = 0; id < kUniverse; ++id) {
        if (rng.Unit() < fraction) ids.push_back(id);
      }
      out.emplace_back(ids.size(), ids.data());
    }
    return out;
  }();
  return datasets;
}

// Contiguous subsets (classes:A-B specs): 1-2 million ids at random offsets.
const std::vector<Roaring>& RangeDatasets() {
  static const std::vector<Roaring> datasets = [] {
    std::vector<Roaring> out;
    Rng rng(43);
    for (int d = 0; d < kDatasets; ++d) {
      const SampleId size = static_cast<SampleId>(1000000 + rng.Below(1000001));
      const SampleId first = static_cast<SampleId>(rng.Below(kUniverse));
      out.push_back(IdRange(first, first + size - 1));
    }
    return out;
  }();
  return datasets;
}

double SubsetBytes(const std::vector<Roaring>& subsets) {
  size_t bytes = 0;
  for (const Roaring& subset : subsets) {
    bytes += ApproximateRoaringBytes(subset);
  }
  return static_cast<double>(bytes);
}

double BitsetBytes(const std::vector<Roaring>& subsets) {
  size_t bytes = 0;
  for (const Roaring& subset : subsets) {
    bytes += ApproximateRoaringBytes(CopyWithoutRuns(subset));
  }
  return static_cast<double>(bytes);
}

// Time per insert of each of the 128 datasets into one planner (thread CPU
// time, see above).
void InsertJobs(benchmark::State& state, const std::vector<Roaring>& sets) {
  double bytes = 0;
  for (auto _ : state) {
    DependentPlanner planner(1);
    const double begin = ThreadCpuSeconds();
    for (int d = 0; d < kDatasets; ++d) planner.AddJob(d, sets[d]);
    state.SetIterationTime((ThreadCpuSeconds() - begin) / kDatasets);
    bytes = static_cast<double>(planner.MemoryBytes());
  }
  state.counters["mem_ratio"] = bytes / SubsetBytes(sets);
  state.counters["mem_ratio_vs_bitsets"] = bytes / BitsetBytes(sets);
}

void BM_InsertJobRandomSubsets(benchmark::State& state) { InsertJobs(state, RandomDatasets()); }
BENCHMARK(BM_InsertJobRandomSubsets)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_InsertJobRangeSubsets(benchmark::State& state) { InsertJobs(state, RangeDatasets()); }
BENCHMARK(BM_InsertJobRangeSubsets)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);

enum Overlap { kIdentical = 0, kRandom = 1, kNested = 2 };

// 8 jobs of 1 million ids: the same ids, independent random samples of
// 1 million out of 1.33 million, or nested prefixes of 1M, 7/8 M, ... 1/8 M.
std::vector<Roaring> EightJobs(Overlap overlap) {
  std::vector<Roaring> jobs;
  for (uint64_t j = 0; j < 8; ++j) {
    switch (overlap) {
      case kIdentical: jobs.push_back(IdRange(0, 999999)); break;
      case kRandom: jobs.push_back(IdSample(0, 1333332, 1000000, j + 1)); break;
      case kNested:
        jobs.push_back(IdRange(0, static_cast<SampleId>(1000000 / 8 * (8 - j)) - 1));
        break;
    }
  }
  return jobs;
}

// One epoch of every job; argument 1 (speeds) makes job j take part in
// j + 1 rounds out of 8, so rounds are partial. Rates ("ids_per_s") are per
// CPU second, Google Benchmark's default.
void BM_PlanEpoch(benchmark::State& state) {
  const auto overlap = static_cast<Overlap>(state.range(0));
  const bool speeds = state.range(1) != 0;
  const std::vector<Roaring> subsets = EightJobs(overlap);
  uint64_t picks = 0;
  uint64_t shared = 0;
  double peak_bytes = 0;
  for (auto _ : state) {
    state.PauseTiming();
    DependentPlanner planner(7);
    for (JobHandle j = 0; j < 8; ++j) planner.AddJob(j, subsets[j]);
    std::vector<JobHandle> participants;
    std::vector<Pick> out;
    out.reserve(8);
    state.ResumeTiming();
    for (uint64_t round = 0;; ++round) {
      participants.clear();
      for (JobHandle j = 0; j < 8; ++j) {
        if (planner.Remaining(j) == 0) continue;
        if (!speeds || round % 8 <= j) participants.push_back(j);
      }
      if (participants.empty()) break;
      out.clear();
      planner.Round(participants, &out);
      if (round % (1 << 18) == 0) {
        state.PauseTiming();
        peak_bytes = std::max(peak_bytes, static_cast<double>(planner.MemoryBytes()));
        state.ResumeTiming();
      }
    }
    picks = planner.Stats().picks;
    shared = planner.Stats().shared_picks;
  }
  state.SetItemsProcessed(static_cast<int64_t>(picks) * static_cast<int64_t>(state.iterations()));
  state.counters["ids_per_s"] =
      benchmark::Counter(static_cast<double>(picks), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["shared_fraction"] = static_cast<double>(shared) / static_cast<double>(picks);
  state.counters["peak_mem_ratio"] = peak_bytes / SubsetBytes(subsets);
  state.counters["peak_mem_ratio_vs_bitsets"] = peak_bytes / BitsetBytes(subsets);
}
BENCHMARK(BM_PlanEpoch)
    ->ArgNames({"overlap", "speeds"})
    ->Args({kIdentical, 0})
    ->Args({kRandom, 0})
    ->Args({kNested, 0})
    ->Args({kRandom, 1})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

void BM_SplitEpoch(benchmark::State& state) {
  Roaring subset;
  subset.addRange(0, 1281167);
  uint64_t epoch = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(SplitEpoch(subset, epoch++, static_cast<uint32_t>(state.range(0)),
                                        /*drop_last=*/false));
  }
}
BENCHMARK(BM_SplitEpoch)->ArgName("ranks")->Arg(8)->Arg(64)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace joaderfs

BENCHMARK_MAIN();
