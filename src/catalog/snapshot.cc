#include "catalog/snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/coding.h"
#include "common/crc32c.h"

namespace joaderfs {
namespace {

constexpr char kMagic[8] = {'J', 'F', 'S', 'C', 'A', 'T', 'L', 'G'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeader = sizeof kMagic + 4 + 8 + 4;  // magic, version, length, CRC

// Little-endian, as the daemon's other formats (common/coding.h); the
// vectors of packed structs are written as they lie in memory.
class Writer {
 public:
  template <typename T>
  void Put(T v) {
    PutFixed(&out, v);
  }
  void PutBytes(std::string_view s) {
    Put<uint64_t>(s.size());
    out.append(s);
  }
  template <typename T>
  void PutVector(const std::vector<T>& v) {
    Put<uint64_t>(v.size());
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string out;
};

// Every read checks the bytes left first; a failed one leaves ok() false
// and reads nothing more.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  T Get() {
    if (!Take(sizeof(T))) return T{};
    return DecodeFixed<T>(in_.data() - sizeof(T));
  }
  std::string GetBytes() {
    const uint64_t n = Get<uint64_t>();
    if (!ok_ || n > in_.size() || !Take(n)) return {};
    return std::string(in_.data() - n, n);
  }
  template <typename T>
  std::vector<T> GetVector() {
    const uint64_t n = Get<uint64_t>();
    if (!ok_ || n > in_.size() / sizeof(T) || !Take(n * sizeof(T))) return {};
    std::vector<T> v(n);
    std::memcpy(v.data(), in_.data() - n * sizeof(T), n * sizeof(T));
    return v;
  }
  bool ok() const { return ok_; }
  bool done() const { return ok_ && in_.empty(); }

 private:
  bool Take(size_t n) {
    if (!ok_ || n > in_.size()) {
      ok_ = false;
      return false;
    }
    in_.remove_prefix(n);
    return true;
  }
  std::string_view in_;
  bool ok_ = true;
};

std::string EncodePayload(const CatalogSnapshot& snapshot) {
  Writer w;
  w.PutBytes(snapshot.source);
  w.Put<uint64_t>(snapshot.classes.size());
  for (const ClassScan& c : snapshot.classes) {
    w.PutBytes(c.name);
    w.Put(c.first);
    w.Put(c.count);
    w.Put<uint8_t>(c.reusable);
    for (uint64_t n :
         {c.special_files, c.link_loops, c.broken_links, c.revisits, c.unreadable, c.unprintable}) {
      w.Put(n);
    }
    w.PutBytes(c.first_unprintable);
    w.Put<uint64_t>(c.folders.size());
    for (const FolderStamp& f : c.folders) {
      w.PutBytes(f.rel);
      w.Put(f.dev);
      w.Put(f.ino);
      w.Put(f.mtime_ns);
      w.Put(f.ctime_ns);
    }
  }
  const SampleTable::PartsRef p = snapshot.samples.parts();
  w.PutBytes(p.names);
  w.PutVector(p.name_at);
  w.PutBytes(p.folders);
  w.PutVector(p.folder_at);
  w.PutVector(p.runs);

  return std::move(w.out);
}

std::string EncodeHeader(std::string_view payload) {
  std::string out(kMagic, sizeof kMagic);
  PutFixed<uint32_t>(&out, kVersion);
  PutFixed<uint64_t>(&out, payload.size());
  PutFixed<uint32_t>(&out, Crc32c(payload.data(), payload.size()));
  return out;
}

}  // namespace

Status DecodeSnapshot(std::string_view bytes, CatalogSnapshot* out) {
  if (bytes.size() < kHeader || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    return Status::Corruption("not a catalog snapshot");
  }
  Reader header(bytes.substr(sizeof kMagic, kHeader - sizeof kMagic));
  const auto version = header.Get<uint32_t>();
  const auto length = header.Get<uint64_t>();
  const auto crc = header.Get<uint32_t>();
  if (version != kVersion) {
    return Status::Corruption("snapshot version " + std::to_string(version) + ", not " +
                              std::to_string(kVersion));
  }
  const std::string_view payload = bytes.substr(kHeader);
  if (length != payload.size()) return Status::Corruption("truncated or overlong");
  if (Crc32c(payload.data(), payload.size()) != crc) return Status::Corruption("checksum mismatch");

  Reader r(payload);
  CatalogSnapshot s;
  s.source = r.GetBytes();
  const auto classes = r.Get<uint64_t>();
  // Each class takes at least 8 bytes: no count can make a huge reserve.
  if (!r.ok() || classes > payload.size() / 8) return Status::Corruption("bad class count");
  s.classes.resize(classes);
  for (ClassScan& c : s.classes) {
    c.name = r.GetBytes();
    c.first = r.Get<uint32_t>();
    c.count = r.Get<uint32_t>();
    c.reusable = r.Get<uint8_t>() != 0;
    for (uint64_t* n : {&c.special_files, &c.link_loops, &c.broken_links, &c.revisits,
                        &c.unreadable, &c.unprintable}) {
      *n = r.Get<uint64_t>();
    }
    c.first_unprintable = r.GetBytes();
    const auto folders = r.Get<uint64_t>();
    if (!r.ok() || folders > payload.size() / 8) return Status::Corruption("bad folder count");
    c.folders.resize(folders);
    for (FolderStamp& f : c.folders) {
      f.rel = r.GetBytes();
      f.dev = r.Get<uint64_t>();
      f.ino = r.Get<uint64_t>();
      f.mtime_ns = r.Get<int64_t>();
      f.ctime_ns = r.Get<int64_t>();
    }
    if (!r.ok()) return Status::Corruption("truncated class");
  }
  SampleTable::Parts p;
  p.names = r.GetBytes();
  p.name_at = r.GetVector<uint32_t>();
  p.folders = r.GetBytes();
  p.folder_at = r.GetVector<uint32_t>();
  p.runs = r.GetVector<SampleTable::Run>();
  if (!r.done()) return Status::Corruption("truncated or trailing bytes");
  if (!SampleTable::FromParts(std::move(p), &s.samples)) {
    return Status::Corruption("inconsistent sample table");
  }
  // The classes cover the table in order, each within it.
  uint64_t next = 0;
  for (const ClassScan& c : s.classes) {
    if (c.first != next || uint64_t{c.first} + c.count > s.samples.size()) {
      return Status::Corruption("class ranges do not cover the samples");
    }
    next += c.count;
  }
  if (next != s.samples.size()) return Status::Corruption("class ranges do not cover the samples");
  *out = std::move(s);
  return Status::Ok();
}

Status ReadSnapshotFile(const std::string& path, CatalogSnapshot* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Status::NotFound(path + ": " + std::strerror(errno));
  std::string bytes;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) bytes.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return DecodeSnapshot(bytes, out);
}

Status WriteSnapshotFile(const std::string& path, const CatalogSnapshot& snapshot) {
  // The header and the payload are written apart: no copy of the payload.
  const std::string payload = EncodePayload(snapshot);
  const std::string header = EncodeHeader(payload);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IOError(tmp + ": " + std::strerror(errno));
  for (std::string_view bytes : {std::string_view(header), std::string_view(payload)}) {
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int error = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        return Status::IOError(tmp + ": " + std::strerror(error));
      }
      bytes.remove_prefix(static_cast<size_t>(n));
    }
  }
  // No fsync: a torn file after a crash fails its length or checksum and is
  // ignored (a full scan runs).
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(tmp.c_str());
    return Status::IOError(path + ": " + std::strerror(error));
  }
  return Status::Ok();
}

}  // namespace joaderfs
