#include "cache/memcached_client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "common/hash.h"
#include "common/parse.h"
#include "common/private_file.h"

namespace joaderfs {
namespace {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// The longest reply line we accept: "VA <size> k<key of at most 250>" and
// memcached's error lines fit many times over.
constexpr size_t kMaxLine = 1024;
constexpr size_t kMaxKey = 250;  // memcached's own limit
constexpr size_t kReadChunk = 64 << 10;

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer: FNV's low bits alone rank poorly
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int MillisLeft(Deadline deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(left);
}

std::string TlsError() {
  const unsigned long e = ERR_get_error();
  if (e == 0) return "TLS error";
  char text[256];
  ERR_error_string_n(e, text, sizeof text);
  ERR_clear_error();
  return text;
}

bool ValidKey(std::string_view key) {
  if (key.empty() || key.size() > kMaxKey) return false;
  for (const char c : key) {
    if (c <= ' ' || c == 0x7f) return false;
  }
  return true;
}

}  // namespace

int64_t ParseValueLine(std::string_view line, size_t max_value) {
  if (line.substr(0, 3) != "VA ") return -1;
  std::string_view rest = line.substr(3);
  const size_t space = rest.find(' ');
  const std::optional<uint64_t> size = ParseUint(rest.substr(0, space));
  if (!size) return -1;
  if (*size > max_value) return -2;
  return static_cast<int64_t>(*size);
}

namespace {

// The size a "VA" reply declares, or false and why (another kind of reply,
// or a size past the largest value): the server failed that call.
bool ValueSize(std::string_view line, size_t max_value, size_t* size, std::string* error) {
  const int64_t n = ParseValueLine(line, max_value);
  if (n >= 0) {
    *size = static_cast<size_t>(n);
    return true;
  }
  *error = n == -2 ? "a value larger than any image declared" : "an unexpected reply";
  return false;
}

}  // namespace

struct MemcachedClient::Server {
  std::string name;  // host:port
  std::string host;
  std::string port;
  uint64_t seed = 0;  // its rendezvous hash basis
  // Guarded by the client's mu_ (a nested struct the analysis cannot tie
  // to it: every access below is under MutexLock(mu_)).
  std::vector<std::unique_ptr<Connection>> idle;
  bool failed = false;
  bool probing = false;  // one call is trying a failed server again
  Deadline retry_at{};
};

// One connection to one server, used by one caller at a time. Every read
// and write waits at most until the caller's deadline.
class MemcachedClient::Connection {
 public:
  static std::unique_ptr<Connection> Dial(const Server& s, SSL_CTX* tls, Deadline deadline,
                                          std::string* error) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    if (int rc = getaddrinfo(s.host.c_str(), s.port.c_str(), &hints, &found); rc != 0) {
      *error = std::string("cannot resolve: ") + gai_strerror(rc);
      return nullptr;
    }
    std::unique_ptr<addrinfo, void (*)(addrinfo*)> owner(found, freeaddrinfo);
    std::unique_ptr<Connection> c(new Connection());
    c->fd_ = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd_ < 0) {
      *error = std::string("socket: ") + std::strerror(errno);
      return nullptr;
    }
    const int one = 1;
    setsockopt(c->fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd_, found->ai_addr, found->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        *error = std::string("connect: ") + std::strerror(errno);
        return nullptr;
      }
      if (!c->Wait(POLLOUT, deadline, error)) return nullptr;
      int so_error = 0;
      socklen_t len = sizeof so_error;
      getsockopt(c->fd_, SOL_SOCKET, SO_ERROR, &so_error, &len);
      if (so_error != 0) {
        *error = std::string("connect: ") + std::strerror(so_error);
        return nullptr;
      }
    }
    if (tls && !c->Handshake(s, tls, deadline, error)) return nullptr;
    return c;
  }

  ~Connection() {
    if (ssl_) SSL_free(ssl_);
    if (fd_ >= 0) close(fd_);
  }

  bool Send(std::string_view data, Deadline deadline, std::string* error) {
    while (!data.empty()) {
      ssize_t n;
      short wait = POLLOUT;
      if (ssl_) {
        ERR_clear_error();
        const int rc = SSL_write(ssl_, data.data(), static_cast<int>(data.size()));
        n = rc;
        if (rc <= 0 && !TlsWants(rc, &wait, error)) return false;
      } else {
        n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
          *error = std::string("send: ") + std::strerror(errno);
          return false;
        }
      }
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
      } else if (!Wait(wait, deadline, error)) {
        return false;
      }
    }
    return true;
  }

  // A reply line, without its "\r\n".
  bool ReadLine(std::string* line, Deadline deadline, std::string* error) {
    for (;;) {
      const size_t end = buffer_.find("\r\n", start_);
      if (end != std::string::npos) {
        line->assign(buffer_, start_, end - start_);
        start_ = end + 2;
        return true;
      }
      if (buffer_.size() - start_ > kMaxLine) {
        *error = "a reply line past " + std::to_string(kMaxLine) + " bytes";
        return false;
      }
      if (!Fill(deadline, error)) return false;
    }
  }

  // A data block of `size` bytes and its "\r\n".
  bool ReadBlock(size_t size, std::string* out, Deadline deadline, std::string* error) {
    out->resize(size + 2);
    size_t have = std::min(out->size(), buffer_.size() - start_);
    std::memcpy(out->data(), buffer_.data() + start_, have);
    start_ += have;
    while (have < out->size()) {
      const ssize_t n = Receive(out->data() + have, out->size() - have, deadline, error);
      if (n < 0) return false;
      have += static_cast<size_t>(n);
    }
    if (out->compare(size, 2, "\r\n") != 0) {
      *error = "a data block not ended by CRLF";
      return false;
    }
    out->resize(size);
    return true;
  }

  // Whether every byte of the replies was read: only then may the
  // connection carry another call.
  bool Drained() const { return start_ == buffer_.size(); }

 private:
  Connection() = default;

  bool Handshake(const Server& s, SSL_CTX* tls, Deadline deadline, std::string* error) {
    ssl_ = SSL_new(tls);
    if (!ssl_ || SSL_set_fd(ssl_, fd_) != 1) {
      *error = TlsError();
      return false;
    }
    in6_addr any;
    const bool literal = inet_pton(AF_INET, s.host.c_str(), &any) == 1 ||
                         inet_pton(AF_INET6, s.host.c_str(), &any) == 1;
    // The server's certificate must name the host or address we dialled.
    const int named = literal ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), s.host.c_str())
                              : SSL_set1_host(ssl_, s.host.c_str());
    if (named != 1) {
      *error = TlsError();
      return false;
    }
    if (!literal) SSL_set_tlsext_host_name(ssl_, s.host.c_str());
    for (;;) {
      ERR_clear_error();
      const int rc = SSL_connect(ssl_);
      if (rc == 1) return true;
      short wait = POLLIN;
      if (!TlsWants(rc, &wait, error) || !Wait(wait, deadline, error)) {
        const long verify = SSL_get_verify_result(ssl_);
        if (verify != X509_V_OK) {
          *error = std::string("TLS: ") + X509_verify_cert_error_string(verify);
        }
        return false;
      }
    }
  }

  // After an SSL call returned rc <= 0: true and what to wait for, or false
  // and why it failed.
  bool TlsWants(int rc, short* wait, std::string* error) {
    switch (SSL_get_error(ssl_, rc)) {
      case SSL_ERROR_WANT_READ: *wait = POLLIN; return true;
      case SSL_ERROR_WANT_WRITE: *wait = POLLOUT; return true;
      case SSL_ERROR_ZERO_RETURN: *error = "closed by the server"; return false;
      case SSL_ERROR_SYSCALL:
        *error = errno ? std::string("TLS: ") + std::strerror(errno) : "closed by the server";
        return false;
      default: *error = "TLS: " + TlsError(); return false;
    }
  }

  bool Wait(short events, Deadline deadline, std::string* error) {
    for (;;) {
      pollfd p{fd_, events, 0};
      const int rc = poll(&p, 1, MillisLeft(deadline));
      if (rc > 0) return true;
      if (rc == 0) {
        *error = "timed out";
        return false;
      }
      if (errno != EINTR) {
        *error = std::string("poll: ") + std::strerror(errno);
        return false;
      }
    }
  }

  // Some bytes into `to`: how many, or -1 (error set).
  ssize_t Receive(char* to, size_t size, Deadline deadline, std::string* error) {
    for (;;) {
      short wait = POLLIN;
      if (ssl_) {
        ERR_clear_error();
        const int rc = SSL_read(ssl_, to, static_cast<int>(std::min<size_t>(size, INT32_MAX)));
        if (rc > 0) return rc;
        if (!TlsWants(rc, &wait, error)) return -1;
      } else {
        const ssize_t n = recv(fd_, to, size, 0);
        if (n > 0) return n;
        if (n == 0) {
          *error = "closed by the server";
          return -1;
        }
        if (errno != EAGAIN && errno != EINTR) {
          *error = std::string("recv: ") + std::strerror(errno);
          return -1;
        }
      }
      if (!Wait(wait, deadline, error)) return -1;
    }
  }

  bool Fill(Deadline deadline, std::string* error) {
    if (start_ > 0) {
      buffer_.erase(0, start_);
      start_ = 0;
    }
    const size_t had = buffer_.size();
    buffer_.resize(had + kReadChunk);
    const ssize_t n = Receive(buffer_.data() + had, kReadChunk, deadline, error);
    buffer_.resize(had + (n > 0 ? static_cast<size_t>(n) : 0));
    return n > 0;
  }

  int fd_ = -1;
  SSL* ssl_ = nullptr;
  std::string buffer_;  // bytes received, not yet parsed from start_
  size_t start_ = 0;
};

