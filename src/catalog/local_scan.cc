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
#include <thread>
#include <unordered_map>
#include <unordered_set>

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

namespace {

int64_t Nanoseconds(const struct timespec& t) { return t.tv_sec * 1'000'000'000LL + t.tv_nsec; }

// A name the walk keeps: not hidden (nor "." or ".."), no '/', no control
// character.
bool ComponentOk(std::string_view name) {
  return !name.empty() && name[0] != '.' && name.find('/') == std::string_view::npos &&
         !HasControlByte(name);
}

// A folder path the walk makes: components it keeps, joined by '/'.
bool FolderPathOk(std::string_view rel) {
  size_t start = 0;
  for (;;) {
    const size_t slash = std::min(rel.find('/', start), rel.size());
    if (!ComponentOk(rel.substr(start, slash - start))) return false;
    if (slash == rel.size()) return true;
    start = slash + 1;
  }
}

FolderStamp Stamp(std::string rel, const struct stat& st) {
  return {std::move(rel), static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
          Nanoseconds(st.st_mtim), Nanoseconds(st.st_ctim)};
}

}  // namespace

Status Catalog::ScanImageFolder(std::vector<std::string>* shards, const CatalogSnapshot* snapshot) {
  root_ = source_;
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  scan_started_ns_ = Nanoseconds(now);
  std::set<std::pair<dev_t, ino_t>> visited;
  struct stat st {};
  if (::stat(root_.c_str(), &st) != 0) return Status::IOError("cannot examine " + root_);
  visited.emplace(st.st_dev, st.st_ino);
  DIR* dir = nullptr;
  std::vector<FolderEntry> top;
  ++folders_listed_;
  const bool listed = ListFolder(root_, &dir, &top);
  const int error = errno;
  std::vector<std::pair<std::string, struct stat>> classes;
  if (listed) {
    for (const FolderEntry& e : top) {
      if (e.name[0] == '.' || Unprintable(e.name)) continue;
      switch (Examine(dir, e, &st)) {
        case EntryKind::kFolder: classes.emplace_back(e.name, st); break;
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
  class_scans_.assign(classes.size(), ClassScan());
  // Class folders are claimed before any walk, so that a link from one
  // class into another adds nothing to the first. A class folder that is a
  // second link to another keeps its label (torchvision's class indices)
  // but adds no sample.
  std::vector<bool> claimed(classes.size());
  for (size_t label = 0; label < classes.size(); ++label) {
    claimed[label] =
        visited.insert({classes[label].second.st_dev, classes[label].second.st_ino}).second;
    scan_skips_.revisits += !claimed[label];
  }
  // Which folder a link reaches first depends on every class before it: a
  // tree with a folder reached twice is walked whole.
  if (snapshot && scan_skips_.revisits == 0 &&
      std::none_of(snapshot->classes.begin(), snapshot->classes.end(),
                   [](const ClassScan& c) { return c.revisits > 0; })) {
    std::unordered_map<std::string_view, const ClassScan*> by_name;
    for (const ClassScan& c : snapshot->classes) by_name.emplace(c.name, &c);
    uint64_t walked = 0;
    for (size_t label = 0; label < classes.size(); ++label) {
      const auto it = by_name.find(classes[label].first);
      const auto l = static_cast<int32_t>(label);
      if (it != by_name.end() && ReuseClass(*snapshot, *it->second, l, &visited)) continue;
      WalkClass(classes[label].first, l, classes[label].second, &visited);
      ++walked;
    }
    if (scan_skips_.revisits == 0) {
      snapshot_current_ = walked == 0;
      spdlog::info("SOURCE {}: {} of {} classes listed again, the rest as the snapshot had them",
                   Printable(source_), walked, classes.size());
      return Status::Ok();
    }
    // A changed class reached a folder of another: walk it all.
    samples_ = SampleTable();
    special_files_ = flat_images_ = 0;
    scan_skips_ = ScanSkips();
    first_unprintable_.clear();
    shards->clear();
    return ScanImageFolder(shards, nullptr);
  }
  for (size_t label = 0; label < classes.size(); ++label) {
    if (claimed[label]) {
      WalkClass(classes[label].first, static_cast<int32_t>(label), classes[label].second, &visited);
    }
  }
  return Status::Ok();
}

bool Catalog::ReuseClass(const CatalogSnapshot& snapshot, const ClassScan& c, int32_t label,
                         std::set<std::pair<dev_t, ino_t>>* visited) {
  if (!c.reusable || c.folders.empty() || c.folders.front().rel != c.name) return false;
  // Its paths are checked as the walk would have made them, so that no
  // crafted snapshot names a file outside SOURCE or a name the walk leaves
  // out: folders are the class's and plain components, samples lie in one
  // of them and their names are images' names.
  std::unordered_set<std::string_view> folders;
  for (const FolderStamp& f : c.folders) {
    if (!FolderPathOk(f.rel) || !f.rel.starts_with(c.name) ||
        (f.rel.size() > c.name.size() && f.rel[c.name.size()] != '/')) {
      return false;
    }
    folders.insert(f.rel);
  }
  if (uint64_t{c.first} + c.count > snapshot.samples.size()) return false;
  for (SampleId id = c.first; id < c.first + c.count; ++id) {
    const std::string_view folder = snapshot.samples.folder(id), name = snapshot.samples.name(id);
    if (folder.empty() || !folders.contains(folder.substr(0, folder.size() - 1)) ||
        !ComponentOk(name) || !IsImageName(name)) {
      return false;
    }
  }
  struct stat st {};
  for (const FolderStamp& f : c.folders) {
    if (::stat((root_ + "/" + f.rel).c_str(), &st) != 0) return false;
    const FolderStamp now = Stamp(f.rel, st);
    if (now.dev != f.dev || now.ino != f.ino || now.mtime_ns != f.mtime_ns ||
        now.ctime_ns != f.ctime_ns) {
      return false;
    }
  }
  if (!samples_.AppendFrom(snapshot.samples, c.first, c.count, label)) return false;
  for (const FolderStamp& f : c.folders) visited->insert({f.dev, f.ino});
  special_files_ += c.special_files;
  scan_skips_.link_loops += c.link_loops;
  scan_skips_.broken_links += c.broken_links;
  scan_skips_.unreadable += c.unreadable;
  if (c.unprintable > 0 && scan_skips_.unprintable == 0) first_unprintable_ = c.first_unprintable;
  scan_skips_.unprintable += c.unprintable;
  ClassScan& kept = class_scans_[label];
  kept = c;
  return true;
}

void Catalog::WalkClass(const std::string& cls, int32_t label, const struct stat& class_st,
                        std::set<std::pair<dev_t, ino_t>>* visited) {
  // Depth first, each folder's entries in name order, files added where
  // they fall: that is the component-wise path order (PathLess), with no
  // sort of whole relpaths. A folder's subfolders are claimed in `visited`
  // when it is listed, before any is entered, so that the first of two
  // links to one folder in path order is the one entered: the walk lists
  // each distinct folder once, whatever the links.
  ClassScan& scan = class_scans_[label];
  scan.name = cls;
  const uint64_t special_before = special_files_;
  const ScanSkips skips_before = scan_skips_;
  enum Action : uint8_t { kSkip, kAdd, kEnter };
  struct Frame {
    std::string folder;  // relative to root_, with a trailing '/'
    std::vector<FolderEntry> entries;
    std::vector<Action> actions;
    std::vector<struct stat> subfolders;  // of the entries to enter, in order
    size_t next = 0, next_subfolder = 0;
  };
  std::vector<Frame> stack;
  struct stat st {};
  // `folder_st`: its stat, taken before it is listed.
  const auto enter = [&](std::string rel, const struct stat& folder_st) {
    scan.folders.push_back(Stamp(rel, folder_st));
    // A folder changed so near the scan that a later change may leave its
    // times as they are is not trusted at the next mount.
    if (scan.folders.back().mtime_ns > scan_started_ns_ - 2'000'000'000 ||
        scan.folders.back().ctime_ns > scan_started_ns_ - 2'000'000'000) {
      scan.reusable = false;
    }
    Frame f;
    f.folder = std::move(rel) + "/";
    DIR* dir = nullptr;
    ++folders_listed_;
    if (!ListFolder(root_ + "/" + f.folder, &dir, &f.entries)) {
      ++scan_skips_.unreadable;
      f.entries.clear();
    }
    f.actions.assign(f.entries.size(), kSkip);
    for (size_t i = 0; i < f.entries.size(); ++i) {
      const FolderEntry& e = f.entries[i];
      // The folder's own name was looked at in its parent.
      if (e.name[0] == '.' || (HasControlByte(e.name) && Unprintable(f.folder + e.name))) continue;
      const bool image = IsImageName(e.name);
      switch (Examine(dir, e, &st)) {
        case EntryKind::kFolder:
          if (visited->insert({st.st_dev, st.st_ino}).second) {
            f.actions[i] = kEnter;
            f.subfolders.push_back(st);
          } else {
            ++scan_skips_.revisits;
          }
          break;
        case EntryKind::kFile:
          if (image) f.actions[i] = kAdd;
          break;
        case EntryKind::kSpecial: special_files_ += image; break;
        case EntryKind::kLoop: image ? ++special_files_ : ++scan_skips_.link_loops; break;
        case EntryKind::kBroken: image ? ++special_files_ : ++scan_skips_.broken_links; break;
        case EntryKind::kUnreadable: ++scan_skips_.unreadable; break;
      }
    }
    if (dir) ::closedir(dir);
    stack.push_back(std::move(f));
  };
  enter(cls, class_st);
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.next == f.entries.size()) {
      stack.pop_back();
      continue;
    }
    const size_t i = f.next++;
    if (f.actions[i] == kAdd && !samples_.Add(f.folder, f.entries[i].name, label)) {
      ++scan_skips_.unreadable;
    }
    if (f.actions[i] == kEnter) {
      const struct stat sub = f.subfolders[f.next_subfolder++];
      enter(f.folder + f.entries[i].name, sub);  // invalidates f
    }
  }
  scan.special_files = special_files_ - special_before;
  scan.link_loops = scan_skips_.link_loops - skips_before.link_loops;
  scan.broken_links = scan_skips_.broken_links - skips_before.broken_links;
  scan.revisits = scan_skips_.revisits - skips_before.revisits;
  scan.unreadable = scan_skips_.unreadable - skips_before.unreadable;
  scan.unprintable = scan_skips_.unprintable - skips_before.unprintable;
  // The name the warning shows, when this class met the first one.
  if (skips_before.unprintable == 0 && scan.unprintable > 0) {
    scan.first_unprintable = first_unprintable_;
  }
}

std::vector<size_t> Catalog::StatLocalFiles(const std::vector<SampleId>& ids,
                                            std::vector<uint8_t>* kinds,
                                            const std::atomic<bool>* cancel) {
  const size_t n = ids.empty() ? samples_.size() : ids.size();
  if (kinds) kinds->assign(n, kMissing);
  const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 2u, 8u);
  // A thread works on one folder at a time, and keeps it open: a stat
  // relative to it looks up one name, not the whole path. On a filesystem
  // where a lookup that hangs blocks the others in its folder (FUSE
  // without parallel lookups), no second thread is caught behind it; only
  // folders over kBatch samples are shared. A list of ids spread over the
  // tree is taken in batches of kSpread.
  constexpr size_t kBatch = 16384, kSpread = 64;
  std::vector<size_t> batches;
  if (ids.empty()) {
    batches = samples_.FolderBatches(kBatch);
  } else {
    for (size_t i = 0; i < n; i += kSpread) batches.push_back(i);
  }
  struct OpenFolder {
    uint32_t index = UINT32_MAX;
    std::string path;  // with its trailing '/'
    int fd = -1;
    ~OpenFolder() {
      if (fd >= 0) ::close(fd);
    }
  };
  const std::vector<size_t> stuck = ParallelWalkWithDeadline(
      n, batches, threads, scan_timeout_,
      [this, kinds, &ids] {
        auto folder = std::make_shared<OpenFolder>();
        return [this, kinds, &ids, folder](size_t i, const WalkPublisher& p) {
          // What the step reads of the catalog it copies under Publish; one
          // capture, so that the function needs no allocation.
          struct Work {
            SampleId id;
            uint32_t index;
            std::string name, folder_path;
            struct stat st;
            bool known, found;
          } w{};
          Work* q = &w;
          if (!p.Publish([this, q, i, &ids, &folder] {
                q->id = ids.empty() ? static_cast<SampleId>(i) : ids[i];
                // Taken already by a read of the file (Confirm).
                q->known = samples_.identity_known(q->id);
                if (q->known) return;
                q->index = samples_.folder_index(q->id);
                q->name = samples_.name(q->id);
                if (q->index != folder->index) {
                  q->folder_path = root_ + "/" + std::string(samples_.FolderAt(q->index));
                }
              })) {
            return;
          }
          if (w.known) {
            p.Publish([this] { identities_pending_.fetch_sub(1); });
            return;
          }
          if (w.index != folder->index) {
            if (folder->fd >= 0) ::close(folder->fd);
            folder->index = w.index;
            folder->path = std::move(w.folder_path);
            folder->fd = ::open(folder->path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
          }
          w.found = folder->fd >= 0 && !w.name.empty()
                        ? ::fstatat(folder->fd, w.name.c_str(), &w.st, 0) == 0
                        : ::stat((folder->path + w.name).c_str(), &w.st) == 0;
          p.Publish([this, q, i, kinds] {
            identities_pending_.fetch_sub(1);
            if (!q->found) return;
            if (kinds) (*kinds)[i] = S_ISREG(q->st.st_mode) ? kRegular : kSpecial;
            // A FIFO or device where a file was listed gets no identity: its
            // reads are refused.
            if (!S_ISREG(q->st.st_mode)) return;
            samples_.Settle(q->id, StampOf(q->st));
          });
        };
      },
      cancel);
  if (kinds) {
    for (size_t i : stuck) (*kinds)[i] = kStuck;
  }
  return stuck;
}

void Catalog::StartIdentityPass(uint64_t at_mount) {
  const auto started = std::chrono::steady_clock::now();
  identities_pending_ = samples_.size();
  if (samples_.size() <= at_mount) {
    const std::vector<size_t> stuck = StatLocalFiles({}, nullptr, nullptr);
    NoteIdentityStuck(stuck.size(), stuck.empty() ? "" : samples_.relpath(stuck.front()));
    identities_pending_ = 0;
    return;
  }
  // What the daemon sizes its reads by (mean_image_bytes()), before the mount.
  const size_t n = samples_.size(), step = SpreadStep(n);
  std::vector<SampleId> spread;
  for (size_t id = 0; id < n; id += step) spread.push_back(static_cast<SampleId>(id));
  StatLocalFiles(spread, nullptr, nullptr);  // one given up is given up again below
  identities_pending_ = n;  // the pass counts every file down, those taken included
  identities_settled_ = false;
  identity_pass_ = std::thread([this, started] {
    const std::vector<size_t> stuck = StatLocalFiles({}, nullptr, &stop_identity_pass_);
    if (stop_identity_pass_.load()) return;
    NoteIdentityStuck(stuck.size(), stuck.empty() ? "" : samples_.relpath(stuck.front()));
    identities_pending_ = 0;
    spdlog::info("SOURCE {}: identities of {} files taken {:.1f} s after the listing",
                 Printable(source_), samples_.size(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    identities_settled_ = true;
    identities_settled_.notify_all();
  });
}

void Catalog::NoteIdentityStuck(size_t given_up, const std::string& first) {
  if (given_up == 0) return;
  identity_stuck_ += given_up;
  spdlog::warn(
      "SOURCE {}: {} files whose stat did not return within {} s (read_timeout) are kept; "
      "their reads are skipped while they hang, the first {}",
      Printable(source_), given_up, scan_timeout_.count() / 1000, Printable(first, 120));
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
