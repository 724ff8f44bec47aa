#include "fs/filesystem.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <memory>
#include <optional>
#include <vector>

#include "common/parse.h"
#include "common/printable.h"
#include "common/rate_limited_log.h"
#include "control/control_files.h"
#include "fs/render.h"
#include "spec/spec.h"

namespace joaderfs {
namespace {

constexpr fuse_ino_t kRootIno = FUSE_ROOT_ID;  // 1
constexpr fuse_ino_t kJobsIno = 7;
constexpr fuse_ino_t kFirstJobIno = 16;
// A job's inodes: its folder, its files, then next.R from kRankOffset on.
constexpr fuse_ino_t kRankOffset = 16;
constexpr fuse_ino_t kJobInodeStride = kRankOffset + kMaxRanks;

// Static entries may be cached by the kernel; job entries come and go.
constexpr double kStaticTimeout = 60.0;

int ToErrno(const Status& s) {
  switch (s.code()) {
    case Status::Code::kOk: return 0;
    case Status::Code::kInvalidArgument: return EINVAL;
    case Status::Code::kNotFound: return ENOENT;
    case Status::Code::kExists: return EEXIST;
    case Status::Code::kBusy: return EBUSY;
    case Status::Code::kPermission: return EACCES;
    case Status::Code::kGone: return ENODEV;
    case Status::Code::kInterrupted: return EINTR;
    case Status::Code::kIOError: return EIO;
    case Status::Code::kCorruption: return EIO;
    case Status::Code::kQuota: return EDQUOT;
    case Status::Code::kTooMany: return EMFILE;
  }
  return EIO;
}

// A read's interrupt callback gets the reader and the read's token packed
// into its data pointer, so nothing is allocated whose lifetime could race
// with the reply.
constexpr int kTokenBits = 40;
void* PackInterrupt(uint64_t reader, uint64_t token) {
  return reinterpret_cast<void*>((reader << kTokenBits) | (token & ((1ULL << kTokenBits) - 1)));
}

}  // namespace

// Each node kind's behaviour, one row per kind: where it lives, its name and
// mode, and the control file (control/control_files.h) that handles its writes.
// Streams (`next`, `next.R`) are read through the JobManager; the other
// files are rendered when opened (fs/render.h).
struct Filesystem::NodeKind {
  Node node;
  Node parent;
  const char* name;
  // The inode of a static node; the offset from its job folder's inode of
  // a job's node.
  fuse_ino_t ino;
  mode_t mode;
  std::optional<ControlFile::Kind> control;
};

namespace {

// Anyone may make a job; the sticky bit says only owners remove theirs.
// In the order a listing shows them.
constexpr Filesystem::NodeKind kNodeKinds[] = {
    {Filesystem::Node::kRoot, Filesystem::Node::kNone, "", kRootIno, S_IFDIR | 0755, {}},
    {Filesystem::Node::kReadme, Filesystem::Node::kRoot, "README", 2, S_IFREG | 0444, {}},
    {Filesystem::Node::kStats, Filesystem::Node::kRoot, "stats", 3, S_IFREG | 0444, {}},
    {Filesystem::Node::kMetrics, Filesystem::Node::kRoot, "metrics", 8, S_IFREG | 0444, {}},
    {Filesystem::Node::kDataset, Filesystem::Node::kRoot, "dataset", 4, S_IFDIR | 0755, {}},
    {Filesystem::Node::kJobs, Filesystem::Node::kRoot, "jobs", kJobsIno, S_IFDIR | 01777, {}},
    {Filesystem::Node::kInfo, Filesystem::Node::kDataset, "info", 5, S_IFREG | 0444, {}},
    {Filesystem::Node::kManifest, Filesystem::Node::kDataset, "manifest", 6, S_IFREG | 0444, {}},
    {Filesystem::Node::kJobDir, Filesystem::Node::kJobs, "", 0, S_IFDIR | 0755, {}},
    {Filesystem::Node::kSpec, Filesystem::Node::kJobDir, "spec", 1, S_IFREG | 0644,
     ControlFile::Kind::kSpec},
    {Filesystem::Node::kIds, Filesystem::Node::kJobDir, "ids", 2, S_IFREG | 0200,
     ControlFile::Kind::kIds},
    {Filesystem::Node::kStatus, Filesystem::Node::kJobDir, "status", 4, S_IFREG | 0444, {}},
    {Filesystem::Node::kResume, Filesystem::Node::kJobDir, "resume", 5, S_IFREG | 0200,
     ControlFile::Kind::kResume},
    {Filesystem::Node::kError, Filesystem::Node::kJobDir, "error", 6, S_IFREG | 0444, {}},
    // Only in jobs without ranks; next.R (kRankOffset + R) in the others.
    {Filesystem::Node::kNext, Filesystem::Node::kJobDir, "next", 3, S_IFREG | 0444, {}},
    {Filesystem::Node::kRankNext,
     Filesystem::Node::kJobDir,
     "next.",
     kRankOffset,
     S_IFREG | 0444,
     {}},
};

const Filesystem::NodeKind* KindOf(Filesystem::Node node) {
  for (const auto& kind : kNodeKinds) {
    if (kind.node == node) return &kind;
  }
  return nullptr;
}

}  // namespace

struct Filesystem::OpenFile {
  Node node = Node::kNone;
  std::string job;
  std::string content;                   // rendered files
  std::unique_ptr<ControlFile> control;  // spec, ids, resume
  JobManager::ReaderId reader = 0;       // next, next.R
  // What a rendered file's handle holds, charged to its opener in the job
  // manager's open_file_bytes() (a control file charges its own).
  uint64_t charged = 0;
  uint32_t opener = 0;
  // The reader's position: the bytes it has read. Its one valid offset
  // (docs/design.md 2.4 "File semantics"); shared with replies in flight.
  std::shared_ptr<std::atomic<uint64_t>> position = std::make_shared<std::atomic<uint64_t>>(0);
  // A read of the stream is in flight: the position it was checked at is
  // being consumed, so another read at that offset fails (ESPIPE) instead
  // of taking records too. Shared with the reply, which clears it.
  std::shared_ptr<std::atomic<bool>> reading = std::make_shared<std::atomic<bool>>(false);
  const std::string& data() const { return control ? control->content() : content; }
};

// Trampolines from libfuse's C callbacks to the Filesystem.
struct Ops {
  static Filesystem* Fs(fuse_req_t req) { return static_cast<Filesystem*>(fuse_req_userdata(req)); }
  static void Lookup(fuse_req_t r, fuse_ino_t p, const char* n) { Fs(r)->Lookup(r, p, n); }
  static void Getattr(fuse_req_t r, fuse_ino_t i, fuse_file_info* f) { Fs(r)->Getattr(r, i, f); }
  static void Setattr(fuse_req_t r, fuse_ino_t i, struct stat* a, int s, fuse_file_info*) {
    Fs(r)->Setattr(r, i, a, s);
  }
  static void Readdir(fuse_req_t r, fuse_ino_t i, size_t s, off_t o, fuse_file_info*) {
    Fs(r)->Readdir(r, i, s, o);
  }
  static void Mkdir(fuse_req_t r, fuse_ino_t p, const char* n, mode_t) { Fs(r)->Mkdir(r, p, n); }
  static void Rmdir(fuse_req_t r, fuse_ino_t p, const char* n) { Fs(r)->Rmdir(r, p, n); }
  // The tree's shape is fixed but for mkdir and rmdir in /jobs.
  static void Mknod(fuse_req_t r, fuse_ino_t, const char*, mode_t, dev_t) {
    fuse_reply_err(r, EPERM);
  }
  static void Unlink(fuse_req_t r, fuse_ino_t, const char*) { fuse_reply_err(r, EPERM); }
  static void Symlink(fuse_req_t r, const char*, fuse_ino_t, const char*) {
    fuse_reply_err(r, EPERM);
  }
  static void Rename(fuse_req_t r, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned) {
    fuse_reply_err(r, EPERM);
  }
  static void Link(fuse_req_t r, fuse_ino_t, fuse_ino_t, const char*) { fuse_reply_err(r, EPERM); }
  static void Create(fuse_req_t r, fuse_ino_t, const char*, mode_t, fuse_file_info*) {
    fuse_reply_err(r, EPERM);
  }
  static void Init(void*, fuse_conn_info* conn) {
    // Asynchronous direct I/O splits one io_submit(O_DIRECT) read into
    // parallel requests at offsets ahead of the stream's position, which
    // can only fail after the first has taken records: sent one by one,
    // in order, each is read at the position like a read(2).
    conn->want &= ~FUSE_CAP_ASYNC_DIO;
  }
  static void Open(fuse_req_t r, fuse_ino_t i, fuse_file_info* f) { Fs(r)->Open(r, i, f); }
  static void Read(fuse_req_t r, fuse_ino_t i, size_t s, off_t o, fuse_file_info* f) {
    Fs(r)->Read(r, i, s, o, f);
  }
  static void Write(fuse_req_t r, fuse_ino_t i, const char* b, size_t s, off_t o,
                    fuse_file_info* f) {
    Fs(r)->Write(r, i, b, s, o, f);
  }
  static void Flush(fuse_req_t r, fuse_ino_t i, fuse_file_info* f) { Fs(r)->Flush(r, i, f); }
  static void Release(fuse_req_t r, fuse_ino_t i, fuse_file_info* f) { Fs(r)->Release(r, i, f); }
  // `r` is the interrupted request: its session's userdata is ours.
  static void Interrupted(fuse_req_t r, void* data) {
    const auto packed = reinterpret_cast<uint64_t>(data);
    Fs(r)->jobs_->Interrupt(packed >> kTokenBits, packed & ((1ULL << kTokenBits) - 1));
  }
};

Filesystem::Filesystem(const Catalog* catalog, JobManager* jobs, uint32_t default_size,
                       std::string mountpoint)
    : catalog_(catalog),
      jobs_(jobs),
      default_size_(default_size),
      mountpoint_(std::move(mountpoint)),
      uid_(getuid()),
      gid_(getgid()),
      mount_time_([] {
        timespec t{};
        clock_gettime(CLOCK_REALTIME, &t);
        return t;
      }()),
      next_job_inode_(kFirstJobIno) {}

Filesystem::~Filesystem() = default;

const fuse_lowlevel_ops* Filesystem::Operations() {
  static const fuse_lowlevel_ops ops = [] {
    fuse_lowlevel_ops o{};
    o.init = Ops::Init;
    o.lookup = Ops::Lookup;
    o.getattr = Ops::Getattr;
    o.setattr = Ops::Setattr;
    o.readdir = Ops::Readdir;
    o.mkdir = Ops::Mkdir;
    o.rmdir = Ops::Rmdir;
    o.mknod = Ops::Mknod;
    o.unlink = Ops::Unlink;
    o.symlink = Ops::Symlink;
    o.rename = Ops::Rename;
    o.link = Ops::Link;
    o.create = Ops::Create;
    o.open = Ops::Open;
    o.read = Ops::Read;
    o.write = Ops::Write;
    o.flush = Ops::Flush;
    o.release = Ops::Release;
    return o;
  }();
  return &ops;
}

fuse_ino_t Filesystem::JobInode(const std::string& job) {
  MutexLock lock(mu_);
  auto [it, inserted] = job_inodes_.try_emplace(job, next_job_inode_);
  if (inserted) {
    job_names_[next_job_inode_] = job;
    next_job_inode_ += kJobInodeStride;
  }
  return it->second;
}

Filesystem::Node Filesystem::Resolve(fuse_ino_t ino, std::string* job, uint32_t* rank) const {
  if (ino < kFirstJobIno) {
    for (const NodeKind& kind : kNodeKinds) {
      if (kind.parent != Node::kJobDir && kind.node != Node::kJobDir && kind.ino == ino) {
        return kind.node;
      }
    }
    return Node::kNone;
  }
  const fuse_ino_t offset = (ino - kFirstJobIno) % kJobInodeStride;
  {
    MutexLock lock(mu_);
    auto it = job_names_.find(ino - offset);
    if (it == job_names_.end()) return Node::kNone;
    *job = it->second;
  }
  uint32_t ranks;
  if (!jobs_->Ranks(*job, &ranks).ok()) return Node::kNone;
  if (offset >= kRankOffset) {
    if (offset - kRankOffset >= ranks) return Node::kNone;
    if (rank) *rank = static_cast<uint32_t>(offset - kRankOffset);
    return Node::kRankNext;
  }
  if (offset == 0) return Node::kJobDir;
  for (const NodeKind& kind : kNodeKinds) {
    if (kind.parent == Node::kJobDir && kind.node != Node::kRankNext && kind.ino == offset) {
      return kind.node == Node::kNext && ranks ? Node::kNone : kind.node;
    }
  }
  return Node::kNone;
}

bool Filesystem::Attr(fuse_ino_t ino, struct stat* st) const {
  std::string job;
  uint32_t rank = 0;
  const Node node = Resolve(ino, &job, &rank);
  if (node == Node::kNone) return false;
  *st = {};
  st->st_ino = ino;
  st->st_uid = uid_;
  st->st_gid = gid_;
  st->st_atim = st->st_mtim = st->st_ctim = mount_time_;
  // A rendered or control file reports the size of what its latest open
  // gave the reader (0 before one); all are read with direct_io. A stream
  // reports the bytes a reader opened now could read, where its records have
  // one size, so that readers that size a file first (TensorFlow's, numpy's)
  // read one epoch.
  st->st_mode = KindOf(node)->mode;
  if (node == Node::kNext || node == Node::kRankNext) {
    const std::optional<uint64_t> size =
        jobs_->StreamSize(job, node == Node::kRankNext ? std::optional(rank) : std::nullopt);
    st->st_size = static_cast<off_t>(size.value_or(0));
  } else if (S_ISREG(st->st_mode)) {
    MutexLock lock(mu_);
    const auto it = opened_size_.find(ino);
    if (it != opened_size_.end()) st->st_size = static_cast<off_t>(it->second);
  }
  st->st_nlink = S_ISDIR(st->st_mode) ? 2 : 1;
  st->st_blksize = 1 << 20;
  if (!job.empty()) {
    uint32_t owner = 0;
    if (jobs_->JobOwner(job, &owner).ok()) st->st_uid = owner;
  }
  return true;
}

void Filesystem::Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  std::string job;
  const Node node = Resolve(parent, &job);
  const std::string n = name;
  fuse_ino_t ino = 0;
  // Jobs come and go: nothing below /jobs may be cached.
  bool dynamic = false;
  if (node == Node::kJobs) {
    uint32_t owner;
    if (jobs_->JobOwner(n, &owner).ok()) ino = JobInode(n);
    dynamic = true;
  } else if (node == Node::kRoot || node == Node::kDataset || node == Node::kJobDir) {
    dynamic = node == Node::kJobDir;
    const fuse_ino_t base = dynamic ? parent : 0;
    for (const NodeKind& kind : kNodeKinds) {
      if (kind.parent == node && kind.node != Node::kRankNext && n == kind.name) {
        ino = base + kind.ino;
      }
    }
    // next.R: R in decimal without leading zeros (Attr checks R < W).
    if (dynamic && n.starts_with("next.") && n.size() > 5 && (n[5] != '0' || n.size() == 6)) {
      const auto rank = ParseUint(std::string_view(n).substr(5));
      if (rank && *rank < kMaxRanks) ino = base + kRankOffset + *rank;
    }
  } else {
    fuse_reply_err(req, node == Node::kNone ? ENOENT : ENOTDIR);
    return;
  }
  fuse_entry_param e{};
  if (ino == 0 || !Attr(ino, &e.attr)) {
    // A negative entry for static folders may be cached; jobs appear any time.
    e.ino = 0;
    e.entry_timeout = dynamic ? 0 : kStaticTimeout;
    fuse_reply_entry(req, &e);
    return;
  }
  e.ino = ino;
  e.entry_timeout = dynamic ? 0 : kStaticTimeout;
  // A file's size changes with each open (Attr): never cached.
  e.attr_timeout = dynamic || S_ISREG(e.attr.st_mode) ? 0 : kStaticTimeout;
  fuse_reply_entry(req, &e);
}