Status MemcachedClient::Open(const MemcachedClientOptions& options,
                             std::unique_ptr<MemcachedClient>* out) {
  std::unique_ptr<MemcachedClient> c(new MemcachedClient());
  c->options_ = options;
  for (const std::string& name : options.servers) {
    const size_t colon = name.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return Status::InvalidArgument("remote_cache: '" + name + "' is not host:port");
    }
    auto s = std::make_unique<Server>();
    s->name = name;
    s->host = name.substr(0, colon);
    if (s->host.size() > 2 && s->host.front() == '[' && s->host.back() == ']') {
      s->host = s->host.substr(1, s->host.size() - 2);
    }
    s->port = name.substr(colon + 1);
    s->seed = Fnv1a(kFnv1aBasis, name.data(), name.size());
    c->servers_.push_back(std::move(s));
  }
  if (!options.tls.ca_file.empty()) {
    // A peer that closes mid-write must cost that call, not the process:
    // OpenSSL writes with write(2), which would raise SIGPIPE.
    signal(SIGPIPE, SIG_IGN);
    c->tls_ = SSL_CTX_new(TLS_client_method());
    if (!c->tls_) return Status::IOError("remote_tls: " + TlsError());
    SSL_CTX_set_min_proto_version(c->tls_, TLS1_2_VERSION);
    SSL_CTX_set_verify(c->tls_, SSL_VERIFY_PEER, nullptr);
    if (SSL_CTX_load_verify_locations(c->tls_, options.tls.ca_file.c_str(), nullptr) != 1) {
      return Status::InvalidArgument("remote_tls: cannot load CA file " + options.tls.ca_file +
                                     ": " + TlsError());
    }
    const std::string& cert = options.tls.cert_file;
    if (!cert.empty()) {  // it holds this node's private key
      std::string pem;
      if (Status read = ReadSecretFile(cert, /*owner_only=*/true, 1 << 20, &pem); !read.ok()) {
        return Status::InvalidArgument("remote_tls_cert: " + read.message());
      }
      OPENSSL_cleanse(pem.data(), pem.size());
    }
    if (!cert.empty() &&
        (SSL_CTX_use_certificate_chain_file(c->tls_, cert.c_str()) != 1 ||
         SSL_CTX_use_PrivateKey_file(c->tls_, cert.c_str(), SSL_FILETYPE_PEM) != 1 ||
         SSL_CTX_check_private_key(c->tls_) != 1)) {
      return Status::InvalidArgument(
          "remote_tls_cert: cannot load a certificate and its key from " + cert + ": " +
          TlsError());
    }
  }
  *out = std::move(c);
  return Status::Ok();
}

