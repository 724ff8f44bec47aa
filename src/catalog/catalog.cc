#include "catalog/catalog.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include <spdlog/spdlog.h>

#include "catalog/layout.h"
#include "catalog/manifest.h"
#include "catalog/tar_index.h"
#include "common/hash.h"
#include "common/printable.h"

namespace joaderfs {
namespace fs = std::filesystem;

bool IsImageName(std::string_view name) {
  static const std::string_view kExtensions[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                                 ".pgm", ".tif",  ".tiff", ".webp"};
  // Asked of every name of a tree: no copy of it.
  for (std::string_view ext : kExtensions) {
    if (name.size() >= ext.size() &&
        std::equal(
            ext.begin(), ext.end(), name.end() - static_cast<ptrdiff_t>(ext.size()),
            [](char e, char c) { return e == std::tolower(static_cast<unsigned char>(c)); })) {
      return true;
    }
  }
  return false;
}

bool IsTarName(const std::string& name) {
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".tar") == 0;
}

bool PathLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const size_t ie = std::min(a.find('/', i), a.size());
    const size_t je = std::min(b.find('/', j), b.size());
    const int c = a.compare(i, ie - i, b, j, je - j);
    if (c != 0) return c < 0;
    i = ie + 1;
    j = je + 1;
  }
  return a.size() - std::min(i, a.size()) < b.size() - std::min(j, b.size());
}

namespace {

// The error for a SOURCE folder or bucket that yielded no sample.
Status NoImage(const std::string& source, uint64_t flat_images) {
  if (flat_images > 0) {
    return Status::InvalidArgument("SOURCE " + source + " holds " + std::to_string(flat_images) +
                                   " images but no class folder: " + kLayouts);
  }
  return Status::InvalidArgument("SOURCE " + source + " holds no image: " + kLayouts);
}

}  // namespace

Status Catalog::Open(const std::string& source, const CatalogOptions& options,
                     std::unique_ptr<Catalog>* out) {
  std::unique_ptr<Catalog> c(new Catalog());
  if (source.starts_with("s3://")) {
    Status s = c->OpenS3(source, options);
    if (!s.ok()) return s;
    c->LogSkips();
    if (c->size() == 0) return NoImage(source, c->flat_images_);
    *out = std::move(c);
    return Status::Ok();
  }
  c->scan_timeout_ = options.read_timeout;
  std::error_code ec;
  c->source_ = fs::absolute(source, ec).lexically_normal().string();
  if (c->source_.size() > 1 && c->source_.ends_with('/')) c->source_.pop_back();
  struct stat st {};
  if (::stat(c->source_.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::NotFound("SOURCE " + source + " does not exist");
    return Status::IOError("SOURCE " + source + ": " + std::strerror(errno));
  }
  // Reading a FIFO as a manifest would block start-up for good.
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
    return Status::InvalidArgument("SOURCE " + source + " is neither a folder nor a manifest file");
  }
  // The snapshot of an earlier scan, when cache_dir holds a sound one of
  // this SOURCE.
  std::string snapshot_path;
  CatalogSnapshot snapshot;
  bool have_snapshot = false;
  if (S_ISDIR(st.st_mode) && !options.cache_dir.empty()) {
    snapshot_path = SourceFolder(options.cache_dir, c->source_, "catalog1");
    Status r = ReadSnapshotFile(snapshot_path, &snapshot);
    if (r.ok() && snapshot.source != c->source_) r = Status::Corruption("of another SOURCE");
    have_snapshot = r.ok();
    if (!r.ok() && r.code() != Status::Code::kNotFound) {
      spdlog::warn("catalog snapshot {} ignored ({}): a full scan", snapshot_path, r.message());
    }
  }
  std::vector<std::string> shards;
  const bool tree = S_ISDIR(st.st_mode);
  Status s =
      tree ? c->ScanImageFolder(&shards, have_snapshot ? &snapshot : nullptr) : c->ReadManifest();
  if (!s.ok()) return s;
  snapshot = CatalogSnapshot();
  const bool shard_folder = c->samples_.size() == 0 && !shards.empty();
  if (shard_folder) {
    s = c->ScanShards(std::move(shards), options.label_key);
    if (!s.ok()) return s;
    c->IndexShards();
  } else if (tree) {
    c->samples_.Finish();  // identities: StartIdentityPass()
    if (!snapshot_path.empty() && c->size() > 0 && !c->snapshot_current_) {
      c->WriteSnapshot(snapshot_path);
    }
  } else {
    c->Index();
  }
  c->class_scans_ = {};
  c->LogSkips();
  if (c->size() == 0) {
    if (!tree) return Status::InvalidArgument("manifest " + source + " lists no image");
    return NoImage(source, c->flat_images_);
  }
  if (tree && !shard_folder) c->StartIdentityPass(options.identities_at_mount);
  *out = std::move(c);
  return Status::Ok();
}