void Filesystem::Getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  struct stat st;
  if (!Attr(ino, &st)) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  if (const auto* file = fi ? reinterpret_cast<const OpenFile*>(fi->fh) : nullptr;
      file && file->reader) {
    const std::optional<uint64_t> unread = jobs_->ReaderUnread(file->reader);
    st.st_size = unread ? static_cast<off_t>(*file->position + *unread) : 0;
  }
  fuse_reply_attr(req, &st, 0);
}

// Only truncation of the control files (as done by `>` in a shell) is
// accepted, and it changes nothing: their content is what gets written.
void Filesystem::Setattr(fuse_req_t req, fuse_ino_t ino, struct stat*, int to_set) {
  std::string job;
  const Node node = Resolve(ino, &job);
  if (node == Node::kNone) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  // A job's files are its owner's: nobody else may even touch them.
  if (uint32_t owner = 0; !job.empty() && jobs_->JobOwner(job, &owner).ok() &&
                          !MayUseJob(fuse_req_ctx(req)->uid, owner)) {
    fuse_reply_err(req, EPERM);
    return;
  }
  const std::optional<ControlFile::Kind> control = KindOf(node)->control;
  const int allowed = FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME |
                      FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW | FUSE_SET_ATTR_CTIME;
  if ((to_set & ~allowed) || ((to_set & FUSE_SET_ATTR_SIZE) && !control)) {
    fuse_reply_err(req, EPERM);
    return;
  }
  if (to_set & FUSE_SET_ATTR_SIZE) {
    const Status s = ControlFile::CheckTruncate(*control, jobs_, job, fuse_req_ctx(req)->uid);
    if (!s.ok()) {
      fuse_reply_err(req, ToErrno(s));
      return;
    }
  }
  Getattr(req, ino, nullptr);
}

