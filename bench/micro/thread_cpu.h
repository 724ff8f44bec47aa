// CPU time of the calling thread (or of the whole process, background
// threads included), for the benchmarks: the machines that run them are
// shared, and their targets are per core.

#ifndef JOADERFS_BENCH_THREAD_CPU_H_
#define JOADERFS_BENCH_THREAD_CPU_H_

#include <time.h>

namespace joaderfs {

inline double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

inline double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace joaderfs

#endif  // JOADERFS_BENCH_THREAD_CPU_H_
