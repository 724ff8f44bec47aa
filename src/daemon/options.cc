#include "daemon/options.h"

#define FUSE_USE_VERSION 314
#include <fuse_log.h>
#include <fuse_lowlevel.h>
#include <spdlog/common.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

#include "cache/budget.h"
#include "cache/remote_tier.h"
#include "common/parse.h"
#include "common/rocksdb_support.h"
#include "common/wrap.h"
#include "daemon/metrics_endpoint.h"

namespace joaderfs {
namespace {
namespace fs = std::filesystem;

enum Key {
  kRamCache,
  kCacheDir,
  kDiskCache,
  kPurgeDiskCache,
  kRemoteCache,
  kRemotePublish,
  kRemoteKey,
  kRemoteOldKey,
  kRemoteTls,
  kRemoteTlsCert,
  kThreads,
  kSize,
  kBase,
  kSeed,
  kLookahead,
  kIdleTimeout,
  kRetryFailed,
  kReadTimeout,
  kSourceReads,
  kSourceInFlight,
  kMaxPixels,
  kMaxJobsPerUser,
  kMaxStreamsPerUser,
  kMaxReadersPerUser,
  kMaxUnreadPerUser,
  kLimitRoot,
  kLabelKey,
  kS3Endpoint,
  kS3Region,
  kS3Credentials,
  kS3Profile,
  kSampler,
  kDriftBound,
  kLog,
  kLogLevel,
  kMetricsListen,
  kForeground,
  kDebug,
  kHelp,
  kVersion,
};

// Our -o options, in --help's order: the one list of them (options.h
// MountOptionInfo). Apply() parses each by its key.
struct MountOptionRow {
  Key key;
  MountOptionInfo info;
};
constexpr MountOptionRow kMountOptions[] = {
    {kRamCache,
     {"ram_cache", "SIZE", "1/4 of RAM",
      "RAM budget for decoded samples and unread deliveries; with a cgroup memory limit "
      "below RAM, a quarter of that"}},
    {kCacheDir,
     {"cache_dir", "DIR|none", "/var/cache/joaderfs for root",
      "on-disk cache and job store folder (for other users ~/.cache/joaderfs); none turns "
      "both off"}},
    {kDiskCache,
     {"disk_cache", "SIZE", "the decoded set's estimate",
      "on-disk budget, at most 80% of cache_dir's free space less room for its databases"}},
    {kPurgeDiskCache,
     {"purge_disk_cache", "0|1", "0",
      "1: empty SOURCE's disk tier at mount, before serving (after a compromise; the job "
      "store stays)"}},
    {kRemoteCache,
     {"remote_cache", "memcached://HOST:PORT[+HOST:PORT...]|none", "none",
      "the remote tier: decoded images shared by a cluster's daemons through these memcached "
      "servers (see docs/admin-guide.md, Cluster)"}},
    {kRemotePublish,
     {"remote_publish", "SIZE", "no limit",
      "the most image bytes this daemon publishes to the remote tier per mount"}},
    {kRemoteKey,
     {"remote_key", "FILE|insecure", "none: required with remote_cache",
      "the cluster key (64 hex digits, mode 600) that seals and opens the remote tier's "
      "values; insecure lets anyone who reaches the servers forge and read them"}},
    {kRemoteOldKey,
     {"remote_old_key", "FILE", "none",
      "key rotation: values sealed with this former cluster key are read, never written"}},
    {kRemoteTls,
     {"remote_tls", "CAFILE", "none: plain TCP",
      "reach the memcached servers over TLS, verified against this CA bundle"}},
    {kRemoteTlsCert,
     {"remote_tls_cert", "FILE", "none",
      "with remote_tls: this daemon's certificate and key (one PEM, mode 600), for servers "
      "that require one"}},
    {kThreads, {"threads", "N", "number of cores", "decode threads"}},
    {kSize,
     {"size", "N", "224",
      "output size: shorter side N, centre crop N x N; 0 resizes nothing: the image as "
      "decoded at the base resolution (the original with base=0)"}},
    {kBase,
     {"base", "N", "256",
      "cache images decoded with their shorter side at least N, cut per job; 0 = full size"}},
    {kSeed, {"seed", "N", "random", "sampler seed, also the root of each job's augmentation seed"}},
    {kLookahead, {"lookahead", "N", "128", "samples each job's plan runs ahead"}},
    {kIdleTimeout, {"job_idle_timeout", "SEC", "600", "release an unread job's samples after SEC"}},
    {kRetryFailed,
     {"retry_failed", "SEC", "30",
      "try an image that failed again after SEC, doubling per failure to 60 x SEC, or once "
      "its size or mtime changes"}},
    {kReadTimeout,
     {"read_timeout", "SEC", "30",
      "skip an image whose read of SOURCE has not returned after SEC, like an unreadable one; "
      "its thread is replaced"}},
    {kSourceReads,
     {"source_reads", "N", "threads; for s3:// sized from the round trip",
      "reads of SOURCE in flight at once, on I/O threads ahead of the decodes that need "
      "them"}},
    {kSourceInFlight,
     {"source_in_flight", "SIZE", "4 x source_reads x the mean image, 64M-1G",
      "bytes of SOURCE being read or read and awaiting their decode, at most; one read "
      "always may"}},
    {kMaxPixels,
     {"max_pixels", "N", "89478485",
      "refuse images of more than N pixels, from their header (PIL's limit)"}},
    {kMaxJobsPerUser,
     {"max_jobs_per_user", "N", "64", "jobs one uid may have; past it mkdir fails with EDQUOT"}},
    {kMaxStreamsPerUser,
     {"max_streams_per_user", "N", "1024",
      "job streams (next, next.R) one uid may have; past it a spec's ranks= fails with "
      "EDQUOT"}},
    {kMaxReadersPerUser,
     {"max_readers_per_user", "N", "256",
      "stream files one uid may have open; past it open fails with EMFILE"}},
    {kMaxUnreadPerUser,
     {"max_unread_per_user", "SIZE", "2G",
      "deliveries one uid's jobs may hold planned or handed out and not yet read; past it "
      "they plan nothing more until read"}},
    {kLimitRoot, {"limit_root", "0|1", "0", "apply the per-user limits to root too"}},
    {kLabelKey,
     {"label_key", "NAME", "cls",
      "tar shards: the label is the integer in <key>.NAME, else field NAME of <key>.json, "
      "else -1"}},
    {kS3Endpoint,
     {"s3_endpoint", "URL", "https://s3.REGION.amazonaws.com",
      "SOURCE s3://BUCKET[/PREFIX]: an S3-compatible store's http:// or https:// URL, "
      "path-style addressing"}},
    {kS3Region,
     {"s3_region", "NAME", "AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1",
      "SOURCE s3://...: the region requests are signed for"}},
    {kS3Credentials,
     {"s3_credentials", "FILE", "the environment's keys, else ~/.aws/credentials",
      "SOURCE s3://...: the AWS shared-credentials file to take the keys from, never the "
      "environment's; refused unless only its owner may read it (chmod 600)"}},
    {kS3Profile,
     {"s3_profile", "NAME", "AWS_PROFILE, else default",
      "SOURCE s3://...: the profile of the credentials file to use"}},
    {kSampler, {"sampler", "dsa|isa", "dsa", "dependent sampling or independent shuffles"}},
    {kDriftBound,
     {"drift_bound", "0|1", "1",
      "hold a job's reads while it runs far ahead of a job of the same data and pace, so "
      "that they share decodes"}},
    {kLog,
     {"log", "FILE|syslog", "stderr with -f, else syslog",
      "log sink (without a /dev/log, CACHE_DIR/joaderfs.log)"}},
    {kLogLevel, {"log_level", "LEVEL", "info", "trace, debug, info, warn, error, critical or off"}},
    {kMetricsListen,
     {"metrics_listen", "ADDR:PORT", "none",
      "serve /metrics over HTTP there for Prometheus (GET /metrics only)"}},
};

// libfuse's view of our options: "name=%s" per row, then the flags.
const fuse_opt* FuseOptions() {
  static const std::vector<std::string> templates = [] {
    std::vector<std::string> t;
    for (const MountOptionRow& row : kMountOptions) t.push_back(std::string(row.info.name) + "=%s");
    return t;
  }();
  static const std::vector<fuse_opt> options = [] {
    std::vector<fuse_opt> o;
    for (size_t i = 0; i < std::size(kMountOptions); ++i) {
      o.push_back(FUSE_OPT_KEY(templates[i].c_str(), kMountOptions[i].key));
    }
    for (const fuse_opt& flag : {
             fuse_opt FUSE_OPT_KEY("-f", kForeground),
             fuse_opt FUSE_OPT_KEY("-d", kDebug),
             fuse_opt FUSE_OPT_KEY("debug", kDebug),
             fuse_opt FUSE_OPT_KEY("-h", kHelp),
             fuse_opt FUSE_OPT_KEY("--help", kHelp),
             fuse_opt FUSE_OPT_KEY("-V", kVersion),
             fuse_opt FUSE_OPT_KEY("--version", kVersion),
         }) {
      o.push_back(flag);
    }
    o.push_back(FUSE_OPT_END);
    return o;
  }();
  return options.data();
}

struct ParseState {
  DaemonOptions* options;
  Status status;
  bool cache_dir_given = false;
  bool seed_given = false;
  int positional = 0;
};

bool Fail(ParseState* st, std::string message) {
  if (st->status.ok()) st->status = Status::InvalidArgument(std::move(message));
  return false;
}

// Parses "key=value" for one of our keys; false (and a message) when bad.
bool Apply(ParseState* st, int key, const std::string& arg) {
  DaemonOptions& o = *st->options;
  const size_t eq = arg.find('=');
  const std::string name = arg.substr(0, eq);
  const std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
  auto bad = [&](const char* expected) {
    return Fail(st, "bad option " + name + "=" + value + ": expected " + expected);
  };
  auto number = ParseUint(value);
  switch (key) {
    case kRamCache:
      // 0 once meant "a quarter of RAM": leaving the option out says that.
      if (auto v = ParseSize(value); v && *v > 0)
        o.ram_cache = *v;
      else
        return bad("a size above 0 such as 512M or 8G (leave it out for a quarter of RAM)");
      break;
    case kDiskCache:
      if (auto v = ParseSize(value); v && *v > 0)
        o.disk_cache = *v;
      else
        return bad("a size above 0 such as 512M or 10G (cache_dir=none turns the tier off)");
      break;
    case kRemoteCache:
      o.remote_cache.clear();
      if (value != "none") {
        if (Status s = ParseRemoteCache(value, &o.remote_cache); !s.ok()) {
          return bad("memcached://HOST:PORT[+HOST:PORT...] or none");
        }
      }
      break;
    case kRemotePublish:
      if (auto v = ParseSize(value); v && *v > 0)
        o.remote_publish = *v;
      else
        return bad("a size above 0 such as 2G");
      break;
    case kRemoteKey:
    case kRemoteOldKey:
    case kRemoteTls:
    case kRemoteTlsCert: {
      if (value.empty()) return bad(key == kRemoteKey ? "a file or insecure" : "a file");
      std::string& field = key == kRemoteKey      ? o.remote_key
                           : key == kRemoteOldKey ? o.remote_old_key
                           : key == kRemoteTls    ? o.remote_tls
                                                  : o.remote_tls_cert;
      field = value;
      break;
    }
    case kCacheDir:
      if (value.empty()) return bad("a folder or none");
      st->cache_dir_given = true;
      o.cache_dir = value == "none" ? "" : value;
      break;
    case kThreads:
      if (!number || *number == 0 || *number > 1024) return bad("1-1024");
      o.threads = static_cast<unsigned>(*number);
      break;
    case kSize:
      if (!number || *number > 8192) return bad("0-8192");
      o.size = static_cast<uint32_t>(*number);
      break;
    case kBase:
      if (!number || *number > 8192) return bad("0-8192");
      o.base = static_cast<uint32_t>(*number);
      break;
    case kSeed:
      if (!number) return bad("a non-negative integer");
      o.seed = *number;
      st->seed_given = true;
      break;
    case kLookahead:
      if (!number || *number == 0 || *number > (1u << 20)) return bad("1-1048576");
      o.lookahead = static_cast<uint32_t>(*number);
      break;
    case kIdleTimeout:
      if (!number || *number > kMaxIdleTimeout) return bad("seconds, at most 315360000");
      o.job_idle_timeout = *number;
      break;
    case kRetryFailed:
      if (!number || *number > kMaxRetryFailed) return bad("seconds, at most 86400");
      o.retry_failed = *number;
      break;
    case kReadTimeout:
      if (!number || *number == 0 || *number > kMaxReadTimeout) return bad("seconds, 1-86400");
      o.read_timeout = *number;
      break;
    case kSourceReads:
      if (!number || *number == 0 || *number > 1024) return bad("1-1024");
      o.source_reads = static_cast<unsigned>(*number);
      break;
    case kSourceInFlight:
      if (auto v = ParseSize(value); v && *v > 0)
        o.source_in_flight = *v;
      else
        return bad("a size above 0 such as 64M or 1G");
      break;
    case kMaxPixels:
      if (!number || *number == 0 || *number > kMaxMaxPixels) return bad("1-4294967296");
      o.max_pixels = *number;
      break;
    case kMaxJobsPerUser:
    case kMaxStreamsPerUser:
    case kMaxReadersPerUser: {
      if (!number || *number == 0 || *number > kMaxPerUserLimit) return bad("1-1048576");
      const uint32_t limit = static_cast<uint32_t>(*number);
      (key == kMaxJobsPerUser      ? o.max_jobs_per_user
       : key == kMaxStreamsPerUser ? o.max_streams_per_user
                                   : o.max_readers_per_user) = limit;
      break;
    }
    case kMaxUnreadPerUser:
      if (auto v = ParseSize(value); v && *v > 0)
        o.max_unread_per_user = *v;
      else
        return bad("a size above 0 such as 512M or 2G");
      break;
    case kPurgeDiskCache:
      if (value != "0" && value != "1") return bad("0 or 1");
      o.purge_disk_cache = value == "1";
      break;
    case kLimitRoot:
      if (value != "0" && value != "1") return bad("0 or 1");
      o.limit_root = value == "1";
      break;
    case kLabelKey:
      // A member extension and a JSON key: no dot, no slash, short.
      if (value.empty() || value.size() > 64 ||
          value.find_first_of("./") != std::string_view::npos) {
        return bad("a member extension / JSON field name, 1-64 characters, no '.' or '/'");
      }
      o.label_key = std::string(value);
      break;
    case kS3Endpoint:
      if (!value.starts_with("http://") && !value.starts_with("https://")) {
        return bad("an http:// or https:// URL");
      }
      o.s3_endpoint = std::string(value);
      break;
    case kS3Region:
      if (value.empty() || value.size() > 64 ||
          value.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") !=
              std::string_view::npos) {
        return bad("a region name such as us-east-1");
      }
      o.s3_region = std::string(value);
      break;
    case kS3Credentials:
      if (value.empty()) return bad("a file");
      o.s3_credentials = std::string(value);
      break;
    case kS3Profile:
      // A section name of the INI file: printable ASCII, no brackets or spaces.
      if (value.empty() || value.size() > 128 ||
          std::any_of(value.begin(), value.end(),
                      [](char c) { return c <= ' ' || c == 0x7f || c == '[' || c == ']'; })) {
        return bad("a profile name such as default");
      }
      o.s3_profile = std::string(value);
      break;
    case kSampler:
      if (value != "dsa" && value != "isa") return bad("dsa or isa");
      o.dependent_sampling = value == "dsa";
      break;
    case kDriftBound:
      if (value != "0" && value != "1") return bad("0 or 1");
      o.drift_bound = value == "1";
      break;
    case kLog:
      if (value.empty()) return bad("a file or syslog");
      o.log = value;
      break;
    case kMetricsListen: {
      std::string host;
      uint16_t port = 0;
      if (!ParseListen(value, &host, &port).ok()) {
        return bad("ADDR:PORT, such as 127.0.0.1:9101 or [::1]:9101");
      }
      o.metrics_listen = value;
      break;
    }
    case kLogLevel:
      if (spdlog::level::from_str(value) == spdlog::level::off && value != "off") {
        return bad("trace, debug, info, warn, error, critical or off");
      }
      o.log_level = value;
      break;
  }
  return true;
}

int Process(void* data, const char* arg, int key, fuse_args*) {
  auto* st = static_cast<ParseState*>(data);
  DaemonOptions& o = *st->options;
  switch (key) {
    case FUSE_OPT_KEY_NONOPT:
      ++st->positional;
      if (st->positional == 1)
        o.source = arg;
      else if (st->positional == 2)
        o.mountpoint = arg;
      else
        Fail(st, std::string("unexpected argument ") + arg);
      return 0;
    case FUSE_OPT_KEY_OPT: return 1;  // libfuse's; fuse_session_new() rejects the unknown ones
    case kForeground: o.foreground = true; return 0;
    case kDebug: o.debug = o.foreground = true; return 1;  // libfuse prints its requests too
    case kHelp: o.help = true; return 0;
    case kVersion: o.version = true; return 0;
    default: return Apply(st, key, arg) ? 0 : -1;
  }
}

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
  for (const MountOptionRow& row : kMountOptions) names.emplace_back(row.info.name);
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

// Lets libfuse parse its options as the mount will (a session that is never
// mounted), so that an option nobody takes is refused now, naming the
// nearest valid one, rather than with libfuse's bare "unknown option(s)"
// after the dataset has been scanned.
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

// Whether `path` is `dir` or lies below it; both absolute and normal.
bool IsInside(std::string path, std::string dir) {
  for (std::string* p : {&path, &dir}) {
    if (p->size() > 1 && p->ends_with('/')) p->pop_back();
  }
  return path == dir || dir == "/" || path.starts_with(dir + "/");
}

std::optional<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A cgroup limit file's value: a number of bytes, or nullopt for "max",
// v1's "unlimited" (a page-rounded 2^63 - 1) and anything unreadable.
std::optional<uint64_t> ParseLimit(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  std::string value = *text;
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
  auto number = ParseUint(value);
  if (!number || *number >= (1ULL << 62)) return std::nullopt;
  return number;
}

Status CheckCacheDir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::InvalidArgument("cannot create cache_dir " + dir + ": " + ec.message());
  if (!fs::is_directory(dir) || access(dir.c_str(), W_OK | X_OK) != 0) {
    return Status::InvalidArgument("cache_dir " + dir + " is not a writable folder");
  }
  return Status::Ok();
}

}  // namespace

