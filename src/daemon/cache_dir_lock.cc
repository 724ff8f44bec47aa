#include "daemon/cache_dir_lock.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace joaderfs {

Status CacheDirLock::Acquire(const std::string& dir, std::unique_ptr<CacheDirLock>* out) {
  const std::string path = dir + "/joaderfs.lock";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError("cannot open " + path + ": " + std::strerror(errno));
  struct flock lock = {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;  // l_start 0, l_len 0: the whole file
  if (fcntl(fd, F_SETLK, &lock) != 0) {
    const int error = errno;
    std::string holder;
    struct flock probe = {};
    probe.l_type = F_WRLCK;
    probe.l_whence = SEEK_SET;
    // l_pid is 0 when the holder is in another pid namespace.
    if (fcntl(fd, F_GETLK, &probe) == 0 && probe.l_type != F_UNLCK && probe.l_pid > 0) {
      holder = " (pid " + std::to_string(probe.l_pid) + ")";
    }
    close(fd);
    if (error == EACCES || error == EAGAIN) {
      return Status::Busy("cache_dir " + dir + " is in use by another joaderfs" + holder);
    }
    return Status::IOError("cannot lock " + path + ": " + std::strerror(error));
  }
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    const int error = errno;
    close(fd);
    return Status::IOError("cannot write " + path + ": " + std::strerror(error));
  }
  out->reset(new CacheDirLock(fd));
  return Status::Ok();
}

CacheDirLock::~CacheDirLock() { close(fd_); }

}  // namespace joaderfs
