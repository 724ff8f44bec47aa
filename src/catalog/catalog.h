// The catalog: every sample of SOURCE with its id, label and path.
//
// SOURCE is an ImageFolder tree (SOURCE/<class>/.../<image>; classes sorted
// by name get labels 0..C-1; ids 0..N-1 follow the relative paths sorted
// component by component, which is torchvision's ImageFolder order), a
// manifest file (`relpath<TAB>label` lines, paths relative to the manifest's
// folder, ids in file order), or a folder of WebDataset shards: a folder with
// `*.tar` files at its top and no class folder holding an image. Shards are
// taken in name order, samples in member order (catalog/tar_index.h); a
// sample's relpath is `<shard>.tar/<image member>`, and its image is read in
// place at the offset the scan found.
//
// Only regular files (symlinks followed: datasets link class folders to
// other disks) become samples, so that no decode opens a FIFO or a device;
// manifest paths that could leave the manifest's folder are rejected. Both
// are counted and logged once, at Open(). Ids follow the samples kept.
//
// No relpath holds a control character (a byte below 0x20, or 0x7f): a
// name with one (a folder, file, key, tar member or manifest path) is left
// out as a hidden name is, counted in scan_skips().unprintable, so that no
// name can forge a line of /dataset/manifest or of a log.
//
// The folder walk cannot be trapped: symlinks to folders are followed, but
// no folder (by device and inode) is entered twice, so a link to a parent,
// a loop of links or a second link to a class folder adds nothing and the
// walk ends after each distinct folder was listed once. No entry it cannot
// use (a looping or broken link, an unreadable folder) stops it: each is
// skipped, counted in scan_skips() and logged once per cause at Open().
//
// SOURCE may also be `s3://BUCKET[/PREFIX]` (catalog/s3_client.h), with the
// same three layouts: keys PREFIX/<class>/.../<image>, PREFIX naming a
// manifest object (its paths relative to the manifest's "folder"), or
// PREFIX/*.tar shards (scanned with ranged GETs). Keys are listed once, at
// Open(); an object's identity is its size and ETag (catalog/source_store.h).
// Keys with a component starting with '.' are left out, as hidden files are;
// keys the listing should not have held (outside PREFIX/, repeated, out of
// order) are left out and counted in scan_skips().stray_keys.
//
// A tree's files are not stat'ed by the listing (readdir's d_type tells a
// plain file): their identities (size, modification time, inode) are taken
// by a pass of stats after it (StartIdentityPass), waited for by Open() in
// a tree of at most CatalogOptions::identities_at_mount files and run in
// the background beyond, so that a large tree mounts in the time its
// folders take to list. Until the pass, or a read of the file
// (Confirm()), has taken a sample's identity, identity_known() is false:
// its decode is not checked against a scan's identity, and no tier keyed
// by the identity (disk, remote) serves or keeps it before the decode has
// taken it. Manifests' files are stat'ed at Open(); shards and objects
// have theirs from the scan.
//
// Immutable after Open() but for identities, each set once; safe for
// concurrent access.

#ifndef JOADERFS_CATALOG_CATALOG_H_
#define JOADERFS_CATALOG_CATALOG_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <sys/stat.h>
#include <sys/types.h>

#include <roaring/roaring.hh>

#include "catalog/sample_table.h"
#include "catalog/snapshot.h"
#include "catalog/source_store.h"
#include "catalog/tar_index.h"
#include "common/file_range.h"
#include "common/id_hash_table.h"
#include "common/status.h"
#include "common/types.h"

namespace joaderfs {

// What the scan left out, by cause, beside special_files().
struct ScanSkips {
  uint64_t link_loops = 0;    // symlinks that loop (ELOOP), not named as images
  uint64_t broken_links = 0;  // symlinks to nothing, not named as images
  uint64_t revisits = 0;      // folders reached a second time (loops, second links)
  uint64_t unreadable = 0;    // entries that could not be examined, folders not listed
  uint64_t unprintable = 0;   // names holding a control character, any layout
  uint64_t stray_keys = 0;    // s3://: listed keys outside PREFIX/, repeated or out of order
  uint64_t stuck = 0;         // files and shards whose stat or read did not return in read_timeout

