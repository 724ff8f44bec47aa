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
#include <vector>

#include "common/status.h"

namespace joaderfs {

struct S3Credentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // empty unless temporary credentials
};

// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) when
// set, else the profile AWS_PROFILE (default "default") of
// AWS_SHARED_CREDENTIALS_FILE (default ~/.aws/credentials). Fails with
// InvalidArgument naming where it looked, never a secret.
Status LoadS3Credentials(S3Credentials* out);

struct S3Options {
  // http[s]://HOST[:PORT]; empty: https://s3.REGION.amazonaws.com.
  std::string endpoint;
  // Empty: AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1.
  std::string region;
  unsigned attempts = 4;
  std::chrono::milliseconds first_backoff{200};
  std::chrono::seconds request_timeout{60};
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

  // Every object whose key starts with `prefix`, in key order (the store's),
  // page by page with continuation tokens.
  Status List(const std::string& prefix, std::vector<S3Object>* out) const;
  // The object `key`, or `length` bytes at `offset` when `length` > 0.
  // `meta` gets its ETag and whole size. Fails with Corruption, without
  // reading on, once the body passes `max_bytes`; with NotFound for a
  // missing object.
  Status Get(const std::string& key, uint64_t offset, uint64_t length, uint64_t max_bytes,
             std::string* body, S3Object* meta) const;
  Status Head(const std::string& key, S3Object* meta) const;

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
  // and sorted by name (Signature V4 signs it as given).
  Status Request(const char* method, const std::string& key, const std::string& query,
                 const std::string& range, uint64_t max_bytes, Response* response) const;
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
