// The job spec of docs/design.md 2.3: which samples a job reads, at what size
// and with which crop and flip, for how many epochs, and how far delivery
// may reorder them.

#ifndef JOADERFS_SPEC_SPEC_H_
#define JOADERFS_SPEC_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <roaring/roaring.hh>

#include "catalog/catalog.h"
#include "common/status.h"
#include "loader/augment.h"
#include "records/record.h"

namespace joaderfs {

struct SubsetSpec {
  enum class Kind { kAll, kClasses, kRange, kRandom, kIds };
  Kind kind = Kind::kAll;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // kClasses, kRange (inclusive)
  double fraction = 1.0;                              // kRandom
  uint64_t seed = 0;                                  // kRandom
  std::string text = "all";                           // as written, for reading back
};

struct JobSpec {
  SubsetSpec subset;
  uint32_t size = 224;  // 0 keeps the original size
  uint64_t epochs = 0;  // 0 = unlimited
  uint32_t window = 64;
  // Data-parallel ranks (docs/design.md 2.6): 0 = none (the job reads `next`),
  // else files next.0 ... next.<ranks-1>.
  uint32_t ranks = 0;
  bool drop_last = false;
  // How the stream frames its records: JSF1, or TFRecords (`format=`).
  RecordFormat format = RecordFormat::kPlain;
  // crop, flip and seed. The daemon resolves the default seed when it makes
  // the job (JobSeed()), so the spec file always shows one.
  AugmentSpec augment;
  // `group=`: jobs of any daemon with the same group, seed and subset read
  // in the same order (jobs/lane.h Lane::own_group); empty: none.
  std::string group;

  // The bytes of each of its records where they all have one size (JSF1
  // records of size N > 0), else nothing.
  std::optional<uint64_t> record_bytes() const;

  // The spec as the `spec` file shows it: one key=value per line, which
  // parses back to the same spec (but for kIds subsets).
  std::string ToString() const;

  // Whether its deliveries are cut from the base image; else (size 0, no
  // augmentation) they are the base image as it is.
  bool renders() const { return size > 0 || augment.augmented(); }
};

inline constexpr uint32_t kMaxSize = 8192;
inline constexpr uint32_t kMaxWindow = 1 << 16;
inline constexpr uint32_t kMaxRanks = 4096;

// Parses `text` (key=value pairs separated by spaces or newlines) over
// `base`: keys not named keep their value in `base`. Fails with
// InvalidArgument naming the bad token, checking ranges against `catalog`.
Status ParseJobSpec(std::string_view text, const Catalog& catalog, const JobSpec& base,
                    JobSpec* out);

// The ids `subset` selects. REQUIRES: the subset was validated by
// ParseJobSpec (kIds subsets are resolved by ParseIdList instead).
// random:F:SEED is DrawRandomSubset(N, round(F * N), SEED).
Roaring ResolveSubset(const SubsetSpec& subset, const Catalog& catalog);

// k of the ids 0..n-1, uniformly at random and the same for the same seed,
// in time and memory that grow with min(k, n - k), not with n.
Roaring DrawRandomSubset(uint32_t n, uint64_t k, uint64_t seed);

// random:F:SEED as daemons drew it before DrawRandomSubset (the first
// round(F * N) ids of a seeded shuffle of all N, O(N)): only for a job such
// a daemon stored, whose record holds no ids (store/job_store.h), so that
// its subset, and with it the epoch under way, stays what it was.
Roaring ShuffledPrefixSubset(const SubsetSpec& subset, const Catalog& catalog);

// Parses the `ids` file: one sample id or relative path per line (blank
// lines ignored). Fails naming the first bad line as `<file>: line N`, the
// first line of `text` being line `first_line` of that file.
Status ParseIdList(std::string_view text, const Catalog& catalog, Roaring* out,
                   size_t first_line = 1, std::string_view file = "ids");

// The default `seed` of job `name` on a mount whose sampler seed is
// `mount_seed`.
uint64_t JobSeed(uint64_t mount_seed, std::string_view name);

// True for 1-64 characters of [A-Za-z0-9._-], not "." or "..".
bool IsValidJobName(std::string_view name);

}  // namespace joaderfs

#endif  // JOADERFS_SPEC_SPEC_H_
