// Secrets out of the daemon's environment. unsetenv() only drops a
// variable from `environ`: the strings the process started with stay in
// its initial environment block, which /proc/PID/environ shows to anyone
// who may ptrace-read the process (its user, root) for as long as it runs.
// So the block's bytes are overwritten in place.
//
// Not thread-safe (the environment is not): called at start-up, once the
// credentials are read and before the daemon's own threads start.

#ifndef JOADERFS_DAEMON_SCRUB_ENVIRON_H_
#define JOADERFS_DAEMON_SCRUB_ENVIRON_H_

#include <cstddef>
#include <span>
#include <string_view>

namespace joaderfs {

// The variables that hold S3 credentials (catalog/s3_client.h).
inline constexpr std::string_view kSecretVariables[] = {
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"};

// Overwrites with NUL bytes each "NAME=value" string of `names` in the
// block [begin, end) of NUL-terminated strings (the kernel's layout of the
// initial environment). Returns how many it overwrote.
size_t ScrubEnvironmentBlock(char* begin, char* end, std::span<const std::string_view> names);

// unsetenv()s `names`, then scrubs them from this process's initial
// environment block, whose bounds /proc/self/stat gives (env_start,
// env_end). Returns how many strings of the block it overwrote.
size_t ScrubEnvironment(std::span<const std::string_view> names);

}  // namespace joaderfs

#endif  // JOADERFS_DAEMON_SCRUB_ENVIRON_H_
