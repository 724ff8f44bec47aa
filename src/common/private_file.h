// Files that hold secrets (the remote tier's cluster key and TLS key, S3
// credentials): read whole, bounded, and refused unless only their owner may
// read them where the option names them, since a secret every user of the
// machine can read protects nothing.

#ifndef JOADERFS_COMMON_PRIVATE_FILE_H_
#define JOADERFS_COMMON_PRIVATE_FILE_H_

#include <cstddef>
#include <string>

#include "common/status.h"

namespace joaderfs {

// Reads `path` (at most `max_bytes`) into *text. InvalidArgument, with one
// line naming the file (and its mode), when it cannot be opened, is no
// regular file (a FIFO never blocks the caller), is larger, or, with
// `owner_only`, may be read or written by group or others.
Status ReadSecretFile(const std::string& path, bool owner_only, size_t max_bytes,
                      std::string* text);

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_PRIVATE_FILE_H_
