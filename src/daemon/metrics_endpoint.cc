#include "daemon/metrics_endpoint.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

#include "common/parse.h"

namespace joaderfs {
namespace {

constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

MHD_Result Reply(MHD_Connection* connection, unsigned status, const std::string& body,
                 const char* type) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (!response) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED) {
    MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  }
  const MHD_Result r = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return r;
}

MHD_Result Handle(void* cls, MHD_Connection* connection, const char* url, const char* method,
                  const char*, const char*, size_t*, void**) {
  const auto* render = static_cast<const std::function<std::string()>*>(cls);
  if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
      std::strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    return Reply(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "GET /metrics only\n", "text/plain");
  }
  if (std::strcmp(url, "/metrics") != 0) {
    return Reply(connection, MHD_HTTP_NOT_FOUND, "joaderfs serves /metrics only\n", "text/plain");
  }
  return Reply(connection, MHD_HTTP_OK, (*render)(), kContentType);
}

}  // namespace

Status ParseListen(const std::string& listen, std::string* host, uint16_t* port) {
  const size_t colon = listen.rfind(':');
  const uint64_t number =
      colon == std::string::npos ? 0 : ParseUint(listen.substr(colon + 1)).value_or(0);
  *host = colon == std::string::npos ? "" : listen.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  in6_addr any;
  const bool address =
      inet_pton(AF_INET, host->c_str(), &any) == 1 || inet_pton(AF_INET6, host->c_str(), &any) == 1;
  if (number == 0 || number > 65535 || !address) {
    return Status::InvalidArgument("metrics_listen=" + listen +
                                   ": expected ADDR:PORT, such as 127.0.0.1:9101 or [::1]:9101");
  }
  *port = static_cast<uint16_t>(number);
  return Status::Ok();
}

Status MetricsEndpoint::Start(const std::string& listen, std::function<std::string()> render,
                              std::unique_ptr<MetricsEndpoint>* out) {
  std::string host;
  uint16_t port = 0;
  if (Status s = ParseListen(listen, &host, &port); !s.ok()) return s;
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  e->render_ = std::move(render);
  sockaddr_storage address{};
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
  if (host.find(':') == std::string::npos) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    inet_pton(AF_INET, host.c_str(), &v4->sin_addr);
  } else {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr);
    flags |= MHD_USE_IPv6;
  }
  // One polling thread, few connections, short timeouts: a scraper is
  // one client every few seconds, and nobody may hold the server up.
  e->daemon_ = MHD_start_daemon(flags, port, nullptr, nullptr, &Handle, &e->render_,
                                MHD_OPTION_SOCK_ADDR, &address, MHD_OPTION_CONNECTION_LIMIT, 16u,
                                MHD_OPTION_PER_IP_CONNECTION_LIMIT, 4u,
                                MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
  if (!e->daemon_) {
    return Status::InvalidArgument("metrics_listen=" + listen + ": cannot listen there (" +
                                   std::strerror(errno) + ")");
  }
  *out = std::move(e);
  return Status::Ok();
}

MetricsEndpoint::~MetricsEndpoint() {
  if (daemon_) MHD_stop_daemon(daemon_);
}

}  // namespace joaderfs
