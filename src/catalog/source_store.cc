#include "catalog/source_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "catalog/s3_client.h"
#include "common/hash.h"

namespace joaderfs {
namespace {

int64_t MtimeNs(const struct stat& st) {
  return st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec;
}

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
  S3Store(std::shared_ptr<const S3Client> client, std::chrono::milliseconds read_timeout)
      : client_(std::move(client)),
        root_("s3://" + client_->bucket() + "/"),
        read_timeout_(read_timeout) {}

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

}  // namespace

// pread() is continued only when a signal cuts it short. The path may name a FIFO or a device where
// the catalog saw an image (replaced since, or a symlink to /dev): those are refused before opening
// when stat() shows them, and opened without blocking, then refused, when they appear between the
// two calls. Files too large to hold an allowed picture are refused unread.
//
// The bytes are bound to the identity of the file they came from, the
// open descriptor's: a `checked` member is read only from a shard with the
// scan's size, modification time and inode, and `*as_scanned` says whether
// a whole file had them. Either way the file must still have the size and
// time it had when opened once read (not rewritten in place meanwhile).
Status ReadImageBytes(const FileRange& range, uint64_t max_bytes, std::string* out,
                      bool* as_scanned) {
  const std::string& path = range.path;
  struct stat st {};
  if (!range.partial) {
    if (::stat(path.c_str(), &st) != 0) return Status::IOError(path + ": " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return Status::IOError(path + ": not a regular file");
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(path + ": " + std::strerror(errno));
  Status s;
  uint64_t length = range.length;
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  *as_scanned = regular && range.checked && static_cast<uint64_t>(st.st_size) == range.file_size &&
                MtimeNs(st) == range.mtime_ns && st.st_ino == range.inode;
  if (!regular) {
    s = Status::IOError(path + ": not a regular file");
  } else if (range.partial && !*as_scanned) {
    s = Status::IOError(path +
                        ": changed since the scan (size, time or inode); remount to "
                        "index it again");
  } else {
    if (!range.partial) length = static_cast<uint64_t>(st.st_size);
    if (length > max_bytes) {
      s = Status::Corruption(path + ": " + (range.partial ? "member of " : "") +
                             std::to_string(length) + " bytes, over the " +
                             std::to_string(max_bytes) + " an image within max_pixels may take");
    }
  }
  if (s.ok()) {
    out->resize(length);
    size_t done = 0;
    while (done < out->size()) {
      const ssize_t n = ::pread(fd, out->data() + done, out->size() - done,
                                static_cast<off_t>(range.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        s = Status::IOError(path + ": " + std::strerror(errno));
        break;
      }
      if (n == 0) {
        s = Status::IOError(path +
                            (range.partial ? ": ends inside a member" : ": shrank while read"));
        break;
      }
      done += static_cast<size_t>(n);
    }
  }
  struct stat after {};
  if (s.ok() &&
      (::fstat(fd, &after) != 0 || after.st_size != st.st_size || MtimeNs(after) != MtimeNs(st))) {
    s = Status::IOError(path + ": changed while read");
  }
  ::close(fd);
  return s;
}

std::shared_ptr<const SourceStore> LocalSourceStore() {
  static const auto store = std::make_shared<LocalStore>();
  return store;
}

std::shared_ptr<const SourceStore> NewS3SourceStore(std::shared_ptr<const S3Client> client,
                                                    std::chrono::milliseconds read_timeout) {
  return std::make_shared<S3Store>(std::move(client), read_timeout);
}

uint64_t EtagDigest(const std::string& etag) {
  const uint64_t h = Fnv1a(kFnv1aBasis, etag.data(), etag.size());
  return h == 0 ? 1 : h;
}

}  // namespace joaderfs