Catalog::~Catalog() {
  stop_identity_pass_ = true;
  if (identity_pass_.joinable()) identity_pass_.join();
}

bool Catalog::Confirm(SampleId id, const FileStamp& seen) const {
  // A member's identity is its shard's, checked on read; an object's is
  // its listing's.
  if (!shards_.empty() || is_object_store()) return false;
  if (samples_.Settle(id, seen)) return true;
  // Another thread may be setting it this instant.
  while (!samples_.identity_known(id)) std::this_thread::yield();
  return samples_.identity(id) == seen;
}

void Catalog::WaitForIdentities() const { identities_settled_.wait(false); }

uint64_t Catalog::mean_image_bytes() const {
  const size_t n = size(), step = SpreadStep(n);
  uint64_t bytes = 0, count = 0;
  for (size_t id = 0; id < n; id += step) {
    if (!identity_known(static_cast<SampleId>(id))) continue;
    const FileRange r = location(static_cast<SampleId>(id));
    bytes += r.partial ? r.length : r.file_size;
    ++count;
  }
  return count ? bytes / count : 0;
}

void Catalog::LogSkips() const {
  const std::string where = Printable(source_);
  if (special_files_ > 0) {
    spdlog::warn(
        "SOURCE {}: left out {} image names that are not regular files (FIFOs, devices, "
        "folders, broken or looping symlinks)",
        where, special_files_);
  }
  if (scan_skips_.link_loops > 0) {
    spdlog::warn("SOURCE {}: left out {} symlinks that loop", where, scan_skips_.link_loops);
  }
  if (scan_skips_.broken_links > 0) {
    spdlog::warn("SOURCE {}: left out {} broken symlinks", where, scan_skips_.broken_links);
  }
  if (scan_skips_.revisits > 0) {
    spdlog::warn(
        "SOURCE {}: did not enter {} folders a second time (a symlink to a parent, a loop of "
        "links, or two links to one folder)",
        where, scan_skips_.revisits);
  }
  const ShardSkips& t = shard_skips_;
  if (t.damaged > 0) {
    spdlog::warn("SOURCE {}: left out {} samples of damaged or cut-short shards", where, t.damaged);
  }
  if (t.no_image > 0) {
    spdlog::warn("SOURCE {}: left out {} shard keys with no jpg, jpeg, png or webp member", where,
                 t.no_image);
  }
  if (t.unlabeled > 0) {
    spdlog::warn("SOURCE {}: {} samples have no label (no integer .cls or .json field): label -1",
                 where, t.unlabeled);
  }
  if (t.too_large > 0) {
    spdlog::warn("SOURCE {}: left out {} image members over 4 GiB or beyond 2 TiB of a shard",
                 where, t.too_large);
  }
  if (t.unreadable_shards > 0) {
    spdlog::warn("SOURCE {}: left out {} shards that could not be read", where,
                 t.unreadable_shards);
  }
  if (scan_skips_.unreadable > 0) {
    spdlog::warn("SOURCE {}: left out {} entries that could not be examined or listed", where,
                 scan_skips_.unreadable);
  }
  if (scan_skips_.unprintable > 0) {
    spdlog::warn("SOURCE {}: left out {} names holding a control character (the first: {})", where,
                 scan_skips_.unprintable, first_unprintable_);
  }
  if (scan_skips_.stray_keys > 0) {
    spdlog::warn(
        "SOURCE {}: left out {} keys the listing should not hold (outside the prefix, repeated "
        "or out of order)",
        where, scan_skips_.stray_keys);
  }
}

