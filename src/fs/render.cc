#include "fs/render.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/wrap.h"
#include "spec/spec_keys.h"

namespace joaderfs {
namespace {

using Json = nlohmann::ordered_json;

// One figure of /stats and its /metrics series, so that both files show
// the same figures: /stats key (a dot names a member of an object), the
// series, its type and help. The help ends naming the /stats key, which
// tells the reader (and the tests) which figure a series is.
struct MountFigure {
  const char* key;
  const char* metric;
  const char* type;
  const char* help;
  Json (*value)(const MountStats&);
};

const MountFigure kMountFigures[] = {
    {"decoded", "joaderfs_decoded_total", "counter",
     "Real decodes since mount (disk and remote hits not counted).",
     [](const MountStats& s) { return Json(s.cache.decoded); }},
    {"delivered", "joaderfs_delivered_total", "counter", "Records handed to readers since mount.",
     [](const MountStats& s) { return Json(s.delivered); }},
    {"ram_hits", "joaderfs_ram_hits_total", "counter",
     "Cache requests (picks) the RAM tier answered.",
     [](const MountStats& s) { return Json(s.cache.hits); }},
    {"ram_misses", "joaderfs_ram_misses_total", "counter",
     "Cache requests (picks) that started a load.",
     [](const MountStats& s) { return Json(s.cache.misses); }},
    {"disk_hits", "joaderfs_disk_hits_total", "counter", "Loads the disk tier answered.",
     [](const MountStats& s) { return Json(s.disk.hits); }},
    {"disk_misses", "joaderfs_disk_misses_total", "counter", "Loads the disk tier did not hold.",
     [](const MountStats& s) { return Json(s.disk.misses); }},
    {"ram_bytes", "joaderfs_ram_bytes", "gauge", "Bytes of decoded samples in the RAM tier.",
     [](const MountStats& s) { return Json(s.cache.bytes); }},
    {"ram_pinned_bytes", "joaderfs_ram_pinned_bytes", "gauge",
     "Bytes of the RAM tier pinned by jobs' planned samples.",
     [](const MountStats& s) { return Json(s.cache.pinned_bytes); }},
    {"ram_budget", "joaderfs_ram_budget_bytes", "gauge", "The RAM tier's budget.",
     [](const MountStats& s) { return Json(s.cache.budget); }},
    {"ram_entries", "joaderfs_ram_entries", "gauge", "Samples in the RAM tier.",
     [](const MountStats& s) { return Json(s.cache.entries); }},
    {"ram_evictions", "joaderfs_ram_evictions_total", "counter",
     "Samples evicted from the RAM tier.",
     [](const MountStats& s) { return Json(s.cache.evictions); }},
    {"disk_bytes", "joaderfs_disk_bytes", "gauge", "Bytes in the disk tier.",
     [](const MountStats& s) { return Json(s.disk.bytes); }},
    {"disk_budget", "joaderfs_disk_budget_bytes", "gauge", "The disk tier's budget.",
     [](const MountStats& s) { return Json(s.disk.budget); }},
    {"disk_entries", "joaderfs_disk_entries", "gauge", "Samples in the disk tier.",
     [](const MountStats& s) { return Json(s.disk.entries); }},
    {"disk_evictions", "joaderfs_disk_evictions_total", "counter",
     "Samples evicted from the disk tier.",
     [](const MountStats& s) { return Json(s.disk.evictions); }},
    {"disk_writes", "joaderfs_disk_writes_total", "counter", "Samples written to the disk tier.",
     [](const MountStats& s) { return Json(s.disk.writes); }},
    {"disk_write_drops", "joaderfs_disk_write_drops_total", "counter",
     "Disk tier writes skipped because its queue was full.",
     [](const MountStats& s) { return Json(s.disk.write_drops); }},
    {"disk_corrupt", "joaderfs_disk_corrupt_total", "counter",
     "Disk tier entries that failed their checks, dropped.",
     [](const MountStats& s) { return Json(s.disk.corrupt); }},
    {"remote_hits", "joaderfs_remote_hits_total", "counter",
     "Loads the remote tier (remote_cache) answered.",
     [](const MountStats& s) { return Json(s.remote.hits); }},
    {"remote_misses", "joaderfs_remote_misses_total", "counter",
     "Loads the remote tier did not hold (then decoded).",
     [](const MountStats& s) { return Json(s.remote.misses); }},
    {"remote_rejected", "joaderfs_remote_rejected_total", "counter",
     "Remote values and leases that did not open with the cluster key (forged, damaged, "
     "another cluster's): misses, never served or kept.",
     [](const MountStats& s) { return Json(s.remote.rejected); }},
    {"remote_errors", "joaderfs_remote_errors_total", "counter",
     "Remote tier calls that failed or timed out (a dead or slow memcached).",
     [](const MountStats& s) { return Json(s.remote.errors); }},
    {"remote_lease_waits", "joaderfs_remote_lease_waits_total", "counter",
     "Loads that waited for another daemon's decode (its lease).",
     [](const MountStats& s) { return Json(s.remote.lease_waits); }},
    {"remote_lease_hits", "joaderfs_remote_lease_hits_total", "counter",
     "Lease waits that got the other daemon's value in time.",
     [](const MountStats& s) { return Json(s.remote.lease_hits); }},
    {"remote_published", "joaderfs_remote_published_total", "counter",
     "Decodes published to the remote tier.",
     [](const MountStats& s) { return Json(s.remote.published); }},
    {"remote_publish_drops", "joaderfs_remote_publish_drops_total", "counter",
     "Publishes dropped: queue full or remote_publish reached.",
     [](const MountStats& s) { return Json(s.remote.publish_drops); }},
    {"remote_bytes_in", "joaderfs_remote_bytes_in_total", "counter",
     "Value bytes fetched from the remote tier.",
     [](const MountStats& s) { return Json(s.remote.bytes_in); }},
    {"remote_bytes_out", "joaderfs_remote_bytes_out_total", "counter",
     "Value bytes published to the remote tier.",
     [](const MountStats& s) { return Json(s.remote.bytes_out); }},
    {"skipped", "joaderfs_skipped", "gauge", "Samples remembered as bad now.",
     [](const MountStats& s) { return Json(s.cache.failed); }},
    {"retries", "joaderfs_retries_total", "counter",
     "Loads tried again of samples remembered as bad.",
     [](const MountStats& s) { return Json(s.cache.retries); }},
    {"healed", "joaderfs_healed_total", "counter", "Bad samples that later loaded.",
     [](const MountStats& s) { return Json(s.cache.healed); }},
    {"identities_pending", "joaderfs_identities_pending", "gauge",
     "SOURCE files whose identity the pass after the listing has yet to take: until then "
     "their decodes are neither served nor kept by the disk and remote tiers.",
     [](const MountStats& s) { return Json(s.identities_pending); }},
    {"special_files", "joaderfs_special_files", "gauge",
     "SOURCE image names left out: not regular files.",
     [](const MountStats& s) { return Json(s.special_files); }},
    {"rejected_paths", "joaderfs_rejected_paths", "gauge",
     "Manifest paths left out: they could leave its folder.",
     [](const MountStats& s) { return Json(s.rejected_paths); }},
    {"scan_skips.link_loops", "joaderfs_scan_skips_link_loops", "gauge",
     "SOURCE symlinks that loop, left out.",
     [](const MountStats& s) { return Json(s.scan_skips.link_loops); }},
    {"scan_skips.broken_links", "joaderfs_scan_skips_broken_links", "gauge",
     "SOURCE symlinks to nothing, left out.",
     [](const MountStats& s) { return Json(s.scan_skips.broken_links); }},
    {"scan_skips.revisits", "joaderfs_scan_skips_revisits", "gauge",
     "SOURCE folders reached a second time, not walked again.",
     [](const MountStats& s) { return Json(s.scan_skips.revisits); }},
    {"scan_skips.unreadable", "joaderfs_scan_skips_unreadable", "gauge",
     "SOURCE entries that could not be examined.",
     [](const MountStats& s) { return Json(s.scan_skips.unreadable); }},
    {"scan_skips.unprintable", "joaderfs_scan_skips_unprintable", "gauge",
     "SOURCE names holding a control character (files, folders, keys, members, manifest "
     "paths), left out.",
     [](const MountStats& s) { return Json(s.scan_skips.unprintable); }},
    {"scan_skips.stray_keys", "joaderfs_scan_skips_stray_keys", "gauge",
     "Keys an s3:// listing held outside PREFIX/, repeated or out of order, left out.",
     [](const MountStats& s) { return Json(s.scan_skips.stray_keys); }},
    {"scan_skips.stuck", "joaderfs_scan_skips_stuck", "gauge",
     "SOURCE files and shards whose stat or read did not return within read_timeout at the "
     "scan: shards and manifest paths left out, a tree's files kept (their reads time out in "
     "turn).",
     [](const MountStats& s) { return Json(s.scan_skips.stuck); }},
    {"shard_skips.damaged", "joaderfs_shard_skips_damaged", "gauge",
     "Bad tar headers and samples of cut-short shards, left out.",
     [](const MountStats& s) { return Json(s.shard_skips.damaged); }},
    {"shard_skips.no_image", "joaderfs_shard_skips_no_image", "gauge",
     "Shard keys without an image member, left out.",
     [](const MountStats& s) { return Json(s.shard_skips.no_image); }},
    {"shard_skips.unlabeled", "joaderfs_shard_skips_unlabeled", "gauge",
     "Shard samples kept with label -1.",
     [](const MountStats& s) { return Json(s.shard_skips.unlabeled); }},
    {"shard_skips.too_large", "joaderfs_shard_skips_too_large", "gauge",
     "Shard images the index cannot address, left out.",
     [](const MountStats& s) { return Json(s.shard_skips.too_large); }},
    {"shard_skips.unreadable_shards", "joaderfs_shard_skips_unreadable_shards", "gauge",
     "Shards that could not be opened or read.",
     [](const MountStats& s) { return Json(s.shard_skips.unreadable_shards); }},
    {"decode_threads", "joaderfs_decode_threads", "gauge", "Decode threads.",
     [](const MountStats& s) { return Json(s.decode_threads); }},
    {"decode_queue", "joaderfs_decode_queue", "gauge", "Loads waiting for a decode thread.",
     [](const MountStats& s) { return Json(s.decode_queue); }},
    {"decode_busy_seconds", "joaderfs_decode_busy_seconds_total", "counter",
     "Time the decode threads ran tasks, summed over threads.",
     [](const MountStats& s) { return Json(s.decode_busy_seconds); }},
    {"decode_busy_fraction", "joaderfs_decode_busy_fraction", "gauge",
     "Share of the decode threads' time busy over the last 10 s (1: saturated).",
     [](const MountStats& s) { return Json(s.decode_busy_fraction); }},
    {"renders", "joaderfs_renders_total", "counter", "Deliveries resampled from base images.",
     [](const MountStats& s) { return Json(s.renders); }},
    {"renders_shared", "joaderfs_renders_shared_total", "counter",
     "Deliveries handed a render another job made.",
     [](const MountStats& s) { return Json(s.renders_shared); }},
    {"stall_seconds", "joaderfs_stall_seconds_total", "counter",
     "Time readers' reads waited for data, all jobs (reads waiting now included).",
     [](const MountStats& s) { return Json(s.stall_seconds); }},
    {"samples_per_s", "joaderfs_samples_per_second", "gauge",
     "Deliveries per second over the last 10 s.",
     [](const MountStats& s) { return Json(s.samples_per_s); }},
    // Reads of SOURCE on the I/O threads (loader/source_reader.h).
    {"source_read_seconds", "joaderfs_source_read_seconds_total", "counter",
     "Time reads of SOURCE took, summed (an abandoned one until its deadline).",
     [](const MountStats& s) { return Json(s.source.wait_seconds); }},
    {"source_bytes", "joaderfs_source_bytes_total", "counter", "Bytes read from SOURCE.",
     [](const MountStats& s) { return Json(s.source.bytes); }},
    {"source_reads_coalesced", "joaderfs_source_reads_coalesced_total", "counter",
     "Reads of SOURCE served by a neighbour's ranged read of their tar shard: the requests "
     "saved.",
     [](const MountStats& s) { return Json(s.source.coalesced); }},
    {"source_reads_timed_out", "joaderfs_source_reads_timed_out_total", "counter",
     "Reads of SOURCE abandoned at read_timeout.",
     [](const MountStats& s) { return Json(s.source.timed_out); }},
    {"source_io_threads_stuck", "joaderfs_source_io_threads_stuck", "gauge",
     "I/O threads whose read passed read_timeout and has not returned.",
     [](const MountStats& s) { return Json(s.source.stuck_threads); }},
    {"source_in_flight_bytes", "joaderfs_source_in_flight_bytes", "gauge",
     "Bytes of SOURCE being read, or read and awaiting their decode.",
     [](const MountStats& s) { return Json(s.source.bytes_in_flight); }},
    {"source_in_flight_limit", "joaderfs_source_in_flight_limit", "gauge",
     "The bound on source_in_flight_bytes (the mount's source_in_flight).",
     [](const MountStats& s) { return Json(s.source.max_bytes_in_flight); }},
    {"source_reads_running", "joaderfs_source_reads_running", "gauge",
     "Reads of SOURCE running now, at most source_reads (a coalesced range counts once).",
     [](const MountStats& s) { return Json(s.source.running); }},
    {"source_reads_queued", "joaderfs_source_reads_queued", "gauge",
     "Reads of SOURCE waiting for an I/O thread or for room in source_in_flight.",
     [](const MountStats& s) { return Json(s.source.queued); }},
    // An object store's requests (catalog/source_store.h); 0 for local files.
    {"source_requests", "joaderfs_source_requests_total", "counter",
     "GET requests to an object-store SOURCE, retries included.",
     [](const MountStats& s) { return Json(s.source_store.requests); }},
    {"source_retries", "joaderfs_source_retries_total", "counter",
     "Requests to an object-store SOURCE tried again after a failure that may pass.",
     [](const MountStats& s) { return Json(s.source_store.retries); }},
    {"source_failures", "joaderfs_source_failures_total", "counter",
     "Requests to an object-store SOURCE that failed after their last attempt (their "
     "samples are skipped as unreadable).",
     [](const MountStats& s) { return Json(s.source_store.failures); }},
    {"planner.rounds", "joaderfs_planner_rounds_total", "counter", "Planner rounds.",
     [](const MountStats& s) { return Json(s.planner.rounds); }},
    {"planner.picks", "joaderfs_planner_picks_total", "counter", "Samples planned.",
     [](const MountStats& s) { return Json(s.planner.picks); }},
    {"planner.shared_picks", "joaderfs_planner_shared_picks_total", "counter",
     "Picks that shared a load with another job's.",
     [](const MountStats& s) { return Json(s.planner.shared_picks); }},
    {"planner.coupled_picks", "joaderfs_planner_coupled_picks_total", "counter",
     "Picks the planner coupled across jobs.",
     [](const MountStats& s) { return Json(s.planner.coupled_picks); }},
};

// A job stream's figure: its /stats key under jobs.<id> (and, where the
// status file keeps an older name for it, that name), its series.
struct JobFigure {
  const char* key;
  const char* alias;  // or nullptr
  const char* metric;
  const char* type;
  const char* help;
  Json (*value)(const JobStatus&);
};

const JobFigure kJobFigures[] = {
    {"epoch", nullptr, "joaderfs_job_epoch", "gauge",
     "The stream's epoch; between epochs, the one that ended.",
     [](const JobStatus& st) { return Json(st.epoch); }},
    {"remaining", nullptr, "joaderfs_job_remaining", "gauge", "Samples left in the stream's epoch.",
     [](const JobStatus& st) { return Json(st.remaining); }},
    {"subset_size", nullptr, "joaderfs_job_subset_size", "gauge",
     "Samples in the stream's epoch when whole.",
     [](const JobStatus& st) { return Json(st.subset_size); }},
    {"readers", nullptr, "joaderfs_job_readers", "gauge", "Open readers of the stream.",
     [](const JobStatus& st) { return Json(st.readers); }},
    {"samples_per_s", nullptr, "joaderfs_job_samples_per_second", "gauge",
     "The stream's deliveries per second, last 10 s.",
     [](const JobStatus& st) { return Json(st.samples_per_s); }},
    {"this_epoch.delivered", "delivered", "joaderfs_job_epoch_delivered", "gauge",
     "Records the stream delivered in its epoch.",
     [](const JobStatus& st) { return Json(st.this_epoch.delivered); }},
    {"this_epoch.skipped", "skipped", "joaderfs_job_epoch_skipped", "gauge",
     "Picks of bad samples skipped in the stream's epoch.",
     [](const JobStatus& st) { return Json(st.this_epoch.skipped); }},
    {"this_epoch.ram_hits", nullptr, "joaderfs_job_epoch_ram_hits", "gauge",
     "Deliveries of the epoch whose image the RAM tier held.",
     [](const JobStatus& st) { return Json(st.this_epoch.ram_hits); }},
    {"this_epoch.disk_hits", nullptr, "joaderfs_job_epoch_disk_hits", "gauge",
     "Deliveries of the epoch whose load read the disk tier.",
     [](const JobStatus& st) { return Json(st.this_epoch.disk_hits); }},
    {"this_epoch.remote_hits", nullptr, "joaderfs_job_epoch_remote_hits", "gauge",
     "Deliveries of the epoch whose load read the remote tier.",
     [](const JobStatus& st) { return Json(st.this_epoch.remote_hits); }},
    {"this_epoch.decodes", nullptr, "joaderfs_job_epoch_decodes", "gauge",
     "Deliveries of the epoch whose load decoded.",
     [](const JobStatus& st) { return Json(st.this_epoch.decodes); }},
    {"this_epoch.stall_seconds", nullptr, "joaderfs_job_epoch_stall_seconds", "gauge",
     "Time the stream's reads waited for data in its epoch.",
     [](const JobStatus& st) { return Json(st.this_epoch.stall_seconds); }},
    {"total.delivered", "delivered_total", "joaderfs_job_delivered_total", "counter",
     "Records the stream delivered over its life.",
     [](const JobStatus& st) { return Json(st.total.delivered); }},
    {"total.skipped", nullptr, "joaderfs_job_skipped_total", "counter",
     "Picks of bad samples the stream skipped over its life.",
     [](const JobStatus& st) { return Json(st.total.skipped); }},
    {"total.ram_hits", "ram_hits", "joaderfs_job_ram_hits_total", "counter",
     "The stream's deliveries whose image the RAM tier held.",
     [](const JobStatus& st) { return Json(st.total.ram_hits); }},
    {"total.disk_hits", "disk_hits", "joaderfs_job_disk_hits_total", "counter",
     "The stream's deliveries whose load read the disk tier.",
     [](const JobStatus& st) { return Json(st.total.disk_hits); }},
    {"total.remote_hits", "remote_hits", "joaderfs_job_remote_hits_total", "counter",
     "The stream's deliveries whose load read the remote tier.",
     [](const JobStatus& st) { return Json(st.total.remote_hits); }},
    {"total.decodes", "decodes", "joaderfs_job_decodes_total", "counter",
     "The stream's deliveries whose load decoded.",
     [](const JobStatus& st) { return Json(st.total.decodes); }},
    {"total.stall_seconds", "stall_seconds", "joaderfs_job_stall_seconds_total", "counter",
     "Time the stream's reads waited for data (reads waiting now included).",
     [](const JobStatus& st) { return Json(st.total.stall_seconds); }},
};

// Sets `json`'s member at `key` ("a" or "a.b").
void Put(Json* json, std::string_view key, Json value) {
  const size_t dot = key.find('.');
  if (dot == std::string_view::npos) {
    (*json)[std::string(key)] = std::move(value);
  } else {
    (*json)[std::string(key.substr(0, dot))][std::string(key.substr(dot + 1))] = std::move(value);
  }
}

// The figures of a job (or rank) /stats shows: the table's, then the
// older flat names the status file has always had.
Json StatusJson(const JobStatus& st) {
  Json json = Json::object();
  for (const JobFigure& f : kJobFigures) {
    if (f.alias != nullptr) json[f.alias] = f.value(st);
  }
  for (const JobFigure& f : kJobFigures) Put(&json, f.key, f.value(st));
  return json;
}

// Byte strings from the file system (paths, job ids are checked) may hold
// any bytes: replace what is not UTF-8 rather than throw.
std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

// A label value per the text format: backslash, double quote and newline
// escaped.
std::string LabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void Family(std::string* out, const char* name, const char* type, const std::string& help) {
  *out += std::string("# HELP ") + name + " " + help + "\n";
  *out += std::string("# TYPE ") + name + " " + type + "\n";
}

// A bucket's bound as Prometheus's clients write it: 0.001, 2.5, 10.
std::string Bound(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", seconds);
  return text;
}

// The process figures every Prometheus exporter gives, from /proc: resident
// memory (statm's second field, in pages) and the start time (stat's 22nd
// field, clock ticks after boot, plus /proc/stat's btime).
uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

double StartTimeSeconds() {
  static const double start = [] {
    std::ifstream stat("/proc/self/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    // Fields after the command name, which ends at the last ')'.
    std::istringstream after(text.substr(text.rfind(')') + 2));
    std::string field;
    for (int i = 3; i <= 22 && after >> field; ++i) {
    }
    const double ticks = std::strtod(field.c_str(), nullptr);
    std::ifstream proc_stat("/proc/stat");
    double boot = 0;
    for (std::string key; proc_stat >> key;) {
      if (key == "btime") {
        proc_stat >> boot;
        break;
      }
    }
    return boot + ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
  }();
  return start;
}

}  // namespace

std::string RenderInfo(const Catalog& catalog, uint32_t default_size) {
  return Dump(Json{{"source", catalog.source()},
                   {"samples", catalog.size()},
                   {"classes", catalog.num_classes()},
                   {"size", default_size}});
}

std::string RenderJobStatus(const JobStatus& st) {
  Json json = StatusJson(st);
  json["running"] = st.running;
  json["epochs_completed"] = st.epochs_completed;
  json["size"] = st.size;
  json["window"] = st.window;
  json["shared_picks"] = st.shared_picks;
  json["owner"] = st.owner;
  json["error"] = st.error;
  if (!st.ranks.empty()) {
    Json ranks = Json::array();
    for (const JobStatus& rank : st.ranks) {
      Json r = StatusJson(rank);
      r["running"] = rank.running;
      r["epochs_completed"] = rank.epochs_completed;
      ranks.push_back(std::move(r));
    }
    json["ranks"] = std::move(ranks);
  }
  return Dump(json);
}

std::string RenderStats(const MountStats& s) {
  Json json = Json::object();
  for (const MountFigure& f : kMountFigures) Put(&json, f.key, f.value(s));
  Json jobs = Json::object();
  for (const auto& [name, status] : s.jobs) jobs[name] = StatusJson(status);
  json["jobs"] = std::move(jobs);
  json["warnings"] = s.warnings;
  return Dump(json);
}

std::string RenderMetrics(const MountStats& s, const std::string& mount) {
  std::string out;
  const std::string labels = "mount=\"" + LabelValue(mount) + "\"";
  Family(&out, "joaderfs_build_info", "gauge", "The daemon's version; always 1.");
  out += "joaderfs_build_info{" + labels + ",version=\"" JOADERFS_VERSION "\"} 1\n";
  Family(&out, "process_resident_memory_bytes", "gauge", "Resident memory of the daemon.");
  out += "process_resident_memory_bytes{" + labels + "} " + std::to_string(ResidentBytes()) + "\n";
  Family(&out, "process_start_time_seconds", "gauge",
         "When the daemon started, in seconds since the Unix epoch.");
  out += "process_start_time_seconds{" + labels + "} " + Json(StartTimeSeconds()).dump() + "\n";
  struct Latency {
    const char* metric;
    const char* help;
    const LatencyHistogram::Snapshot& (*of)(const MountStats&);
  };
  static constexpr Latency kLatencies[] = {
      {"joaderfs_source_read_latency_seconds",
       "Each read of SOURCE (a local read, an object store's GET), to its end.",
       [](const MountStats& m) -> const LatencyHistogram::Snapshot& {
         return m.source.read_latency;
       }},
      {"joaderfs_decode_latency_seconds", "Each decode of a base image from SOURCE's bytes.",
       [](const MountStats& m) -> const LatencyHistogram::Snapshot& {
         return m.cache.decode_latency;
       }},
      {"joaderfs_remote_get_latency_seconds", "Each get of the remote tier (value or lease).",
       [](const MountStats& m) -> const LatencyHistogram::Snapshot& {
         return m.remote.get_latency;
       }},
      {"joaderfs_remote_set_latency_seconds", "Each value set in the remote tier.",
       [](const MountStats& m) -> const LatencyHistogram::Snapshot& {
         return m.remote.set_latency;
       }},
      {"joaderfs_stream_read_wait_seconds",
       "Each read of a job stream, from its arrival to its reply: what a reader waits.",
       [](const MountStats& m) -> const LatencyHistogram::Snapshot& { return m.read_wait; }},
  };
  for (const Latency& l : kLatencies) {
    const LatencyHistogram::Snapshot& h = l.of(s);
    Family(&out, l.metric, "histogram", l.help);
    for (size_t i = 0; i < LatencyHistogram::kBounds.size(); ++i) {
      out += std::string(l.metric) + "_bucket{" + labels + ",le=\"" +
             Bound(LatencyHistogram::kBounds[i]) + "\"} " + std::to_string(h.at_or_under[i]) + "\n";
    }
    out += std::string(l.metric) + "_bucket{" + labels + ",le=\"+Inf\"} " +
           std::to_string(h.count) + "\n";
    out += std::string(l.metric) + "_sum{" + labels + "} " + Json(h.sum_seconds).dump() + "\n";
    out += std::string(l.metric) + "_count{" + labels + "} " + std::to_string(h.count) + "\n";
  }
  // Numbers as /stats writes them (shortest round trip): both files agree.
  for (const MountFigure& f : kMountFigures) {
    Family(&out, f.metric, f.type, std::string(f.help) + " (/stats " + f.key + ")");
    out += std::string(f.metric) + "{" + labels + "} " + f.value(s).dump() + "\n";
  }
  // Per job stream: a job's one stream, or each rank's.
  struct Stream {
    std::string labels;
    const JobStatus* status;
  };
  std::vector<Stream> streams;
  for (const auto& [name, st] : s.jobs) {
    const std::string job = labels + ",job=\"" + LabelValue(name) + "\"";
    if (st.ranks.empty()) {
      streams.push_back({job, &st});
    } else {
      for (size_t r = 0; r < st.ranks.size(); ++r) {
        streams.push_back({job + ",rank=\"" + std::to_string(r) + "\"", &st.ranks[r]});
      }
    }
  }
  for (const JobFigure& f : kJobFigures) {
    std::string help = std::string(f.help) + " (/stats jobs.ID." + f.key;
    if (f.alias != nullptr) help += " = jobs.ID." + std::string(f.alias);
    Family(&out, f.metric, f.type, help + "; one series per rank for a ranked job)");
    for (const Stream& stream : streams) {
      out += std::string(f.metric) + "{" + stream.labels + "} " + f.value(*stream.status).dump() +
             "\n";
    }
  }
  return out;
}

ManifestView::ManifestView(const Catalog* catalog) : catalog_(catalog) {
  const SampleId n = catalog->size();
  block_start_.reserve(n / kBlock + 2);
  uint64_t at = 0;
  std::string line;
  for (SampleId id = 0; id < n; ++id) {
    if (id % kBlock == 0) block_start_.push_back(at);
    line.clear();
    AppendLine(id, &line);
    at += line.size();
  }
  block_start_.push_back(at);
}

void ManifestView::AppendLine(SampleId id, std::string* out) const {
  *out += std::to_string(id);
  *out += '\t';
  *out += std::to_string(catalog_->label(id));
  *out += '\t';
  *out += catalog_->relpath(id);
  *out += '\n';
}

void ManifestView::Read(uint64_t offset, size_t length, std::string* out) const {
  if (offset >= size()) return;
  const uint64_t end = std::min<uint64_t>(size(), offset + length);
  // The block holding `offset`: the last one starting at or before it.
  size_t block =
      static_cast<size_t>(std::upper_bound(block_start_.begin(), block_start_.end() - 1, offset) -
                          block_start_.begin() - 1);
  std::string text;
  for (; block + 1 < block_start_.size() && block_start_[block] < end; ++block) {
    text.clear();
    const SampleId first = static_cast<SampleId>(block) * kBlock;
    const SampleId last = std::min<SampleId>(first + kBlock, catalog_->size());
    for (SampleId id = first; id < last; ++id) AppendLine(id, &text);
    const uint64_t from = std::max(offset, block_start_[block]) - block_start_[block];
    const uint64_t to = std::min(end, block_start_[block + 1]) - block_start_[block];
    out->append(text, from, to - from);
  }
}

namespace {

// One paragraph per key of spec/spec_keys.h.
std::string SpecKeyLines() {
  std::string out;
  for (const SpecKeyInfo& key : kSpecKeys) {
    out += HangingParagraph("  " + std::string(key.name) + "=" + std::string(key.values),
                            std::string(key.help) + " (default: " + std::string(key.fallback) + ")",
                            13, 88);
  }
  return out;
}

}  // namespace

std::string RenderReadme(const Catalog& catalog) {
  return "joaderfs " JOADERFS_VERSION " - decoded samples of " + catalog.source() +
         ", shared between training jobs.\n"
         "\n"
         "Make a job, optionally give it a spec, then read its stream:\n"
         "\n"
         "  mkdir jobs/myjob\n"
         "  echo 'subset=classes:0-9 size=224 epochs=10' > jobs/myjob/spec\n"
         "  python train.py --data jobs/myjob     # the job folder: the client reads its next\n"
         "\n"
         "Spec keys (write before the first read of next, after it only the same spec again;\n"
         "each write holds whole pairs; a misspelt key names the nearest):\n" +
         SpecKeyLines() +
         "jobs/<id>/ids takes newline-separated sample ids or relative paths instead of subset=.\n"
         "jobs/<id>/resume takes epoch=E, optionally rank=R, then the ids consumed: the stream\n"
         "then delivers exactly the rest of epoch E.\n"
         "Without rank= on a ranked job, its ranks split the rest anew, in equal shares.\n"
         "\n"
         "Each open() of next is one reader; the job's samples are divided among its open\n"
         "readers. A reader gets EOF when the epoch is over; the next open() starts the next\n"
         "epoch. rmdir jobs/<id> ends the job.\n"
         "Each user may hold only so many jobs, job streams (next, next.R) and open readers\n"
         "(the mount's max_jobs_per_user, max_streams_per_user, max_readers_per_user): past\n"
         "them mkdir and spec fail with EDQUOT, open with EMFILE. Past max_unread_per_user\n"
         "of deliveries planned or handed out and not yet read, a user's reads wait until\n"
         "its readers read what they hold.\n"
         "\n"
         "Records (joaderfs-stream(5)): a 64-byte little-endian header - magic JSF1, header\n"
         "size, sample id, label, epoch, flags, height, width, channels, dtype (1 = uint8),\n"
         "payload bytes - then HWC RGB uint8 pixels, zero-padded to a multiple of 64 bytes.\n"
         "format=tfrecord: TFRecords whose Example holds image/encoded (the raw HWC pixels),\n"
         "image/format=raw, image/height, image/width, image/channels, image/class/label,\n"
         "image/id, image/epoch (+ image/crop/{x,y,width,height}, image/flipped if augmented):\n"
         "  tf.data.TFRecordDataset('jobs/myjob/next') reads one epoch, no joaderfs import.\n"
         "next reads as a plain file: stat gives the bytes of the epoch a reader opened now\n"
         "could get (with size=N > 0 and format=plain; else 0), so FixedLengthRecordDataset,\n"
         "tf.io.read_file and numpy.fromfile read one epoch. A lone reader gets its last\n"
         "record again (flags bit 2: a repeat) for each skipped sample; with other readers\n"
         "EOF comes earlier, at a record's end. lseek(SEEK_CUR) gives the position; read or\n"
         "pread anywhere else fails with ESPIPE and takes nothing.\n"
         "\n"
         "A rejected write to spec, ids or resume fails with EINVAL (EBUSY: a started job's\n"
         "spec or ids that differ); jobs/<id>/error says why (empty when the last write was\n"
         "good). An ids or resume line that is bad on its own fails the write that ends it;\n"
         "what needs the job (rank, epochs=, readers) is judged at close: see error.\n"
         "\n"
         "SOURCE may also be a folder of WebDataset shards (*.tar): a sample is a key with a\n"
         "jpg/jpeg/png/webp member, labelled by key.cls or the label_key field of key.json\n"
         "(else -1); its path in dataset/manifest is <shard>.tar/<member>.\n"
         "\n"
         "Other files: stats (JSON counters), dataset/info, dataset/manifest (id, label, path),\n"
         "jobs/<id>/status (JSON). See joaderfs(8).\n"
         "metrics: every stats figure in Prometheus text. status has this_epoch and total\n"
         "counts; stall_seconds is how long reads waited, and stats decode_busy_fraction\n"
         "near 1 means the decode threads are saturated (input-bound).\n"
         "A read of SOURCE past the mount's read_timeout is abandoned and its sample skipped\n"
         "(stats source_reads_timed_out, source_io_threads_stuck).\n";
}

}  // namespace joaderfs
