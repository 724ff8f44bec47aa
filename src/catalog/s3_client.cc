#include "catalog/s3_client.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/hash.h"
#include "common/printable.h"
#include "common/private_file.h"

namespace joaderfs {

struct S3Client::Response {
  long code = 0;
  std::string body;
  std::string etag;
  uint64_t total_size = 0;         // from Content-Range, else Content-Length
  bool head = false;               // no body comes
  uint64_t max_bytes = 0;          // a 2xx body's cap
  uint64_t expected = 0;           // a 2xx body's cap without a Content-Length; 0: max_bytes
  uint64_t declared = UINT64_MAX;  // a 2xx answer's Content-Length
  bool over_limit = false;         // passed max_bytes
  bool over_expected = false;      // passed `declared` or `expected`
  bool error_cut = false;          // an error body passed kErrorBodyBytes: dropped

  bool success() const { return code >= 200 && code < 300; }
  uint64_t cap() const {
    const uint64_t soft = declared != UINT64_MAX ? declared : expected > 0 ? expected : max_bytes;
    return std::min(soft, max_bytes);
  }
};

namespace {

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string Unquote(std::string etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return etag;
}

// Percent-encodes all but RFC 3986's unreserved characters (and '/' when
// `keep_slash`), as Signature V4's canonical form wants.
std::string Encode(const std::string& s, bool keep_slash) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes a key of a listing asked for with encoding-type=url ('+'
// is a space, as the store encodes it).
std::string UrlDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const int high = i + 2 < s.size() ? HexDigit(s[i + 1]) : -1;
    const int low = i + 2 < s.size() ? HexDigit(s[i + 2]) : -1;
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && high >= 0 && low >= 0) {
      out += static_cast<char>(high * 16 + low);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* r = static_cast<S3Client::Response*>(user);
  const size_t bytes = size * n;
  if (!r->success()) {
    // Enough of an error answer for its code and message; one that goes on
    // (a broken or hostile store) is dropped there, never held or read on.
    const size_t room = kErrorBodyBytes - std::min<uint64_t>(r->body.size(), kErrorBodyBytes);
    r->body.append(data, std::min(bytes, room));
    if (bytes > room) {
      r->error_cut = true;
      return 0;
    }
    return bytes;
  }
  // A body past what was asked for (or declared) ends the transfer.
  const uint64_t cap = r->cap();
  if (r->body.size() + bytes > cap) {
    (cap == r->max_bytes ? r->over_limit : r->over_expected) = true;
    return 0;
  }
  r->body.append(data, bytes);
  return bytes;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* r = static_cast<S3Client::Response*>(user);
  const std::string line(data, size * n);
  if (line.starts_with("HTTP/")) {
    // A new response (after a 100 Continue, or a redirect): start over.
    r->body.clear();
    r->etag.clear();
    r->total_size = 0;
    r->declared = UINT64_MAX;
    const size_t space = line.find(' ');
    r->code = space == std::string::npos ? 0 : std::atol(line.c_str() + space + 1);
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return size * n;
  std::string name = line.substr(0, colon);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string value = Trim(line.substr(colon + 1));
  if (name == "etag") {
    r->etag = Unquote(value);
  } else if (name == "content-range") {
    // "bytes FIRST-LAST/TOTAL"
    if (const size_t slash = value.rfind('/'); slash != std::string::npos) {
      r->total_size = std::strtoull(value.c_str() + slash + 1, nullptr, 10);
    }
  } else if (name == "content-length") {
    const uint64_t length = std::strtoull(value.c_str(), nullptr, 10);
    if (r->total_size == 0) r->total_size = length;
    if (!r->head && r->success()) {
      // Declared past the cap: refused before a byte of it is read.
      if (length > r->max_bytes) {
        r->over_limit = true;
        return 0;
      }
      r->declared = length;
      // The body in one allocation, not grown 16 KiB at a time (a copy each
      // time it doubles): a few percent of the daemon's CPU per GET.
      r->body.reserve(length);
    }
  }
  return size * n;
}

// The text of the first element named `name` below `node`, depth first.
const xmlNode* Find(const xmlNode* node, const char* name) {
  for (const xmlNode* n = node ? node->children : nullptr; n; n = n->next) {
    if (n->type == XML_ELEMENT_NODE && xmlStrcmp(n->name, BAD_CAST name) == 0) return n;
  }
  return nullptr;
}

std::string Text(const xmlNode* node) {
  if (!node) return {};
  xmlChar* t = xmlNodeGetContent(node);
  std::string s = t ? reinterpret_cast<const char*>(t) : "";
  xmlFree(t);
  return s;
}

// "Code: Message" of an S3 error body, or empty.
std::string ErrorOf(const std::string& body) {
  if (body.empty()) return {};
  xmlDoc* doc = xmlReadMemory(body.data(), static_cast<int>(body.size()), nullptr, nullptr,
                              XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
  if (!doc) return {};
  const xmlNode* root = xmlDocGetRootElement(doc);
  std::string out;
  if (root && xmlStrcmp(root->name, BAD_CAST "Error") == 0) {
    out = Text(Find(root, "Code"));
    const std::string message = Text(Find(root, "Message"));
    if (!message.empty()) out += ": " + message;
  }
  xmlFreeDoc(doc);
  return out;
}

bool Retriable(CURLcode rc, long code) {
  if (rc != CURLE_OK) {
    return rc != CURLE_WRITE_ERROR && rc != CURLE_URL_MALFORMAT && rc != CURLE_UNSUPPORTED_PROTOCOL;
  }
  return code >= 500 || code == 429;
}

// The `profile` section of an AWS shared-credentials (INI) text.
bool ParseProfile(std::string_view text, const std::string& profile, S3Credentials* out) {
  bool inside = false;
  while (!text.empty()) {
    const size_t eol = std::min(text.find('\n'), text.size());
    std::string line = Trim(std::string(text.substr(0, eol)));
    text.remove_prefix(std::min(eol + 1, text.size()));
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      inside = Trim(line.substr(1, line.size() - 2)) == profile;
      continue;
    }
    if (!inside) continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = Trim(line.substr(0, eq)), value = Trim(line.substr(eq + 1));
    if (key == "aws_access_key_id") out->access_key = value;
    if (key == "aws_secret_access_key") out->secret_key = value;
    if (key == "aws_session_token") out->session_token = value;
  }
  return !out->access_key.empty() && !out->secret_key.empty();
}

// ~: $HOME, else the home of the user this runs as (mount(8) runs its
// helpers without HOME).
std::string HomeFolder() {
  std::string home = Env("HOME");
  if (!home.empty()) return home;
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buffer[4096];
  if (::getpwuid_r(::geteuid(), &pw, buffer, sizeof buffer, &found) == 0 && found &&
      found->pw_dir) {
    return found->pw_dir;
  }
  return "";
}

}  // namespace

bool ParseS3Url(const std::string& source, std::string* bucket, std::string* prefix) {
  if (!source.starts_with("s3://")) return false;
  const std::string rest = source.substr(5);
  const size_t slash = rest.find('/');
  *bucket = rest.substr(0, slash);
  *prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  while (!prefix->empty() && prefix->back() == '/') prefix->pop_back();
  return !bucket->empty();
}

Status LoadS3Credentials(const S3CredentialSource& from, S3Credentials* out) {
  *out = {};
  if (from.file.empty() && from.profile.empty()) {
    out->access_key = Env("AWS_ACCESS_KEY_ID");
    out->secret_key = Env("AWS_SECRET_ACCESS_KEY");
    if (!out->access_key.empty() && !out->secret_key.empty()) {
      out->session_token = Env("AWS_SESSION_TOKEN");
      return Status::Ok();
    }
    *out = {};
  }
  std::string file = from.file;
  if (file.empty()) file = Env("AWS_SHARED_CREDENTIALS_FILE");
  if (file.empty()) file = HomeFolder() + "/.aws/credentials";
  std::string profile = from.profile.empty() ? Env("AWS_PROFILE") : from.profile;
  if (profile.empty()) profile = "default";
  std::string text;
  const bool named = !from.file.empty();
  // A named file must be its owner's alone; ~/.aws/credentials is as the
  // AWS tools leave it. A few profiles fit in 1 MiB many times over.
  if (Status read = ReadSecretFile(file, named, 1 << 20, &text); !read.ok()) {
    const std::string why = read.message();
    if (named) return Status::InvalidArgument("s3_credentials " + why);
    if (!from.profile.empty()) return Status::InvalidArgument("s3_profile: " + why);
    return Status::InvalidArgument(
        "no S3 credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not both set, and " +
        why);
  }
  if (ParseProfile(text, profile, out)) return Status::Ok();
  *out = {};
  const std::string lacks = Printable(file) + " has no profile [" + Printable(profile) +
                            "] with aws_access_key_id and aws_secret_access_key";
  if (named) return Status::InvalidArgument("s3_credentials " + lacks);
  if (!from.profile.empty()) return Status::InvalidArgument("s3_profile: " + lacks);
  return Status::InvalidArgument(
      "no S3 credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not both set, and " +
      lacks);
}

bool ListingBound::Take(std::string_view key) {
  if (!key.starts_with(prefix_) || (keys_ > 0 && key <= std::string_view(last_))) {
    ++stray_;
    return false;
  }
  last_.assign(key);
  ++keys_;
  return true;
}

Status ListingBound::EndPage(bool truncated, std::string_view next_token) {
  ++pages_;
  if (!truncated) return Status::Ok();
  const std::string page = "page " + std::to_string(pages_);
  if (next_token.empty()) {
    return Status::IOError(page + " is truncated but holds no continuation token");
  }
  if (!tokens_.insert(Fnv1a(kFnv1aBasis, next_token.data(), next_token.size())).second) {
    return Status::IOError(page + " hands out a continuation token given before: the listing " +
                           "would never end");
  }
  if (pages_ >= kMaxPages) {
    return Status::IOError("more than " + std::to_string(kMaxPages) + " pages");
  }
  if (pages_ > keys_ + kIdlePages) {
    return Status::IOError(std::to_string(pages_) + " pages for " + std::to_string(keys_) +
                           " keys: the listing does not advance");
  }
  return Status::Ok();
}

Status S3Client::Open(std::string bucket, S3Options options, S3Credentials credentials,
                      std::unique_ptr<S3Client>* out) {
  // Not thread-safe: the first client is made at start-up, before threads.
  static std::once_flag once;
  std::call_once(once, [] {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    xmlInitParser();
  });
  std::unique_ptr<S3Client> c(new S3Client());
  c->bucket_ = std::move(bucket);
  c->region_ = options.region;
  if (c->region_.empty()) c->region_ = Env("AWS_REGION");
  if (c->region_.empty()) c->region_ = Env("AWS_DEFAULT_REGION");
  if (c->region_.empty()) c->region_ = "us-east-1";
  c->endpoint_ = options.endpoint;
  if (c->endpoint_.empty()) c->endpoint_ = "https://s3." + c->region_ + ".amazonaws.com";
  while (c->endpoint_.ends_with('/')) c->endpoint_.pop_back();
  if (!c->endpoint_.starts_with("http://") && !c->endpoint_.starts_with("https://")) {
    return Status::InvalidArgument("s3_endpoint " + c->endpoint_ +
                                   " is not an http:// or https:// URL");
  }
  c->sigv4_ = "aws:amz:" + c->region_ + ":s3";
  c->userpwd_ = credentials.access_key + ":" + credentials.secret_key;
  if (!credentials.session_token.empty()) {
    c->token_header_ = "x-amz-security-token: " + credentials.session_token;
  }
  c->options_ = options;
  *out = std::move(c);
  return Status::Ok();
}

S3Client::~S3Client() {
  for (void* h : handles_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* S3Client::TakeHandle() const {
  {
    std::lock_guard lock(handles_mu_);
    if (!handles_.empty()) {
      void* h = handles_.back();
      handles_.pop_back();
      return h;
    }
  }
  CURL* h = curl_easy_init();
  if (!h) return nullptr;
  // What every request of this client shares, set once: a handle keeps its
  // options, connection and buffers from one request to the next (resetting
  // and setting them again cost each GET libcurl's copies of every string).
  curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4_.c_str());
  curl_easy_setopt(h, CURLOPT_USERPWD, userpwd_.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, options_.low_speed_bytes);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(options_.low_speed_time.count()));
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, OnHeader);
  return h;
}

void S3Client::ReturnHandle(void* handle) const {
  std::lock_guard lock(handles_mu_);
  handles_.push_back(handle);
}

S3Stats S3Client::Stats() const {
  S3Stats s;
  s.gets = gets_.load();
  s.retries = retries_.load();
  s.failures = failures_.load();
  s.bytes = bytes_.load();
  s.lists = lists_.load();
  s.heads = heads_.load();
  return s;
}

Status S3Client::Request(const char* method, const std::string& key, const std::string& query,
                         const std::string& range, uint64_t max_bytes, uint64_t expected,
                         Clock::time_point deadline, Response* r) const {
  const std::string url = endpoint_ + "/" + bucket_ + (key.empty() ? "" : "/" + Encode(key, true)) +
                          (query.empty() ? "" : "?" + query);
  const std::string what = std::string(method) + " s3://" + bucket_ + "/" + Printable(key);
  const bool head = std::string_view(method) == "HEAD";
  auto backoff = options_.first_backoff;
  std::string failure = "no time left before the read's deadline";
  unsigned attempts = 0;
  for (; attempts < std::max(1u, options_.attempts); ++attempts) {
    if (attempts > 0) {
      if (Clock::now() + backoff >= deadline) break;
      ++retries_;
      std::this_thread::sleep_for(backoff);
      backoff *= 2;
    }
    // Each attempt within request_timeout and what is left of the deadline.
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::min<Clock::duration>(options_.request_timeout, deadline - Clock::now()));
    if (left.count() <= 0) break;
    if (!head && query.empty()) ++gets_;
    if (head) ++heads_;
    if (!query.empty()) ++lists_;
    CURL* h = static_cast<CURL*>(TakeHandle());
    if (!h) return Status::IOError(what + ": cannot make a curl handle");
    *r = Response();
    r->head = head;
    r->max_bytes = max_bytes;
    r->expected = expected;
    curl_slist* headers = nullptr;
    // Signed, as real S3 requires, and no payload to hash on a GET.
    headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!token_header_.empty()) headers = curl_slist_append(headers, token_header_.c_str());
    const std::string range_header = "Range: bytes=" + range;
    if (!range.empty()) headers = curl_slist_append(headers, range_header.c_str());
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(left.count()));
    // The handle may have made a HEAD last: say which this one is.
    if (head) {
      curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else {
      curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    }
    const CURLcode rc = curl_easy_perform(h);
    // The list is freed below: the handle must not keep pointing at it.
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    r->code = code;
    curl_slist_free_all(headers);
    ReturnHandle(h);
    if (r->over_limit && !range.empty()) {
      ++failures_;
      return Status::IOError(what + ": the answer passes the " + std::to_string(max_bytes) +
                             " bytes asked for");
    }
    if (r->over_limit) {
      ++failures_;
      return Status::Corruption(what + ": the answer passes the " + std::to_string(max_bytes) +
                                " bytes it may take");
    }
    if (r->over_expected) {
      ++failures_;
      return Status::IOError(what + ": the answer passes the " + std::to_string(r->cap()) +
                             " bytes expected");
    }
    // An error body cut short was still an answer: its code decides.
    const CURLcode transfer = r->error_cut ? CURLE_OK : rc;
    if (transfer == CURLE_OK && code >= 200 && code < 300) {
      if (!head && query.empty()) bytes_ += r->body.size();
      return Status::Ok();
    }
    if (transfer != CURLE_OK) {
      failure = curl_easy_strerror(rc);
    } else {
      const std::string error = ErrorOf(r->body);
      failure = "HTTP " + std::to_string(code) + (error.empty() ? "" : " " + Printable(error));
    }
    if (!Retriable(transfer, code)) {
      ++failures_;
      if (code == 404) return Status::NotFound(what + ": " + failure);
      if (code == 401 || code == 403) {
        return Status::Permission(what + ": " + failure +
                                  " (check the credentials, s3_region and the bucket's policy)");
      }
      return Status::IOError(what + ": " + failure);
    }
  }
  ++failures_;
  return Status::IOError(what + ": " + failure + " (after " + std::to_string(attempts) +
                         (attempts == 1 ? " attempt)" : " attempts)"));
}