void Catalog::NoteManifestUnprintable(const Manifest& manifest) {
  if (manifest.unprintable == 0) return;
  if (scan_skips_.unprintable == 0) {
    first_unprintable_ = "manifest line " + std::to_string(manifest.first_unprintable_line);
  }
  scan_skips_.unprintable += manifest.unprintable;
}

bool Catalog::Unprintable(std::string_view name) {
  if (!HasControlByte(name)) return false;
  if (scan_skips_.unprintable++ == 0) first_unprintable_ = Printable(name, 120);
  return true;
}

Status Catalog::ReadManifest() {
  root_ = fs::path(source_).parent_path().string();
  std::ifstream in(source_, std::ios::binary);
  if (!in) return Status::IOError("cannot read manifest " + source_);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Manifest manifest;
  Status s = ParseManifest(text, &manifest);
  if (!s.ok()) {
    // Most often an image or a tar passed as SOURCE: say how it was read.
    return Status::InvalidArgument("manifest " + source_ + " " + s.message() +
                                   " (SOURCE is a file, so it was read as a manifest" +
                                   (IsImageName(source_) || IsTarName(source_)
                                        ? ", though it is named as an image or shard"
                                        : "") +
                                   "; " + kLayouts + ")");
  }
  int64_t max_label = -1;
  for (const ManifestEntry& e : manifest.entries) {
    max_label = std::max(max_label, e.label);
    AddSample(e.relpath, e.label);
  }
  num_classes_ = static_cast<uint32_t>(max_label + 1);
  rejected_paths_ = manifest.rejected;
  if (rejected_paths_ > 0) {
    spdlog::warn(
        "manifest {}: left out {} paths that could leave its folder (absolute, climbing "
        "out with .., or holding a NUL byte), the first on line {}",
        Printable(source_), rejected_paths_, manifest.first_rejected_line);
  }
  NoteManifestUnprintable(manifest);
  return Status::Ok();
}

void Catalog::AddSample(std::string_view relpath, int64_t label) {
  const size_t slash = relpath.rfind('/');
  const size_t split = slash == std::string_view::npos ? 0 : slash + 1;
  if (!samples_.Add(relpath.substr(0, split), relpath.substr(split), static_cast<int32_t>(label))) {
    ++scan_skips_.unreadable;
  }
}

void Catalog::Index() {
  // A local file's identity is its stat, which a hung filesystem may never
  // answer: those are left out. An object's is its listing's size and
  // ETag digest (OpenS3).
  std::vector<uint8_t> kinds;
  if (!is_object_store()) {
    identities_pending_ = samples_.size();  // counted down by the stats
    const std::vector<size_t> stuck = StatLocalFiles({}, &kinds, nullptr);
    identities_pending_ = 0;
    NoteStuck(stuck.size(), stuck.empty() ? "" : samples_.relpath(stuck.front()));
    for (uint8_t kind : kinds) special_files_ += kind == kSpecial;
    if (std::any_of(kinds.begin(), kinds.end(),
                    [](uint8_t k) { return k == kSpecial || k == kStuck; })) {
      samples_ = samples_.Filtered(
          [&](SampleId id) { return kinds[id] != kSpecial && kinds[id] != kStuck; });
    }
  }
  kinds = {};
  samples_.Finish();
}