MemcachedClient::~MemcachedClient() {
  {
    MutexLock lock(mu_);
    for (auto& s : servers_) s->idle.clear();
  }
  if (tls_) SSL_CTX_free(tls_);
}

const std::vector<std::string>& MemcachedClient::servers() const { return options_.servers; }

MemcachedClient::Server* MemcachedClient::Pick(std::string_view key) {
  std::vector<std::pair<uint64_t, Server*>> ranked;
  ranked.reserve(servers_.size());
  for (auto& s : servers_)
    ranked.emplace_back(Mix(Fnv1a(s->seed, key.data(), key.size())), s.get());
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a > b; });
  const Deadline now = Clock::now();
  MutexLock lock(mu_);
  for (auto& [weight, s] : ranked) {
    if (!s->failed) return s;
    if (!s->probing && now >= s->retry_at) {
      s->probing = true;  // this call tries it; the others pass it by meanwhile
      return s;
    }
  }
  return nullptr;
}

std::unique_ptr<MemcachedClient::Connection> MemcachedClient::Take(Server* s, Deadline deadline,
                                                                   std::string* error) {
  {
    MutexLock lock(mu_);
    if (!s->idle.empty()) {
      std::unique_ptr<Connection> c = std::move(s->idle.back());
      s->idle.pop_back();
      return c;
    }
  }
  return Connection::Dial(*s, tls_, deadline, error);
}