  uint64_t total() const {
    return link_loops + broken_links + revisits + unreadable + unprintable + stray_keys + stuck;
  }
};

class S3Client;
struct S3Object;
struct Manifest;

struct CatalogOptions {
  // Shards: the label is the integer in member `<key>.<label_key>`, else the
  // integer field `label_key` of `<key>.json`, else -1.
  std::string label_key = "cls";
  // s3:// SOURCEs (catalog/s3_client.h S3Options, S3CredentialSource).
  std::string s3_endpoint;
  std::string s3_region;
  std::string s3_credentials;
  std::string s3_profile;
  // s3://: the bound on one read of an image, its retries included. A
  // local SOURCE's scan: how long a stat or a read may go without an answer
  // before its file or shard is left out.
  std::chrono::milliseconds read_timeout{30'000};
  // Where an ImageFolder SOURCE's scan is kept for the next mount
  // (catalog/snapshot.h): <cache_dir>/<FNV-1a of SOURCE>-catalog1. Empty:
  // nowhere. The caller holds cache_dir's lock.
  std::string cache_dir;
  // An ImageFolder tree of at most this many files has every identity
  // taken before Open() returns (64Ki stats: tens of milliseconds); a
  // larger one, the identities of 4096 files spread over it (what
  // mean_image_bytes() reads), the rest in the background.
  uint64_t identities_at_mount = 65536;
};

// What the shard scan left out or could not label (tar_index.h ShardCounts),
// logged once per cause at Open().
struct ShardSkips {
  uint64_t damaged = 0;            // bad headers; samples of cut-short shards
  uint64_t no_image = 0;           // keys with no image member
  uint64_t unlabeled = 0;          // kept, with label -1
  uint64_t too_large = 0;          // images over 4 GiB or past 2 TiB into a shard
  uint64_t unreadable_shards = 0;  // shards that could not be opened or read
};

class Catalog {
 public:
  ~Catalog();  // stops the identity pass, abandoning stats that hang

  // Scans SOURCE. Fails with NotFound when it does not exist, and with
  // InvalidArgument when it holds no image or a manifest line is malformed.
  static Status Open(const std::string& source, const CatalogOptions& options,
                     std::unique_ptr<Catalog>* out);
  static Status Open(const std::string& source, std::unique_ptr<Catalog>* out) {
    return Open(source, CatalogOptions(), out);
  }

  const std::string& source() const { return source_; }
  // Where the bytes of location() are read from: local files or the bucket.
  const std::shared_ptr<const SourceStore>& store() const { return store_; }
  bool is_object_store() const { return store_ != LocalSourceStore(); }
  size_t size() const { return shards_.empty() ? samples_.size() : members_.size(); }
  // Whether SOURCE is a folder of WebDataset shards.
  bool is_tar() const { return !shards_.empty(); }
  const ShardSkips& shard_skips() const { return shard_skips_; }
  // Bytes the per-sample index holds (names, identities, labels, the
  // relpath lookup tables), for the benchmarks.
  size_t index_bytes() const;
  // Image names that were not regular files at the scan (FIFOs, devices,
  // sockets, folders, broken or looping symlinks): left out.
  uint64_t special_files() const { return special_files_; }
  // Everything else the folder walk could not use (ScanSkips).
  ScanSkips scan_skips() const {
    ScanSkips s = scan_skips_;
    s.stuck += identity_stuck_.load();
    return s;
  }
  // Manifest paths that could leave its folder (manifest.h): left out.
  uint64_t rejected_paths() const { return rejected_paths_; }
  uint32_t num_classes() const { return num_classes_; }
  // Folders the scan listed, SOURCE's top included: with a snapshot, only
  // those of the classes that changed.
  uint64_t folders_listed() const { return folders_listed_; }

  // Built on each call for tar samples (`<shard>/<member>`).
  std::string relpath(SampleId id) const;
  int64_t label(SampleId id) const {
    return shards_.empty() ? samples_.label(id) : members_[id].label;
  }
  // The file to read for `id` (for a tar sample, its shard).
  std::string path(SampleId id) const;
  // Where the image of `id` lies, its file or its bytes inside a shard,
  // with that file's identity at the scan: a decode of it reads only bytes
  // of that identity, the one fingerprint() names.
  FileRange location(SampleId id) const;