void Filesystem::Readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off) {
  std::string job;
  const Node node = Resolve(ino, &job);
  std::vector<std::pair<std::string, fuse_ino_t>> entries = {{".", ino}, {"..", kRootIno}};
  switch (node) {
    case Node::kRoot:
    case Node::kDataset:
      for (const NodeKind& kind : kNodeKinds) {
        if (kind.parent == node) entries.push_back({kind.name, kind.ino});
      }
      break;
    case Node::kJobs:
      for (const std::string& name : jobs_->JobNames()) entries.push_back({name, JobInode(name)});
      break;
    case Node::kJobDir: {
      entries[1].second = kJobsIno;
      uint32_t ranks = 0;
      if (!jobs_->Ranks(job, &ranks).ok()) ranks = 0;
      for (const NodeKind& kind : kNodeKinds) {
        if (kind.parent != node) continue;
        if (kind.node == Node::kRankNext) {
          for (uint32_t r = 0; r < ranks; ++r) {
            entries.push_back({kind.name + std::to_string(r), ino + kind.ino + r});
          }
        } else if (kind.node != Node::kNext || ranks == 0) {
          entries.push_back({kind.name, ino + kind.ino});
        }
      }
      break;
    }
    case Node::kNone: fuse_reply_err(req, ENOENT); return;
    default: fuse_reply_err(req, ENOTDIR); return;
  }
  std::vector<char> buf(size);
  size_t used = 0;
  for (size_t i = static_cast<size_t>(off); i < entries.size(); ++i) {
    struct stat st {};
    st.st_ino = entries[i].second;
    Attr(entries[i].second, &st);
    const size_t n = fuse_add_direntry(req, buf.data() + used, size - used,
                                       entries[i].first.c_str(), &st, static_cast<off_t>(i + 1));
    if (n > size - used) break;
    used += n;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void Filesystem::Mkdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  std::string job;
  if (Resolve(parent, &job) != Node::kJobs) {
    fuse_reply_err(req, EPERM);
    return;
  }
  const uint32_t uid = fuse_req_ctx(req)->uid;
  const Status s = jobs_->CreateJob(name, uid);
  if (!s.ok()) {
    // A limit reached has its own cause: one line per uid, whatever else
    // that uid gets wrong.
    const char* cause =
        s.code() == Status::Code::kQuota ? "job limit, uid " : "mkdir refused, uid ";
    Warnings().Warn(cause + std::to_string(uid), "mkdir jobs/{} by uid {}: {}", Printable(name),
                    uid, Printable(s.message()));
    fuse_reply_err(req, ToErrno(s));
    return;
  }
  fuse_entry_param e{};
  e.ino = JobInode(name);
  Attr(e.ino, &e.attr);
  fuse_reply_entry(req, &e);
}

void Filesystem::Rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  std::string job;
  if (Resolve(parent, &job) != Node::kJobs) {
    fuse_reply_err(req, EPERM);
    return;
  }
  const Status s = jobs_->RemoveJob(name, fuse_req_ctx(req)->uid);
  if (s.ok()) {
    MutexLock lock(mu_);
    auto it = job_inodes_.find(name);
    if (it != job_inodes_.end()) {
      for (fuse_ino_t ino = it->second; ino < it->second + kRankOffset; ++ino) {
        opened_size_.erase(ino);
      }
      job_names_.erase(it->second);
      job_inodes_.erase(it);
    }
  }
  fuse_reply_err(req, ToErrno(s));
}

