#include "common/private_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/printable.h"

namespace joaderfs {

Status ReadSecretFile(const std::string& path, bool owner_only, size_t max_bytes,
                      std::string* text) {
  const std::string name = Printable(path);
  // O_NONBLOCK: a FIFO named here must not hang the mount; fstat refuses it.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return Status::InvalidArgument(name + ": " + std::strerror(errno));
  struct stat st {};
  Status s;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    s = Status::InvalidArgument(name + " is not a regular file");
  } else if (owner_only && (st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    s = Status::InvalidArgument(name + " may be read or written by group or others (mode " + mode +
                                "): make it its owner's alone (chmod 600)");
  } else if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    s = Status::InvalidArgument(name + " is larger than such a file can be");
  } else {
    text->resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < text->size()) {
      const ssize_t got = read(fd, text->data() + done, text->size() - done);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      done += static_cast<size_t>(got);
    }
    text->resize(done);
  }
  close(fd);
  return s;
}

}  // namespace joaderfs
