// A catalog snapshot: what the walk of an ImageFolder tree found, kept in
// cache_dir (<cache_dir>/<FNV-1a of SOURCE>-catalog1) so that a remount
// lists again only the class folders that changed (catalog.h).
//
// A class is reused when every folder its walk entered (the class folder
// first, then each subfolder, symlinks followed) still has the device,
// inode, modification and change time the snapshot recorded: adding,
// removing or renaming an entry changes both times of its folder. Files are not
// trusted: the scan stats every sample again (a file rewritten in place
// keeps its folder's time), so a remount's identities and fingerprints are
// those a full scan would give.
//
// The file is a header (magic, version, payload length, CRC-32C of the
// payload) and the payload; it is written to a temporary name and renamed.
// Decoding checks every length and offset: a damaged, truncated or hostile
// file is refused with Corruption, never half read.
//
// Pure functions of their arguments but for Read/WriteSnapshotFile;
// thread-compatible.

#ifndef JOADERFS_CATALOG_SNAPSHOT_H_
#define JOADERFS_CATALOG_SNAPSHOT_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "catalog/sample_table.h"
#include "common/status.h"

namespace joaderfs {

// A folder the walk entered, as a stat through its path showed it just
// before it was listed.
struct FolderStamp {
  std::string rel;  // relative to SOURCE
  uint64_t dev = 0;
  uint64_t ino = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;  // also moves on chmod, which mtime does not
};

// One class folder's walk.
struct ClassScan {
  std::string name;
  uint32_t first = 0;  // its samples in the snapshot's table
  uint32_t count = 0;
  // Whether a remount may take it whole: false when a folder changed within
  // two seconds of the scan, where a later change might leave its times
  // as they were (a coarse clock).
  bool reusable = true;
  // What its walk left out (Catalog::special_files(), ScanSkips).
  uint64_t special_files = 0, link_loops = 0, broken_links = 0, revisits = 0, unreadable = 0,
           unprintable = 0;
  std::string first_unprintable;
  std::vector<FolderStamp> folders;
};

struct CatalogSnapshot {
  std::string source;
  std::vector<ClassScan> classes;  // in label order
  SampleTable samples;             // names, folders and labels (no identities)
};

// Corruption naming what is wrong.
Status DecodeSnapshot(std::string_view bytes, CatalogSnapshot* out);

// NotFound when there is no file; Corruption as DecodeSnapshot.
Status ReadSnapshotFile(const std::string& path, CatalogSnapshot* out);
// Writes `path`.tmp, then renames it over `path`.
Status WriteSnapshotFile(const std::string& path, const CatalogSnapshot& snapshot);

}  // namespace joaderfs

#endif  // JOADERFS_CATALOG_SNAPSHOT_H_