void MemcachedClient::Return(Server* s, std::unique_ptr<Connection> c) {
  MutexLock lock(mu_);
  s->idle.push_back(std::move(c));
}

MemcachedClient::Result MemcachedClient::Fail(Server* s, std::string error) {
  std::vector<std::unique_ptr<Connection>> closing;
  {
    MutexLock lock(mu_);
    s->failed = true;
    s->probing = false;
    s->retry_at = Clock::now() + options_.retry;
    closing.swap(s->idle);  // closed outside the lock
  }
  return {Result::Kind::kError, s->name, std::move(error)};
}

void MemcachedClient::Succeeded(Server* s) {
  MutexLock lock(mu_);
  s->failed = false;
  s->probing = false;
}

MemcachedClient::Result MemcachedClient::Call(
    Server* s, const std::string& request, Deadline deadline,
    const std::function<bool(Connection*, std::string*)>& read_reply) {
  std::string error;
  std::unique_ptr<Connection> c = Take(s, deadline, &error);
  if (!c) return Fail(s, std::move(error));
  if (!c->Send(request, deadline, &error)) return Fail(s, std::move(error));
  if (!read_reply(c.get(), &error)) return Fail(s, std::move(error));
  if (!c->Drained()) return Fail(s, "bytes past the reply");
  Succeeded(s);
  Return(s, std::move(c));
  return {Result::Kind::kOk, s->name, {}};
}

MemcachedClient::Result MemcachedClient::Get(std::string_view key, std::string* value) {
  if (!ValidKey(key)) return {Result::Kind::kError, {}, "invalid key"};
  Server* s = Pick(key);
  if (!s) return {Result::Kind::kError, {}, "no server is up"};
  const Deadline deadline = Clock::now() + options_.timeout;
  bool hit = false;
  Result r = Call(s, "mg " + std::string(key) + " v\r\n", deadline,
                  [&](Connection* c, std::string* error) {
                    std::string line;
                    if (!c->ReadLine(&line, deadline, error)) return false;
                    if (line == "EN") return true;
                    size_t size = 0;
                    if (!ValueSize(line, options_.max_value, &size, error)) return false;
                    hit = true;
                    return c->ReadBlock(size, value, deadline, error);
                  });
  if (r.ok() && !hit) r.kind = Result::Kind::kMiss;
  return r;
}