void Filesystem::Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto file = std::make_unique<OpenFile>();
  uint32_t rank = 0;
  file->node = Resolve(ino, &file->job, &rank);
  const bool writing = (fi->flags & O_ACCMODE) != O_RDONLY;
  const uint32_t uid = fuse_req_ctx(req)->uid;
  if (file->node == Node::kNone) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  const NodeKind& kind = *KindOf(file->node);
  if (S_ISDIR(kind.mode)) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  Status s;
  if (kind.control) {
    s = ControlFile::Open(*kind.control, jobs_, file->job, uid, fi->flags, &file->control);
  } else if (file->node == Node::kNext || file->node == Node::kRankNext) {
    s = writing
            ? Status::Permission("next is read-only")
            : jobs_->OpenReader(file->job, uid, &file->reader,
                                file->node == Node::kRankNext ? std::optional(rank) : std::nullopt);
  } else if (writing) {
    s = Status::Permission("read-only file");
  } else {
    s = Render(file.get());
    if (s.ok()) s = ChargeRendered(file.get(), uid);
  }
  if (!s.ok()) {
    if (s.code() == Status::Code::kTooMany || s.code() == Status::Code::kQuota) {
      Warnings().Warn("open limit, uid " + std::to_string(uid), "open of {} by uid {}: {}",
                      file->job.empty() ? std::string(kind.name) : "jobs/" + Printable(file->job),
                      uid, s.message());
    }
    fuse_reply_err(req, ToErrno(s));
    return;
  }
  if (!file->reader && file->node != Node::kManifest && !writing) {
    MutexLock lock(mu_);
    opened_size_[ino] = file->data().size();
  }
  fi->direct_io = 1;
  fi->fh = reinterpret_cast<uint64_t>(file.get());
  if (fuse_reply_open(req, fi) == 0) {
    file.release();
    return;
  }
  // The opener went away.
  if (file->reader) jobs_->CloseReader(file->reader);
  jobs_->open_file_bytes().Release(file->opener, file->charged);
}

