// SourceReader: reads the encoded bytes of SOURCE images (through its
// catalog/source_store.h SourceStore: files, or objects) on I/O threads of its own, apart from the
// decode pool, with a deadline per read, so that a file whose reads never return (a hung network
// filesystem) costs an I/O thread and that sample, never a decode thread that other jobs need.
//
// - Deadline: a read that has run `timeout` fails with IOError naming the
//   timeout; its result is dropped when it finally returns.
// - Stuck threads: the thread of a timed-out read is replaced while fewer
//   than `threads` + `max_extra_threads` exist; once every thread is stuck,
//   reads fail at once. A stuck thread whose read returns serves again if a
//   thread is missing, else ends. A read
//   of a path whose earlier read is still stuck fails at once too (a tar
//   shard's members share its path), without taking a thread.
// - Bytes in flight: a read starts only while the bytes of reads running and
//   of results not yet released (the Bytes handed to `done`, freed once
//   decoded) stay within `max_bytes_in_flight`; one read always may.
// - Coalescing: queued members of one tar shard that lie near each other
//   are read as one range (SourceReaderOptions coalesce_*) and split; the
//   range has one deadline, fails for all of them, and counts as one read
//   stuck on its path. Each member counts as a read in the stats, its own
//   bytes in flight once read.
//
// Thread-safe. `done` is called exactly once per Read() until Stop(): on an
// I/O thread, on the deadline's watchdog thread, or on the caller's when the
// read fails at once. It must be short and must not block (hand the work to
// the decode pool). Stop() drops the reads not yet finished without calling
// their `done`, and returns without waiting for stuck threads: those are
// detached and, when their read returns, touch only state they share
// ownership of (never the SourceReader or a callback), so the daemon exits
// on unmount even while reads are blocked.

#ifndef JOADERFS_LOADER_SOURCE_READER_H_
#define JOADERFS_LOADER_SOURCE_READER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "catalog/source_store.h"
#include "common/file_range.h"
#include "common/latency_histogram.h"
#include "common/status.h"

namespace joaderfs {

struct SourceReaderOptions {
  unsigned threads = 4;  // I/O threads not stuck; at least 1
  // Threads started beyond `threads` to replace stuck ones, at most.
  unsigned max_extra_threads = 16;
  std::chrono::steady_clock::duration timeout = std::chrono::seconds(30);
  uint64_t max_bytes_in_flight = uint64_t{256} << 20;
  // Coalescing: a thread that takes a member of a tar shard also takes the
  // queued members of that shard (same path and identity) near it, and
  // reads them as one range, while each gap between them is at most
  // `coalesce_max_gap` and the span at most `coalesce_max_span` (0: never).
  // A gap read costs its bytes' transfer, a request saved a round trip:
  // 256 KiB takes ~2.5 ms at 100 MB/s, below an object store's round trip
  // (10-100 ms), and shards' neighbouring images lie a few small members
  // (.cls, .json) apart.
  uint64_t coalesce_max_gap = uint64_t{256} << 10;
  uint64_t coalesce_max_span = uint64_t{8} << 20;
  // Where ranges are read (the catalog's store()): local files by default.
  std::shared_ptr<const SourceStore> store = LocalSourceStore();
};

struct SourceReaderStats {
  double wait_seconds = 0;     // time reads took, summed (timed-out ones until their deadline)
  uint64_t bytes = 0;          // bytes read successfully
  uint64_t reads = 0;          // reads finished (either way)
  uint64_t coalesced = 0;      // reads served by another's read of their shard: requests saved
  uint64_t timed_out = 0;      // reads failed at their deadline
  uint64_t refused = 0;        // failed at once: their path still stuck, or too many stuck threads
  uint64_t stuck_threads = 0;  // threads whose read passed its deadline and has not returned
  uint64_t threads = 0;        // I/O threads now, stuck ones included
  uint64_t bytes_in_flight = 0;
  uint64_t max_bytes_in_flight = 0;         // the bound: SourceReaderOptions::max_bytes_in_flight
  uint64_t queued = 0;                      // reads waiting for a thread or for room in flight
  uint64_t running = 0;                     // requests running now (a coalesced range is one)
  LatencyHistogram::Snapshot read_latency;  // each read's time: a local read, an S3 GET
};

class SourceReader {
 public:
  // The bytes of one read; held bytes count as in flight until freed.
  using Bytes = std::shared_ptr<const std::string>;
  struct Result {
    Status status;
    Bytes bytes;              // null unless `status` is ok
    bool as_scanned = false;  // as ReadImageBytes says
    FileStamp seen;           // ... and the identity its bytes came from (a whole file's)
    // Failed by the deadline, or at once because the path's earlier read
    // or every thread was stuck: the file was not (fully) looked at, and
    // looking at it again (a stat) may hang as well.
    bool stuck = false;
  };
  using Done = std::function<void(Result result)>;

  explicit SourceReader(SourceReaderOptions options);
  ~SourceReader();  // Stop()
  SourceReader(const SourceReader&) = delete;
  SourceReader& operator=(const SourceReader&) = delete;

  // Reads `range` (at most `max_bytes`, as ReadImageBytes) and calls `done`.
  // `expected_bytes` is what it counts in flight until the file's size is
  // known (0: unknown).
  void Read(FileRange range, uint64_t max_bytes, uint64_t expected_bytes, Done done);
  // Drops every read not finished (their `done` is never called, nor is
  // that of a later Read()) and returns once no `done` is running, without
  // waiting for threads in a read: idle threads end, and a thread whose read
  // returns later drops its result and ends. Idempotent.
  void Stop();

  SourceReaderStats Stats() const;
  const SourceReaderOptions& options() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::thread watchdog_;  // fails reads at their deadline; never does I/O, so joined
};

}  // namespace joaderfs

#endif  // JOADERFS_LOADER_SOURCE_READER_H_
