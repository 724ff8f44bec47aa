// FileRange: where the bytes of one image lie, a whole file or a run of
// bytes inside one (a member of a tar shard), as the catalog found it.
//
// A plain value; no file is opened here.

#ifndef JOADERFS_COMMON_FILE_RANGE_H_
#define JOADERFS_COMMON_FILE_RANGE_H_

#include <cstdint>
#include <string>

namespace joaderfs {

struct FileRange {
  std::string path;
  // The whole file when false; otherwise `length` bytes at `offset`, read
  // only while the file still has the size, modification time and inode it
  // had at the scan (the offsets would name other bytes in a rewritten file).
  bool partial = false;
  uint64_t offset = 0;
  uint64_t length = 0;
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
