// The daemon's log: where it goes (syslog, a file, stderr with -f), and a
// file log reopened on SIGHUP, so that logrotate's `postrotate kill -HUP`
// (or `copytruncate`-free rotation by hand) starts a new file without
// unmounting anything.
//
// One per process. Open() installs the default spdlog logger; the SIGHUP
// handler only writes a byte to a pipe (async-signal-safe), and a thread of
// this object's reopens the file. Destroying it stops that thread and
// flushes the log.

#ifndef JOADERFS_DAEMON_LOG_SINK_H_
#define JOADERFS_DAEMON_LOG_SINK_H_

#include <spdlog/sinks/dist_sink.h>

#include <memory>
#include <string>
#include <thread>

#include "common/status.h"
#include "daemon/options.h"

namespace joaderfs {

class LogSink {
 public:
  // A sink that cannot be opened is a start-up error. Daemonized, the
  // default sink is syslog; where syslog cannot be reached the log goes to
  // <cache_dir>/joaderfs.log (one daemon holds a cache_dir), or with
  // cache_dir=none to the default cache folder's joaderfs-<mountpoint>.log
  // (several daemons may use that folder, each gets a log of its own), and
  // `note` says so: the caller tells the user once the mount is up, so
  // that a start-up error stays one line.
  static Status Open(const DaemonOptions& o, std::unique_ptr<LogSink>* out, std::string* note);
  ~LogSink();

  // From now on SIGHUP reopens a file log (and is only logged otherwise),
  // in place of the handler libfuse installed, which would end the session.
  void ReopenOnSighup();

 private:
  LogSink() = default;
  void ReopenLoop();

  std::string file_;  // empty: syslog or stderr
  std::shared_ptr<spdlog::sinks::dist_sink_mt> sinks_;
  int wake_[2] = {-1, -1};  // the SIGHUP handler writes 'h', the destructor 'q'
  std::thread reopener_;
};

// The mountpoint as a file name: '/' between components becomes '-', and
// each byte but [A-Za-z0-9_.] becomes %XX, so that no two mountpoints
// share a name ("/mnt/a-b" is "mnt-a%2Db", "/mnt/a/b" is "mnt-a-b").
std::string MountFileName(const std::string& mountpoint);

}  // namespace joaderfs

#endif  // JOADERFS_DAEMON_LOG_SINK_H_
