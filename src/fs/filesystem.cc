#include "fs/filesystem.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

#include "common/parse.h"
#include "common/printable.h"
#include "common/rate_limited_log.h"
#include "fs/render.h"
#include "jobs/spec.h"

namespace joaderfs {
namespace {

constexpr fuse_ino_t kRootIno = FUSE_ROOT_ID;  // 1
constexpr fuse_ino_t kReadmeIno = 2;
constexpr fuse_ino_t kStatsIno = 3;
constexpr fuse_ino_t kDatasetIno = 4;
constexpr fuse_ino_t kInfoIno = 5;
constexpr fuse_ino_t kManifestIno = 6;
constexpr fuse_ino_t kJobsIno = 7;
constexpr fuse_ino_t kFirstJobIno = 16;
// dir, spec, ids, next, status, resume, then next.R from kRankOffset on.
enum JobFile : fuse_ino_t {
  kDirOffset,
  kSpecOffset,
  kIdsOffset,
  kNextOffset,
  kStatusOffset,
  kResumeOffset,
  kRankOffset = 16
};
constexpr fuse_ino_t kJobInodeStride = kRankOffset + kMaxRanks;
// A resume file lists the ids of at most one epoch.
constexpr size_t kMaxResumeBytes = 256 << 20;

// Static entries may be cached by the kernel; job entries come and go.
constexpr double kStaticTimeout = 60.0;

Filesystem* g_filesystem = nullptr;  // for interrupt callbacks

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

struct Filesystem::OpenFile {
  Node node = Node::kNone;
  std::string job;
  std::string content;  // rendered files; spec: the bytes written; ids: a partial last line
  JobManager::ReaderId reader = 0;
  Roaring ids;  // ids: the complete lines written so far
  bool wrote = false;
  bool rejected = false;  // a write failed: the handle changes nothing any more
};

namespace {

// What one handle of a control file may hold: specs are a few keys, an ids
// line is one id or path.
constexpr size_t kMaxIdsLine = 4096;

}  // namespace

// Trampolines from libfuse's C callbacks to the Filesystem.
struct Ops {
  static Filesystem* Fs(fuse_req_t req) { return static_cast<Filesystem*>(fuse_req_userdata(req)); }
  static void Lookup(fuse_req_t r, fuse_ino_t p, const char* n) { Fs(r)->Lookup(r, p, n); }
  static void Getattr(fuse_req_t r, fuse_ino_t i, fuse_file_info*) { Fs(r)->Getattr(r, i); }
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
  static void Interrupted(fuse_req_t, void* data) {
    const auto packed = reinterpret_cast<uint64_t>(data);
    g_filesystem->jobs_->Interrupt(packed >> kTokenBits, packed & ((1ULL << kTokenBits) - 1));
  }
};

Filesystem::Filesystem(const Catalog* catalog, JobManager* jobs, uint32_t default_size)
    : catalog_(catalog),
      jobs_(jobs),
      default_size_(default_size),
      uid_(getuid()),
      gid_(getgid()),
      mount_time_([] {
        timespec t{};
        clock_gettime(CLOCK_REALTIME, &t);
        return t;
      }()),
      next_job_inode_(kFirstJobIno) {
  g_filesystem = this;
}

Filesystem::~Filesystem() { g_filesystem = nullptr; }

const fuse_lowlevel_ops* Filesystem::Operations() {
  static const fuse_lowlevel_ops ops = [] {
    fuse_lowlevel_ops o{};
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
  switch (ino) {
    case kRootIno: return Node::kRoot;
    case kReadmeIno: return Node::kReadme;
    case kStatsIno: return Node::kStats;
    case kDatasetIno: return Node::kDataset;
    case kInfoIno: return Node::kInfo;
    case kManifestIno: return Node::kManifest;
    case kJobsIno: return Node::kJobs;
    default: break;
  }
  if (ino < kFirstJobIno) return Node::kNone;
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
  switch (offset) {
    case kDirOffset: return Node::kJobDir;
    case kSpecOffset: return Node::kSpec;
    case kIdsOffset: return Node::kIds;
    case kNextOffset: return ranks ? Node::kNone : Node::kNext;
    case kStatusOffset: return Node::kStatus;
    case kResumeOffset: return Node::kResume;
    default: return Node::kNone;
  }
}

bool Filesystem::Attr(fuse_ino_t ino, struct stat* st) const {
  std::string job;
  const Node node = Resolve(ino, &job);
  if (node == Node::kNone) return false;
  *st = {};
  st->st_ino = ino;
  st->st_uid = uid_;
  st->st_gid = gid_;
  st->st_atim = st->st_mtim = st->st_ctim = mount_time_;
  st->st_nlink = 1;
  st->st_blksize = 1 << 20;
  // Rendered and stream files report size 0; they are read with direct_io.
  switch (node) {
    case Node::kRoot:
    case Node::kDataset:
      st->st_mode = S_IFDIR | 0755;
      st->st_nlink = 2;
      break;
    // Anyone may make a job; the sticky bit says only owners remove theirs.
    case Node::kJobs:
      st->st_mode = S_IFDIR | 01777;
      st->st_nlink = 2;
      break;
    case Node::kJobDir:
      st->st_mode = S_IFDIR | 0755;
      st->st_nlink = 2;
      break;
    case Node::kSpec: st->st_mode = S_IFREG | 0644; break;
    case Node::kIds:
    case Node::kResume: st->st_mode = S_IFREG | 0200; break;
    default: st->st_mode = S_IFREG | 0444; break;
  }
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
  bool dynamic = false;
  if (node == Node::kRoot) {
    ino = n == "README"    ? kReadmeIno
          : n == "stats"   ? kStatsIno
          : n == "dataset" ? kDatasetIno
          : n == "jobs"    ? kJobsIno
                           : 0;
  } else if (node == Node::kDataset) {
    ino = n == "info" ? kInfoIno : n == "manifest" ? kManifestIno : 0;
  } else if (node == Node::kJobs) {
    uint32_t owner;
    if (jobs_->JobOwner(n, &owner).ok()) ino = JobInode(n);
    dynamic = true;
  } else if (node == Node::kJobDir) {
    const fuse_ino_t base = parent;
    ino = n == "spec"     ? base + kSpecOffset
          : n == "ids"    ? base + kIdsOffset
          : n == "next"   ? base + kNextOffset
          : n == "status" ? base + kStatusOffset
          : n == "resume" ? base + kResumeOffset
                          : 0;
    // next.R: R in decimal without leading zeros (Attr checks R < W).
    if (n.starts_with("next.") && n.size() > 5 && (n[5] != '0' || n.size() == 6)) {
      const auto rank = ParseUint(std::string_view(n).substr(5));
      if (rank && *rank < kMaxRanks) ino = base + kRankOffset + *rank;
    }
    dynamic = true;
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
  e.attr_timeout = e.entry_timeout = dynamic ? 0 : kStaticTimeout;
  fuse_reply_entry(req, &e);
}

void Filesystem::Getattr(fuse_req_t req, fuse_ino_t ino) {
  struct stat st;
  if (!Attr(ino, &st)) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fuse_reply_attr(req, &st, 0);
}

// Only truncation of `spec` and `ids` (as done by `>` in a shell) is
// accepted, and it changes nothing: their content is what gets written.
void Filesystem::Setattr(fuse_req_t req, fuse_ino_t ino, struct stat*, int to_set) {
  std::string job;
  const Node node = Resolve(ino, &job);
  if (node == Node::kNone) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  const int allowed = FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME |
                      FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW | FUSE_SET_ATTR_CTIME;
  if ((to_set & ~allowed) || ((to_set & FUSE_SET_ATTR_SIZE) && node != Node::kSpec &&
                              node != Node::kIds && node != Node::kResume)) {
    fuse_reply_err(req, EPERM);
    return;
  }
  if ((to_set & FUSE_SET_ATTR_SIZE) && node != Node::kResume) {
    const Status s = jobs_->CheckWritable(job, fuse_req_ctx(req)->uid);
    if (!s.ok()) {
      fuse_reply_err(req, ToErrno(s));
      return;
    }
  }
  Getattr(req, ino);
}

void Filesystem::Readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off) {
  std::string job;
  const Node node = Resolve(ino, &job);
  std::vector<std::pair<std::string, fuse_ino_t>> entries = {{".", ino}, {"..", kRootIno}};
  switch (node) {
    case Node::kRoot:
      entries.insert(entries.end(), {{"README", kReadmeIno},
                                     {"stats", kStatsIno},
                                     {"dataset", kDatasetIno},
                                     {"jobs", kJobsIno}});
      break;
    case Node::kDataset:
      entries.insert(entries.end(), {{"info", kInfoIno}, {"manifest", kManifestIno}});
      break;
    case Node::kJobs:
      for (const std::string& name : jobs_->JobNames()) entries.push_back({name, JobInode(name)});
      break;
    case Node::kJobDir:
      entries[1].second = kJobsIno;
      entries.insert(entries.end(), {{"spec", ino + kSpecOffset},
                                     {"ids", ino + kIdsOffset},
                                     {"status", ino + kStatusOffset},
                                     {"resume", ino + kResumeOffset}});
      if (uint32_t ranks = 0; jobs_->Ranks(job, &ranks).ok() && ranks > 0) {
        for (uint32_t r = 0; r < ranks; ++r) {
          entries.push_back({"next." + std::to_string(r), ino + kRankOffset + r});
        }
      } else {
        entries.push_back({"next", ino + kNextOffset});
      }
      break;
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
  const Status s = jobs_->CreateJob(name, fuse_req_ctx(req)->uid);
  if (!s.ok()) {
    spdlog::warn("mkdir jobs/{}: {}", Printable(name), Printable(s.message()));
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
  const int mode = fi->flags & O_ACCMODE;
  const bool writing = mode != O_RDONLY;
  const uint32_t uid = fuse_req_ctx(req)->uid;
  Status s;
  switch (file->node) {
    case Node::kNone: fuse_reply_err(req, ENOENT); return;
    case Node::kRoot:
    case Node::kDataset:
    case Node::kJobs:
    case Node::kJobDir: fuse_reply_err(req, EISDIR); return;
    case Node::kSpec:
      // A writer starts from nothing (its writes are the new spec), or from
      // the current spec when appending.
      if (writing) s = jobs_->CheckWritable(file->job, uid);
      if (s.ok() && (!writing || (fi->flags & O_APPEND)))
        s = jobs_->GetSpec(file->job, &file->content);
      break;
    case Node::kIds:
      s = mode == O_RDONLY ? Status::Permission("ids is write-only")
                           : jobs_->CheckWritable(file->job, uid);
      break;
    case Node::kNext:
    case Node::kRankNext:
      s = writing ? Status::Permission("next is read-only")
                  : jobs_->OpenReader(
                        file->job, uid, &file->reader,
                        file->node == Node::kRankNext ? std::optional(rank) : std::nullopt);
      fi->nonseekable = 1;
      break;
    case Node::kResume:
      if (mode == O_RDONLY) {
        s = Status::Permission("resume is write-only");
      } else if (uint32_t owner = 0; (s = jobs_->JobOwner(file->job, &owner)).ok()) {
        if (uid != 0 && uid != owner) s = Status::Permission("job " + file->job + " is not yours");
      }
      break;
    default:
      if (writing) {
        s = Status::Permission("read-only file");
        break;
      }
      if (file->node == Node::kReadme) file->content = RenderReadme(*catalog_);
      if (file->node == Node::kStats) file->content = RenderStats(jobs_->Stats());
      if (file->node == Node::kInfo) file->content = RenderInfo(*catalog_, default_size_);
      if (file->node == Node::kManifest) file->content = RenderManifest(*catalog_);
      if (file->node == Node::kStatus) {
        JobStatus status;
        s = jobs_->GetJobStatus(file->job, &status);
        if (s.ok()) file->content = RenderJobStatus(status);
      }
      break;
  }
  if (!s.ok()) {
    fuse_reply_err(req, ToErrno(s));
    return;
  }
  fi->direct_io = 1;
  fi->fh = reinterpret_cast<uint64_t>(file.get());
  if (fuse_reply_open(req, fi) == 0) {
    file.release();
  } else if (file->reader) {
    jobs_->CloseReader(file->reader);  // the opener went away
  }
}

void Filesystem::Read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  auto* file = reinterpret_cast<OpenFile*>(fi->fh);
  if (file->node != Node::kNext && file->node != Node::kRankNext) {
    const size_t from = std::min(static_cast<size_t>(off), file->content.size());
    fuse_reply_buf(req, file->content.data() + from, std::min(size, file->content.size() - from));
    return;
  }
  // Register for interrupts first: once Read() is called the reply may
  // come from another thread at any moment, after which `req` is gone.
  const uint64_t token = next_read_token_++;
  fuse_req_interrupt_func(req, Ops::Interrupted, PackInterrupt(file->reader, token));
  jobs_->Read(file->reader, size, token, [req](const Status& s, std::span<const iovec> data) {
    if (!s.ok()) {
      fuse_reply_err(req, ToErrno(s));
    } else {
      fuse_reply_iov(req, data.data(), static_cast<int>(data.size()));
    }
  });
}

void Filesystem::Write(fuse_req_t req, fuse_ino_t, const char* buf, size_t size, off_t,
                       fuse_file_info* fi) {
  auto* file = reinterpret_cast<OpenFile*>(fi->fh);
  const uint32_t uid = fuse_req_ctx(req)->uid;
  const std::string_view data(buf, size);
  Status s;
  if (file->rejected) {
    s = Status::InvalidArgument("an earlier write to this handle was rejected");
  } else if (file->node == Node::kSpec) {
    // Each write holds whole key=value pairs and replaces the spec with
    // everything written through this handle so far.
    std::string candidate = file->content + std::string(data);
    s = jobs_->SetSpec(file->job, uid, candidate);
    if (s.ok()) file->content = std::move(candidate);
  } else if (file->node == Node::kIds) {
    // Complete lines are parsed as they come; the subset is set on close.
    const size_t end = data.rfind('\n');
    if (end == std::string_view::npos) {
      if (file->content.size() + size > kMaxIdsLine) {
        s = Status::InvalidArgument("ids: line too long");
      } else {
        file->content.append(data);
      }
    } else {
      const std::string lines = file->content + std::string(data.substr(0, end + 1));
      Roaring ids;
      s = ParseIdList(lines, *catalog_, &ids);
      if (s.ok()) s = jobs_->CheckWritable(file->job, uid);
      if (s.ok() && size - end - 1 > kMaxIdsLine) s = Status::InvalidArgument("ids: line too long");
      if (s.ok()) {
        file->ids |= ids;
        file->content.assign(data.substr(end + 1));
      }
    }
    if (s.ok()) file->wrote = true;
  } else if (file->node == Node::kResume) {
    // Applied whole on close: the first line names the epoch.
    if (file->content.size() + size > kMaxResumeBytes) {
      s = Status::InvalidArgument("resume: more than " + std::to_string(kMaxResumeBytes) +
                                  " bytes");
    } else {
      file->content.append(data);
      file->wrote = true;
    }
  } else {
    s = Status::Permission("not writable");
  }
  if (!s.ok()) {
    // Nothing of a rejected write, and nothing after it, reaches the job.
    file->rejected = true;
    // Rate-limited: a user may repeat a bad write as fast as FUSE takes it.
    Warnings().Warn("rejected write", "write to jobs/{}/{}: {}", file->job,
                    file->node == Node::kSpec  ? "spec"
                    : file->node == Node::kIds ? "ids"
                                               : "resume",
                    Printable(s.message()));
    fuse_reply_err(req, ToErrno(s));
    return;
  }
  fuse_reply_write(req, size);
}

void Filesystem::Flush(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  auto* file = reinterpret_cast<OpenFile*>(fi->fh);
  Status s;
  if (file->node == Node::kIds && file->wrote && !file->rejected) {
    file->wrote = false;
    // A last line without a newline counts.
    Roaring last;
    s = ParseIdList(file->content, *catalog_, &last);
    if (s.ok()) s = jobs_->SetIdSubset(file->job, fuse_req_ctx(req)->uid, file->ids | last);
    if (!s.ok()) {
      file->rejected = true;
      Warnings().Warn("rejected write", "write to jobs/{}/ids: {}", file->job,
                      Printable(s.message()));
    }
  } else if (file->node == Node::kResume && file->wrote && !file->rejected) {
    file->wrote = false;
    s = jobs_->Resume(file->job, fuse_req_ctx(req)->uid, file->content);
    if (!s.ok()) {
      file->rejected = true;
      Warnings().Warn("rejected write", "write to jobs/{}/resume: {}", file->job,
                      Printable(s.message()));
    }
  }
  fuse_reply_err(req, ToErrno(s));
}

void Filesystem::Release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  std::unique_ptr<OpenFile> file(reinterpret_cast<OpenFile*>(fi->fh));
  if (file->reader) jobs_->CloseReader(file->reader);
  fuse_reply_err(req, 0);
}

}  // namespace joaderfs
