// Parsing of manifest files: `relpath<TAB>label` lines, paths relative to
// the manifest's folder. Pure functions of the text, so that they can be
// tested and fuzzed without files.

#ifndef JOADERFS_CATALOG_MANIFEST_H_
#define JOADERFS_CATALOG_MANIFEST_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace joaderfs {

struct ManifestEntry {
  std::string relpath;
  int64_t label = 0;  // 0..INT32_MAX
};

struct Manifest {
  std::vector<ManifestEntry> entries;  // in file order
  // Lines whose path could name something outside the manifest's folder
  // (see EscapesFolder): left out of `entries`.
  uint64_t rejected = 0;
  size_t first_rejected_line = 0;  // 1-based; 0 when none
  // Lines whose path holds a control character (common/printable.h
  // HasControlByte; a tab before the label's): left out of `entries`.
  uint64_t unprintable = 0;
  size_t first_unprintable_line = 0;
};

// True when `relpath` may name something outside the folder it is
// relative to: an absolute path, one whose `..` components climb above
// it ("a/../../b"), or one holding a NUL byte (the system would read a
// shorter path than the one checked). Symlinks are not resolved: they are
// the dataset owner's to place.
bool EscapesFolder(std::string_view relpath);

// Parses a whole manifest. Blank lines are skipped and a CR before the LF
// is dropped; the label is the digits after the last tab. Fails with
// InvalidArgument ("line N: ...") at the first malformed line.
Status ParseManifest(std::string_view text, Manifest* out);

}  // namespace joaderfs

#endif  // JOADERFS_CATALOG_MANIFEST_H_
