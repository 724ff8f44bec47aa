// Files that hold secrets (the remote tier's cluster key and TLS key, S3
// credentials) are refused unless only their owner may read them: a secret
// that every user of the machine can read protects nothing.

#ifndef JOADERFS_COMMON_PRIVATE_FILE_H_
#define JOADERFS_COMMON_PRIVATE_FILE_H_

#include <string>
#include <string_view>

#include "common/status.h"

namespace joaderfs {

// Opens `path` for reading: the descriptor (O_CLOEXEC), or -1 and a one-line
// error naming `option`, the file and its mode when it is no regular file
// or group or others may read or write it.
int OpenPrivateFile(const std::string& path, std::string_view option, Status* error);

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_PRIVATE_FILE_H_