void Catalog::WriteSnapshot(const std::string& path) {
  CatalogSnapshot snapshot;
  snapshot.source = source_;
  snapshot.classes = std::move(class_scans_);
  // Each class's samples after Index(): labels rise with ids.
  SampleId first = 0;
  for (size_t label = 0; label < snapshot.classes.size(); ++label) {
    SampleId end = first;
    while (end < samples_.size() && samples_.label(end) == static_cast<int32_t>(label)) ++end;
    snapshot.classes[label].first = first;
    snapshot.classes[label].count = end - first;
    first = end;
  }
  snapshot.samples = std::move(samples_);
  const Status s = WriteSnapshotFile(path, snapshot);
  samples_ = std::move(snapshot.samples);
  class_scans_ = std::move(snapshot.classes);
  if (!s.ok()) spdlog::warn("catalog snapshot not kept: {}", s.message());
}

void Catalog::AddShard(Shard shard,
                       const std::function<Status(uint64_t size, const ShardSampleFn& emit)>& scan,
                       ShardCounts* counts, int64_t* max_label) {
  shard.first = static_cast<SampleId>(members_.size());
  const uint32_t index = static_cast<uint32_t>(shards_.size());
  const Status s = scan(shard.size, [&](std::string_view member, uint64_t offset, uint64_t length,
                                        int64_t label) {
    if (Unprintable(member)) return;
    // Offsets past 2 TiB, labels past 32 bits and 4 GiB of names are
    // beyond what a 24-byte entry holds.
    if (offset / 512 > UINT32_MAX || names_.size() + member.size() > UINT32_MAX ||
        members_.size() >= UINT32_MAX) {
      ++counts->too_large;
      return;
    }
    if (label < INT32_MIN || label > INT32_MAX) {
      ++counts->unlabeled;
      label = -1;
    }
    members_.push_back({static_cast<uint32_t>(names_.size()), static_cast<uint32_t>(member.size()),
                        index, static_cast<uint32_t>(offset / 512), static_cast<uint32_t>(length),
                        static_cast<int32_t>(label)});
    names_.append(member);
    *max_label = std::max(*max_label, label);
  });
  if (!s.ok()) {
    ++shard_skips_.unreadable_shards;
    members_.resize(shard.first);
    return;
  }
  shards_.push_back(std::move(shard));
}

void Catalog::FinishShards(const ShardCounts& counts, int64_t max_label) {
  shard_skips_.damaged = counts.damaged;
  shard_skips_.no_image = counts.no_image;
  shard_skips_.unlabeled = counts.unlabeled;
  shard_skips_.too_large = counts.too_large;
  num_classes_ = static_cast<uint32_t>(max_label + 1);
  members_.shrink_to_fit();
  names_.shrink_to_fit();
  if (members_.empty()) shards_.clear();
}

void Catalog::IndexShards() {
  by_member_.Reset(members_.size());
  for (SampleId id = 0; id < members_.size(); ++id) {
    const Member& m = members_[id];
    // A name repeated in one shard: the first member keeps it, as a scan would find.
    by_member_.Insert(MemberHash(m.shard, MemberName(m)), id, [&](SampleId held) {
      return members_[held].shard == m.shard && MemberName(members_[held]) == MemberName(m);
    });
  }
}

uint64_t Catalog::MemberHash(uint32_t shard, std::string_view member) {
  return Fnv1a(Fnv1a(kFnv1aBasis, &shard, sizeof shard), member.data(), member.size());
}

std::string_view Catalog::MemberName(const Member& m) const {
  return std::string_view(names_).substr(m.name_at, m.name_size);
}

std::string Catalog::relpath(SampleId id) const {
  if (shards_.empty()) return samples_.relpath(id);
  const Member& m = members_[id];
  std::string out = shards_[m.shard].name;
  out += '/';
  out.append(names_, m.name_at, m.name_size);
  return out;
}

std::string Catalog::path(SampleId id) const {
  if (shards_.empty()) return root_ + "/" + samples_.relpath(id);
  return root_ + "/" + shards_[members_[id].shard].name;
}

