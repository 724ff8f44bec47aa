#include "catalog/source_store.h"

#include <sys/stat.h>

#include "catalog/s3_client.h"
#include "common/hash.h"
#include "loader/decoder.h"

namespace joaderfs {
namespace {

class LocalStore : public SourceStore {
 public:
  Status Read(const FileRange& range, uint64_t max_bytes, std::string* out,
              bool* as_scanned) const override {
    return ReadImageBytes(range, max_bytes, out, as_scanned);
  }
  SourceIdentity Identify(const std::string& path) const override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return {};
    return {static_cast<int64_t>(st.st_size),
            static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  }
};

class S3Store : public SourceStore {
 public:
  explicit S3Store(std::shared_ptr<const S3Client> client)
      : client_(std::move(client)), root_("s3://" + client_->bucket() + "/") {}

  Status Read(const FileRange& range, uint64_t max_bytes, std::string* out,
              bool* as_scanned) const override {
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
    // A ranged GET of a zero-length member would ask for bytes=N-(N-1).
    if (range.partial && length == 0) {
      out->clear();
      Status s = client_->Head(key, &meta);
      if (!s.ok()) return Status::IOError(s.message());
    } else {
      Status s = client_->Get(key, range.offset, length, max_bytes, out, &meta);
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
    if (!client_->Head(path.substr(root_.size()), &meta).ok()) return {};
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
};

}  // namespace

std::shared_ptr<const SourceStore> LocalSourceStore() {
  static const auto store = std::make_shared<LocalStore>();
  return store;
}

std::shared_ptr<const SourceStore> NewS3SourceStore(std::shared_ptr<const S3Client> client) {
  return std::make_shared<S3Store>(std::move(client));
}

uint64_t EtagDigest(const std::string& etag) {
  const uint64_t h = Fnv1a(kFnv1aBasis, etag.data(), etag.size());
  return h == 0 ? 1 : h;
}

}  // namespace joaderfs
