#include "common/memory_trim.h"

#include <malloc.h>

namespace joaderfs {

uint64_t MallocFreeBytes() { return mallinfo2().fordblks; }

bool TrimFreeMemory(uint64_t keep_free_bytes) {
  if (MallocFreeBytes() <= keep_free_bytes) return false;
  malloc_trim(0);
  return true;
}

}  // namespace joaderfs
