// S3Client: the three requests an S3 SOURCE needs (ListObjectsV2, GET of a
// byte range, HEAD) on one bucket of AWS S3 or an S3-compatible store, over
// libcurl. libcurl signs every request with AWS Signature V4
// (CURLOPT_AWS_SIGV4): there is no signing code here. Addressing is
// path-style (ENDPOINT/BUCKET/KEY), which every S3-compatible store accepts.
//
// Each request is tried up to `attempts` times, with a back-off doubling from
// `first_backoff`, when it fails in transit (no connection, a reset, a
// timeout) or the store answers 5xx or 429 (SlowDown); a 4xx answer is final.
// Credentials are held only here and in libcurl's handles: no message or
// log line this class makes names them.
//
// The store is not trusted to behave: every body is capped (an error's at
// kErrorBodyBytes, a GET's at what it asked for, a listing page's at
// kListPageBytes) and the transfer dropped past the cap; each attempt is
// bounded in time and speed; a listing must advance (ListingBound).
//
// Thread-safe: requests run concurrently on pooled curl handles (one per
// request at a time, kept for their connections and their shared options).

#ifndef JOADERFS_CATALOG_S3_CLIENT_H_
#define JOADERFS_CATALOG_S3_CLIENT_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/status.h"

namespace joaderfs {

struct S3Credentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // empty unless temporary credentials
};

// Where the credentials come from: the mount's s3_credentials= and
// s3_profile= (empty when not given).
struct S3CredentialSource {
  std::string file;
  std::string profile;
};

// With `from.file`: the profile `from.profile` (else AWS_PROFILE, else
// "default") of that file, which must be a regular file no one but its
// owner may read or write (as ssh holds private keys). Else with
// `from.profile`: that profile of AWS_SHARED_CREDENTIALS_FILE, else
// ~/.aws/credentials. Else AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and
// AWS_SESSION_TOKEN) when set, else that file's AWS_PROFILE. An option
// given means its file's keys, never the environment's. "~" is $HOME, else
// the home of the user the daemon runs as (mount(8) passes no HOME). Fails
// with InvalidArgument naming where it looked, never a secret.
Status LoadS3Credentials(const S3CredentialSource& from, S3Credentials* out);

// The most bytes of an error answer kept (for its code and message); the
// transfer is dropped past them.
inline constexpr uint64_t kErrorBodyBytes = 64 << 10;
// The most bytes of one ListObjectsV2 page (1000 keys of up to 1 KiB each,
// percent-encoded, in XML, take under 4 MiB).
inline constexpr uint64_t kListPageBytes = 16 << 20;

// What a listing must keep to go on, so that a store that loops or repeats
// itself fails it in bounded time and memory: no continuation token twice,
// at most kMaxPages pages, and no more pages than one per key taken plus
// kIdlePages (S3 may answer a page without keys; a store that never
// advances does so forever). Keys must lie below the prefix asked for and
// come in the store's order (UTF-8 binary, ascending); any other key is
// left out (counted in stray()), so that no key is listed twice. Pure
// logic, no I/O. Not thread-safe.
class ListingBound {
 public:
  static constexpr uint64_t kMaxPages = 1'000'000;
  static constexpr uint64_t kIdlePages = 1'000;

  explicit ListingBound(std::string prefix) : prefix_(std::move(prefix)) {}
  // Whether `key`, of the page being read, may be kept: below the prefix
  // and after every key kept before it.
  bool Take(std::string_view key);
  // At the end of each page, with what it said. Fails with IOError (a
  // message without the listing's name) when the listing must stop.
  Status EndPage(bool truncated, std::string_view next_token);
  uint64_t pages() const { return pages_; }
  uint64_t keys() const { return keys_; }
  uint64_t stray() const { return stray_; }

 private:
  const std::string prefix_;
  std::string last_;  // the last key kept
  uint64_t pages_ = 0, keys_ = 0, stray_ = 0;
  std::unordered_set<uint64_t> tokens_;  // digests of the tokens handed out
};

