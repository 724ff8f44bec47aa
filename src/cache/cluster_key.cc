#include "cache/cluster_key.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/coding.h"
#include "common/private_file.h"

namespace joaderfs {
namespace {

constexpr uint32_t kMagic = 0x3253524a;  // "JRS2"
constexpr size_t kNonce = 12;
constexpr size_t kTag = 16;
constexpr size_t kDims = 12;  // height, width, channels: sealed with the pixels
constexpr std::string_view kValuePrefix = "jfs2:";
constexpr std::string_view kLeasePrefix = "jfs2l:";
// What a value's associated data starts with: a value of another use of
// the same key never opens as one of ours.
constexpr std::string_view kContext = "joaderfs remote value v2";

std::array<uint8_t, 32> Hmac(const uint8_t* key, std::string_view a, std::string_view b = {}) {
  std::string message(a);
  message.append(b);
  std::array<uint8_t, 32> out{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), key, 32, reinterpret_cast<const uint8_t*>(message.data()), message.size(),
       out.data(), &length);
  return out;
}

std::string Hex(const uint8_t* p, size_t n) {
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) std::snprintf(&s[2 * i], 3, "%02x", p[i]);
  return s;
}

struct CipherDeleter {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using Cipher = std::unique_ptr<EVP_CIPHER_CTX, CipherDeleter>;

}  // namespace

Status ClusterKey::Load(const std::string& path, ClusterKey* out) {
  std::string text;
  if (Status s = ReadSecretFile(path, /*owner_only=*/true, 256, &text); !s.ok()) {
    return Status::InvalidArgument("remote_key: " + s.message());
  }
  std::string_view hex(text);
  while (!hex.empty() && std::isspace(static_cast<unsigned char>(hex.back()))) hex.remove_suffix(1);
  while (!hex.empty() && std::isspace(static_cast<unsigned char>(hex.front())))
    hex.remove_prefix(1);
  Key master{};
  bool good = hex.size() == 64;
  for (size_t i = 0; good && i < 32; ++i) {
    char byte[3] = {hex[2 * i], hex[2 * i + 1], 0};
    char* end = nullptr;
    master[i] = static_cast<uint8_t>(std::strtoul(byte, &end, 16));
    good = std::isxdigit(static_cast<unsigned char>(byte[0])) &&
           std::isxdigit(static_cast<unsigned char>(byte[1]));
  }
  OPENSSL_cleanse(text.data(), text.size());
  if (!good) {
    return Status::InvalidArgument("remote_key: " + path +
                                   " must hold 64 hex digits (openssl rand -hex 32)");
  }
  out->Derive(master);
  OPENSSL_cleanse(master.data(), master.size());
  return Status::Ok();
}

ClusterKey ClusterKey::Insecure() {
  ClusterKey k;
  k.Derive(Key{});
  k.insecure_ = true;
  return k;
}

void ClusterKey::Derive(const Key& master) {
  value_key_ = Hmac(master.data(), "joaderfs value key");
  name_key_ = Hmac(master.data(), "joaderfs name key");
  lease_key_ = Hmac(master.data(), "joaderfs lease key");
}

std::string ClusterKey::ValueName(std::string_view material) const {
  const auto mac = Hmac(name_key_.data(), material);
  return std::string(kValuePrefix) + Hex(mac.data(), 16);
}

std::string ClusterKey::LeaseName(std::string_view material) const {
  const auto mac = Hmac(name_key_.data(), material);
  return std::string(kLeasePrefix) + Hex(mac.data(), 16);
}

