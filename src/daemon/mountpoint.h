// The mountpoint before the mount: a dead joaderfs leaves its mount behind
// (every access fails with ENOTCONN, and libfuse refuses to mount there),
// so a new daemon detaches it and mounts, as systemd's ExecStopPost did by
// hand. A mountpoint that a live joaderfs serves is refused: mounting over
// it would hide a working mount and its jobs.

#ifndef JOADERFS_DAEMON_MOUNTPOINT_H_
#define JOADERFS_DAEMON_MOUNTPOINT_H_

#include <string>
#include <string_view>

#include "common/status.h"

namespace joaderfs {

// Ok when `mountpoint` (absolute, normal) may be mounted on, after
// detaching a dead joaderfs's mount there (`*detached` set, for the log);
// Busy when a live joaderfs serves it; InvalidArgument when a dead mount of
// another file system is there.
Status PrepareMountpoint(const std::string& mountpoint, bool* detached);

// The file system type mounted at `mountpoint` in a /proc/self/mountinfo
// text ("fuse.joaderfs", say), the last mount there; empty when none.
std::string MountedType(std::string_view mountinfo, const std::string& mountpoint);

}  // namespace joaderfs

#endif  // JOADERFS_DAEMON_MOUNTPOINT_H_
