// joaderfs-stuck-fs: a test-only FUSE filesystem that passes a folder
// through, except that reads of chosen files never return, as on a hung
// network filesystem. Such a read ends only when the kernel interrupts it
// (its reader was killed: as on NFS, a hung read is killable) or the
// filesystem goes.
//
//   joaderfs-stuck-fs ROOT STUCK[,STUCK...] MOUNTPOINT [FUSE options]
//
// STUCK names a file by its path relative to ROOT; with a "stat:" in front,
// its stat (getattr) never returns instead. Read-only. libfuse runs the
// handlers on several threads; they share only the strings set in main()
// before the loop starts.

#define FUSE_USE_VERSION 35

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char* root;
static char stuck[4096];  // ",a,stat:b," for a quick substring test

static void RealPath(const char* path, char* out) { snprintf(out, PATH_MAX, "%s%s", root, path); }

static int IsStuck(const char* path) {
  char key[PATH_MAX + 2];
  snprintf(key, sizeof key, ",%s,", path + 1);  // path starts with '/'
  return strstr(stuck, key) != NULL;
}

static int IsStuckStat(const char* path) {
  char key[PATH_MAX + 8];
  snprintf(key, sizeof key, ",stat:%s,", path + 1);
  return strstr(stuck, key) != NULL;
}

// Blocks until the kernel interrupts the request (its caller was killed).
static int Hang(void) {
  while (!fuse_interrupted()) usleep(20000);
  return -EINTR;
}

static int GetAttr(const char* path, struct stat* st, struct fuse_file_info* fi) {
  (void)fi;
  if (IsStuckStat(path)) return Hang();
  char real[PATH_MAX];
  RealPath(path, real);
  return lstat(real, st) == 0 ? 0 : -errno;
}

static int ReadDir(const char* path, void* buf, fuse_fill_dir_t fill, off_t offset,
                   struct fuse_file_info* fi, enum fuse_readdir_flags flags) {
  (void)offset, (void)fi, (void)flags;
  char real[PATH_MAX];
  RealPath(path, real);
  DIR* d = opendir(real);
  if (!d) return -errno;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    struct stat st = {.st_ino = e->d_ino, .st_mode = (mode_t)(DTTOIF(e->d_type))};
    if (fill(buf, e->d_name, &st, 0, 0)) break;
  }
  closedir(d);
  return 0;
}

static int Open(const char* path, struct fuse_file_info* fi) {
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
  char real[PATH_MAX];
  RealPath(path, real);
  const int fd = open(real, O_RDONLY);
  if (fd < 0) return -errno;
  fi->fh = (uint64_t)fd;
  // A stuck file's reads bypass the page cache: each is its reader's own
  // request, which a kill interrupts, not a readahead that would leave page
  // locks held for every later open of the file, by any process.
  if (IsStuck(path)) fi->direct_io = 1;
  return 0;
}

static int Read(const char* path, char* buf, size_t size, off_t offset, struct fuse_file_info* fi) {
  if (IsStuck(path)) return Hang();
  const ssize_t n = pread((int)fi->fh, buf, size, offset);
  return n < 0 ? -errno : (int)n;
}

static int Release(const char* path, struct fuse_file_info* fi) {
  (void)path;
  close((int)fi->fh);
  return 0;
}

static const struct fuse_operations kOps = {
    .getattr = GetAttr, .readdir = ReadDir, .open = Open, .read = Read, .release = Release};

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s ROOT STUCK[,STUCK...] MOUNTPOINT [FUSE options]\n", argv[0]);
    return 2;
  }
  root = realpath(argv[1], NULL);
  if (!root) {
    perror(argv[1]);
    return 2;
  }
  snprintf(stuck, sizeof stuck, ",%s,", argv[2]);
  // fuse_main sees: argv[0] MOUNTPOINT [options]
  argv[2] = argv[0];
  return fuse_main(argc - 2, argv + 2, &kOps, NULL);
}
