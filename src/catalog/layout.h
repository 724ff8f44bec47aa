// What the scans of every kind of SOURCE agree on (local_scan.cc for folders
// and shards on disk, catalog.cc for manifests, s3_source.cc for a bucket): which names are
// images and shards, the order of relative paths, and the layouts a SOURCE
// without samples is told about.
//
// Pure functions; thread-safe.

#ifndef JOADERFS_CATALOG_LAYOUT_H_
#define JOADERFS_CATALOG_LAYOUT_H_

#include <string>
#include <string_view>

namespace joaderfs {

// The extensions torchvision's ImageFolder accepts, in any case.
bool IsImageName(std::string_view name);

// A WebDataset shard: NAME.tar.
bool IsTarName(const std::string& name);

// Component-wise comparison, so that "a/x.jpg" sorts before "a-b/y.jpg" as
// the class "a" sorts before "a-b".
bool PathLess(const std::string& a, const std::string& b);

// What the error for a SOURCE without samples names.
inline constexpr char kLayouts[] =
    "expected SOURCE/<class>/<image> (ImageFolder), a manifest file of relpath<TAB>label "
    "lines, or a folder of WebDataset shards SOURCE/*.tar";

}  // namespace joaderfs

#endif  // JOADERFS_CATALOG_LAYOUT_H_
