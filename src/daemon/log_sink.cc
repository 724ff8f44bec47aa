#include "daemon/log_sink.h"

#include <fcntl.h>
#include <paths.h>
#include <signal.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace joaderfs {
namespace {

// The pipe's write end for the SIGHUP handler: set once before the handler
// is installed.
std::atomic<int> sighup_fd{-1};

void OnSighup(int) {
  const int saved = errno;
  const char byte = 'h';
  if (write(sighup_fd.load(), &byte, 1) < 0) {
    // A full pipe already holds a reopen.
  }
  errno = saved;
}

// Whether syslog(3) would deliver: glibc writes to the /dev/log socket and
// drops messages silently when there is none (a container, a machine
// without a syslog daemon). On false, `why` says what failed.
bool SyslogReachable(std::string* why) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, _PATH_LOG, sizeof(address.sun_path) - 1);
  for (int type : {SOCK_DGRAM, SOCK_STREAM}) {
    const int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *why = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    const int error = errno;
    close(fd);
    if (ok) return true;
    *why = std::string(_PATH_LOG) + ": " + std::strerror(error);
  }
  return false;
}

}  // namespace

std::string MountFileName(const std::string& mountpoint) {
  std::string out;
  size_t i = 0;
  while (i < mountpoint.size() && mountpoint[i] == '/') ++i;
  for (; i < mountpoint.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(mountpoint[i]);
    if (c == '/') {
      out += '-';
    } else if (std::isalnum(c) || c == '_' || c == '.') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out.empty() ? "root" : out;
}

Status LogSink::Open(const DaemonOptions& o, std::unique_ptr<LogSink>* out, std::string* note) {
  std::unique_ptr<LogSink> l(new LogSink());
  std::string file = o.log == "syslog" ? "" : o.log;
  std::string unreachable;
  const bool syslog = o.log == "syslog" || (o.log.empty() && !o.foreground);
  if (syslog && !SyslogReachable(&unreachable)) {
    const std::string folder = o.cache_dir.empty() ? DefaultCacheDir() : o.cache_dir;
    std::error_code ec;
    std::filesystem::create_directories(folder, ec);
    file = folder + (o.cache_dir.empty() ? "/joaderfs-" + MountFileName(o.mountpoint) + ".log"
                                         : "/joaderfs.log");
    *note = "syslog is not available (" + unreachable + "); logging to " + file;
  }
  try {
    spdlog::sink_ptr sink;
    if (syslog && unreachable.empty()) {
      sink =
          std::make_shared<spdlog::sinks::syslog_sink_mt>("joaderfs", LOG_PID, LOG_DAEMON, false);
    } else if (!file.empty()) {
      sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(file);
      l->file_ = file;
    } else {
      sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    }
    // Through a dist sink, whose sinks can be swapped while others log.
    l->sinks_ = std::make_shared<spdlog::sinks::dist_sink_mt>(std::vector<spdlog::sink_ptr>{sink});
    auto logger = std::make_shared<spdlog::logger>("joaderfs", l->sinks_);
    logger->set_level(spdlog::level::from_str(o.log_level));
    logger->flush_on(spdlog::level::info);
    spdlog::set_default_logger(std::move(logger));
  } catch (const spdlog::spdlog_ex& e) {
    return Status::InvalidArgument("cannot open log " + file + ": " + e.what());
  }
  *out = std::move(l);
  return Status::Ok();
}

void LogSink::ReopenOnSighup() {
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    spdlog::warn("SIGHUP will not reopen the log: pipe: {}", std::strerror(errno));
    return;
  }
  fcntl(wake_[0], F_SETFL, 0);  // the reopener blocks on its end
  sighup_fd = wake_[1];
  reopener_ = std::thread([this] { ReopenLoop(); });
  struct sigaction sa {};
  sa.sa_handler = OnSighup;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGHUP, &sa, nullptr);
}

void LogSink::ReopenLoop() {
  for (char byte = 0; read(wake_[0], &byte, 1) == 1 || errno == EINTR;) {
    if (byte == 'q') return;
    if (byte != 'h') continue;
    byte = 0;
    if (file_.empty()) {
      spdlog::info("SIGHUP: logging to syslog or stderr, nothing to reopen");
      continue;
    }
    try {
      // The old file (renamed by logrotate) is closed once the new one
      // takes its place.
      sinks_->set_sinks({std::make_shared<spdlog::sinks::basic_file_sink_mt>(file_)});
      spdlog::info("SIGHUP: log {} reopened", file_);
    } catch (const spdlog::spdlog_ex& e) {
      spdlog::error("SIGHUP: cannot reopen log {}: {}; logging on to the old file", file_,
                    e.what());
    }
  }
}

LogSink::~LogSink() {
  if (reopener_.joinable()) {
    signal(SIGHUP, SIG_IGN);  // the pipe closes below
    sighup_fd = -1;
    const char byte = 'q';
    if (write(wake_[1], &byte, 1) < 0) {
      // Cannot happen: the reopener drains the pipe.
    }
    reopener_.join();
  }
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
  spdlog::shutdown();
}

}  // namespace joaderfs
