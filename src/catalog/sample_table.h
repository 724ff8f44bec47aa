// The samples of a catalog that are whole files (an ImageFolder tree, a
// manifest, an s3:// listing), packed: a sample costs its file name's bytes
// plus 33 bytes (a 4-byte offset into one arena of names, a 24-byte
// identity and its state byte, a 4-byte slot of the relpath lookup at most
// 70% full) and no heap block of its own. A relpath is split at its last
// '/': the folder part (with that '/') is kept once per folder, and runs of
// consecutive samples sharing a folder and a label are kept once per run,
// so an ImageFolder tree adds 12 bytes per run (a few per class), a
// manifest at most 12 per sample.
//
// Built by one thread (Add in id order, then Finish). After Finish() the
// one change is a sample's identity, set once (Settle) where it was not
// known: that and every read are safe concurrently. An identity is read
// only once identity_known() says it is set (acquire/release on a state
// byte per sample).

#ifndef JOADERFS_CATALOG_SAMPLE_TABLE_H_
#define JOADERFS_CATALOG_SAMPLE_TABLE_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/file_range.h"
#include "common/id_hash_table.h"
#include "common/types.h"

namespace joaderfs {

class SampleTable {
 public:
  using Identity = FileStamp;

  // Appends the sample `folder` + `name` (`folder` empty or ending in '/')
  // as the next id. False, adding nothing, past 4 GiB of names or 2^32 - 1
  // samples.
  bool Add(std::string_view folder, std::string_view name, int32_t label);
  // Building: `id`'s identity is known, and is `identity`.
  void set_identity(SampleId id, const Identity& identity) {
    identities_[id] = identity;
    state_[id] = kKnown;
  }
  // Sets the identity of `id` where none is known yet, and says whether
  // this call set it. Safe concurrently with every other call.
  bool Settle(SampleId id, const Identity& identity) const;
  // Whether `id`'s identity is known; if not (no stat has been taken of
  // its file yet) identity() and fingerprint() must not be asked.
  bool identity_known(SampleId id) const {
    return std::atomic_ref(state_[id]).load(std::memory_order_acquire) == kKnown;
  }

  // A table of the samples for which `keep(id)` holds, in id order.
  template <typename Keep>
  SampleTable Filtered(Keep keep) const;
  // Builds the relpath lookup and releases what only building needed.
  void Finish();

  size_t size() const { return identities_.size(); }
  // The folder part (empty or ending in '/') and the name of `id`'s relpath.
  std::string_view folder(SampleId id) const { return FolderAt(RunOf(id).folder); }
  std::string_view name(SampleId id) const {
    return std::string_view(names_).substr(name_at_[id], NameEnd(id) - name_at_[id]);
  }
  std::string relpath(SampleId id) const;
  int32_t label(SampleId id) const { return RunOf(id).label; }
  // Only once identity_known(id).
  const Identity& identity(SampleId id) const { return identities_[id]; }
  // The digest Catalog::fingerprint() documents: FNV-1a of the relpath, its
  // NUL, then label, size, mtime seconds, mtime nanoseconds and inode (all 0
  // while not identity_known(id)).
  uint64_t fingerprint(SampleId id) const;
  // The first id with this relpath (after Finish()).
  std::optional<SampleId> Find(std::string_view relpath) const;
  // Bytes held, for Catalog::index_bytes().
  size_t bytes() const;

  // Consecutive samples from `first` on with one folder and one label.
  struct Run {
    SampleId first;
    uint32_t folder;
    int32_t label;
  };
  // The table less its identities and lookup: what a snapshot keeps
  // (snapshot.h).
  struct Parts {
    std::string names;
    std::vector<uint32_t> name_at;
    std::string folders;
    std::vector<uint32_t> folder_at;
    std::vector<Run> runs;
  };
  struct PartsRef {
    const std::string& names;
    const std::vector<uint32_t>& name_at;
    const std::string& folders;
    const std::vector<uint32_t>& folder_at;
    const std::vector<Run>& runs;
  };
  PartsRef parts() const { return {names_, name_at_, folders_, folder_at_, runs_}; }
  // A table of `parts` with zero identities, not finished; false when they
  // do not make one (an offset out of order or out of bounds, a run out of
  // order or naming no folder).
  static bool FromParts(Parts parts, SampleTable* out);
  // Appends the samples [from, from + count) of `other` with label `label`.
  bool AppendFrom(const SampleTable& other, SampleId from, size_t count, int32_t label);

  // Folders (each its relpath part with the trailing '/') in first-use
  // order, and each sample's folder index.
  size_t folder_count() const { return folder_at_.size(); }
  std::string_view FolderAt(uint32_t folder) const {
    const uint32_t end = folder + 1 < folder_at_.size() ? folder_at_[folder + 1]
                                                        : static_cast<uint32_t>(folders_.size());
    return std::string_view(folders_).substr(folder_at_[folder], end - folder_at_[folder]);
  }
  uint32_t folder_index(SampleId id) const { return RunOf(id).folder; }
  // The first id of each stretch of consecutive samples in one folder,
  // stretches cut at `at_most` samples.
  std::vector<size_t> FolderBatches(size_t at_most) const;

 private:
  uint32_t NameEnd(SampleId id) const {
    return id + 1 < name_at_.size() ? name_at_[id + 1] : static_cast<uint32_t>(names_.size());
  }
  const Run& RunOf(SampleId id) const;
  uint32_t FolderIndex(std::string_view folder);
  bool AddIn(uint32_t folder, std::string_view name, int32_t label, const Identity& identity,
             uint8_t state);
  bool Equals(SampleId id, std::string_view relpath) const;

  // A sample's identity: not known, being set (Settle), known.
  enum State : uint8_t { kUnknown, kSetting, kKnown };

  std::string names_;              // every name, in id order
  std::vector<uint32_t> name_at_;  // where each id's name starts in names_
  // Set once each after Finish(), through atomic_ref on state_.
  mutable std::vector<Identity> identities_;
  mutable std::vector<uint8_t> state_;
  std::vector<Run> runs_;
  std::string folders_;  // every folder part, in first-use order
  std::vector<uint32_t> folder_at_;
  IdHashTable by_relpath_;  // on the relpath's FNV-1a
  // Building only: folder part -> index.
  std::unordered_map<std::string, uint32_t> folder_index_;
};

template <typename Keep>
SampleTable SampleTable::Filtered(Keep keep) const {
  SampleTable out;
  out.folders_ = folders_;
  out.folder_at_ = folder_at_;
  out.names_.reserve(names_.size());
  for (SampleId id = 0; id < size(); ++id) {
    if (keep(id)) out.AddIn(RunOf(id).folder, name(id), label(id), identities_[id], state_[id]);
  }
  return out;
}

}  // namespace joaderfs

#endif  // JOADERFS_CATALOG_SAMPLE_TABLE_H_