struct S3Options {
  // http[s]://HOST[:PORT]; empty: https://s3.REGION.amazonaws.com.
  std::string endpoint;
  // Empty: AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1.
  std::string region;
  unsigned attempts = 4;
  std::chrono::milliseconds first_backoff{200};
  // One attempt's bound, connection to last byte.
  std::chrono::seconds request_timeout{60};
  // An attempt slower than `low_speed_bytes` a second over
  // `low_speed_time` fails in transit (a body that trickles).
  long low_speed_bytes = 1024;
  std::chrono::seconds low_speed_time{20};
};

struct S3Object {
  std::string key;
  uint64_t size = 0;
  std::string etag;  // without its quotes
};

// Requests by kind since the client was made; every figure counts attempts.
struct S3Stats {
  uint64_t gets = 0;      // GET attempts (objects and ranges)
  uint64_t retries = 0;   // attempts after a retriable failure, any request
  uint64_t failures = 0;  // requests that failed after their last attempt
  uint64_t bytes = 0;     // body bytes of successful GETs
  uint64_t lists = 0;     // ListObjectsV2 pages
  uint64_t heads = 0;
};

class S3Client {
 public:
  // Checks the endpoint's form; sends nothing.
  static Status Open(std::string bucket, S3Options options, S3Credentials credentials,
                     std::unique_ptr<S3Client>* out);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  using Clock = std::chrono::steady_clock;

  // Every object whose key starts with `prefix`, in key order (the store's),
  // page by page with continuation tokens, within ListingBound's bounds
  // (else IOError); `*stray` (may be null) gets the keys it left out.
  Status List(const std::string& prefix, std::vector<S3Object>* out,
              uint64_t* stray = nullptr) const;
  // The object `key`, or `length` bytes at `offset` when `length` > 0.
  // `meta` gets its ETag and whole size. Fails with Corruption, without
  // reading on, once the body passes `max_bytes`; with IOError once it
  // passes what the answer's Content-Length declared, or `length`, or,
  // without either, `expected` (when > 0: the size the listing gave); with
  // NotFound for a missing object. No attempt starts or runs past
  // `deadline`.
  Status Get(const std::string& key, uint64_t offset, uint64_t length, uint64_t max_bytes,
             std::string* body, S3Object* meta, uint64_t expected = 0,
             Clock::time_point deadline = Clock::time_point::max()) const;
  Status Head(const std::string& key, S3Object* meta,
              Clock::time_point deadline = Clock::time_point::max()) const;

  const std::string& bucket() const { return bucket_; }
  const std::string& endpoint() const { return endpoint_; }
  const std::string& region() const { return region_; }
  S3Stats Stats() const;
  // Times three HEADs of `key` and keeps the fastest as round_trip(): the
  // store's round trip, which sizes the reads in flight (a listing page
  // costs the store far more than a GET's round trip).
  void MeasureRoundTrip(const std::string& key);
  // Zero until measured.
  std::chrono::microseconds round_trip() const {
    return std::chrono::microseconds(round_trip_us_.load());
  }

  struct Response;  // one request's answer (s3_client.cc)

 private:
  S3Client() = default;
  // One request, retried as the header says. `query` is already encoded
  // and sorted by name (Signature V4 signs it as given). A 2xx body is
  // capped at `max_bytes` (Corruption past it), and at `expected` (> 0)
  // when the answer declares no length (IOError past it).
  Status Request(const char* method, const std::string& key, const std::string& query,
                 const std::string& range, uint64_t max_bytes, uint64_t expected,
                 Clock::time_point deadline, Response* response) const;
  void* TakeHandle() const;
  void ReturnHandle(void* handle) const;

  std::string bucket_;
  std::string endpoint_;
  std::string region_;
  std::string sigv4_;  // "aws:amz:REGION:s3"
  std::string userpwd_;
  std::string token_header_;
  S3Options options_;
  mutable std::mutex handles_mu_;
  mutable std::vector<void*> handles_;  // idle curl handles
  mutable std::atomic<uint64_t> gets_{0}, retries_{0}, failures_{0}, bytes_{0}, lists_{0},
      heads_{0};
  mutable std::atomic<int64_t> round_trip_us_{0};
};

// "s3://BUCKET[/PREFIX]" into its bucket and prefix (no trailing '/').
// False when `source` is not of that form.
bool ParseS3Url(const std::string& source, std::string* bucket, std::string* prefix);

}  // namespace joaderfs

#endif  // JOADERFS_CATALOG_S3_CLIENT_H_