MountStats Filesystem::Stats() const {
  MountStats stats = jobs_->Stats();
  stats.warnings = warnings_;
  stats.read_wait = read_wait_->Take();
  return stats;
}

Status Filesystem::ChargeRendered(OpenFile* file, uint32_t uid) const {
  const uint64_t bytes = kOpenFileBytes + file->content.capacity();
  Status s = jobs_->open_file_bytes().Charge(uid, bytes);
  if (s.ok()) {
    file->charged = bytes;
    file->opener = uid;
  }
  return s;
}

Status Filesystem::Render(OpenFile* file) const {
  switch (file->node) {
    case Node::kReadme: file->content = RenderReadme(*catalog_); break;
    case Node::kStats: file->content = RenderStats(Stats()); break;
    case Node::kMetrics: file->content = RenderMetrics(Stats(), mountpoint_); break;
    case Node::kInfo: file->content = RenderInfo(*catalog_, default_size_); break;
    case Node::kManifest:
      std::call_once(manifest_once_,
                     [this] { manifest_ = std::make_unique<ManifestView>(catalog_); });
      break;
    case Node::kError: return jobs_->GetError(file->job, &file->content);
    case Node::kStatus: {
      JobStatus status;
      Status s = jobs_->GetJobStatus(file->job, &status);
      if (s.ok()) file->content = RenderJobStatus(status);
      return s;
    }
    default: break;
  }
  return Status::Ok();
}

