#include "daemon/mountpoint.h"

#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

extern char** environ;

namespace joaderfs {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(std::string_view field) {
  auto octal = [](char c) { return c >= '0' && c <= '7'; };
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size() && octal(field[i + 1]) && octal(field[i + 2]) &&
        octal(field[i + 3])) {
      out += static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 +
                               (field[i + 3] - '0'));
      i += 3;
    } else {
      out += field[i];
    }
  }
  return out;
}

// fusermount3 -uz: how a user who is not root detaches a FUSE mount.
bool LazyUnmountAsUser(const std::string& mountpoint) {
  const char* argv[] = {"fusermount3", "-u", "-z", "-q", mountpoint.c_str(), nullptr};
  pid_t pid = 0;
  if (posix_spawnp(&pid, "fusermount3", nullptr, nullptr, const_cast<char**>(argv), environ) != 0) {
    return false;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool IsJoaderfs(const std::string& type) { return type == "fuse.joaderfs" || type == "joaderfs"; }

}  // namespace

std::string MountedType(std::string_view mountinfo, const std::string& mountpoint) {
  std::string type;
  std::istringstream lines{std::string(mountinfo)};
  for (std::string line; std::getline(lines, line);) {
    // id parent major:minor root MOUNTPOINT options [optional...] - TYPE source super
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string x; fields >> x;) f.push_back(x);
    if (f.size() < 7 || Unescape(f[4]) != mountpoint) continue;
    for (size_t i = 6; i + 1 < f.size(); ++i) {
      if (f[i] == "-") {
        type = f[i + 1];  // the last mount at the path is the one on top
        break;
      }
    }
  }
  return type;
}

Status PrepareMountpoint(const std::string& mountpoint, bool* detached) {
  *detached = false;
  struct stat st {};
  const bool reachable = stat(mountpoint.c_str(), &st) == 0;
  const int error = errno;
  if (!reachable && error != ENOTCONN) return Status::Ok();  // libfuse says why
  std::ifstream in("/proc/self/mountinfo");
  std::stringstream text;
  text << in.rdbuf();
  const std::string type = MountedType(text.str(), mountpoint);
  if (reachable) {
    if (!IsJoaderfs(type)) return Status::Ok();
    return Status::Busy(mountpoint + " is already mounted by a running joaderfs (umount " +
                        mountpoint + " first)");
  }
  if (!IsJoaderfs(type)) {
    return Status::InvalidArgument(mountpoint + ": " + std::strerror(error) + " (a dead " +
                                   (type.empty() ? "mount" : type + " mount") +
                                   " that is not joaderfs's: unmount it first)");
  }
  // A dead joaderfs's mount: nobody can use it, and the new daemon takes
  // its place.
  const bool ok =
      geteuid() == 0 ? umount2(mountpoint.c_str(), MNT_DETACH) == 0 : LazyUnmountAsUser(mountpoint);
  if (!ok) {
    return Status::IOError(mountpoint + " was left by a joaderfs that died and cannot be " +
                           "detached: " + std::strerror(errno) + " (umount -l it)");
  }
  *detached = true;
  return Status::Ok();
}

}  // namespace joaderfs
