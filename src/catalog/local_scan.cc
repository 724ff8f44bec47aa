// Catalog: the scan of a local SOURCE folder, an ImageFolder tree or a
// folder of tar shards (catalog/catalog.h). Every stat and read that a hung
// filesystem may never answer runs under the scan's deadline
// (common/deadline_walk.h).

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "catalog/catalog.h"
#include "catalog/layout.h"
#include "catalog/tar_index.h"
#include "common/deadline_walk.h"
#include "common/printable.h"

namespace joaderfs {

namespace {

// One entry of a folder: its name and its type as readdir() tells it
// (DT_UNKNOWN where the filesystem does not).
struct FolderEntry {
  std::string name;
  unsigned char type;
};

// The entries of `path` but "." and "..", sorted by name so that which of two
// links to one folder is entered first does not depend on the filesystem.
// `*dir` gets the open folder, which answers fstatat() for them; the caller
// closes it (it may be set when listing fails half-way).
bool ListFolder(const std::string& path, DIR** dir, std::vector<FolderEntry>* out) {
  out->clear();
  *dir = ::opendir(path.c_str());
  if (!*dir) return false;
  errno = 0;
  while (const dirent* e = ::readdir(*dir)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") out->push_back({std::string(name), e->d_type});
  }
  if (errno != 0) return false;
  std::sort(out->begin(), out->end(),
            [](const FolderEntry& a, const FolderEntry& b) { return a.name < b.name; });
  return true;
}

// What an entry is once symlinks are followed.
enum class EntryKind { kFolder, kFile, kSpecial, kLoop, kBroken, kUnreadable };

EntryKind Examine(DIR* dir, const FolderEntry& e, struct stat* st) {
  // Plain files need no stat: they are most entries of a dataset.
  if (e.type == DT_REG) return EntryKind::kFile;
  if (e.type != DT_DIR && e.type != DT_LNK && e.type != DT_UNKNOWN) return EntryKind::kSpecial;
  if (::fstatat(::dirfd(dir), e.name.c_str(), st, 0) != 0) {
    if (errno == ELOOP) return EntryKind::kLoop;
    if (errno == ENOENT) return EntryKind::kBroken;
    return EntryKind::kUnreadable;
  }
  if (S_ISDIR(st->st_mode)) return EntryKind::kFolder;
  return S_ISREG(st->st_mode) ? EntryKind::kFile : EntryKind::kSpecial;
}

}  // namespace

Status Catalog::ScanImageFolder(std::vector<std::string>* shards) {
  root_ = source_;
  std::set<std::pair<dev_t, ino_t>> visited;
  struct stat st {};
  if (::stat(root_.c_str(), &st) != 0) return Status::IOError("cannot examine " + root_);
  visited.emplace(st.st_dev, st.st_ino);
  DIR* dir = nullptr;
  std::vector<FolderEntry> top;
  const bool listed = ListFolder(root_, &dir, &top);
  const int error = errno;
  std::vector<std::pair<std::string, std::pair<dev_t, ino_t>>> classes;
  if (listed) {
    for (const FolderEntry& e : top) {
      if (e.name[0] == '.' || Unprintable(e.name)) continue;
      switch (Examine(dir, e, &st)) {
        case EntryKind::kFolder: classes.push_back({e.name, {st.st_dev, st.st_ino}}); break;
        case EntryKind::kFile:
          flat_images_ += IsImageName(e.name);
          if (IsTarName(e.name)) shards->push_back(e.name);
          break;
        case EntryKind::kLoop: ++scan_skips_.link_loops; break;
        case EntryKind::kBroken: ++scan_skips_.broken_links; break;
        case EntryKind::kUnreadable: ++scan_skips_.unreadable; break;
        case EntryKind::kSpecial: break;
      }
    }
  }
  if (dir) ::closedir(dir);
  if (!listed) return Status::IOError("cannot list " + root_ + ": " + std::strerror(error));
  num_classes_ = static_cast<uint32_t>(classes.size());
  // Class folders are claimed before any walk, so that a link from one
  // class into another adds nothing to the first. A class folder that is a
  // second link to another keeps its label (torchvision's class indices)
  // but adds no sample.
  std::vector<bool> claimed(classes.size());
  for (size_t label = 0; label < classes.size(); ++label) {
    claimed[label] = visited.insert(classes[label].second).second;
    scan_skips_.revisits += !claimed[label];
  }
  std::vector<std::string> files;
  for (size_t label = 0; label < classes.size(); ++label) {
    if (!claimed[label]) continue;
    files.clear();
    WalkClass(classes[label].first, &visited, &files);
    std::sort(files.begin(), files.end(), PathLess);
    for (auto& f : files) entries_.push_back({std::move(f), static_cast<int64_t>(label)});
  }
  return Status::Ok();
}

void Catalog::WalkClass(const std::string& cls, std::set<std::pair<dev_t, ino_t>>* visited,
                        std::vector<std::string>* files) {
  // Depth first with a stack of relative paths, children in name order, so
  // that the first of two links to one folder in path order is the one
  // entered. Every folder pushed is new to `visited`: the walk lists each
  // distinct folder once, whatever the links.
  std::vector<std::string> pending{cls};
  std::vector<FolderEntry> entries;
  std::vector<std::string> subfolders;
  struct stat st {};
  while (!pending.empty()) {
    const std::string rel = std::move(pending.back());
    pending.pop_back();
    DIR* dir = nullptr;
    if (!ListFolder(root_ + "/" + rel, &dir, &entries)) {
      ++scan_skips_.unreadable;
      entries.clear();
    }
    subfolders.clear();
    for (const FolderEntry& e : entries) {
      if (e.name[0] == '.' || Unprintable(rel + "/" + e.name)) continue;
      const bool image = IsImageName(e.name);
      switch (Examine(dir, e, &st)) {
        case EntryKind::kFolder:
          if (visited->insert({st.st_dev, st.st_ino}).second) {
            subfolders.push_back(rel + "/" + e.name);
          } else {
            ++scan_skips_.revisits;
          }
          break;
        case EntryKind::kFile:
          if (image) files->push_back(rel + "/" + e.name);
          break;
        case EntryKind::kSpecial: special_files_ += image; break;
        case EntryKind::kLoop: image ? ++special_files_ : ++scan_skips_.link_loops; break;
        case EntryKind::kBroken: image ? ++special_files_ : ++scan_skips_.broken_links; break;
        case EntryKind::kUnreadable: ++scan_skips_.unreadable; break;
      }
    }
    if (dir) ::closedir(dir);
    pending.insert(pending.end(), std::make_move_iterator(subfolders.rbegin()),
                   std::make_move_iterator(subfolders.rend()));
  }
}

void Catalog::StatLocalFiles(std::vector<uint8_t>* kinds) {
  kinds->assign(entries_.size(), kMissing);
  const std::vector<size_t> stuck =
      WalkWithDeadline(entries_.size(), scan_timeout_, [&](size_t i, const WalkPublisher& p) {
        std::string path;
        if (!p.Publish([&] { path = root_ + "/" + entries_[i].relpath; })) return;
        struct stat st {};
        const bool found = ::stat(path.c_str(), &st) == 0;
        p.Publish([&] {
          if (!found) return;
          (*kinds)[i] = S_ISREG(st.st_mode) ? kRegular : kSpecial;
          Entry& e = entries_[i];
          e.size = static_cast<uint64_t>(st.st_size);
          e.mtime_ns = st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec;
          e.inode = st.st_ino;
        });
      });
  for (size_t i : stuck) (*kinds)[i] = kStuck;
  NoteStuck(stuck.size(), stuck.empty() ? "" : entries_[stuck.front()].relpath);
}

void Catalog::NoteStuck(uint64_t count, const std::string& first) {
  if (count == 0) return;
  scan_skips_.stuck += count;
  spdlog::warn(
      "SOURCE {}: left out {} entries whose stat or read did not return within {} s "
      "(read_timeout), the first {}",
      Printable(source_), count, scan_timeout_.count() / 1000, Printable(first, 120));
}

Status Catalog::ScanShards(std::vector<std::string> names, const std::string& label_key) {
  std::sort(names.begin(), names.end());
  int64_t max_label = -1;
  ShardCounts counts;
  // A shard's reads, which a hung filesystem may never answer, run under a
  // deadline (each read is progress); its members are added at its end, so
  // a shard given up adds nothing.
  const std::vector<size_t> stuck =
      WalkWithDeadline(names.size(), scan_timeout_, [&](size_t i, const WalkPublisher& p) {
        std::string path;
        if (!p.Publish([&] { path = root_ + "/" + names[i]; })) return;
        const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        struct stat st {};
        if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
          if (fd >= 0) ::close(fd);
          p.Publish([&] { ++shard_skips_.unreadable_shards; });
          return;
        }
        struct Member {
          std::string name;
          uint64_t offset, length;
          int64_t label;
        };
        std::vector<Member> members;
        ShardCounts own;
        const Status s = ScanShard(
            [&](uint64_t offset, char* buffer, uint64_t n) -> int64_t {
              const int64_t r = ReadShardAt(fd, offset, buffer, n);
              return p.Publish([] {}) ? r : -EINTR;  // given up: stop reading
            },
            static_cast<uint64_t>(st.st_size), kLocalShardWindow, label_key, &own,
            [&](std::string_view name, uint64_t offset, uint64_t length, int64_t label) {
              members.push_back({std::string(name), offset, length, label});
            });
        ::close(fd);
        p.Publish([&] {
          Shard shard;
          shard.name = std::move(names[i]);
          shard.size = static_cast<uint64_t>(st.st_size);
          shard.mtime_ns = st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec;
          shard.inode = st.st_ino;
          counts.Add(own);
          AddShard(
              std::move(shard),
              [&](uint64_t, const ShardSampleFn& emit) {
                for (const Member& m : members) emit(m.name, m.offset, m.length, m.label);
                return s;
              },
              &counts, &max_label);
        });
      });
  NoteStuck(stuck.size(), stuck.empty() ? "" : names[stuck.front()]);
  FinishShards(counts, max_label);
  return Status::Ok();
}

}  // namespace joaderfs