FileRange Catalog::location(SampleId id) const {
  FileRange r = FileRange::WholeFile(path(id));
  r.checked = identity_known(id);
  if (shards_.empty()) {
    if (!r.checked) return r;
    const SampleTable::Identity& e = samples_.identity(id);
    r.file_size = e.size;
    r.mtime_ns = e.mtime_ns;
    r.inode = e.inode;
    return r;
  }
  const Member& m = members_[id];
  const Shard& shard = shards_[m.shard];
  r.partial = true;
  r.offset = uint64_t{m.block} * 512;
  r.length = m.length;
  r.file_size = shard.size;
  r.mtime_ns = shard.mtime_ns;
  r.inode = shard.inode;
  return r;
}

uint64_t Catalog::identity() const {
  WaitForIdentities();
  uint64_t h = Fnv1a(kFnv1aBasis, source_.data(), source_.size());
  for (SampleId id = 0; id < size(); ++id) {
    const uint64_t f = fingerprint(id);
    h = Fnv1a(h, &f, sizeof f);
  }
  return h;
}

uint64_t Catalog::fingerprint(SampleId id) const {
  if (shards_.empty()) return samples_.fingerprint(id);
  const Member& m = members_[id];
  const Shard& shard = shards_[m.shard];
  const std::string rel = relpath(id);
  const uint64_t parts[] = {static_cast<uint64_t>(static_cast<int64_t>(m.label)),
                            uint64_t{m.block},
                            uint64_t{m.length},
                            shard.size,
                            static_cast<uint64_t>(shard.mtime_ns),
                            shard.inode};
  return Fnv1a(Fnv1a(kFnv1aBasis, rel.data(), rel.size() + 1), parts, sizeof parts);
}

size_t Catalog::index_bytes() const {
  size_t bytes = members_.capacity() * sizeof(Member) + names_.capacity() + by_member_.bytes();
  for (const Shard& s : shards_) bytes += sizeof(Shard) + s.name.capacity();
  return bytes + samples_.bytes();
}

Roaring Catalog::IdsWithLabels(std::vector<std::pair<uint64_t, uint64_t>> ranges) const {
  // Labels lie in 0..num_classes_-1 (at most kMaxLabel + 1 of them): mark the
  // wanted ones in a table, each class once however the ranges overlap.
  std::sort(ranges.begin(), ranges.end());
  std::vector<bool> wanted(num_classes_);
  uint64_t marked = 0;  // classes below this are marked already
  for (const auto& [first, last] : ranges) {
    for (uint64_t c = std::max(first, marked); c <= last && c < num_classes_; ++c) wanted[c] = true;
    marked = std::max(marked, std::min<uint64_t>(last, num_classes_) + 1);
  }
  Roaring ids;
  for (SampleId id = 0; id < size(); ++id) {
    const int64_t l = label(id);
    if (l >= 0 && static_cast<uint64_t>(l) < wanted.size() && wanted[l]) ids.add(id);
  }
  return ids;
}

Roaring Catalog::IdsWithLabels(int64_t first, int64_t last) const {
  if (last < 0 || first > last) return Roaring();
  return IdsWithLabels(
      {{static_cast<uint64_t>(std::max<int64_t>(first, 0)), static_cast<uint64_t>(last)}});
}

std::optional<SampleId> Catalog::FindRelpath(std::string_view relpath) const {
  if (!shards_.empty()) {
    // `<shard>/<member>`: the shard by binary search, then the member by hash.
    const size_t slash = relpath.find('/');
    if (slash == std::string_view::npos) return {};
    const std::string_view shard = relpath.substr(0, slash), member = relpath.substr(slash + 1);
    auto it = std::lower_bound(shards_.begin(), shards_.end(), shard,
                               [](const Shard& s, std::string_view n) { return s.name < n; });
    if (it == shards_.end() || it->name != shard) return {};
    const auto index = static_cast<uint32_t>(it - shards_.begin());
    return by_member_.Find(MemberHash(index, member), [&](SampleId id) {
      return members_[id].shard == index && MemberName(members_[id]) == member;
    });
  }
  return samples_.Find(relpath);
}

}  // namespace joaderfs
