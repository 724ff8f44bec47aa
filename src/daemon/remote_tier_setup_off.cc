// remote_tier_setup.h in a build without the remote tier (JOADERFS_REMOTE=OFF).

#include "daemon/remote_tier_setup.h"

namespace joaderfs {

Status RemoteTierBuilt() {
  return Status::InvalidArgument(
      "remote_cache: this joaderfs was built without the remote tier (JOADERFS_REMOTE=OFF)");
}

Status OpenRemoteTier(const DaemonOptions&, const Catalog*, uint64_t,
                      std::unique_ptr<RemoteTier>*) {
  return RemoteTierBuilt();
}

}  // namespace joaderfs
