#include "catalog/source_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace joaderfs {
namespace {

int64_t MtimeNs(const struct stat& st) {
  return st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec;
}

class LocalStore : public SourceStore {
 public:
  Status Read(const FileRange& range, uint64_t max_bytes, std::string* out, bool* as_scanned,
              FileStamp* seen) const override {
    return ReadImageBytes(range, max_bytes, out, as_scanned, seen);
  }
  SourceIdentity Identify(const std::string& path) const override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return {};
    return {static_cast<int64_t>(st.st_size),
            static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  }
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
                      bool* as_scanned, FileStamp* seen) {
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
  if (seen && regular) *seen = StampOf(st);
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

FileStamp StampOf(const struct stat& st) {
  return {static_cast<uint64_t>(st.st_size), MtimeNs(st), static_cast<uint64_t>(st.st_ino)};
}

std::shared_ptr<const SourceStore> LocalSourceStore() {
  static const auto store = std::make_shared<LocalStore>();
  return store;
}

}  // namespace joaderfs
