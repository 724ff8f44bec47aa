// The names a scan looks for: images by torchvision's extensions, tar
// shards, and the order samples take within a class.

#ifndef JOADERFS_CATALOG_NAMES_H_
#define JOADERFS_CATALOG_NAMES_H_

#include <string>

namespace joaderfs {

// The extensions torchvision's ImageFolder accepts.
bool IsImageName(const std::string& name);
bool IsTarName(const std::string& name);
// Component-wise comparison, so that "a/x.jpg" sorts before "a-b/y.jpg" as
// the class "a" sorts before "a-b".
bool PathLess(const std::string& a, const std::string& b);

}  // namespace joaderfs

#endif  // JOADERFS_CATALOG_NAMES_H_