std::vector<MemcachedClient::Result> MemcachedClient::GetMany(
    const std::vector<std::string>& keys,
    const std::function<void(size_t, std::string&&, const std::string&)>& found) {
  std::vector<Result> failures;
  std::unordered_map<Server*, std::vector<size_t>> by_server;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!ValidKey(keys[i])) continue;
    if (Server* s = Pick(keys[i])) by_server[s].push_back(i);
  }
  for (auto& [server, indexes] : by_server) {
    Server* s = server;  // a lambda cannot capture a structured binding
    std::string request;
    std::unordered_map<std::string_view, size_t> asked;
    for (const size_t i : indexes) {
      request += "mg " + keys[i] + " v k q\r\n";
      asked.emplace(keys[i], i);
    }
    request += "mn\r\n";
    const Deadline deadline = Clock::now() + options_.timeout;
    Result r = Call(s, request, deadline, [&](Connection* c, std::string* error) {
      for (;;) {
        std::string line;
        if (!c->ReadLine(&line, deadline, error)) return false;
        if (line == "MN") return true;
        size_t size = 0;
        if (!ValueSize(line, options_.max_value, &size, error)) return false;
        // The key comes back as the flag "k<key>"; one we did not ask for
        // is a server error, not a value.
        const size_t k = line.find(" k");
        const std::string_view key =
            k == std::string::npos
                ? std::string_view()
                : std::string_view(line).substr(k + 2, line.find(' ', k + 2) - (k + 2));
        const auto at = asked.find(key);
        if (at == asked.end()) {
          *error = "a value for a key not asked for";
          return false;
        }
        std::string value;
        if (!c->ReadBlock(size, &value, deadline, error)) return false;
        found(at->second, std::move(value), s->name);
      }
    });
    if (!r.ok()) failures.push_back(std::move(r));
  }
  return failures;
}

MemcachedClient::Result MemcachedClient::Store(std::string_view key, std::string_view value,
                                               uint32_t ttl_seconds, char mode) {
  if (!ValidKey(key)) return {Result::Kind::kError, {}, "invalid key"};
  Server* s = Pick(key);
  if (!s) return {Result::Kind::kError, {}, "no server is up"};
  std::string request = "ms " + std::string(key) + " " + std::to_string(value.size()) + " T" +
                        std::to_string(ttl_seconds) + " M" + mode + "\r\n";
  request.append(value);
  request += "\r\n";
  const Deadline deadline = Clock::now() + options_.timeout;
  bool stored = false;
  std::string refused;  // the server's own error (a value too large, say): that call fails
  Result r = Call(s, request, deadline, [&](Connection* c, std::string* error) {
    std::string line;
    if (!c->ReadLine(&line, deadline, error)) return false;
    stored = line == "HD";
    if (line.rfind("SERVER_ERROR ", 0) == 0) refused = line.substr(0, 80);
    if (stored || line == "NS" || !refused.empty()) return true;
    *error = "an unexpected reply";
    return false;
  });
  if (r.ok() && !refused.empty()) return {Result::Kind::kError, s->name, refused};
  if (r.ok() && !stored) r.kind = Result::Kind::kMiss;
  return r;
}

MemcachedClient::Result MemcachedClient::Set(std::string_view key, std::string_view value,
                                             uint32_t ttl_seconds) {
  return Store(key, value, ttl_seconds, 'S');
}

MemcachedClient::Result MemcachedClient::Add(std::string_view key, std::string_view value,
                                             uint32_t ttl_seconds) {
  return Store(key, value, ttl_seconds, 'E');
}

MemcachedClient::Result MemcachedClient::Delete(std::string_view key) {
  if (!ValidKey(key)) return {Result::Kind::kError, {}, "invalid key"};
  Server* s = Pick(key);
  if (!s) return {Result::Kind::kError, {}, "no server is up"};
  const Deadline deadline = Clock::now() + options_.timeout;
  bool deleted = false;
  Result r =
      Call(s, "md " + std::string(key) + "\r\n", deadline, [&](Connection* c, std::string* error) {
        std::string line;
        if (!c->ReadLine(&line, deadline, error)) return false;
        deleted = line == "HD";
        if (deleted || line == "NF") return true;
        *error = "an unexpected reply";
        return false;
      });
  if (r.ok() && !deleted) r.kind = Result::Kind::kMiss;
  return r;
}

std::vector<MemcachedClient::Result> MemcachedClient::Ping() {
  std::vector<Result> failures;
  for (auto& s : servers_) {
    const Deadline deadline = Clock::now() + options_.timeout;
    Result r = Call(s.get(), "mn\r\n", deadline, [&](Connection* c, std::string* error) {
      std::string line;
      if (!c->ReadLine(&line, deadline, error)) return false;
      if (line == "MN") return true;
      *error = "an unexpected reply";
      return false;
    });
    if (!r.ok()) failures.push_back(std::move(r));
  }
  return failures;
}

}  // namespace joaderfs
