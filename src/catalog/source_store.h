// SourceStore: where the bytes of SOURCE's images come from. The catalog
// makes the one of its SOURCE (catalog.h Catalog::store()): local files, or
// the objects of an S3 bucket. The I/O threads (loader/source_reader.h) read
// through it and the RAM tier asks it whether a failed image changed
// (cache/sample_cache.h), so neither knows which it is.
//
// Identity: a local file's is its size, modification time and inode; an
// object's its size and ETag, whose 64-bit digest stands in a FileRange's
// `inode` (and mtime_ns is 0), so that the catalog's fingerprints, and the
// disk tier's keys made from them, change when an object does.
//
// Implementations are immutable and thread-safe.

#ifndef JOADERFS_CATALOG_SOURCE_STORE_H_
#define JOADERFS_CATALOG_SOURCE_STORE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <sys/stat.h>

#include "common/file_range.h"
#include "common/status.h"

namespace joaderfs {

// What a file or object looks like now; size -1 when it cannot be looked at.
struct SourceIdentity {
  int64_t size = -1;
  int64_t version = -1;  // a file's mtime in ns; an object's ETag digest
  bool operator==(const SourceIdentity&) const = default;
};

// Figures of the store's own requests (the I/O threads count their reads
// in loader/source_reader.h); all 0 for local files.
struct SourceStoreStats {
  uint64_t requests = 0;  // GET attempts
  uint64_t retries = 0;   // attempts after a failure that may pass
  uint64_t failures = 0;  // requests failed for good
};

class SourceStore {
 public:
  virtual ~SourceStore() = default;
  // Reads the bytes of `range` with ReadImageBytes's contract (below): at
  // most `max_bytes`; `*as_scanned` when they came from the identity the
  // scan saw; a member of a shard that changed since fails. `*seen` (when
  // not null): a local file's identity as its bytes were read; an object's
  // is left as it is (the listing gave every object's).
  virtual Status Read(const FileRange& range, uint64_t max_bytes, std::string* out,
                      bool* as_scanned, FileStamp* seen) const = 0;
  virtual SourceIdentity Identify(const std::string& path) const = 0;
  virtual SourceStoreStats Stats() const { return {}; }
  // One request's round trip as measured at mount (the fastest of three
  // HEADs of one object); zero for local files.
  virtual std::chrono::microseconds RoundTrip() const { return {}; }
};

// Reads the bytes of the local file `range` names, at most `max_bytes`
// (else Corruption), opening it without blocking and refusing what is not a
// regular file (IOError). `*as_scanned`: a whole file has the size, time
// and inode the scan saw (a `checked` range); a shard member without them
// fails. A file rewritten while read fails too. `*seen` (when not null):
// the identity of the open descriptor the bytes were read from.
Status ReadImageBytes(const FileRange& range, uint64_t max_bytes, std::string* out,
                      bool* as_scanned, FileStamp* seen = nullptr);

// A local file's identity as `st` (its stat) gives it.
FileStamp StampOf(const struct stat& st);

// Local files (a process-wide instance). An S3 bucket's store is made with
// its catalog (catalog/s3_source.cc).
std::shared_ptr<const SourceStore> LocalSourceStore();

}  // namespace joaderfs

#endif  // JOADERFS_CATALOG_SOURCE_STORE_H_