std::string ClusterKey::Seal(std::string_view material, const DecodedSample& s) const {
  std::string dims;
  PutFixed<uint32_t>(&dims, s.height);
  PutFixed<uint32_t>(&dims, s.width);
  PutFixed<uint32_t>(&dims, s.channels);
  std::string value;
  value.resize(4 + kNonce + kDims + s.bytes() + kTag);
  auto* v = reinterpret_cast<uint8_t*>(value.data());
  EncodeFixed<uint32_t>(v, kMagic);
  uint8_t* nonce = v + 4;
  RAND_bytes(nonce, kNonce);
  Cipher c(EVP_CIPHER_CTX_new());
  int n = 0;
  EVP_EncryptInit_ex(c.get(), EVP_aes_256_gcm(), nullptr, value_key_.data(), nonce);
  EVP_EncryptUpdate(c.get(), nullptr, &n, reinterpret_cast<const uint8_t*>(kContext.data()),
                    static_cast<int>(kContext.size()));
  EVP_EncryptUpdate(c.get(), nullptr, &n, reinterpret_cast<const uint8_t*>(material.data()),
                    static_cast<int>(material.size()));
  uint8_t* out = nonce + kNonce;
  EVP_EncryptUpdate(c.get(), out, &n, reinterpret_cast<const uint8_t*>(dims.data()), kDims);
  out += n;
  EVP_EncryptUpdate(c.get(), out, &n, s.pixels.get(), static_cast<int>(s.bytes()));
  out += n;
  EVP_EncryptFinal_ex(c.get(), out, &n);
  out += n;
  EVP_CIPHER_CTX_ctrl(c.get(), EVP_CTRL_GCM_GET_TAG, kTag, out);
  return value;
}

Status ClusterKey::Open(std::string_view material, std::string_view value,
                        DecodedSample* out) const {
  const auto* v = reinterpret_cast<const uint8_t*>(value.data());
  if (value.size() < kSealOverhead || DecodeFixed<uint32_t>(v) != kMagic) {
    return Status::Corruption("not a sealed value");
  }
  const size_t sealed = value.size() - 4 - kNonce - kTag;  // dims and pixels
  std::shared_ptr<uint8_t> plain(static_cast<uint8_t*>(std::malloc(sealed)),
                                 [](uint8_t* p) { std::free(p); });
  if (!plain) return Status::Corruption("no memory for a value");
  Cipher c(EVP_CIPHER_CTX_new());
  int n = 0;
  const uint8_t* nonce = v + 4;
  const uint8_t* body = nonce + kNonce;
  const uint8_t* tag = body + sealed;
  bool good =
      EVP_DecryptInit_ex(c.get(), EVP_aes_256_gcm(), nullptr, value_key_.data(), nonce) == 1 &&
      EVP_DecryptUpdate(c.get(), nullptr, &n, reinterpret_cast<const uint8_t*>(kContext.data()),
                        static_cast<int>(kContext.size())) == 1 &&
      EVP_DecryptUpdate(c.get(), nullptr, &n, reinterpret_cast<const uint8_t*>(material.data()),
                        static_cast<int>(material.size())) == 1 &&
      EVP_DecryptUpdate(c.get(), plain.get(), &n, body, static_cast<int>(sealed)) == 1 &&
      EVP_CIPHER_CTX_ctrl(c.get(), EVP_CTRL_GCM_SET_TAG, kTag, const_cast<uint8_t*>(tag)) == 1 &&
      EVP_DecryptFinal_ex(c.get(), plain.get() + n, &n) == 1;
  if (!good) return Status::Corruption("a value that does not open with the cluster key");
  out->height = DecodeFixed<uint32_t>(plain.get());
  out->width = DecodeFixed<uint32_t>(plain.get() + 4);
  out->channels = DecodeFixed<uint32_t>(plain.get() + 8);
  // Authentic, so sealed by a daemon of this cluster: checked all the same,
  // as nothing is trusted to be well-formed.
  if (out->channels < 1 || out->channels > 4 || out->bytes() != sealed - kDims) {
    return Status::Corruption("a sealed value whose dimensions do not match its size");
  }
  out->pixels = std::shared_ptr<uint8_t>(plain, plain.get() + kDims);
  return Status::Ok();
}

std::string ClusterKey::Lease(std::string_view lease_name, int64_t expires_unix_ms) const {
  std::string lease;
  PutFixed<uint64_t>(&lease, static_cast<uint64_t>(expires_unix_ms));
  const auto mac = Hmac(lease_key_.data(), lease_name, lease);
  lease.append(reinterpret_cast<const char*>(mac.data()), 16);
  return lease;
}

int64_t ClusterKey::LeaseExpiry(std::string_view lease_name, std::string_view lease) const {
  if (lease.size() != kLeaseBytes) return -1;
  const auto mac = Hmac(lease_key_.data(), lease_name, lease.substr(0, 8));
  if (CRYPTO_memcmp(mac.data(), lease.data() + 8, 16) != 0) return -1;
  return static_cast<int64_t>(
      DecodeFixed<uint64_t>(reinterpret_cast<const uint8_t*>(lease.data())));
}

}  // namespace joaderfs
