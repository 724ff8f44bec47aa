// Fixed-width integers in byte buffers, for the formats the daemon writes:
// the disk tier's slots and index (cache/disk_cache.cc), the stream records
// (records/record.cc) and the job store's keys (store/job_store.cc).
//
// Native order is little-endian, the order of those formats (checked
// below); the BigEndian helpers are for RocksDB keys, whose bytewise order
// must be the numbers' order. Callers check lengths; these never do.

#ifndef JOADERFS_COMMON_CODING_H_
#define JOADERFS_COMMON_CODING_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

namespace joaderfs {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the formats are little-endian");

// Writes `v` at `at`.
template <typename T>
void EncodeFixed(void* at, T v) {
  static_assert(std::is_integral_v<T>);
  std::memcpy(at, &v, sizeof v);
}

// Appends `v` to `out`.
template <typename T>
void PutFixed(std::string* out, T v) {
  static_assert(std::is_integral_v<T>);
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

// Reads a T at `at`.
template <typename T>
T DecodeFixed(const void* at) {
  static_assert(std::is_integral_v<T>);
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

// Appends the low `bytes` bytes of `v`, most significant first.
inline void PutBigEndian(std::string* out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Reads `bytes` bytes at in[at], most significant first.
inline uint64_t DecodeBigEndian(std::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(in[at + i]);
  return v;
}

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_CODING_H_
