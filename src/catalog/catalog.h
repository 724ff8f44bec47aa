// The catalog: every sample of SOURCE with its id, label and path.
//
// SOURCE is an ImageFolder tree (SOURCE/<class>/.../<image>; classes sorted
// by name get labels 0..C-1; ids 0..N-1 follow the relative paths sorted
// component by component, which is torchvision's ImageFolder order) or a
// manifest file (`relpath<TAB>label` lines, paths relative to the manifest's
// folder, ids in file order).
//
// Only regular files (symlinks followed: datasets link class folders to
// other disks) become samples, so that no decode opens a FIFO or a device;
// manifest paths that could leave the manifest's folder are rejected. Both
// are counted and logged once, at Open(). Ids follow the samples kept.
//
// Immutable after Open(); safe for concurrent access.

#ifndef JOADERFS_CATALOG_CATALOG_H_
#define JOADERFS_CATALOG_CATALOG_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <roaring/roaring.hh>

#include "common/status.h"
#include "common/types.h"

namespace joaderfs {

using SampleId = uint32_t;

class Catalog {
 public:
  // Scans SOURCE. Fails with NotFound when it does not exist, and with
  // InvalidArgument when it holds no image or a manifest line is malformed.
  static Status Open(const std::string& source, std::unique_ptr<Catalog>* out);

  const std::string& source() const { return source_; }
  size_t size() const { return entries_.size(); }
  // Image names that were not regular files at the scan (FIFOs, devices,
  // sockets, folders, broken symlinks): left out.
  uint64_t special_files() const { return special_files_; }
  // Manifest paths that could leave its folder (manifest.h): left out.
  uint64_t rejected_paths() const { return rejected_paths_; }
  uint32_t num_classes() const { return num_classes_; }

  const std::string& relpath(SampleId id) const { return entries_[id].relpath; }
  int64_t label(SampleId id) const { return entries_[id].label; }
  // The file to read for `id`.
  std::string path(SampleId id) const { return root_ + "/" + entries_[id].relpath; }

  // Ids whose label lies in [first, last].
  Roaring IdsWithLabels(int64_t first, int64_t last) const;
  std::optional<SampleId> FindRelpath(std::string_view relpath) const;

  // A digest of the sample's relative path, label, file size, modification
  // time and inode: it changes when that file is replaced or modified.
  uint64_t fingerprint(SampleId id) const { return entries_[id].fingerprint; }

  // A digest of every sample's fingerprint: it changes when any file is
  // added, removed, resized or modified.
  uint64_t identity() const { return identity_; }

 private:
  struct Entry {
    std::string relpath;
    int64_t label;
    uint64_t fingerprint = 0;
  };

  Catalog() = default;
  Status ScanImageFolder();
  Status ReadManifest();
  // Drops the entries that are not regular files, then indexes the rest.
  void Index();

  std::string source_;  // as given, made absolute
  std::string root_;    // the folder relative paths start from
  std::vector<Entry> entries_;
  uint32_t num_classes_ = 0;
  uint64_t identity_ = 0;
  uint64_t special_files_ = 0;
  uint64_t rejected_paths_ = 0;
  std::unordered_map<std::string_view, SampleId> by_relpath_;
};

}  // namespace joaderfs

#endif  // JOADERFS_CATALOG_CATALOG_H_
