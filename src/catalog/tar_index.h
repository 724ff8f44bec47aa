// The index of one WebDataset shard: a tar file whose members are grouped
// into samples by key (`dir/key.jpg`, `dir/key.cls`, `dir/key.json`: the key
// is the name up to the first dot of its last component, the extension the
// rest, as the webdataset package splits them). Consecutive members with one
// key make one sample; its image is the first member with extension jpg,
// jpeg, png or webp (any case), its label the integer in the member whose
// extension is `label_key`, else the integer field `label_key` of its
// `.json` member, else -1 (no label).
//
// Only headers and label members are read (pread, in 64 KiB windows that
// skip long members, or a caller's reads); image bytes are located, never read. ustar, GNU (long
// names, base-256 sizes) and pax (path, size) headers are understood.
// Damage costs only the samples it touches: a header whose checksum fails
// is skipped up to the next valid header (the member it described is lost,
// the samples before and after it serve), and a shard cut short drops its
// last sample, so a truncated or corrupt shard still serves the rest.
//
// Stateless functions; safe to call from any thread.

#ifndef JOADERFS_CATALOG_TAR_INDEX_H_
#define JOADERFS_CATALOG_TAR_INDEX_H_

#include <cstdint>
#include <functional>
#include <string_view>

#include "common/status.h"

namespace joaderfs {

// What ScanShard() left out or could not label, added to across shards.
struct ShardCounts {
  uint64_t damaged = 0;    // bad headers, and samples lost where a shard is cut short
  uint64_t no_image = 0;   // keys with no image member
  uint64_t unlabeled = 0;  // samples kept with label -1
  uint64_t too_large = 0;  // image members the index cannot address (over 4 GiB)

  void Add(const ShardCounts& other) {
    damaged += other.damaged;
    no_image += other.no_image;
    unlabeled += other.unlabeled;
    too_large += other.too_large;
  }
};

// One sample: the image member's full name, where its bytes lie, its label.
using ShardSampleFn =
    std::function<void(std::string_view name, uint64_t offset, uint64_t length, int64_t label)>;

// Indexes the tar open at `fd`, `size` bytes long, calling `emit` for each
// sample in member order. Fails only when the file cannot be read at all.
Status ScanShard(int fd, uint64_t size, std::string_view label_key, ShardCounts* counts,
                 const ShardSampleFn& emit);

// Reads up to `n` bytes at `offset` into `buffer`: the count read (0 at the
// end), or -errno.
using ShardReadFn = std::function<int64_t(uint64_t offset, char* buffer, uint64_t n)>;
// That for a local file open at `fd` (pread), and the window its scans read.
int64_t ReadShardAt(int fd, uint64_t offset, char* buffer, uint64_t n);
inline constexpr uint64_t kLocalShardWindow = 64 << 10;
// The same through `read` (an object store's ranged GETs), `window` bytes a
// call at most (at least 64 KiB are used): fewer, larger reads where each
// costs a round trip.
Status ScanShard(const ShardReadFn& read, uint64_t size, uint64_t window,
                 std::string_view label_key, ShardCounts* counts, const ShardSampleFn& emit);

}  // namespace joaderfs

#endif  // JOADERFS_CATALOG_TAR_INDEX_H_
