#include "common/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <climits>

namespace joaderfs {

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  // ISA-L's iSCSI CRC is CRC-32C without the final inversion, and its
  // length an int: longer buffers go in pieces.
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  uint32_t state = ~crc;
  while (n > 0) {
    const size_t piece = std::min<size_t>(n, INT_MAX);
    state = crc32_iscsi(p, static_cast<int>(piece), state);
    p += piece;
    n -= piece;
  }
  return ~state;
}

uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

}  // namespace joaderfs
