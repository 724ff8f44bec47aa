// The vocabulary the parts share: what names a sample and a planning
// participant. Plain integers, declared once here so that no part includes
// another only for a name (catalog/, cache/, sampling/ and jobs/ use them).

#ifndef JOADERFS_COMMON_TYPES_H_
#define JOADERFS_COMMON_TYPES_H_

#include <cstdint>

namespace joaderfs {

// A sample: its index in the catalog (catalog/catalog.h), dense from 0.
using SampleId = uint32_t;
// A participant of a planning group (sampling/planner.h): one job stream.
using JobHandle = uint32_t;

// A label is a class index in 0..kMaxLabel, or -1 for none. The bound keeps
// a crafted label from inflating the class count (/dataset/info, per-class
// tables) while leaving room for the largest label sets in use.
constexpr int64_t kMaxLabel = (int64_t{1} << 24) - 1;

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_TYPES_H_
