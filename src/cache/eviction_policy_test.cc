#include "cache/eviction_policy.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

#include "sampling/dependent_planner.h"

namespace joaderfs {
namespace {

std::vector<SampleId> Drain(EvictionPolicy& policy) {
  std::vector<SampleId> order;
  while (policy.size() > 0) order.push_back(policy.Evict());
  return order;
}

TEST(EvictionPolicy, LruEvictsLeastRecentlyUsed) {
  auto lru = NewLruPolicy();
  for (SampleId id : {1, 2, 3, 4}) lru->Insert(id);
  lru->Touch(1);
  lru->Touch(3);
  lru->Erase(4);
  EXPECT_EQ(Drain(*lru), (std::vector<SampleId>{2, 1, 3}));
}

TEST(EvictionPolicy, FifoIgnoresTouches) {
  auto fifo = NewFifoPolicy();
  for (SampleId id : {1, 2, 3}) fifo->Insert(id);
  fifo->Touch(1);
  fifo->Erase(2);
  fifo->Insert(2);
  EXPECT_EQ(Drain(*fifo), (std::vector<SampleId>{1, 3, 2}));
}

TEST(EvictionPolicy, RandomIsDeterministicAndUniform) {
  auto a = NewRandomPolicy(3);
  auto b = NewRandomPolicy(3);
  for (SampleId id = 0; id < 50; ++id) {
    a->Insert(id);
    b->Insert(id);
  }
  const std::vector<SampleId> order = Drain(*a);
  EXPECT_EQ(order, Drain(*b));
  EXPECT_EQ(std::set<SampleId>(order.begin(), order.end()).size(), 50u);
  // First victim among 4 entries: 40000 trials, each ~10000 (sd ~87).
  std::map<SampleId, int> first;
  for (uint64_t seed = 0; seed < 40000; ++seed) {
    auto p = NewRandomPolicy(seed);
    for (SampleId id = 0; id < 4; ++id) p->Insert(id);
    ++first[p->Evict()];
  }
  for (const auto& [id, n] : first) EXPECT_NEAR(n, 10000, 500) << id;
}

TEST(EvictionPolicy, RefCntEvictsFewestReferencesFirst) {
  std::map<SampleId, uint32_t> refs = {{1, 2}, {2, 0}, {3, 1}, {4, 1}};
  auto policy = NewRefCntPolicy([&](SampleId id) { return refs.at(id); });
  for (SampleId id : {1, 2, 3, 4}) policy->Insert(id);
  EXPECT_EQ(policy->Evict(), 2u);
  // Ties go to the older entry.
  EXPECT_EQ(policy->Evict(), 3u);
  // A pick lowers a count: only seen after Refresh.
  refs[1] = 0;
  policy->Refresh(1);
  EXPECT_EQ(policy->Evict(), 1u);
  EXPECT_EQ(policy->Evict(), 4u);
  EXPECT_EQ(policy->size(), 0u);
}

TEST(EvictionPolicy, RefCntBreaksTiesByFarthestNextUse) {
  std::map<SampleId, uint32_t> refs = {{1, 1}, {2, 1}, {3, 1}, {4, 0}};
  std::map<SampleId, uint64_t> next = {{1, 10}, {2, kNoPlannedUse}, {3, 30}, {4, 5}};
  auto policy = NewRefCntPolicy([&](SampleId id) { return refs.at(id); },
                                [&](SampleId id) { return next.at(id); });
  for (SampleId id : {1, 2, 3, 4}) policy->Insert(id);
  EXPECT_EQ(Drain(*policy), (std::vector<SampleId>{4, 2, 3, 1}));
}

TEST(EvictionPolicy, RefCntRefreshAllAfterAnEpochStart) {
  std::map<SampleId, uint32_t> refs = {{1, 0}, {2, 1}};
  auto policy = NewRefCntPolicy([&](SampleId id) { return refs.at(id); });
  policy->Insert(1);
  policy->Insert(2);
  refs[1] = 3;  // a job started a new epoch needing 1 again
  policy->RefreshAll();
  EXPECT_EQ(Drain(*policy), (std::vector<SampleId>{2, 1}));
}

TEST(EvictionPolicy, RefCntFollowsThePlanner) {
  auto planner = NewDependentPlanner(1);
  Roaring a, b;
  a.addRange(0, 10);
  b.addRange(5, 15);
  planner->AddJob(0, a);
  planner->AddJob(1, b);
  auto policy = NewRefCntPolicy([&](SampleId id) { return planner->RefCount(id); });
  for (SampleId id : {2, 7, 12}) policy->Insert(id);  // counts 1, 2, 1
  EXPECT_EQ(policy->Evict(), 2u);
  EXPECT_EQ(policy->Evict(), 12u);
  EXPECT_EQ(policy->Evict(), 7u);
}

TEST(CountBoundedCache, CountsHitsAndMissesAndEvicts) {
  CountBoundedCache cache(2, NewLruPolicy());
  EXPECT_FALSE(cache.Access(1));
  EXPECT_FALSE(cache.Access(2));
  EXPECT_TRUE(cache.Access(1));
  EXPECT_FALSE(cache.Access(3));  // evicts 2, the least recently used
  EXPECT_FALSE(cache.Contains(2));
  EXPECT_TRUE(cache.Contains(1));
  EXPECT_TRUE(cache.Contains(3));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.misses(), 3u);
  cache.Refresh(42);  // not cached: ignored
}

TEST(CountBoundedCache, OneSlot) {
  CountBoundedCache cache(1, NewFifoPolicy());
  EXPECT_FALSE(cache.Access(5));
  EXPECT_TRUE(cache.Access(5));
  EXPECT_FALSE(cache.Access(6));
  EXPECT_FALSE(cache.Access(5));
  EXPECT_EQ(cache.misses(), 3u);
}

TEST(EvictionPolicy, ParseKinds) {
  EXPECT_EQ(ParseEvictionKind("refcnt"), EvictionKind::kRefCnt);
  EXPECT_EQ(ParseEvictionKind("lru"), EvictionKind::kLru);
  EXPECT_EQ(ParseEvictionKind("fifo"), EvictionKind::kFifo);
  EXPECT_EQ(ParseEvictionKind("random"), EvictionKind::kRandom);
  EXPECT_EQ(ParseEvictionKind("LRU"), std::nullopt);
}

}  // namespace
}  // namespace joaderfs
