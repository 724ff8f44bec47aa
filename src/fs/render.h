// The small files of the tree, rendered from snapshots: /README,
// /dataset/info, /dataset/manifest, /stats, /metrics and /jobs/<id>/status
// (docs/design.md 2.2, 2.5). JSON through nlohmann-json, keys in a fixed
// order; /metrics in Prometheus' text format, its numbers written as /stats
// writes them.
//
// Pure functions of their arguments; no FUSE, so tests render without a
// mount.

#ifndef JOADERFS_FS_RENDER_H_
#define JOADERFS_FS_RENDER_H_

#include <cstdint>
#include <string>

#include "catalog/catalog.h"
#include "jobs/job_manager.h"

namespace joaderfs {

std::string RenderReadme(const Catalog& catalog);
std::string RenderInfo(const Catalog& catalog, uint32_t default_size);
std::string RenderManifest(const Catalog& catalog);
std::string RenderJobStatus(const JobStatus& status);
std::string RenderStats(const MountStats& stats);
// Every figure of RenderStats (one table holds both), each series
// labelled mount="<mount>"; job figures per job stream (labels job and,
// for a ranked job, rank; a ranked job has no series without rank). Each
// HELP ends naming the /stats key of its figure.
std::string RenderMetrics(const MountStats& stats, const std::string& mount);

}  // namespace joaderfs

#endif  // JOADERFS_FS_RENDER_H_
