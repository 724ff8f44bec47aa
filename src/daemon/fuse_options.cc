#include "daemon/fuse_options.h"

#define FUSE_USE_VERSION 314
#include <fuse_log.h>
#include <fuse_lowlevel.h>

#include <cstdarg>
#include <cstdio>
#include <iterator>
#include <sstream>
#include <string_view>
#include <vector>

#include "common/parse.h"
#include "daemon/options.h"

namespace joaderfs {
namespace {

// The options libfuse and mount(8) take besides ours: only to suggest a
// name for a typo. Whether an option is valid is libfuse's to say.
constexpr const char* kOtherOptionNames[] = {
    "allow_other", "allow_root", "auto_unmount", "blkdev",  "blksize",   "default_permissions",
    "fsname",      "subtype",    "max_read",     "context", "fscontext", "defcontext",
    "rootcontext", "ro",         "rw",           "suid",    "nosuid",    "dev",
    "nodev",       "exec",       "noexec",       "async",   "sync",      "dirsync",
    "atime",       "noatime",    "debug",
};

// "name (did you mean other?)" for the nearest known option (NearestName).
std::string Explain(const std::string& option) {
  const std::string name = option.substr(0, option.find('='));
  std::vector<std::string_view> names(std::begin(kOtherOptionNames), std::end(kOtherOptionNames));
  const std::vector<MountOptionInfo> ours = MountOptionTable();
  for (const MountOptionInfo& o : ours) names.emplace_back(o.name);
  return option + DidYouMean(name, names);
}

// Where libfuse's messages go while CheckFuseOptions runs. The options are
// parsed once, before any thread exists.
std::string* fuse_messages = nullptr;

void KeepFuseMessage(fuse_log_level level, const char* format, va_list ap) {
  if (fuse_messages == nullptr || level > FUSE_LOG_ERR) return;
  char buffer[1024];
  std::vsnprintf(buffer, sizeof(buffer), format, ap);
  *fuse_messages += buffer;
}

}  // namespace

Status CheckFuseOptions(const fuse_args& args) {
  fuse_args copy = FUSE_ARGS_INIT(0, nullptr);
  for (int i = 0; i < args.argc; ++i) fuse_opt_add_arg(&copy, args.argv[i]);
  std::string messages;
  fuse_messages = &messages;
  fuse_set_log_func(KeepFuseMessage);
  const fuse_lowlevel_ops no_ops{};
  fuse_session* session = fuse_session_new(&copy, &no_ops, sizeof(no_ops), nullptr);
  fuse_set_log_func(nullptr);
  fuse_messages = nullptr;
  fuse_opt_free_args(&copy);
  if (session != nullptr) {
    fuse_session_destroy(session);
    return Status::Ok();
  }
  // libfuse: "fuse: unknown option(s): `-o a,b -x'".
  const std::string marker = "unknown option(s): `";
  const size_t start = messages.find(marker);
  const size_t end = messages.find('\'', start + marker.size());
  if (start == std::string::npos || end == std::string::npos) {
    std::string reason = messages.substr(0, messages.find('\n'));
    if (reason.starts_with("fuse: ")) reason.erase(0, 6);
    return Status::InvalidArgument(reason.empty() ? "libfuse refused the options" : reason);
  }
  std::istringstream tokens(messages.substr(start + marker.size(), end - start - marker.size()));
  std::vector<std::string> unknown;
  for (std::string token; tokens >> token;) {
    if (token == "-o") continue;
    if (token.starts_with("-o")) token.erase(0, 2);
    std::istringstream options(token);
    for (std::string option; std::getline(options, option, ',');) {
      if (!option.empty()) unknown.push_back(Explain(option));
    }
  }
  std::string message = unknown.size() == 1 ? "unknown option " : "unknown options ";
  for (size_t i = 0; i < unknown.size(); ++i) message += (i ? ", " : "") + unknown[i];
  return Status::InvalidArgument(message + "; joaderfs --help lists the options");
}

}  // namespace joaderfs
