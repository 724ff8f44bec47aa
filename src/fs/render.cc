#include "fs/render.h"

#include <nlohmann/json.hpp>

namespace joaderfs {
namespace {

using Json = nlohmann::ordered_json;

Json StatusJson(const JobStatus& st) {
  return Json{{"epoch", st.epoch},
              {"delivered", st.delivered},
              {"remaining", st.remaining},
              {"subset_size", st.subset_size},
              {"readers", st.readers}};
}

// Byte strings from the file system (paths, job ids are checked) may hold
// any bytes: replace what is not UTF-8 rather than throw.
std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
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
            {"renders_shared", s.renders_shared}};
  json["planner"] = Json{{"rounds", s.planner.rounds},
                         {"picks", s.planner.picks},
                         {"shared_picks", s.planner.shared_picks},
                         {"coupled_picks", s.planner.coupled_picks}};
  Json jobs = Json::object();
  for (const auto& [name, status] : s.jobs) jobs[name] = StatusJson(status);
  json["jobs"] = std::move(jobs);
  return Dump(json);
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
         "Spec keys (write before the first read of next; each write holds whole pairs):\n"
         "  subset=all | classes:A-B[,C-D...] | range:A-B | random:F:SEED\n"
         "  size=N     shorter side resized to N, centre crop N x N (default: the mount's size);\n"
         "             0 resizes nothing: the image as the cache holds it (shorter side at\n"
         "             least the mount's base; the original with base=0), or a random crop\n"
         "             at its own size\n"
         "  crop=center | random | random:SMIN-SMAX:RMIN-RMAX\n"
         "             centre crop (default), or torchvision's RandomResizedCrop (scale\n"
         "             0.08-1, ratio 0.75-1.3333 unless given)\n"
         "  flip=P     horizontal flip with probability P (default 0)\n"
         "  seed=N     the job's augmentation seed (default: from the mount's seed and the\n"
         "             job id); a sample's crop and flip depend on (seed, epoch, id) alone\n"
         "  epochs=N   EOF for good after N epochs (default unlimited)\n"
         "  window=W   deliver in completion order within W positions (default 64, 1 = strict)\n"
         "  ranks=W    W data-parallel ranks: rank R reads next.R (equal counts per epoch)\n"
         "  drop_last=0|1  pad every rank to ceil(S/W) samples (0, default) or drop to floor\n"
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
         "them mkdir and spec fail with EDQUOT, open with EMFILE.\n"
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
         "jobs/<id>/status (JSON). See joaderfs(8).\n";
}

}  // namespace joaderfs
