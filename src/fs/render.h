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
#include <vector>

#include "catalog/catalog.h"
#include "jobs/job_manager.h"

namespace joaderfs {

std::string RenderReadme(const Catalog& catalog);
std::string RenderInfo(const Catalog& catalog, uint32_t default_size);

// /dataset/manifest ("id<TAB>label<TAB>relpath" a line, by id), rendered
// from the catalog a block of ids at a time as it is read, never whole: a
// read costs what it asks for, and any number of open handles cost
// nothing (a 5M-sample manifest is 208 MB). Made on the first open: one
// pass over the catalog for the byte offset of each block. Immutable
// after construction; thread-safe.
class ManifestView {
 public:
  explicit ManifestView(const Catalog* catalog);
  uint64_t size() const { return block_start_.back(); }
  // Appends the manifest's bytes [offset, offset + length) (fewer at its
  // end) to *out.
  void Read(uint64_t offset, size_t length, std::string* out) const;

 private:
  static constexpr SampleId kBlock = 1024;  // ids a block: ~40 KB of lines
  void AppendLine(SampleId id, std::string* out) const;
  const Catalog* catalog_;
  std::vector<uint64_t> block_start_;  // each block's first byte; last: the size
};
std::string RenderJobStatus(const JobStatus& status);
std::string RenderStats(const MountStats& stats);
// Every figure of RenderStats (one table holds both), each series
// labelled mount="<mount>"; job figures per job stream (labels job and,
// for a ranked job, rank; a ranked job has no series without rank). Each
// HELP ends naming the /stats key of its figure.
std::string RenderMetrics(const MountStats& stats, const std::string& mount);

}  // namespace joaderfs

#endif  // JOADERFS_FS_RENDER_H_