std::string DefaultCacheDir() {
  if (geteuid() == 0) return "/var/cache/joaderfs";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return std::string(xdg) + "/joaderfs";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::string(home) + "/.cache/joaderfs";
  }
  return "/tmp/joaderfs-cache-" + std::to_string(geteuid());
}

namespace {

// The remote tier's options belong together: a tier without a key, or a
// key or TLS file without the tier, is refused rather than ignored.
Status CheckRemoteOptions(const DaemonOptions& o) {
  if (o.remote_cache.empty()) {
    for (const auto* given :
         {&o.remote_key, &o.remote_old_key, &o.remote_tls, &o.remote_tls_cert}) {
      if (!given->empty()) {
        return Status::InvalidArgument(
            "remote_key, remote_old_key, remote_tls and remote_tls_cert go with remote_cache");
      }
    }
    return Status::Ok();
  }
  if (o.remote_key.empty()) {
    return Status::InvalidArgument(
        "remote_cache needs remote_key=FILE, a secret the cluster's daemons share (openssl rand "
        "-hex 32 > FILE; chmod 600 FILE): without it anyone who reaches the servers chooses "
        "what jobs train on. remote_key=insecure shares unsealed values all the same");
  }
  if (o.remote_key == "insecure" && !o.remote_old_key.empty()) {
    return Status::InvalidArgument("remote_old_key needs a remote_key file, not insecure");
  }
  if (!o.remote_tls_cert.empty() && o.remote_tls.empty()) {
    return Status::InvalidArgument("remote_tls_cert needs remote_tls=CAFILE");
  }
  return Status::Ok();
}

}  // namespace