Status S3Client::List(const std::string& prefix, std::vector<S3Object>* out,
                      uint64_t* stray) const {
  out->clear();
  const std::string where = "listing s3://" + bucket_ + "/" + Printable(prefix);
  ListingBound bound(prefix);
  std::string token;
  for (;;) {
    // Signature V4 signs the query as sent: its names in order. Keys come
    // percent-encoded (encoding-type=url), so that a key XML cannot carry
    // (a control character) still lists, to be left out by the catalog.
    std::string query;
    if (!token.empty()) query += "continuation-token=" + Encode(token, false) + "&";
    query += "encoding-type=url&list-type=2&prefix=" + Encode(prefix, false);
    Response r;
    Status s = Request("GET", "", query, "", kListPageBytes, 0, Clock::time_point::max(), &r);
    if (!s.ok()) return s;
    xmlDoc* doc = xmlReadMemory(r.body.data(), static_cast<int>(r.body.size()), nullptr, nullptr,
                                XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
    const xmlNode* root = doc ? xmlDocGetRootElement(doc) : nullptr;
    if (!root || xmlStrcmp(root->name, BAD_CAST "ListBucketResult") != 0) {
      if (doc) xmlFreeDoc(doc);
      return Status::IOError(where + ": the answer is not a ListBucketResult");
    }
    const bool encoded = Text(Find(root, "EncodingType")) == "url";
    for (const xmlNode* n = root->children; n; n = n->next) {
      if (n->type != XML_ELEMENT_NODE || xmlStrcmp(n->name, BAD_CAST "Contents") != 0) continue;
      S3Object o;
      o.key = Text(Find(n, "Key"));
      if (encoded) o.key = UrlDecode(o.key);
      if (!bound.Take(o.key)) continue;
      o.size = std::strtoull(Text(Find(n, "Size")).c_str(), nullptr, 10);
      o.etag = Unquote(Text(Find(n, "ETag")));
      out->push_back(std::move(o));
    }
    const bool truncated = Text(Find(root, "IsTruncated")) == "true";
    token = Text(Find(root, "NextContinuationToken"));
    xmlFreeDoc(doc);
    if (stray) *stray = bound.stray();
    s = bound.EndPage(truncated, token);
    if (!s.ok()) return Status::IOError(where + ": " + s.message());
    if (!truncated) return Status::Ok();
  }
}

Status S3Client::Get(const std::string& key, uint64_t offset, uint64_t length, uint64_t max_bytes,
                     std::string* body, S3Object* meta, uint64_t expected,
                     Clock::time_point deadline) const {
  Response r;
  const std::string range =
      length > 0 ? std::to_string(offset) + "-" + std::to_string(offset + length - 1) : "";
  // A range is what was asked for, not a byte more.
  if (length > 0) expected = length;
  Status s = Request("GET", key, "", range, length > 0 ? std::min(length, max_bytes) : max_bytes,
                     expected, deadline, &r);
  if (!s.ok()) return s;
  if (length > 0 && r.body.size() != length) {
    return Status::IOError("GET s3://" + bucket_ + "/" + Printable(key) + ": " +
                           std::to_string(r.body.size()) + " bytes where " +
                           std::to_string(length) + " were asked for");
  }
  meta->key = key;
  meta->etag = std::move(r.etag);
  meta->size = length > 0 ? r.total_size : r.body.size();
  *body = std::move(r.body);
  return Status::Ok();
}

void S3Client::MeasureRoundTrip(const std::string& key) {
  int64_t best = 0;
  for (int i = 0; i < 3; ++i) {
    S3Object meta;
    const auto started = std::chrono::steady_clock::now();
    if (!Head(key, &meta).ok()) return;
    const int64_t took = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::steady_clock::now() - started)
                             .count();
    if (best == 0 || took < best) best = took;
  }
  round_trip_us_ = best;
}

Status S3Client::Head(const std::string& key, S3Object* meta, Clock::time_point deadline) const {
  Response r;
  Status s = Request("HEAD", key, "", "", 0, 0, deadline, &r);
  if (!s.ok()) return s;
  meta->key = key;
  meta->etag = std::move(r.etag);
  meta->size = r.total_size;
  return Status::Ok();
}

}  // namespace joaderfs
