// The remote tier of a mount (remote_cache=), made from the mount's
// options. The tier is a build option (CMake JOADERFS_REMOTE, ON by
// default: it needs OpenSSL): remote_tier_setup.cc makes it, and a build
// without it compiles remote_tier_setup_off.cc instead, which refuses
// remote_cache= saying so. Nothing else in the daemon knows which.
//
// Called on the main thread at mount.

#ifndef JOADERFS_DAEMON_REMOTE_TIER_SETUP_H_
#define JOADERFS_DAEMON_REMOTE_TIER_SETUP_H_

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "daemon/options.h"

namespace joaderfs {

class Catalog;
class RemoteTier;

// Ok, or InvalidArgument naming the build option when this build has no
// remote tier.
Status RemoteTierBuilt();

// The tier over `o.remote_cache`'s servers, its cluster keys and TLS files
// loaded, for values of images up to `max_image_bytes` (larger declared
// sizes are refused before allocating). Fails, naming the option, on a key
// or TLS file that does not load.
Status OpenRemoteTier(const DaemonOptions& o, const Catalog* catalog, uint64_t max_image_bytes,
                      std::unique_ptr<RemoteTier>* out);

}  // namespace joaderfs

#endif  // JOADERFS_DAEMON_REMOTE_TIER_SETUP_H_
