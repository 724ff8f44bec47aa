#include "daemon/machine.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/parse.h"

namespace joaderfs {
namespace {
namespace fs = std::filesystem;

std::optional<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A cgroup limit file's value: a number of bytes, or nullopt for "max",
// v1's "unlimited" (a page-rounded 2^63 - 1) and anything unreadable.
std::optional<uint64_t> ParseLimit(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  std::string value = *text;
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
  auto number = ParseUint(value);
  if (!number || *number >= (1ULL << 62)) return std::nullopt;
  return number;
}

}  // namespace

std::optional<uint64_t> CgroupMemoryLimit(
    std::string_view proc_self_cgroup,
    const std::function<std::optional<std::string>(const std::string& path)>& read_file) {
  std::optional<uint64_t> lowest;
  auto consider = [&](const std::string& path) {
    if (auto limit = ParseLimit(read_file(path)); limit && (!lowest || *limit < *lowest)) {
      lowest = limit;
    }
  };
  // Lines are "ID:CONTROLLERS:PATH": "0::PATH" for v2, a list holding
  // "memory" for v1's memory hierarchy.
  std::istringstream lines{std::string(proc_self_cgroup)};
  for (std::string line; std::getline(lines, line);) {
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (path.empty() || path[0] != '/' || path.find("..") != std::string::npos) continue;
    std::string root, file;
    if (controllers.empty() && line.compare(0, first, "0") == 0) {
      root = "/sys/fs/cgroup";
      file = "/memory.max";
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      root = "/sys/fs/cgroup/memory";
      file = "/memory.limit_in_bytes";
    } else {
      continue;
    }
    // A parent's limit binds its children too: walk up to the root.
    while (true) {
      if (path.size() > 1 && path.back() == '/') path.pop_back();
      consider(root + (path == "/" ? "" : path) + file);
      if (path == "/") break;
      path = path.substr(0, std::max<size_t>(1, path.rfind('/')));
    }
  }
  return lowest;
}

std::optional<uint64_t> ThisCgroupMemoryLimit() {
  return CgroupMemoryLimit(ReadSmallFile("/proc/self/cgroup").value_or(""), ReadSmallFile);
}

uint64_t DefaultRamCache(uint64_t ram, std::optional<uint64_t> cgroup_limit) {
  return std::min(ram, cgroup_limit.value_or(ram)) / 4;
}

uint64_t CacheDirRoom(const std::string& dir) {
  std::error_code ec;
  const fs::space_info space = fs::space(dir, ec);
  uint64_t room = ec ? 0 : space.available;
  // What the tier holds already is room it may keep using.
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) room += it->file_size(ec);
  }
  return room;
}

}  // namespace joaderfs