  // Ids whose label lies in one of the inclusive `ranges`, in one pass over
  // the samples however many ranges a spec names (they are merged first).
  Roaring IdsWithLabels(std::vector<std::pair<uint64_t, uint64_t>> ranges) const;
  // Ids whose label lies in [first, last].
  Roaring IdsWithLabels(int64_t first, int64_t last) const;
  // A hash lookup: for tar samples, a binary search of the shard, then the
  // member's name in by_member_ (an `ids` file of relpaths is read in time
  // linear in its lines, not lines times shard size).
  std::optional<SampleId> FindRelpath(std::string_view relpath) const;

  // A digest of the sample's relative path, label, file size, modification
  // time and inode: it changes when that file is replaced or modified.
  // For a tar sample: its relpath, label, offset, length and the shard's
  // size, modification time and inode. Names nothing until
  // identity_known(id) (it is that of a missing file).
  uint64_t fingerprint(SampleId id) const;
  // Whether `id`'s file identity has been taken (always, but for a tree's
  // file not yet stat'ed): before, location() is not `checked`, and no
  // tier may look the sample up or keep it by its fingerprint.
  bool identity_known(SampleId id) const { return !shards_.empty() || samples_.identity_known(id); }
  // Whether bytes read from `id`'s file with identity `seen` (the open
  // descriptor's) are the sample's as the catalog names it: where no
  // identity was taken yet, `seen` becomes it, once (a later read of a
  // rewritten file then compares with it). False for a shard member or an
  // object, whose identities come from the scan. Thread-safe.
  bool Confirm(SampleId id, const FileStamp& seen) const;
  // Files whose identity the pass has yet to take (0 once it ended).
  uint64_t identities_pending() const { return identities_pending_.load(); }
  // Waits until the identity pass has ended (tests, benchmarks, and the
  // disk tier before it sorts its entries by fingerprint).
  void WaitForIdentities() const;
  bool identities_settled() const { return identities_settled_.load(); }
  // CatalogOptions::read_timeout: what one stat of the pass may take.
  std::chrono::milliseconds read_timeout() const { return scan_timeout_; }
  // The mean encoded size of the images, over at most 4096 samples spread
  // evenly whose identity is known (a shard member's length), 0 when none is.
  uint64_t mean_image_bytes() const;

  // A digest of every sample's fingerprint: it changes when any file is
  // added, removed, resized or modified. O(N), computed on each call once
  // the identity pass has ended.
  uint64_t identity() const;

 private:
  // One sample of a shard: 24 bytes plus its member name in names_.
  struct Member {
    uint32_t name_at;  // in names_
    uint32_t name_size;
    uint32_t shard;
    uint32_t block;  // the image's offset / 512 (tar data is block-aligned)
    uint32_t length;
    int32_t label;
  };
  struct Shard {
    std::string name;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    uint64_t inode = 0;
    SampleId first = 0;  // its first sample; its samples run to the next shard's first
  };

