// The daemon's command line as fstab, autofs or a user may write it. The
// input is split at NUL bytes into arguments after "joaderfs"; the seeds
// are "-o\0key=value,...\0SOURCE\0MOUNTPOINT". Only the parsing runs: no
// file is looked at.

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "daemon/options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace joaderfs;
  std::vector<std::string> args = {"joaderfs"};
  std::string arg;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] != 0) {
      arg += static_cast<char>(data[i]);
    } else {
      args.push_back(std::move(arg));
      arg.clear();
    }
  }
  args.push_back(std::move(arg));
  if (args.size() > 64) return 0;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  DaemonOptions o;
  fuse_args fuse{};
  const Status s = ParseCommandLine(static_cast<int>(args.size()), argv.data(), &o, &fuse);
  fuse_opt_free_args(&fuse);
  if (s.ok() && !o.help && !o.version) {
    const bool sane = !o.source.empty() && !o.mountpoint.empty() && o.threads <= 1024 &&
                      o.size <= 8192 && o.max_pixels >= 1 && o.max_pixels <= kMaxMaxPixels &&
                      o.job_idle_timeout <= kMaxIdleTimeout;
    if (!sane) std::abort();
  }
  return 0;
}
