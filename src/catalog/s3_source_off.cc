// Catalog::OpenS3 in a build without S3 support (JOADERFS_S3=OFF); see
// catalog/s3_source.h.

#include "catalog/catalog.h"

namespace joaderfs {

Status Catalog::OpenS3(const std::string& source, const CatalogOptions&) {
  return Status::InvalidArgument("SOURCE " + source +
                                 ": this joaderfs was built without S3 support (JOADERFS_S3=OFF)");
}

}  // namespace joaderfs
