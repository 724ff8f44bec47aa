#include "common/private_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace joaderfs {

int OpenPrivateFile(const std::string& path, std::string_view option, Status* error) {
  const std::string what = std::string(option) + ": " + path;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = Status::InvalidArgument(what + ": " + std::strerror(errno));
    return -1;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (st.st_mode & 077) != 0) {
    close(fd);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    *error = Status::InvalidArgument(what + " must be a regular file only its owner can read (mode " +
                                     mode + "; chmod 600 it)");
    return -1;
  }
  return fd;
}

}  // namespace joaderfs
