// The cluster key of the remote tier (remote_key=FILE): the secret that the
// daemons of one cluster share, and what it makes of a sample. From it come,
// by HMAC-SHA256 (OpenSSL) with a label each, three keys of their own:
//   - a value key: each value is sealed with AES-256-GCM (OpenSSL EVP), a
//     random 96-bit nonce per value, and the sample's key material (base,
//     file size, mtime, member range, relative path: the identity of the
//     source bytes in the dataset) as associated data. A value forged
//     without the key, or moved to another sample's name, does not open;
//     nor can anyone without the key read its pixels;
//   - a name key: a value's memcached key is an HMAC of its key material,
//     so names neither show paths nor can be computed without the key;
//   - a lease key: a lease holds its expiry (wall clock) and an HMAC of it
//     and its name, so a forged lease is not believed and a copied one
//     costs a wait only until its own expiry.
// No cipher, MAC or mode of our own: OpenSSL's, as documented.
//
// Immutable after Load; thread-safe.

#ifndef JOADERFS_CACHE_CLUSTER_KEY_H_
#define JOADERFS_CACHE_CLUSTER_KEY_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "loader/decoded_sample.h"

namespace joaderfs {

class ClusterKey {
 public:
  static constexpr size_t kSealOverhead = 4 + 12 + 12 + 16;  // magic, nonce, dims, tag
  static constexpr size_t kLeaseBytes = 8 + 16;              // expiry, MAC

  // Reads FILE: 64 hex digits (32 bytes, `openssl rand -hex 32`), white
  // space around them ignored. Refused when group or others may read it.
  static Status Load(const std::string& path, ClusterKey* out);
  // remote_key=insecure: a key everybody knows. Values are still checked
  // against damage, but anyone who can reach the servers can forge them.
  static ClusterKey Insecure();

  // The memcached keys of a value and of its lease.
  std::string ValueName(std::string_view material) const;
  std::string LeaseName(std::string_view material) const;

  std::string Seal(std::string_view material, const DecodedSample& sample) const;
  // Ok and the sample (its pixels in a buffer of their own), or Corruption:
  // the value was not sealed by this key for this material.
  Status Open(std::string_view material, std::string_view value, DecodedSample* out) const;

  std::string Lease(std::string_view lease_name, int64_t expires_unix_ms) const;
  // The expiry (Unix ms) of an authentic lease, else -1.
  int64_t LeaseExpiry(std::string_view lease_name, std::string_view lease) const;

  bool insecure() const { return insecure_; }

 private:
  using Key = std::array<uint8_t, 32>;
  void Derive(const Key& master);
  Key value_key_{};
  Key name_key_{};
  Key lease_key_{};
  bool insecure_ = false;
};

}  // namespace joaderfs

#endif  // JOADERFS_CACHE_CLUSTER_KEY_H_
