// FileRange: where the bytes of one image lie, a whole file or a run of
// bytes inside one (a member of a tar shard), as the catalog found it.
//
// A plain value; no file is opened here.

#ifndef JOADERFS_COMMON_FILE_RANGE_H_
#define JOADERFS_COMMON_FILE_RANGE_H_

#include <cstdint>
#include <string>

namespace joaderfs {

// A file's identity as a stat sees it: size, modification time, inode.
// All 0 for a file that was missing.
struct FileStamp {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t inode = 0;
  bool operator==(const FileStamp&) const = default;
};

struct FileRange {
  std::string path;
  // The whole file when false; otherwise `length` bytes at `offset`.
  bool partial = false;
  uint64_t offset = 0;
  uint64_t length = 0;
  // The file's size, modification time and inode at the scan, the identity
  // its catalog fingerprint names, when `checked`. A member is read only
  // while its shard still has them (the offsets would name other bytes in
  // a rewritten shard). A whole file is read whatever it is now, and the
  // decoder says whether the bytes came from that identity: a decode is
  // kept in the disk tier under the scan's fingerprint only if they did.
  // `checked` false (a path given directly, as in tools and tests, or a
  // sample whose identity the catalog has not taken yet): no identity to
  // compare with.
  bool checked = false;
  uint64_t file_size = 0;
  int64_t mtime_ns = 0;
  uint64_t inode = 0;

  static FileRange WholeFile(std::string p) {
    FileRange r;
    r.path = std::move(p);
    return r;
  }
};

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_FILE_RANGE_H_
