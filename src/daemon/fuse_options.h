// libfuse's options on our command line (allow_other, -d, ...): libfuse
// decides which it takes. They are checked before the fork and the scan of
// SOURCE, through a session that is never mounted, so that an option nobody
// takes is refused at once, naming the nearest valid one (ours or
// libfuse's), rather than with libfuse's bare "unknown option(s)" after the
// dataset has been scanned.
//
// Not thread-safe: it sets libfuse's log function for the while.

#ifndef JOADERFS_DAEMON_FUSE_OPTIONS_H_
#define JOADERFS_DAEMON_FUSE_OPTIONS_H_

#include <fuse_opt.h>

#include "common/status.h"

namespace joaderfs {

// Ok when libfuse takes every option in `args` (our own taken out), else
// InvalidArgument: "unknown option ram_cach=1G (did you mean ram_cache?)",
// or libfuse's own reason.
Status CheckFuseOptions(const fuse_args& args);

}  // namespace joaderfs

#endif  // JOADERFS_DAEMON_FUSE_OPTIONS_H_
