// Faults in the pages of a buffer that will outlive the call that fills it
// (a base image the cache keeps): such a buffer is mostly fresh memory from
// the kernel, and one madvise(MADV_POPULATE_WRITE) maps all of its pages
// where the writes that fill it would trap once a page, for about a third
// less CPU (docs/benchmarks.md, "A base's pages faulted in at once").
//
// Best effort: a kernel before 5.14 refuses it, and the writes fault the
// pages in as before. Only whole pages inside the buffer are touched; the
// contents are left as they are. Thread-safe.

#ifndef JOADERFS_COMMON_POPULATE_PAGES_H_
#define JOADERFS_COMMON_POPULATE_PAGES_H_

#include <cstddef>

namespace joaderfs {

void PopulatePages(void* buffer, size_t bytes);

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_POPULATE_PAGES_H_
