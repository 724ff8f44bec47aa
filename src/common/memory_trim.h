// Gives memory that the allocator holds free back to the system.
//
// glibc's malloc keeps freed heap memory in its arenas: after a burst (many
// jobs with thousands of ranks, hundreds of readers, planning rounds of six
// jobs) the daemon's RSS stays at its peak though the memory is free, and
// a cgroup's limit counts it. malloc_trim() returns it; calling it after each
// free would cost throughput, so the daemon asks once a second (from its
// idle reaper, off every request path) and trims only when more than
// `keep_free_bytes` lie free in the arenas.
//
// Thread-safe (glibc takes each arena's lock in turn); holds no lock of ours.

#ifndef JOADERFS_COMMON_MEMORY_TRIM_H_
#define JOADERFS_COMMON_MEMORY_TRIM_H_

#include <cstdint>

namespace joaderfs {

// Bytes malloc holds free (mallinfo2's fordblks, over every arena).
uint64_t MallocFreeBytes();

// Trims when MallocFreeBytes() exceeds `keep_free_bytes`; true if it did.
bool TrimFreeMemory(uint64_t keep_free_bytes);

// What the daemon keeps free without trimming: small enough that RSS
// returns near its resting size, large enough that a steady load of a few
// jobs does not trim every second.
inline constexpr uint64_t kKeepFreeBytes = 8ULL << 20;

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_MEMORY_TRIM_H_
