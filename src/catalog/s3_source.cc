// SOURCEs on an S3 bucket (s3://BUCKET[/PREFIX]): Catalog::OpenS3 lists
// one into samples, and its images are read through an S3Store. S3 support
// is a build option (CMake JOADERFS_S3, ON by default: it needs libcurl and
// libxml2); a build without it compiles s3_source_off.cc in place of this
// file and s3_client.cc.

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

#include "catalog/catalog.h"
#include "catalog/layout.h"
#include "catalog/manifest.h"
#include "catalog/s3_client.h"
#include "catalog/tar_index.h"
#include "common/hash.h"
#include "common/printable.h"

namespace joaderfs {
namespace {

// The digest of an ETag that stands in FileRange::inode (source_store.h):
// never 0 (0 is a missing file's).
uint64_t EtagDigest(const std::string& etag) {
  const uint64_t h = Fnv1a(kFnv1aBasis, etag.data(), etag.size());
  return h == 0 ? 1 : h;
}

// Objects of `client`'s bucket; paths are "s3://BUCKET/KEY". A read, its
// requests and their retries all included, ends within `read_timeout`.
class S3Store : public SourceStore {
 public:
  S3Store(std::shared_ptr<const S3Client> client, std::chrono::milliseconds read_timeout)
      : client_(std::move(client)),
        root_("s3://" + client_->bucket() + "/"),
        read_timeout_(read_timeout) {}

  Status Read(const FileRange& range, uint64_t max_bytes, std::string* out, bool* as_scanned,
              FileStamp* /*seen*/) const override {
    *as_scanned = false;
    if (!range.path.starts_with(root_)) return Status::IOError(range.path + ": not in " + root_);
    const std::string key = range.path.substr(root_.size());
    uint64_t length = range.partial ? range.length : 0;
    if (range.checked && !range.partial && range.file_size > max_bytes) {
      return Status::Corruption(range.path + ": " + std::to_string(range.file_size) +
                                " bytes, over the " + std::to_string(max_bytes) +
                                " an image within max_pixels may take");
    }
    if (range.partial && length > max_bytes) {
      return Status::Corruption(range.path + ": member of " + std::to_string(length) +
                                " bytes, over the " + std::to_string(max_bytes) +
                                " an image within max_pixels may take");
    }
    S3Object meta;
    // No request outlives the read's deadline, so that no I/O thread is
    // held past it (loader/source_reader.h).
    const auto deadline = S3Client::Clock::now() + read_timeout_;
    // A ranged GET of a zero-length member would ask for bytes=N-(N-1).
    if (range.partial && length == 0) {
      out->clear();
      Status s = client_->Head(key, &meta, deadline);
      if (!s.ok()) return Status::IOError(s.message());
    } else {
      // Without a declared length, a whole object's body stops at the
      // listing's size: a store cannot stream more than the object.
      const uint64_t expected = range.checked && !range.partial ? range.file_size : 0;
      Status s = client_->Get(key, range.offset, length, max_bytes, out, &meta, expected, deadline);
      if (s.code() == Status::Code::kCorruption) return s;
      if (!s.ok()) return Status::IOError(s.message());
    }
    *as_scanned =
        range.checked && meta.size == range.file_size && EtagDigest(meta.etag) == range.inode;
    if (range.partial && !*as_scanned) {
      return Status::IOError(range.path +
                             ": changed since the scan (size or ETag); remount to index it again");
    }
    return Status::Ok();
  }

  SourceIdentity Identify(const std::string& path) const override {
    if (!path.starts_with(root_)) return {};
    S3Object meta;
    if (!client_->Head(path.substr(root_.size()), &meta, S3Client::Clock::now() + read_timeout_)
             .ok()) {
      return {};
    }
    return {static_cast<int64_t>(meta.size), static_cast<int64_t>(EtagDigest(meta.etag))};
  }

  SourceStoreStats Stats() const override {
    const S3Stats s = client_->Stats();
    return {s.gets, s.retries, s.failures};
  }

  std::chrono::microseconds RoundTrip() const override { return client_->round_trip(); }