  Catalog() = default;
  // Lists an s3:// SOURCE and builds samples_ (or shards) from its keys
  // (s3_source.cc; without S3 support in the build, s3_source_off.cc's
  // refuses it).
  Status OpenS3(const std::string& source, const CatalogOptions& options);
  // `size`: the manifest object's, as a HEAD gave it.
  Status ReadS3Manifest(const S3Client& client, const std::string& bucket, const std::string& key,
                        uint64_t size);
  // Indexes the shards of an S3 SOURCE: `objects` are their keys, sizes and ETags.
  Status ScanS3Shards(const S3Client& client, std::vector<S3Object> objects,
                      const std::string& label_key);
  // Indexes the shards named (relative to root_) in name order.
  Status ScanShards(std::vector<std::string> names, const std::string& label_key);
  // Appends the members `scan` finds in `shard` (its sample ids follow the
  // last shard's); a shard whose scan fails adds nothing and is counted.
  void AddShard(Shard shard,
                const std::function<Status(uint64_t size, const ShardSampleFn& emit)>& scan,
                ShardCounts* counts, int64_t* max_label);
  // The skips and classes once every shard was added.
  void FinishShards(const ShardCounts& counts, int64_t max_label);
  // by_member_.
  void IndexShards();
  // The key by_member_ finds a member by: its shard and name.
  static uint64_t MemberHash(uint32_t shard, std::string_view member);
  std::string_view MemberName(const Member& m) const;
  // Also lists the `*.tar` files at SOURCE's top into `shards`. Classes
  // whose folders are as `snapshot` (may be null) recorded are taken from
  // it unlisted.
  Status ScanImageFolder(std::vector<std::string>* shards, const CatalogSnapshot* snapshot);
  // Adds the image files under the class folder `cls` (relative to root_;
  // `st` its stat) in path order with label `label`, entering no folder
  // already in `visited`, and records the walk in class_scans_[label].
  void WalkClass(const std::string& cls, int32_t label, const struct stat& st,
                 std::set<std::pair<dev_t, ino_t>>* visited);
  // Takes the class `c` of `snapshot` as label `label` when each of its
  // folders is as recorded; false, adding nothing, when not.
  bool ReuseClass(const CatalogSnapshot& snapshot, const ClassScan& c, int32_t label,
                  std::set<std::pair<dev_t, ino_t>>* visited);
  // Writes the snapshot of this scan to `path` (one warning if it cannot).
  void WriteSnapshot(const std::string& path);
  // Appends `relpath` (split at its last '/') as the next sample; one that
  // does not fit (past 4 GiB of names) is counted as unreadable.
  void AddSample(std::string_view relpath, int64_t label);
  Status ReadManifest();
  // Drops the samples that are not regular files, then indexes the rest.
  // For an object store, the samples carry their sizes and ETag digests
  // from the listing and nothing is looked at.
  void Index();
  // What a stat says of each local sample, under the scan's deadline; it
  // sets the identities of those found.
  enum EntryStat : uint8_t { kMissing, kRegular, kSpecial, kStuck };
  // `ids`: the samples to stat, all when empty; `kinds` (may be null) gets
  // each one's EntryStat by position; identities are Settle()d. Returns the
  // positions given up at the deadline. Stops early once `*cancel`.
  std::vector<size_t> StatLocalFiles(const std::vector<SampleId>& ids, std::vector<uint8_t>* kinds,
                                     const std::atomic<bool>* cancel);
  // Every SpreadStep(size())-th id: at most 4096 samples spread evenly.
  static size_t SpreadStep(size_t n) { return std::max<size_t>(1, (n + 4095) / 4096); }
  // The pass over a tree's files (above), after Open()'s scan.
  void StartIdentityPass(uint64_t at_mount);
  // Notes `given_up` files of the identity pass kept (the first named).
  void NoteIdentityStuck(size_t given_up, const std::string& first);
  // Counts and logs `count` entries given up at the deadline.
  void NoteStuck(uint64_t count, const std::string& first);
  // One warning per cause of what the scan left out.
  void LogSkips() const;
  // Whether `name` (a relpath or a part of one) holds a control character:
  // if so it is counted, and the first such kept for the warning.
  bool Unprintable(std::string_view name);
  // Counts the manifest's paths left out for a control character.
  void NoteManifestUnprintable(const Manifest& manifest);

  std::string source_;  // as given, made absolute (an s3:// URL as given)
  std::shared_ptr<const SourceStore> store_ = LocalSourceStore();
  std::string root_;     // the folder relative paths start from
  SampleTable samples_;  // for every layout but shards
  uint32_t num_classes_ = 0;
  uint64_t special_files_ = 0;
  uint64_t flat_images_ = 0;  // image files directly in an ImageFolder SOURCE (ignored)
  ScanSkips scan_skips_;
  std::chrono::milliseconds scan_timeout_{30'000};
  uint64_t folders_listed_ = 0;
  int64_t scan_started_ns_ = 0;  // the wall clock's, for the snapshot's racy folders
  // The walk of each class, by label (ImageFolder trees), until Open()
  // has written the snapshot; none is written when the one read held
  // (snapshot_current_).
  std::vector<ClassScan> class_scans_;
  bool snapshot_current_ = false;
  // The identity pass (trees): its thread, asked to stop by the destructor.
  std::thread identity_pass_;
  std::atomic<bool> stop_identity_pass_{false};
  std::atomic<uint64_t> identities_pending_{0};
  std::atomic<bool> identities_settled_{true};
  std::atomic<uint64_t> identity_stuck_{0};  // files the pass gave up, kept
  std::string first_unprintable_;            // Printable(), for the warning
  uint64_t rejected_paths_ = 0;
  // Shards (empty for other sources).
  std::vector<Shard> shards_;
  std::vector<Member> members_;
  std::string names_;
  // On (shard, member name): 4-12 bytes a sample, beside the 24 of Member.
  IdHashTable by_member_;
  ShardSkips shard_skips_;
};

}  // namespace joaderfs

#endif  // JOADERFS_CATALOG_CATALOG_H_
