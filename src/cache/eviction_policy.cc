#include "cache/eviction_policy.h"

#include <cassert>
#include <list>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/random.h"

namespace joaderfs {
namespace {

class RefCntPolicy final : public EvictionPolicy {
 public:
  RefCntPolicy(RefCountFn ref_count, NextUseFn next_use)
      : ref_count_(std::move(ref_count)), next_use_(std::move(next_use)) {}

  void Insert(SampleId id) override {
    assert(!keys_.contains(id));
    Place(id, next_seq_++);
  }

  void Touch(SampleId) override {}

  void Erase(SampleId id) override {
    auto it = keys_.find(id);
    order_.erase(it->second);
    keys_.erase(it);
  }

  void Refresh(SampleId id) override {
    auto it = keys_.find(id);
    const uint64_t seq = std::get<2>(it->second);
    order_.erase(it->second);
    keys_.erase(it);
    Place(id, seq);
  }

  void RefreshAll() override {
    std::vector<std::pair<SampleId, uint64_t>> all;
    all.reserve(keys_.size());
    for (const auto& [id, key] : keys_) all.push_back({id, std::get<2>(key)});
    keys_.clear();
    order_.clear();
    for (const auto& [id, seq] : all) Place(id, seq);
  }

  SampleId Evict() override {
    const Key key = *order_.begin();
    const SampleId id = std::get<3>(key);
    order_.erase(order_.begin());
    keys_.erase(id);
    return id;
  }

  size_t size() const override { return keys_.size(); }

 private:
  // Ascending: fewest jobs needing it, then farthest next use (stored as
  // its complement), then oldest insertion; the id makes keys unique.
  using Key = std::tuple<uint32_t, uint64_t, uint64_t, SampleId>;

  void Place(SampleId id, uint64_t seq) {
    const uint64_t next = next_use_ ? next_use_(id) : kNoPlannedUse;
    const Key key{ref_count_(id), kNoPlannedUse - next, seq, id};
    order_.insert(key);
    keys_.emplace(id, key);
  }

  RefCountFn ref_count_;
  NextUseFn next_use_;
  std::set<Key> order_;
  std::unordered_map<SampleId, Key> keys_;
  uint64_t next_seq_ = 0;
};

// LRU and FIFO: a list in eviction order; LRU moves touched entries to the
// back.
class ListPolicy final : public EvictionPolicy {
 public:
  explicit ListPolicy(bool move_on_touch) : move_on_touch_(move_on_touch) {}

  void Insert(SampleId id) override {
    assert(!where_.contains(id));
    where_.emplace(id, list_.insert(list_.end(), id));
  }

  void Touch(SampleId id) override {
    if (!move_on_touch_) return;
    auto it = where_.at(id);
    list_.splice(list_.end(), list_, it);
  }

  void Erase(SampleId id) override {
    auto it = where_.find(id);
    list_.erase(it->second);
    where_.erase(it);
  }

  SampleId Evict() override {
    const SampleId id = list_.front();
    list_.pop_front();
    where_.erase(id);
    return id;
  }

  size_t size() const override { return where_.size(); }

 private:
  bool move_on_touch_;
  std::list<SampleId> list_;
  std::unordered_map<SampleId, std::list<SampleId>::iterator> where_;
};

class RandomPolicy final : public EvictionPolicy {
 public:
  explicit RandomPolicy(uint64_t seed) : rng_(seed) {}

  void Insert(SampleId id) override {
    assert(!index_.contains(id));
    index_.emplace(id, ids_.size());
    ids_.push_back(id);
  }

  void Touch(SampleId) override {}

  void Erase(SampleId id) override { RemoveAt(index_.at(id)); }

  SampleId Evict() override {
    const size_t at = rng_.Below(ids_.size());
    const SampleId id = ids_[at];
    RemoveAt(at);
    return id;
  }

  size_t size() const override { return ids_.size(); }

 private:
  void RemoveAt(size_t at) {
    index_.erase(ids_[at]);
    if (at + 1 != ids_.size()) {
      ids_[at] = ids_.back();
      index_[ids_[at]] = at;
    }
    ids_.pop_back();
  }

  Rng rng_;
  std::vector<SampleId> ids_;
  std::unordered_map<SampleId, size_t> index_;
};

}  // namespace

std::optional<EvictionKind> ParseEvictionKind(std::string_view name) {
  if (name == "refcnt") return EvictionKind::kRefCnt;
  if (name == "lru") return EvictionKind::kLru;
  if (name == "fifo") return EvictionKind::kFifo;
  if (name == "random") return EvictionKind::kRandom;
  return std::nullopt;
}

std::unique_ptr<EvictionPolicy> NewRefCntPolicy(RefCountFn ref_count, NextUseFn next_use) {
  return std::make_unique<RefCntPolicy>(std::move(ref_count), std::move(next_use));
}

std::unique_ptr<EvictionPolicy> NewLruPolicy() {
  return std::make_unique<ListPolicy>(/*move_on_touch=*/true);
}

std::unique_ptr<EvictionPolicy> NewFifoPolicy() {
  return std::make_unique<ListPolicy>(/*move_on_touch=*/false);
}

std::unique_ptr<EvictionPolicy> NewRandomPolicy(uint64_t seed) {
  return std::make_unique<RandomPolicy>(seed);
}

std::unique_ptr<EvictionPolicy> NewEvictionPolicy(EvictionKind kind, RefCountFn ref_count,
                                                  uint64_t seed) {
  switch (kind) {
    case EvictionKind::kRefCnt: return NewRefCntPolicy(std::move(ref_count));
    case EvictionKind::kLru: return NewLruPolicy();
    case EvictionKind::kFifo: return NewFifoPolicy();
    case EvictionKind::kRandom: return NewRandomPolicy(seed);
  }
  return nullptr;
}

CountBoundedCache::CountBoundedCache(size_t capacity, std::unique_ptr<EvictionPolicy> policy)
    : capacity_(capacity), policy_(std::move(policy)) {
  assert(capacity_ > 0);
}

bool CountBoundedCache::Access(SampleId id) {
  if (cached_.contains(id)) {
    policy_->Touch(id);
    ++hits_;
    return true;
  }
  ++misses_;
  if (cached_.size() >= capacity_) cached_.erase(policy_->Evict());
  cached_.insert(id);
  policy_->Insert(id);
  return false;
}

void CountBoundedCache::Refresh(SampleId id) {
  if (cached_.contains(id)) policy_->Refresh(id);
}

}  // namespace joaderfs
