// The shard scan (catalog/tar_index.h) over arbitrary bytes: every run ends
// (libFuzzer's -timeout catches a scan that loops), and every sample it
// emits lies inside the shard, block-aligned, with a label in range.

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "catalog/tar_index.h"
#include "common/types.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("shard", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) {
    std::abort();
  }
  joaderfs::ShardCounts counts;
  const joaderfs::Status s = joaderfs::ScanShard(
      fd, size, "cls", &counts,
      [size](std::string_view name, uint64_t offset, uint64_t length, int64_t label) {
        if (name.empty() || offset % 512 != 0 || offset > size || length > size - offset ||
            label < -1 || label > joaderfs::kMaxLabel) {
          std::abort();
        }
      });
  if (!s.ok()) std::abort();  // an in-memory file is always readable
  return 0;
}
