// A memcached client for the remote tier that no server can crash, stall or
// bloat: memcached's meta text protocol (mg, ms, md, mn; memcached 1.6's
// doc/protocol.txt), spoken over TCP or TLS (OpenSSL; memcached's -Z).
//
// Why not libmemcached: a reply of the wrong kind trips an assert() inside
// it (the process aborts), it allocates whatever value size a server
// declares, and its poll timeout restarts per packet, so a server that
// accepts and never answers, or trickles, holds a caller far past it. Here:
//   - every reply is parsed strictly; anything unexpected (another kind of
//     reply, bytes that are no reply, a line past kMaxLine) is an error of
//     that call, never an abort;
//   - a declared value size past `max_value` is an error before anything
//     is allocated;
//   - each call has one deadline, `timeout` from its start, over connect,
//     TLS handshake, request and whole reply;
//   - a server whose call fails is ejected: keys that hash to it go to the
//     next server by rendezvous hashing (so losing a server moves only its
//     keys), and one call a `retry` interval probes it again.
// A connection whose call failed is closed, never reused: no reply of an
// old call can be read as the answer to a new one.
//
// Thread-safe: any thread may call any member. Connections are pooled per
// server under a leaf mutex and used without it, one caller at a time.

#ifndef JOADERFS_CACHE_MEMCACHED_CLIENT_H_
#define JOADERFS_CACHE_MEMCACHED_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/ranked_mutex.h"
#include "common/status.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace joaderfs {

struct MemcachedTls {
  std::string ca_file;    // verify servers against this CA bundle; empty: plain TCP
  std::string cert_file;  // PEM with this client's certificate and key; empty: none
};

struct MemcachedClientOptions {
  std::vector<std::string> servers;  // host:port
  std::chrono::milliseconds timeout{100};
  std::chrono::milliseconds retry{1000};  // an ejected server is probed again after
  size_t max_value = 64 << 20;            // a larger declared value is an error
  MemcachedTls tls;
};

class MemcachedClient {
 public:
  // Fails on a malformed server list or TLS files that do not load; servers
  // are not contacted.
  static Status Open(const MemcachedClientOptions& options, std::unique_ptr<MemcachedClient>* out);
  ~MemcachedClient();

  // The outcome of one call. A failed call names its server and why, for
  // the caller's rate-limited log.
  struct Result {
    enum class Kind { kOk, kMiss, kError } kind = Kind::kError;
    std::string server;  // host:port that answered or failed
    std::string error;   // kError: what went wrong
    bool ok() const { return kind == Kind::kOk; }
  };

  // kOk and the value; kMiss; kError.
  Result Get(std::string_view key, std::string* value);
  // One pipelined request per server for all `keys`: `found(i, value,
  // server)` for each key held, on this thread; misses are not reported.
  // Returns the servers' failures (empty when every server answered).
  std::vector<Result> GetMany(
      const std::vector<std::string>& keys,
      const std::function<void(size_t, std::string&&, const std::string&)>& found);
  // kOk: stored; kMiss: not stored (Add: the key exists).
  Result Set(std::string_view key, std::string_view value, uint32_t ttl_seconds);
  Result Add(std::string_view key, std::string_view value, uint32_t ttl_seconds);
  // kOk: deleted; kMiss: there was none.
  Result Delete(std::string_view key);
  // Asks every server for its version: the failures (empty when all answer).
  std::vector<Result> Ping();

  const std::vector<std::string>& servers() const;

 private:
  struct Server;
  class Connection;
  MemcachedClient() = default;
  // The live server that ranks first for `key` (rendezvous hashing), or the
  // first-ranked overall when none is live; nullptr when a probe of it is
  // already under way.
  Server* Pick(std::string_view key);
  // An idle connection to the server, or a new one.
  std::unique_ptr<Connection> Take(Server* s, std::chrono::steady_clock::time_point deadline,
                                   std::string* error);
  void Return(Server* s, std::unique_ptr<Connection> c);
  // Marks the server failed (ejected for `retry`), closes its idle
  // connections; returns the error result.
  Result Fail(Server* s, std::string error);
  void Succeeded(Server* s);
  Result Store(std::string_view key, std::string_view value, uint32_t ttl_seconds, char mode);
  // Sends `request` and lets `read_reply` parse the reply (false and why:
  // the server failed). The connection is reused only after a whole reply
  // with nothing behind it.
  Result Call(Server* s, const std::string& request, std::chrono::steady_clock::time_point deadline,
              const std::function<bool(Connection*, std::string*)>& read_reply);

  MemcachedClientOptions options_;
  SSL_CTX* tls_ = nullptr;
  std::vector<std::unique_ptr<Server>> servers_;
  mutable Mutex mu_;
};

// Parses a reply line "VA <size> <flags>*": the size, or -1 for a line of
// another kind or a malformed one, -2 for a size past `max_value`.
int64_t ParseValueLine(std::string_view line, size_t max_value);

}  // namespace joaderfs

#endif  // JOADERFS_CACHE_MEMCACHED_CLIENT_H_