void Filesystem::Read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  auto* file = reinterpret_cast<OpenFile*>(fi->fh);
  if (file->node == Node::kManifest) {
    std::string part;
    manifest_->Read(static_cast<uint64_t>(off), size, &part);
    fuse_reply_buf(req, part.data(), part.size());
    return;
  }
  if (!file->reader) {
    const std::string& data = file->data();
    const size_t from = std::min(static_cast<size_t>(off), data.size());
    fuse_reply_buf(req, data.data() + from, std::min(size, data.size() - from));
    return;
  }
  // Reads through the page cache (sendfile, splice, a MAP_PRIVATE map) come
  // at page offsets, are kept for every reader of the inode and cannot be
  // told apart from the file's bytes, so they fail, taking nothing: a read
  // of the reader's own (read, pread, readv, io_submit) names its file
  // table as lock owner, the page cache's none. shutil.copyfile then
  // falls back to read().
  if (fi->lock_owner == 0) {
    Warnings().Warn("page cache read " + std::to_string(fuse_req_ctx(req)->uid),
                    "jobs/{}: a read through the page cache (sendfile, splice or mmap) by uid {} "
                    "refused with EIO; streams are read with read()",
                    Printable(file->job), fuse_req_ctx(req)->uid);
    fuse_reply_err(req, EIO);
    return;
  }
  // A stream is read in order: a read or pread anywhere but at the
  // reader's position would re-read or skip, so it fails and takes nothing;
  // so does one at the position while another read there is in flight
  // (the check and the claim are one step).
  bool idle = false;
  if (static_cast<uint64_t>(off) != *file->position ||
      !file->reading->compare_exchange_strong(idle, true)) {
    fuse_reply_err(req, ESPIPE);
    return;
  }
  if (static_cast<uint64_t>(off) != *file->position) {  // moved before the claim
    *file->reading = false;
    fuse_reply_err(req, ESPIPE);
    return;
  }
  // Register for interrupts first: once Read() is called the reply may
  // come from another thread at any moment, after which `req` is gone.
  const uint64_t token = next_read_token_++;
  fuse_req_interrupt_func(req, Ops::Interrupted, PackInterrupt(file->reader, token));
  jobs_->Read(
      file->reader, size, token,
      [req, position = file->position, reading = file->reading, wait = read_wait_,
       started = std::chrono::steady_clock::now()](const Status& s, std::span<const iovec> data) {
        wait->Observe(std::chrono::steady_clock::now() - started);
        if (!s.ok()) {
          *reading = false;
          fuse_reply_err(req, ToErrno(s));
          return;
        }
        // Before the reply: the reader's next read comes at the new
        // position.
        uint64_t n = 0;
        for (const iovec& v : data) n += v.iov_len;
        *position += n;
        *reading = false;
        fuse_reply_iov(req, data.data(), static_cast<int>(data.size()));
      });
}

void Filesystem::Write(fuse_req_t req, fuse_ino_t, const char* buf, size_t size, off_t,
                       fuse_file_info* fi) {
  auto* file = reinterpret_cast<OpenFile*>(fi->fh);
  const Status s = file->control
                       ? file->control->Write(fuse_req_ctx(req)->uid, std::string_view(buf, size))
                       : Status::Permission("not writable");
  if (!s.ok()) {
    fuse_reply_err(req, ToErrno(s));
    return;
  }
  fuse_reply_write(req, size);
}

void Filesystem::Flush(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  auto* file = reinterpret_cast<OpenFile*>(fi->fh);
  const Status s = file->control ? file->control->Flush(fuse_req_ctx(req)->uid) : Status::Ok();
  fuse_reply_err(req, ToErrno(s));
}

void Filesystem::Release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  std::unique_ptr<OpenFile> file(reinterpret_cast<OpenFile*>(fi->fh));
  if (file->reader) jobs_->CloseReader(file->reader);
  jobs_->open_file_bytes().Release(file->opener, file->charged);
  fuse_reply_err(req, 0);
}

}  // namespace joaderfs
