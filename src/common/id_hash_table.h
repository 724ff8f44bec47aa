// IdHashTable: sample ids found by a hash of their key, which the caller
// keeps (a relpath in the catalog's sample table, a tar member's name).
// Open addressing with linear probing, a power of two long and at most 70%
// full; each slot holds an id + 1, 0 when empty: 4 bytes a slot, 4-12 bytes
// an id. The caller hashes and compares keys; the table holds no key.
//
// Built by one thread (Reset, then Insert); immutable and safe for
// concurrent Find afterwards.

#ifndef JOADERFS_COMMON_ID_HASH_TABLE_H_
#define JOADERFS_COMMON_ID_HASH_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/types.h"

namespace joaderfs {

class IdHashTable {
 public:
  // Empties the table and makes room for `ids` ids.
  void Reset(size_t ids) {
    size_t slots = 16;
    while (slots * 7 < ids * 10) slots *= 2;
    slots_.assign(slots, 0);
  }

  // Adds `id` under `hash`, unless `same_key(held)` says an id already there
  // has its key: the first id keeps a key listed twice.
  template <typename SameKey>
  void Insert(uint64_t hash, SampleId id, SameKey same_key) {
    const size_t mask = slots_.size() - 1;
    for (size_t slot = static_cast<size_t>(hash) & mask;; slot = (slot + 1) & mask) {
      const uint32_t held = slots_[slot];
      if (held == 0) {
        slots_[slot] = id + 1;
        return;
      }
      if (same_key(held - 1)) return;
    }
  }

  // The id under `hash` for which `matches(id)` holds.
  template <typename Matches>
  std::optional<SampleId> Find(uint64_t hash, Matches matches) const {
    if (slots_.empty()) return {};
    const size_t mask = slots_.size() - 1;
    for (size_t slot = static_cast<size_t>(hash) & mask;; slot = (slot + 1) & mask) {
      const uint32_t held = slots_[slot];
      if (held == 0) return {};
      if (matches(held - 1)) return held - 1;
    }
  }

  size_t bytes() const { return slots_.capacity() * sizeof(uint32_t); }

 private:
  std::vector<uint32_t> slots_;
};

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_ID_HASH_TABLE_H_
