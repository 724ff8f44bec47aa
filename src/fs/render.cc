#include "fs/render.h"

#include <nlohmann/json.hpp>

#include "common/wrap.h"
#include "jobs/spec_keys.h"

namespace joaderfs {
namespace {

using Json = nlohmann::ordered_json;

Json StatusJson(const JobStatus& st) {
  return Json{{"epoch", st.epoch},
              {"delivered", st.delivered},
              {"remaining", st.remaining},
              {"subset_size", st.subset_size},
              {"readers", st.readers},
              {"stall_seconds", st.stall_seconds},
              {"samples_per_s", st.samples_per_s},
              {"ram_hits", st.ram_hits},
              {"disk_hits", st.disk_hits},
              {"decodes", st.decodes}};
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

void Family(std::string* out, const char* name, const char* type, const char* help) {
  *out += std::string("# HELP ") + name + " " + help + "\n";
  *out += std::string("# TYPE ") + name + " " + type + "\n";
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
  json["skipped"] = st.skipped;
  json["delivered_total"] = st.delivered_total;
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
      r["skipped"] = rank.skipped;
      r["delivered_total"] = rank.delivered_total;
      ranks.push_back(std::move(r));
    }
    json["ranks"] = std::move(ranks);
  }
  return Dump(json);
}

std::string RenderStats(const MountStats& s) {
  Json json{{"decoded", s.cache.decoded},
            {"delivered", s.delivered},
            {"ram_hits", s.cache.hits},
            {"ram_misses", s.cache.misses},
            {"disk_hits", s.disk.hits},
            {"disk_misses", s.disk.misses},
            {"ram_bytes", s.cache.bytes},
            {"ram_pinned_bytes", s.cache.pinned_bytes},
            {"ram_budget", s.cache.budget},
            {"ram_entries", s.cache.entries},
            {"ram_evictions", s.cache.evictions},
            {"disk_bytes", s.disk.bytes},
            {"disk_budget", s.disk.budget},
            {"disk_entries", s.disk.entries},
            {"disk_evictions", s.disk.evictions},
            {"disk_writes", s.disk.writes},
            {"disk_write_drops", s.disk.write_drops},
            {"disk_corrupt", s.disk.corrupt},
            {"skipped", s.cache.failed},
            {"special_files", s.special_files},
            {"rejected_paths", s.rejected_paths},
            {"decode_threads", s.decode_threads},
            {"decode_queue", s.decode_queue},
            {"decode_busy_seconds", s.decode_busy_seconds},
            {"renders", s.renders},
            {"renders_shared", s.renders_shared},
            {"stall_seconds", s.stall_seconds},
            {"samples_per_s", s.samples_per_s}};
  json["planner"] = Json{{"rounds", s.planner.rounds},
                         {"picks", s.planner.picks},
                         {"shared_picks", s.planner.shared_picks},
                         {"coupled_picks", s.planner.coupled_picks}};
  Json jobs = Json::object();
  for (const auto& [name, status] : s.jobs) jobs[name] = StatusJson(status);
  json["jobs"] = std::move(jobs);
  return Dump(json);
}

std::string RenderMetrics(const MountStats& s) {
  std::string out;
  struct Mount {
    const char* name;
    const char* type;
    const char* help;
    Json value;
  };
  const Mount mount[] = {
      {"joaderfs_decoded_total", "counter", "Real decodes since mount (disk hits not counted).",
       s.cache.decoded},
      {"joaderfs_delivered_total", "counter", "Records handed to readers since mount.",
       s.delivered},
      {"joaderfs_ram_hits_total", "counter", "Cache requests the RAM tier answered.", s.cache.hits},
      {"joaderfs_disk_hits_total", "counter", "Loads the disk tier answered.", s.disk.hits},
      {"joaderfs_ram_bytes", "gauge", "Bytes of decoded samples in the RAM tier.", s.cache.bytes},
      {"joaderfs_ram_budget_bytes", "gauge", "The RAM tier's budget.", s.cache.budget},
      {"joaderfs_disk_bytes", "gauge", "Bytes in the disk tier.", s.disk.bytes},
      {"joaderfs_decode_queue", "gauge", "Loads waiting for a decode thread.", s.decode_queue},
      {"joaderfs_stall_seconds_total", "counter",
       "Time readers' reads waited for data, all jobs (reads waiting now included).",
       s.stall_seconds},
      {"joaderfs_samples_per_second", "gauge", "Deliveries per second over the last 10 s.",
       s.samples_per_s},
  };
  // Numbers as /stats writes them (shortest round trip): both files agree.
  for (const Mount& m : mount) {
    Family(&out, m.name, m.type, m.help);
    out += std::string(m.name) + " " + m.value.dump() + "\n";
  }
  // Per job stream: a job's one stream, or each rank's.
  struct Stream {
    std::string labels;
    const JobStatus* status;
  };
  std::vector<Stream> streams;
  for (const auto& [name, st] : s.jobs) {
    const std::string job = "job=\"" + LabelValue(name) + "\"";
    if (st.ranks.empty()) {
      streams.push_back({job, &st});
    } else {
      for (size_t r = 0; r < st.ranks.size(); ++r) {
        streams.push_back({job + ",rank=\"" + std::to_string(r) + "\"", &st.ranks[r]});
      }
    }
  }
  struct PerJob {
    const char* name;
    const char* type;
    const char* help;
    Json (*value)(const JobStatus&);
  };
  const PerJob per_job[] = {
      {"joaderfs_job_stall_seconds_total", "counter",
       "Time the stream's reads waited for data (reads waiting now included).",
       [](const JobStatus& st) { return Json(st.stall_seconds); }},
      {"joaderfs_job_samples_per_second", "gauge", "The stream's deliveries per second, last 10 s.",
       [](const JobStatus& st) { return Json(st.samples_per_s); }},
      {"joaderfs_job_delivered_total", "counter", "Records the stream delivered over its life.",
       [](const JobStatus& st) { return Json(st.delivered_total); }},
      {"joaderfs_job_ram_hits_total", "counter", "The stream's picks found in the RAM tier.",
       [](const JobStatus& st) { return Json(st.ram_hits); }},
      {"joaderfs_job_disk_hits_total", "counter",
       "The stream's picks whose load read the disk tier.",
       [](const JobStatus& st) { return Json(st.disk_hits); }},
      {"joaderfs_job_decodes_total", "counter", "The stream's picks whose load decoded.",
       [](const JobStatus& st) { return Json(st.decodes); }},
  };
  for (const PerJob& m : per_job) {
    Family(&out, m.name, m.type, m.help);
    for (const Stream& stream : streams) {
      out +=
          std::string(m.name) + "{" + stream.labels + "} " + m.value(*stream.status).dump() + "\n";
    }
  }
  return out;
}

std::string RenderManifest(const Catalog& catalog) {
  std::string out;
  out.reserve(catalog.size() * 40);
  for (SampleId id = 0; id < catalog.size(); ++id) {
    out += std::to_string(id);
    out += '\t';
    out += std::to_string(catalog.label(id));
    out += '\t';
    out += catalog.relpath(id);
    out += '\n';
  }
  return out;
}

namespace {

// One paragraph per key of jobs/spec_keys.h.
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
         "  python train.py --data jobs/myjob/next\n"
         "\n"
         "Spec keys (write before the first read of next; each write holds whole pairs):\n" +
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
         "\n"
         "A rejected write to spec, ids or resume fails with EINVAL; jobs/<id>/error says why\n"
         "(empty when the last write was good).\n"
         "\n"
         "SOURCE may also be a folder of WebDataset shards (*.tar): a sample is a key with a\n"
         "jpg/jpeg/png/webp member, labelled by key.cls or the label_key field of key.json\n"
         "(else -1); its path in dataset/manifest is <shard>.tar/<member>.\n"
         "\n"
         "Other files: stats (JSON counters), dataset/info, dataset/manifest (id, label, path),\n"
         "jobs/<id>/status (JSON). See joaderfs(8).\n"
         "metrics: Prometheus text; stall_seconds (status, stats) is how long reads waited.\n";
}

}  // namespace joaderfs
