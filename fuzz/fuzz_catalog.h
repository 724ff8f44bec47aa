// A small Catalog for the fuzz targets whose parsers check against one: an
// ImageFolder of 4 classes ("c0".."c3", 5 placeholder files each: ids
// 0..19), scanned once from a temporary folder that is removed right after.

#ifndef JOADERFS_FUZZ_FUZZ_CATALOG_H_
#define JOADERFS_FUZZ_FUZZ_CATALOG_H_

#include "catalog/catalog.h"

namespace joaderfs {

// Thread-safe; built on the first call, never destroyed.
const Catalog& FuzzCatalog();

}  // namespace joaderfs

#endif  // JOADERFS_FUZZ_FUZZ_CATALOG_H_
