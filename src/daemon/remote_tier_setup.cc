#include "daemon/remote_tier_setup.h"

#include "cache/cluster_key.h"
#include "cache/memcached_tier.h"

namespace joaderfs {

Status RemoteTierBuilt() { return Status::Ok(); }

Status OpenRemoteTier(const DaemonOptions& o, const Catalog* catalog, uint64_t max_image_bytes,
                      std::unique_ptr<RemoteTier>* out) {
  RemoteTierOptions rto;
  rto.servers = o.remote_cache;
  rto.publish_limit = o.remote_publish;
  rto.timeout = std::chrono::milliseconds(o.remote_timeout_ms);
  if (o.remote_key == "insecure") {
    rto.key = ClusterKey::Insecure();
  } else if (Status s = ClusterKey::Load(o.remote_key, &rto.key); !s.ok()) {
    return s;
  }
  if (!o.remote_old_key.empty()) {
    rto.old_key.emplace();
    if (Status s = ClusterKey::Load(o.remote_old_key, &*rto.old_key); !s.ok()) {
      return Status::InvalidArgument("remote_old_key: " + s.message());
    }
  }
  rto.tls.ca_file = o.remote_tls;
  rto.tls.cert_file = o.remote_tls_cert;
  rto.max_value = max_image_bytes + ClusterKey::kSealOverhead;
  return MemcachedTier::Open(rto, catalog, o.base, out);
}

}  // namespace joaderfs
