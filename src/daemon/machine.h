// What the machine offers the daemon, for the defaults sized from it: its
// memory as a cgroup limits it (ram_cache), and cache_dir's room
// (disk_cache).
//
// Thread-safe: they read files and hold nothing.

#ifndef JOADERFS_DAEMON_MACHINE_H_
#define JOADERFS_DAEMON_MACHINE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace joaderfs {

// The memory limit of the cgroup this process runs in: the lowest limit on
// its path to the root, of cgroup v2 (memory.max) and v1
// (memory.limit_in_bytes), or nullopt when none. `proc_self_cgroup` is the
// text of /proc/self/cgroup; `read_file` returns a file's text, or nullopt.
std::optional<uint64_t> CgroupMemoryLimit(
    std::string_view proc_self_cgroup,
    const std::function<std::optional<std::string>(const std::string& path)>& read_file);
// CgroupMemoryLimit of this process, from the files themselves.
std::optional<uint64_t> ThisCgroupMemoryLimit();

// ram_cache's default: a quarter of the machine's RAM or of the cgroup's
// limit, whichever is lower.
uint64_t DefaultRamCache(uint64_t ram, std::optional<uint64_t> cgroup_limit);

// cache_dir's free space plus the bytes of the files in it.
uint64_t CacheDirRoom(const std::string& dir);

}  // namespace joaderfs

#endif  // JOADERFS_DAEMON_MACHINE_H_
