// metrics_listen=ADDR:PORT: the /metrics file served over HTTP for
// Prometheus to scrape, by libmicrohttpd (no HTTP code of ours). It serves
// GET /metrics and nothing else: no job stream or control file is reachable
// through it, whatever the URL (404), and no other method (405).
//
// Owns the libmicrohttpd daemon and its one polling thread; `render` is
// called on that thread, one scrape at a time. Destroying it stops the
// server before returning, so `render` may use objects that outlive it.

#ifndef JOADERFS_DAEMON_METRICS_ENDPOINT_H_
#define JOADERFS_DAEMON_METRICS_ENDPOINT_H_

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

struct MHD_Daemon;

namespace joaderfs {

class MetricsEndpoint {
 public:
  // `listen` is ADDR:PORT: an IPv4 address, or [IPv6]:PORT. Fails when it
  // is malformed or cannot be bound.
  static Status Start(const std::string& listen, std::function<std::string()> render,
                      std::unique_ptr<MetricsEndpoint>* out);
  ~MetricsEndpoint();

 private:
  MetricsEndpoint() = default;
  std::function<std::string()> render_;
  MHD_Daemon* daemon_ = nullptr;
};

// Checks metrics_listen's value: the parse Start uses, without binding.
Status ParseListen(const std::string& listen, std::string* host, uint16_t* port);

}  // namespace joaderfs

#endif  // JOADERFS_DAEMON_METRICS_ENDPOINT_H_
