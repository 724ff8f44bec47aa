#include "daemon/options.h"

#include <spdlog/common.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include "cache/budget.h"
#include "common/parse.h"
#include "common/wrap.h"
#include "daemon/fuse_options.h"
#include "daemon/machine.h"
#include "daemon/metrics_endpoint.h"
#include "daemon/remote_tier_setup.h"

namespace joaderfs {
namespace {
namespace fs = std::filesystem;

// `memcached://host:port+host:port...` into its servers (host:port each).
bool ParseServers(std::string_view uri, std::vector<std::string>* servers) {
  constexpr std::string_view kScheme = "memcached://";
  if (!uri.starts_with(kScheme)) return false;
  servers->clear();
  const std::string_view list = uri.substr(kScheme.size());
  for (size_t start = 0;;) {
    const size_t plus = list.find('+', start);
    const std::string_view server = list.substr(start, plus - start);
    const size_t colon = server.rfind(':');
    const auto port =
        colon == std::string_view::npos ? std::nullopt : ParseUint(server.substr(colon + 1));
    if (colon == 0 || !port || *port == 0 || *port > 65535) return false;
    servers->emplace_back(server);
    if (plus == std::string_view::npos) return true;
    start = plus + 1;
  }
}

// How an option's value is read, and what a bad one is told it should be.
enum class Kind {
  kCount,    // an integer within [min, max]: "1-1024"
  kSeconds,  // the same, in seconds: "seconds, at most 86400"
  kSize,     // a size above 0 (ParseSize): "a size above 0 such as <expected>"
  kFlag,     // 0 or 1
  kText,     // not empty, and what `valid` accepts: "<expected>"
};

// Stores a text option's value that takes more than a copy; false when the
// value is bad.
using Setter = bool (*)(std::string_view value, DaemonOptions* o);

// Where a value goes: a count, size or seconds into an integer member, a
// flag into a bool, a text into a string or through a Setter.
using Field = std::variant<uint64_t DaemonOptions::*, uint32_t DaemonOptions::*,
                           bool DaemonOptions::*, std::string DaemonOptions::*, Setter>;

// One of our -o options: all the code says about it (options.h
// MountOptionInfo for the words).
struct OptionRow {
  MountOptionInfo info;
  Field field;
  Kind kind = Kind::kCount;
  uint64_t min = 0, max = UINT64_MAX;               // kCount, kSeconds
  std::string_view expected = {};                   // kSize, kText
  bool (*valid)(std::string_view value) = nullptr;  // kText; null: any
};

constexpr OptionRow kOptions[] = {
    {.info = {"ram_cache", "SIZE", "1/4 of RAM",
              "RAM budget for decoded samples and unread deliveries; with a cgroup memory limit "
              "below RAM, a quarter of that"},
     .field = &DaemonOptions::ram_cache,
     .kind = Kind::kSize,
     // 0 is no budget, not "the default": leaving the option out is.
     .expected = "512M or 8G (leave it out for a quarter of RAM)"},
    {.info = {"cache_dir", "DIR|none", "/var/cache/joaderfs for root",
              "on-disk cache and job store folder (for other users ~/.cache/joaderfs); none "
              "turns both off"},
     .field = Setter{[](std::string_view v, DaemonOptions* o) {
       o->cache_dir = v == "none" ? "" : std::string(v);
       return true;
     }},
     .kind = Kind::kText,
     .expected = "a folder or none"},
    {.info = {"disk_cache", "SIZE", "the decoded set's estimate",
              "on-disk budget, at most 80% of cache_dir's free space less room for its "
              "databases"},
     .field = &DaemonOptions::disk_cache,
     .kind = Kind::kSize,
     .expected = "512M or 10G (cache_dir=none turns the tier off)"},
    {.info = {"purge_disk_cache", "0|1", "0",
              "1: empty SOURCE's disk tier at mount, before serving (after a compromise; the "
              "job store stays)"},
     .field = &DaemonOptions::purge_disk_cache,
     .kind = Kind::kFlag},
    {.info = {"remote_cache", "memcached://HOST:PORT[+HOST:PORT...]|none", "none",
              "the remote tier: decoded images shared by a cluster's daemons through these "
              "memcached servers (see docs/admin-guide.md, Cluster)"},
     .field = Setter{[](std::string_view v, DaemonOptions* o) {
       o->remote_cache.clear();
       return v == "none" || ParseServers(v, &o->remote_cache);
     }},
     .kind = Kind::kText,
     .expected = "memcached://HOST:PORT[+HOST:PORT...] or none"},
    {.info = {"remote_publish", "SIZE", "no limit",
              "the most image bytes this daemon publishes to the remote tier per mount"},
     .field = &DaemonOptions::remote_publish,
     .kind = Kind::kSize,
     .expected = "2G"},
    {.info = {"remote_timeout", "MS", "100",
              "the deadline of one call to a memcached server, connect to whole reply, in "
              "milliseconds; a server whose call fails is passed by for a second"},
     .field = &DaemonOptions::remote_timeout_ms,
     .min = 1,
     .max = 60000},
    {.info = {"remote_key", "FILE|insecure", "none: required with remote_cache",
              "the cluster key (64 hex digits, mode 600) that seals and opens the remote "
              "tier's values; insecure lets anyone who reaches the servers forge and read them"},
     .field = &DaemonOptions::remote_key,
     .kind = Kind::kText,
     .expected = "a file or insecure"},
    {.info = {"remote_old_key", "FILE", "none",
              "key rotation: values sealed with this former cluster key are read, never "
              "written"},
     .field = &DaemonOptions::remote_old_key,
     .kind = Kind::kText,
     .expected = "a file"},
    {.info = {"remote_tls", "CAFILE", "none: plain TCP",
              "reach the memcached servers over TLS, verified against this CA bundle"},
     .field = &DaemonOptions::remote_tls,
     .kind = Kind::kText,
     .expected = "a file"},
    {.info = {"remote_tls_cert", "FILE", "none",
              "with remote_tls: this daemon's certificate and key (one PEM, mode 600), for "
              "servers that require one"},
     .field = &DaemonOptions::remote_tls_cert,
     .kind = Kind::kText,
     .expected = "a file"},
    {.info = {"threads", "N", "number of cores", "decode threads"},
     .field = &DaemonOptions::threads,
     .min = 1,
     .max = 1024},
    {.info = {"size", "N", "224",
              "output size: shorter side N, centre crop N x N; 0 resizes nothing: the image as "
              "decoded at the base resolution (the original with base=0)"},
     .field = &DaemonOptions::size,
     .max = 8192},
    {.info = {"base", "N", "256",
              "cache images decoded with their shorter side at least N, cut per job; 0 = full "
              "size"},
     .field = &DaemonOptions::base,
     .max = 8192},
    {.info = {"seed", "N", "random", "sampler seed, also the root of each job's augmentation seed"},
     .field = &DaemonOptions::seed},
    {.info = {"lookahead", "N", "128", "samples each job's plan runs ahead"},
     .field = &DaemonOptions::lookahead,
     .min = 1,
     .max = 1 << 20},
    {.info = {"job_idle_timeout", "SEC", "600", "release an unread job's samples after SEC"},
     .field = &DaemonOptions::job_idle_timeout,
     .kind = Kind::kSeconds,
     .max = kMaxIdleTimeout},
    {.info = {"retry_failed", "SEC", "30",
              "try an image that failed again after SEC, doubling per failure to 60 x SEC, or "
              "once its size or mtime changes"},
     .field = &DaemonOptions::retry_failed,
     .kind = Kind::kSeconds,
     .max = kMaxRetryFailed},
    {.info = {"read_timeout", "SEC", "30",
              "skip an image whose read of SOURCE has not returned after SEC, like an "
              "unreadable one; its thread is replaced"},
     .field = &DaemonOptions::read_timeout,
     .kind = Kind::kSeconds,
     .min = 1,
     .max = kMaxReadTimeout},
    {.info = {"source_reads", "N", "threads; for s3:// sized from the round trip",
              "reads of SOURCE in flight at once, on I/O threads ahead of the decodes that "
              "need them"},
     .field = &DaemonOptions::source_reads,
     .min = 1,
     .max = 1024},
    {.info = {"source_in_flight", "SIZE", "4 x source_reads x the mean image, 64M-1G",
              "bytes of SOURCE being read or read and awaiting their decode, at most; one read "
              "always may"},
     .field = &DaemonOptions::source_in_flight,
     .kind = Kind::kSize,
     .expected = "64M or 1G"},
    {.info = {"max_pixels", "N", "89478485",
              "refuse images of more than N pixels, from their header (PIL's limit)"},
     .field = &DaemonOptions::max_pixels,
     .min = 1,
     .max = kMaxMaxPixels},
    {.info = {"max_jobs_per_user", "N", "64",
              "jobs one uid may have; past it mkdir fails with EDQUOT"},
     .field = &DaemonOptions::max_jobs_per_user,
     .min = 1,
     .max = kMaxPerUserLimit},
    {.info = {"max_streams_per_user", "N", "1024",
              "job streams (next, next.R) one uid may have; past it a spec's ranks= fails "
              "with EDQUOT"},
     .field = &DaemonOptions::max_streams_per_user,
     .min = 1,
     .max = kMaxPerUserLimit},
    {.info = {"max_readers_per_user", "N", "256",
              "stream files one uid may have open; past it open fails with EMFILE"},
     .field = &DaemonOptions::max_readers_per_user,
     .min = 1,
     .max = kMaxPerUserLimit},
    {.info = {"max_unread_per_user", "SIZE", "2G",
              "deliveries one uid's jobs may hold planned or handed out and not yet read; "
              "past it they plan nothing more until read"},
     .field = &DaemonOptions::max_unread_per_user,
     .kind = Kind::kSize,
     .expected = "512M or 2G"},
    {.info = {"limit_root", "0|1", "0", "apply the per-user limits to root too"},
     .field = &DaemonOptions::limit_root,
     .kind = Kind::kFlag},
    {.info = {"label_key", "NAME", "cls",
              "tar shards: the label is the integer in <key>.NAME, else field NAME of "
              "<key>.json, else -1"},
     .field = &DaemonOptions::label_key,
     .kind = Kind::kText,
     .expected = "a member extension / JSON field name, 1-64 characters, no '.' or '/'",
     // A member extension and a JSON key: no dot, no slash, short.
     .valid = [](std::string_view v) { return v.size() <= 64 && v.find_first_of("./") == v.npos; }},
    {.info = {"s3_endpoint", "URL", "https://s3.REGION.amazonaws.com",
              "SOURCE s3://BUCKET[/PREFIX]: an S3-compatible store's http:// or https:// URL, "
              "path-style addressing"},
     .field = &DaemonOptions::s3_endpoint,
     .kind = Kind::kText,
     .expected = "an http:// or https:// URL",
     .valid =
         [](std::string_view v) { return v.starts_with("http://") || v.starts_with("https://"); }},
    {.info = {"s3_region", "NAME", "AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1",
              "SOURCE s3://...: the region requests are signed for"},
     .field = &DaemonOptions::s3_region,
     .kind = Kind::kText,
     .expected = "a region name such as us-east-1",
     .valid =
         [](std::string_view v) {
           return v.size() <= 64 &&
                  v.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") == v.npos;
         }},
    {.info = {"s3_credentials", "FILE", "the environment's keys, else ~/.aws/credentials",
              "SOURCE s3://...: the AWS shared-credentials file to take the keys from, never "
              "the environment's; refused unless only its owner may read it (chmod 600)"},
     .field = &DaemonOptions::s3_credentials,
     .kind = Kind::kText,
     .expected = "a file"},
    {.info = {"s3_profile", "NAME", "AWS_PROFILE, else default",
              "SOURCE s3://...: the profile of the credentials file to use"},
     .field = &DaemonOptions::s3_profile,
     .kind = Kind::kText,
     .expected = "a profile name such as default",
     // A section name of the INI file: printable ASCII, no brackets or spaces.
     .valid =
         [](std::string_view v) {
           return v.size() <= 128 && std::none_of(v.begin(), v.end(), [](char c) {
                    return c <= ' ' || c == 0x7f || c == '[' || c == ']';
                  });
         }},
    {.info = {"sampler", "dsa|isa", "dsa", "dependent sampling or independent shuffles"},
     .field = Setter{[](std::string_view v, DaemonOptions* o) {
       if (v != "dsa" && v != "isa") return false;
       o->dependent_sampling = v == "dsa";
       return true;
     }},
     .kind = Kind::kText,
     .expected = "dsa or isa"},
    {.info = {"drift_bound", "0|1", "1",
              "hold a job's reads while it runs far ahead of a job of the same data and pace, "
              "so that they share decodes"},
     .field = &DaemonOptions::drift_bound,
     .kind = Kind::kFlag},
    {.info = {"log", "FILE|syslog", "stderr with -f, else syslog",
              "log sink (without a /dev/log, CACHE_DIR/joaderfs.log)"},
     .field = &DaemonOptions::log,
     .kind = Kind::kText,
     .expected = "a file or syslog"},
    {.info = {"log_level", "LEVEL", "info", "trace, debug, info, warn, error, critical or off"},
     .field = &DaemonOptions::log_level,
     .kind = Kind::kText,
     .expected = "trace, debug, info, warn, error, critical or off",
     .valid =
         [](std::string_view v) {
           return spdlog::level::from_str(std::string(v)) != spdlog::level::off || v == "off";
         }},
    {.info = {"metrics_listen", "ADDR:PORT", "none",
              "serve /metrics over HTTP there for Prometheus (GET /metrics only)"},
     .field = &DaemonOptions::metrics_listen,
     .kind = Kind::kText,
     .expected = "ADDR:PORT, such as 127.0.0.1:9101 or [::1]:9101",
     .valid =
         [](std::string_view v) {
           std::string host;
           uint16_t port = 0;
           return ParseListen(std::string(v), &host, &port).ok();
         }},
};

// Each row's field is of its kind: a flag's a bool, a text's a string or a
// Setter, a number's an integer (a size's 64 bits), whose range it holds.
constexpr bool RowsAreTyped() {
  for (const OptionRow& row : kOptions) {
    const Field& f = row.field;
    const bool wide = std::holds_alternative<uint64_t DaemonOptions::*>(f);
    const bool narrow = std::holds_alternative<uint32_t DaemonOptions::*>(f);
    bool typed = false;
    switch (row.kind) {
      case Kind::kCount:
      case Kind::kSeconds: typed = wide || (narrow && row.max <= UINT32_MAX); break;
      case Kind::kSize: typed = wide && !row.expected.empty(); break;
      case Kind::kFlag: typed = std::holds_alternative<bool DaemonOptions::*>(f); break;
      case Kind::kText:
        typed = std::holds_alternative<std::string DaemonOptions::*>(f) ||
                std::holds_alternative<Setter>(f);
        break;
    }
    if (!typed || row.min > row.max) return false;
  }
  return true;
}
static_assert(RowsAreTyped());

// The row named `name`.
consteval size_t Row(std::string_view name) {
  for (size_t i = 0; i < std::size(kOptions); ++i) {
    if (kOptions[i].info.name == name) return i;
  }
  throw "no such option";  // reached for a name no row has: a compile error
}

// What a bad value of `row` is told a good one looks like.
std::string Expected(const OptionRow& row) {
  const std::string range = std::to_string(row.min) + "-" + std::to_string(row.max);
  switch (row.kind) {
    case Kind::kCount:
      return row.min == 0 && row.max == UINT64_MAX ? "a non-negative integer" : range;
    case Kind::kSeconds:
      return "seconds, " + (row.min == 0 ? "at most " + std::to_string(row.max) : range);
    case Kind::kSize: return "a size above 0 such as " + std::string(row.expected);
    case Kind::kFlag: return "0 or 1";
    case Kind::kText: return std::string(row.expected);
  }
  return {};
}

// Parses `value` into `row`'s field of `o`; false when it is bad.
bool Store(const OptionRow& row, std::string_view value, DaemonOptions* o) {
  std::optional<uint64_t> number;
  switch (row.kind) {
    case Kind::kCount:
    case Kind::kSeconds:
      number = ParseUint(value);
      if (!number || *number < row.min || *number > row.max) return false;
      break;
    case Kind::kSize:
      number = ParseSize(value);
      if (!number || *number == 0) return false;
      break;
    case Kind::kFlag:
      if (value != "0" && value != "1") return false;
      o->*std::get<bool DaemonOptions::*>(row.field) = value == "1";
      return true;
    case Kind::kText:
      if (value.empty() || (row.valid && !row.valid(value))) return false;
      if (const Setter* set = std::get_if<Setter>(&row.field)) return (*set)(value, o);
      o->*std::get<std::string DaemonOptions::*>(row.field) = std::string(value);
      return true;
  }
  if (auto* wide = std::get_if<uint64_t DaemonOptions::*>(&row.field)) {
    o->*(*wide) = *number;
  } else {
    o->*std::get<uint32_t DaemonOptions::*>(row.field) = static_cast<uint32_t>(*number);
  }
  return true;
}

// The command-line flags besides our -o options; the options' keys are
// their rows' indices.
enum Flag { kForeground = static_cast<int>(std::size(kOptions)), kDebug, kHelp, kVersion };

// libfuse's view of our options: "name=%s" per row, then the flags.
const fuse_opt* FuseOptions() {
  static const std::vector<std::string> templates = [] {
    std::vector<std::string> t;
    for (const OptionRow& row : kOptions) t.push_back(std::string(row.info.name) + "=%s");
    return t;
  }();
  static const std::vector<fuse_opt> options = [] {
    std::vector<fuse_opt> o;
    for (size_t i = 0; i < std::size(kOptions); ++i) {
      o.push_back(FUSE_OPT_KEY(templates[i].c_str(), static_cast<int>(i)));
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
  bool given[std::size(kOptions)] = {};  // by row
  int positional = 0;
};

void Fail(ParseState* st, std::string message) {
  if (st->status.ok()) st->status = Status::InvalidArgument(std::move(message));
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
  }
  // "name=value" for the row `key`.
  const std::string_view option = arg;
  const std::string_view value = option.substr(option.find('=') + 1);
  const OptionRow& row = kOptions[key];
  if (!Store(row, value, &o)) {
    Fail(st, "bad option " + std::string(option) + ": expected " + Expected(row));
    return -1;
  }
  st->given[key] = true;
  return 0;
}

// Whether `path` is `dir` or lies below it; both absolute and normal.
bool IsInside(std::string path, std::string dir) {
  for (std::string* p : {&path, &dir}) {
    if (p->size() > 1 && p->ends_with('/')) p->pop_back();
  }
  return path == dir || dir == "/" || path.starts_with(dir + "/");
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
  if (!o.remote_cache.empty()) {
    if (Status s = RemoteTierBuilt(); !s.ok()) return s;
  }
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
  if (!st.given[Row("seed")]) options->seed = std::random_device()();
  if (!st.given[Row("cache_dir")]) options->cache_dir = DefaultCacheDir();
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
    const std::optional<uint64_t> limit = ThisCgroupMemoryLimit();
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

uint64_t DefaultUnreadPerUser(uint64_t ram_cache) {
  return std::min(ram_cache / 2, uint64_t{2} << 30);
}

std::vector<MountOptionInfo> MountOptionTable() {
  std::vector<MountOptionInfo> table;
  for (const OptionRow& row : kOptions) table.push_back(row.info);
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
  for (const OptionRow& row : kOptions) {
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