 private:
  const std::shared_ptr<const S3Client> client_;
  const std::string root_;
  const std::chrono::milliseconds read_timeout_;
};

// Whether a key's path below the SOURCE may become a sample: no empty
// component and none hidden (a leading '.'), as the folder walk skips them.
bool UsableRelpath(const std::string& rel) {
  size_t i = 0;
  while (i <= rel.size()) {
    const size_t end = std::min(rel.find('/', i), rel.size());
    if (end == i || rel[i] == '.') return false;
    i = end + 1;
  }
  return true;
}

}  // namespace

Status Catalog::OpenS3(const std::string& source, const CatalogOptions& options) {
  std::string bucket, prefix;
  if (!ParseS3Url(source, &bucket, &prefix)) {
    return Status::InvalidArgument("SOURCE " + source + " is not s3://BUCKET[/PREFIX]");
  }
  source_ = "s3://" + bucket + (prefix.empty() ? "" : "/" + prefix);
  S3Credentials credentials;
  Status s = LoadS3Credentials({options.s3_credentials, options.s3_profile}, &credentials);
  if (!s.ok()) return Status::InvalidArgument("SOURCE " + source_ + ": " + s.message());
  S3Options so;
  so.endpoint = options.s3_endpoint;
  so.region = options.s3_region;
  std::unique_ptr<S3Client> made;
  s = S3Client::Open(bucket, so, std::move(credentials), &made);
  if (!s.ok()) return s;
  S3Client* measure = made.get();
  std::shared_ptr<const S3Client> client = std::move(made);
  store_ = std::make_shared<S3Store>(client, options.read_timeout);
  std::vector<S3Object> objects;
  // Every key listed lies below PREFIX/ (S3Client::List leaves out others).
  s = client->List(prefix.empty() ? "" : prefix + "/", &objects, &scan_skips_.stray_keys);
  if (!s.ok()) {
    return Status::IOError("SOURCE " + source_ + " cannot be listed at " + client->endpoint() +
                           ": " + s.message());
  }
  if (objects.empty() && !prefix.empty()) {
    // No key below PREFIX/: PREFIX itself may be a manifest object.
    S3Object manifest;
    s = client->Head(prefix, &manifest);
    if (s.code() == Status::Code::kNotFound) {
      return Status::NotFound("SOURCE " + source_ + " does not exist (no object " + prefix +
                              " and none below " + prefix + "/)");
    }
    if (!s.ok()) return Status::IOError("SOURCE " + source_ + ": " + s.message());
    measure->MeasureRoundTrip(prefix);
    s = ReadS3Manifest(*client, bucket, prefix, manifest.size);
    if (!s.ok()) return s;
    Index();
    return Status::Ok();
  }
  measure->MeasureRoundTrip(objects.front().key);
  root_ = source_;
  const size_t skip = prefix.empty() ? 0 : prefix.size() + 1;
  // Classes in name order get labels 0..C-1 (std::map), as the folder walk.
  std::map<std::string, std::vector<const S3Object*>> classes;
  std::vector<S3Object> shards;
  for (const S3Object& o : objects) {
    const std::string rel = o.key.substr(skip);
    if (Unprintable(rel) || !UsableRelpath(rel)) continue;
    const size_t slash = rel.find('/');
    if (slash == std::string::npos) {
      flat_images_ += IsImageName(rel);
      if (IsTarName(rel)) shards.push_back(o);
      continue;
    }
    auto& files = classes[rel.substr(0, slash)];
    if (IsImageName(rel)) files.push_back(&o);
  }
  num_classes_ = static_cast<uint32_t>(classes.size());
  int64_t label = 0;
  for (auto& [name, files] : classes) {
    std::vector<std::string> rels;
    std::unordered_map<std::string, const S3Object*> by_rel;
    for (const S3Object* o : files) {
      rels.push_back(o->key.substr(skip));
      by_rel[rels.back()] = o;
    }
    std::sort(rels.begin(), rels.end(), PathLess);
    for (const std::string& rel : rels) {
      const S3Object* o = by_rel[rel];
      const size_t before = samples_.size();
      AddSample(rel, label);
      if (samples_.size() > before)
        samples_.set_identity(before, {o->size, 0, EtagDigest(o->etag)});
    }
    ++label;
  }
  if (samples_.size() == 0 && !shards.empty()) {
    for (S3Object& o : shards) o.key = o.key.substr(skip);
    s = ScanS3Shards(*client, std::move(shards), options.label_key);
    if (!s.ok()) return s;
    IndexShards();
    return Status::Ok();
  }
  Index();
  return Status::Ok();
}

Status Catalog::ReadS3Manifest(const S3Client& client, const std::string& bucket,
                               const std::string& key, uint64_t size) {
  const size_t slash = key.rfind('/');
  const std::string folder = slash == std::string::npos ? "" : key.substr(0, slash);
  root_ = "s3://" + bucket + (folder.empty() ? "" : "/" + folder);
  std::string text;
  S3Object meta;
  Status s = client.Get(key, 0, 0, uint64_t{1} << 30, &text, &meta, size);
  if (!s.ok()) return Status::IOError("cannot read manifest " + source_ + ": " + s.message());
  Manifest manifest;
  s = ParseManifest(text, &manifest);
  if (!s.ok()) {
    return Status::InvalidArgument("manifest " + source_ + " " + s.message() +
                                   " (SOURCE is an object, so it was read as a manifest; " +
                                   kLayouts + ")");
  }
  // One listing of the manifest's folder gives every entry's size and ETag.
  std::vector<S3Object> objects;
  s = client.List(folder.empty() ? "" : folder + "/", &objects, &scan_skips_.stray_keys);
  if (!s.ok()) return Status::IOError("SOURCE " + source_ + ": " + s.message());
  std::unordered_map<std::string, const S3Object*> by_key;
  for (const S3Object& o : objects) by_key[o.key] = &o;
  int64_t max_label = -1;
  for (const ManifestEntry& m : manifest.entries) {
    max_label = std::max(max_label, m.label);
    const size_t before = samples_.size();
    AddSample(m.relpath, m.label);
    // Missing: kept with no identity; its read fails and is counted then.
    if (auto it = by_key.find(folder.empty() ? m.relpath : folder + "/" + m.relpath);
        samples_.size() > before && it != by_key.end()) {
      samples_.set_identity(before, {it->second->size, 0, EtagDigest(it->second->etag)});
    }
  }
  num_classes_ = static_cast<uint32_t>(max_label + 1);
  rejected_paths_ = manifest.rejected;
  if (rejected_paths_ > 0) {
    spdlog::warn("manifest {}: left out {} paths that could leave its folder, the first on line {}",
                 Printable(source_), rejected_paths_, manifest.first_rejected_line);
  }
  NoteManifestUnprintable(manifest);
  return Status::Ok();
}

Status Catalog::ScanS3Shards(const S3Client& client, std::vector<S3Object> objects,
                             const std::string& label_key) {
  std::sort(objects.begin(), objects.end(),
            [](const S3Object& a, const S3Object& b) { return a.key < b.key; });
  // A GET costs a round trip: headers are read in 1 MiB windows.
  constexpr uint64_t kWindow = 1 << 20;
  const std::string prefix = root_.substr(("s3://" + client.bucket()).size());
  int64_t max_label = -1;
  ShardCounts counts;
  std::string body;
  for (S3Object& o : objects) {
    const std::string key = (prefix.empty() ? "" : prefix.substr(1) + "/") + o.key;
    Shard shard;
    shard.name = o.key;
    shard.size = o.size;
    shard.inode = EtagDigest(o.etag);
    // Every window must come from the object the listing saw.
    const ShardReadFn read = [&](uint64_t offset, char* buffer, uint64_t n) -> int64_t {
      S3Object meta;
      if (!client.Get(key, offset, n, n, &body, &meta).ok() || meta.etag != o.etag) return -EIO;
      std::memcpy(buffer, body.data(), body.size());
      return static_cast<int64_t>(body.size());
    };
    AddShard(
        std::move(shard),
        [&](uint64_t size, const ShardSampleFn& emit) {
          return ScanShard(read, size, kWindow, label_key, &counts, emit);
        },
        &counts, &max_label);
  }
  FinishShards(counts, max_label);
  return Status::Ok();
}

}  // namespace joaderfs