Status ParseCommandLine(int argc, char** argv, DaemonOptions* options, fuse_args* fuse_args) {
  ParseState st{options, Status::Ok()};
  *fuse_args = FUSE_ARGS_INIT(argc, argv);
  if (fuse_opt_parse(fuse_args, &st, FuseOptions(), Process) != 0 && st.status.ok()) {
    st.status = Status::InvalidArgument("cannot parse the command line");
  }
  if (!st.status.ok() || options->help || options->version) return st.status;
  if (Status s = CheckFuseOptions(*fuse_args); !s.ok()) return s;
  if (options->source.empty() || options->mountpoint.empty()) {
    return Status::InvalidArgument("usage: joaderfs [options] SOURCE MOUNTPOINT (see --help)");
  }
  if (!st.seed_given) options->seed = std::random_device()();
  if (!st.cache_dir_given) options->cache_dir = DefaultCacheDir();
  return Status::Ok();
}

Status ParseOptions(int argc, char** argv, DaemonOptions* options, fuse_args* fuse_args) {
  Status s = ParseCommandLine(argc, argv, options, fuse_args);
  if (!s.ok() || options->help || options->version) return s;
  DaemonOptions& o = *options;
  std::error_code ec;
  // An s3:// SOURCE is checked when the catalog lists it.
  const bool object_store = o.source.starts_with("s3://");
  if (!object_store && !fs::exists(o.source, ec)) {
    return Status::NotFound("SOURCE " + o.source + " does not exist");
  }
  if (!object_store) o.source = fs::absolute(o.source, ec).lexically_normal().string();
  // The daemon works from "/" once mounted, and unmounts by this path.
  o.mountpoint = fs::absolute(o.mountpoint, ec).lexically_normal().string();
  // Once mounted, what lies under the mountpoint is hidden by the mount.
  if (!object_store && IsInside(o.source, o.mountpoint)) {
    return Status::InvalidArgument("SOURCE " + o.source + " lies inside the mountpoint " +
                                   o.mountpoint);
  }
  if (Status s = CheckRemoteOptions(o); !s.ok()) return s;
  const uint64_t ram = uint64_t(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  if (o.ram_cache == 0) {
    const std::optional<uint64_t> limit =
        CgroupMemoryLimit(ReadSmallFile("/proc/self/cgroup").value_or(""), ReadSmallFile);
    o.ram_cache = DefaultRamCache(ram, limit);
    if (limit && *limit < ram) o.ram_cache_cgroup_limit = *limit;
  }
  if (o.ram_cache > ram) {
    return Status::InvalidArgument("ram_cache=" + std::to_string(o.ram_cache >> 20) +
                                   "M is more than this machine's " + std::to_string(ram >> 20) +
                                   "M of RAM");
  }
  if (Status s = CheckSizeFitsBudget(o.size, o.ram_cache); !s.ok()) return s;
  if (o.max_unread_per_user == 0) o.max_unread_per_user = DefaultUnreadPerUser(o.ram_cache);
  if (o.threads == 0) o.threads = std::max(1u, std::thread::hardware_concurrency());
  if (o.log != "syslog" && !o.log.empty()) o.log = fs::absolute(o.log, ec).string();
  if (o.cache_dir.empty()) return Status::Ok();
  o.cache_dir = fs::absolute(o.cache_dir, ec).lexically_normal().string();
  if (IsInside(o.cache_dir, o.mountpoint)) {
    return Status::InvalidArgument("cache_dir " + o.cache_dir + " lies inside the mountpoint " +
                                   o.mountpoint);
  }
  return CheckCacheDir(o.cache_dir);
}

unsigned DefaultSourceReads(unsigned threads, std::chrono::microseconds round_trip) {
  const uint64_t per_thread = 1 + static_cast<uint64_t>(round_trip.count()) / 2000;
  return static_cast<unsigned>(std::clamp<uint64_t>(uint64_t{threads} * per_thread, threads, 256));
}

uint64_t DefaultSourceInFlight(unsigned reads, uint64_t mean_image_bytes) {
  constexpr uint64_t kMin = uint64_t{64} << 20, kMax = uint64_t{1} << 30;
  // No overflow: reads <= 1024 and an image is at most 4 GiB (tar_index.h).
  return std::clamp<uint64_t>(4 * uint64_t{reads} * std::min(mean_image_bytes, kMax), kMin, kMax);
}

std::optional<uint64_t> CgroupMemoryLimit(
    std::string_view proc_self_cgroup,
    const std::function<std::optional<std::string>(const std::string& path)>& read_file) {
  std::optional<uint64_t> lowest;
  auto consider = [&](const std::string& path) {
    if (auto limit = ParseLimit(read_file(path)); limit && (!lowest || *limit < *lowest)) {
      lowest = limit;
    }
  };
  // Lines are "ID:CONTROLLERS:PATH": "0::PATH" for v2, a list holding
  // "memory" for v1's memory hierarchy.
  std::istringstream lines{std::string(proc_self_cgroup)};
  for (std::string line; std::getline(lines, line);) {
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (path.empty() || path[0] != '/' || path.find("..") != std::string::npos) continue;
    std::string root, file;
    if (controllers.empty() && line.compare(0, first, "0") == 0) {
      root = "/sys/fs/cgroup";
      file = "/memory.max";
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      root = "/sys/fs/cgroup/memory";
      file = "/memory.limit_in_bytes";
    } else {
      continue;
    }
    // A parent's limit binds its children too: walk up to the root.
    while (true) {
      if (path.size() > 1 && path.back() == '/') path.pop_back();
      consider(root + (path == "/" ? "" : path) + file);
      if (path == "/") break;
      path = path.substr(0, std::max<size_t>(1, path.rfind('/')));
    }
  }
  return lowest;
}

uint64_t DefaultRamCache(uint64_t ram, std::optional<uint64_t> cgroup_limit) {
  return std::min(ram, cgroup_limit.value_or(ram)) / 4;
}

uint64_t DefaultUnreadPerUser(uint64_t ram_cache) {
  return std::min(ram_cache / 2, uint64_t{2} << 30);
}

uint64_t DecodedSampleEstimate(uint32_t base) {
  if (base == 0) return 1ULL << 20;
  const uint64_t pixels = uint64_t{base} * base * 4 / 3;
  return pixels * 3 * 9 / 8;
}

DiskCacheSizing DefaultDiskCache(uint64_t samples, uint32_t base, uint64_t room) {
  // The floor covers an estimate that errs low on a small set; the room
  // bounds both, and a full disk still gets a tier that works (and evicts).
  constexpr uint64_t kFloor = 64ULL << 20, kLeast = 1ULL << 20;
  DiskCacheSizing d;
  d.decoded_estimate = samples * DecodedSampleEstimate(base);
  // The two databases in cache_dir (the tier's index, the job store) keep
  // their room, so that a filled tier never leaves them none to reopen in.
  const uint64_t databases = 2 * (kRocksDbWorkingBytes + samples * kRocksDbBytesPerSample);
  const uint64_t usable = room > databases ? room - databases : 0;
  d.budget = std::max(kLeast, std::min(std::max(kFloor, d.decoded_estimate), usable / 10 * 8));
  return d;
}

uint64_t CacheDirRoom(const std::string& dir) {
  std::error_code ec;
  const fs::space_info space = fs::space(dir, ec);
  uint64_t room = ec ? 0 : space.available;
  // What the tier holds already is room it may keep using.
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) room += it->file_size(ec);
  }
  return room;
}

std::vector<MountOptionInfo> MountOptionTable() {
  std::vector<MountOptionInfo> table;
  for (const MountOptionRow& row : kMountOptions) table.push_back(row.info);
  return table;
}

std::string UsageText(const char* program) {
  std::string text = std::string("usage: ") + program + " [options] SOURCE MOUNTPOINT\n" +
                     R"(
SOURCE is an ImageFolder tree (SOURCE/<class>/<image>), a manifest file
(relpath<TAB>label lines) or a folder of WebDataset shards (SOURCE/*.tar:
key.jpg with key.cls or key.json). Jobs read MOUNTPOINT/jobs/<id>/next; see
MOUNTPOINT/README and joaderfs(8).

options:
)";
  for (const MountOptionRow& row : kMountOptions) {
    const MountOptionInfo& o = row.info;
    text += HangingParagraph("    -o " + std::string(o.name) + "=" + std::string(o.value),
                             std::string(o.help) + " (default " + std::string(o.fallback) + ")", 29,
                             80);
  }
  return text + R"(    -o allow_other           let other users read the mount (FUSE option)
    -f                       stay in the foreground
    -d                       debug: foreground, libfuse traces
    -h, --help               this text
    -V, --version            the version
)";
}

}  // namespace joaderfs
