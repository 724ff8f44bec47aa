#include "daemon/scrub_environ.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace joaderfs {

size_t ScrubEnvironmentBlock(char* begin, char* end, std::span<const std::string_view> names) {
  size_t scrubbed = 0;
  for (char* at = begin; at < end;) {
    const size_t length = strnlen(at, static_cast<size_t>(end - at));
    const std::string_view entry(at, length);
    for (std::string_view name : names) {
      if (entry.size() > name.size() && entry.starts_with(name) && entry[name.size()] == '=') {
        std::memset(at, 0, length);
        ++scrubbed;
        break;
      }
    }
    at += length + 1;
  }
  return scrubbed;
}

size_t ScrubEnvironment(std::span<const std::string_view> names) {
  for (std::string_view name : names) ::unsetenv(std::string(name).c_str());
  // /proc/self/stat: "pid (comm) state ..."; env_start and env_end are
  // fields 50 and 51 (proc(5)), counted after the command name, which may
  // hold spaces and parentheses.
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  uintptr_t env_start = 0, env_end = 0;
  for (int n = 3; fields >> field; ++n) {
    if (n == 50) env_start = std::strtoull(field.c_str(), nullptr, 10);
    if (n == 51) {
      env_end = std::strtoull(field.c_str(), nullptr, 10);
      break;
    }
  }
  if (env_start == 0 || env_end <= env_start) return 0;
  return ScrubEnvironmentBlock(reinterpret_cast<char*>(env_start), reinterpret_cast<char*>(env_end),
                               names);
}

}  // namespace joaderfs
