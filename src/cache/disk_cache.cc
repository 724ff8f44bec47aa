#include "cache/disk_cache.h"

#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/hash.h"
#include "common/rate_limited_log.h"
#include "common/rocksdb_support.h"

namespace joaderfs {
namespace {

namespace fs = std::filesystem;

// Bump when the key, index or slot layout changes: old tiers are then left
// alone in their own folder.
// v3: entries are base images (loader/decoder.h DecodeBase), from which
// each job cuts its own output size.
constexpr char kFormat[] = "v3";
constexpr char kSlotFilePrefix[] = "slots-";
constexpr uint32_t kSlotMagic = 0x3253444a;  // "JDS2"
// Slot header: magic, height, width, channels, key hash (8), crc, reserved.
constexpr size_t kSlotHeader = 32;
constexpr size_t kIndexValue = 32;   // id, slot bytes, slot, bytes, crc
constexpr int kEvictionSamples = 8;  // candidates compared per eviction
// Samples waiting to be written: beyond the RAM budget when the RAM tier
// has let them go (docs/cache.md "The margin over ram_cache").
constexpr uint64_t kMaxQueuedBytes = 64ULL << 20;
// Index entries a rebuild step reads: a few ms, so that writes wait little.
constexpr int kRebuildStep = 4096;
constexpr uint64_t kSlotUnit = 64;  // SlotBytes are multiples of it

std::atomic<bool> rebuild_held{false};

uint64_t KeyHash(const std::string& key) { return Fnv1a(kFnv1aBasis, key.data(), key.size()); }

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  return Status::IOError(what + ": " + s.ToString());
}

}  // namespace

// Base images vary in size with each image's aspect and IDCT scale: slots
// in steps of 1/8 of a power of two waste at most 12% and keep the number
// of slot files small.
uint64_t DiskCache::SlotBytes(uint64_t bytes) {
  const uint64_t need = kSlotHeader + bytes;
  uint64_t step = 64;
  while (step * 16 < need) step *= 2;
  return (need + step - 1) / step * step;
}

Status DiskCache::Purge(const std::string& dir, const std::string& source, uint64_t* bytes) {
  // SourceFolder(dir, source, kind) is "<dir>/<hash>-<kind>": each format's
  // tier is "<hash>-v<N>"; the job store ("<hash>-jobs<N>") stays.
  const std::string prefix = fs::path(SourceFolder(dir, source, "v")).filename().string();
  *bytes = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (!e.path().filename().string().starts_with(prefix)) continue;
    for (const fs::directory_entry& f : fs::recursive_directory_iterator(e.path(), ec)) {
      if (f.is_regular_file(ec)) *bytes += f.file_size(ec);
    }
    fs::remove_all(e.path(), ec);
    if (ec) return Status::IOError("cannot remove " + e.path().string() + ": " + ec.message());
  }
  if (ec) return Status::IOError("cannot read " + dir + ": " + ec.message());
  return Status::Ok();
}

Status DiskCache::Open(const std::string& dir, const Catalog* catalog, const RefCounts* counts,
                       uint32_t base, uint64_t budget_bytes, std::unique_ptr<DiskCache>* out) {
  std::unique_ptr<DiskCache> c(new DiskCache());
  c->catalog_ = catalog;
  c->ref_counts_ = counts;
  c->base_ = base;
  c->path_ = SourceFolder(dir, catalog->source(), kFormat);
  std::error_code ec;
  fs::create_directories(c->path_, ec);
  if (ec) return Status::IOError("cannot create " + c->path_ + ": " + ec.message());

  Status s = c->OpenIndex();
  if (s.code() == Status::Code::kCorruption) {
    c->StartAfresh("is damaged", s);
    s = c->OpenIndex();
  }
  if (s.ok()) s = c->OpenSlotFiles();
  if (!s.ok() && s.code() != Status::Code::kBusy &&
      fs::space(dir, ec).available < kRocksDbWorkingBytes) {
    c->StartAfresh("cannot open in a full cache_dir", s);
    s = c->OpenIndex();
    if (s.ok()) s = c->OpenSlotFiles();
  }
  if (!s.ok()) return s;
  c->entry_at_.assign(catalog->size(), kNone);
  c->stats_.budget = budget_bytes;
  // One walk over every entry: it would only push the reads' blocks out of
  // the block cache.
  rocksdb::ReadOptions walk;
  walk.fill_cache = false;
  c->rebuild_it_.reset(c->db_->NewIterator(walk));
  c->rebuild_it_->SeekToFirst();
  c->writer_ = std::thread([raw = c.get()] { raw->WriteLoop(); });
  *out = std::move(c);
  return Status::Ok();
}

// The tier only holds what can be decoded again: rather than serve from (or
// give up on) a damaged index, or fail to reopen in a cache_dir that it
// filled, it drops everything and starts empty.
void DiskCache::StartAfresh(const char* why, const Status& s) {
  spdlog::warn("disk cache {} {} ({}); starting it afresh", path_, why, s.message());
  index_writes_.reset();
  db_.reset();
  for (auto& [slot_bytes, file] : files_) {
    if (file.fd >= 0) close(file.fd);
  }
  files_.clear();
  stats_ = {};
  std::error_code ec;
  fs::remove_all(path_, ec);
  fs::create_directories(path_, ec);
}

// Opens the RocksDB index at path_; Corruption when its files are damaged.
// What RAM holds of it is rebuilt later (RebuildStep).
Status DiskCache::OpenIndex() {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.max_background_jobs = 1;
  PrepareRocksDb(path_ + "/index", &options);  // no LOG file to fail on a full disk
  // RocksDB 7.8's VerifyChecksum opens each table with no unique ID, which
  // this check then logs as a warning at every open; the checksums below,
  // and each slot's header and CRC, are what keep a misplaced file out.
  options.verify_sst_unique_id_in_manifest = false;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path_ + "/index", &db);
  if (!s.ok()) {
    if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
      return Status::Busy("disk cache " + path_ + " is in use by another joaderfs");
    }
    if (s.IsCorruption()) return Status::Corruption(s.ToString());
    return FromRocks(s, "cannot open disk cache " + path_);
  }
  // Damage inside a table file shows only when it is read: checked here,
  // as the tier cannot start afresh once it serves (one pass over the
  // files, no block cached: 0.1 s for a tier of 1.28M entries).
  rocksdb::ReadOptions check;
  check.fill_cache = false;
  s = db->VerifyChecksum(check);
  if (!s.ok()) {
    delete db;
    if (s.IsCorruption()) return Status::Corruption(s.ToString());
    return FromRocks(s, "cannot read disk cache " + path_);
  }
  db_.reset(db);
  index_writes_ = std::make_unique<RocksDbWrites>(db);
  return Status::Ok();
}

// Opens every slot file left in the folder. Until the rebuild knows which
// slots are free, every slot the file holds counts as used: the last one
// may be unpadded, hence the rounding up.
Status DiskCache::OpenSlotFiles() {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(path_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kSlotFilePrefix, 0) != 0) continue;
    const uint64_t slot_bytes =
        std::strtoull(name.c_str() + sizeof(kSlotFilePrefix) - 1, nullptr, 10);
    if (slot_bytes == 0 || slot_bytes % kSlotUnit != 0) continue;
    SlotFile* file = File(slot_bytes);
    struct stat st {};
    if (file && fstat(file->fd, &st) == 0) {
      file->high_water = (static_cast<uint64_t>(st.st_size) + slot_bytes - 1) / slot_bytes;
      file->used.assign((file->high_water + 63) / 64, 0);
    }
  }
  return Status::Ok();
}

DiskCache::~DiskCache() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (writer_.joinable()) writer_.join();
  rebuild_it_.reset();
  for (auto& [slot_bytes, file] : files_) {
    if (file.fd >= 0) close(file.fd);
  }
  // A memtable flushed now is one the next open need not replay from the
  // WAL (time, and up to 4 MiB of RAM); after a failed write, RocksDB is
  // left alone (common/rocksdb_support.h).
  if (db_ && !index_writes_->failed()) db_->Flush(rocksdb::FlushOptions());
  if (db_) db_->Close();
}

// The base, then what identifies the source file's content, then its path
// (so that two files can never share a key).
std::string DiskCache::Key(SampleId id) const {
  std::string key;
  PutFixed<uint32_t>(&key, base_);
  PutFixed<uint64_t>(&key, catalog_->fingerprint(id));
  key += catalog_->relpath(id);
  return key;
}

DiskCache::SlotFile* DiskCache::File(uint64_t slot_bytes) {
  auto [it, inserted] = files_.try_emplace(slot_bytes);
  if (inserted) {
    const std::string name = path_ + "/" + kSlotFilePrefix + std::to_string(slot_bytes);
    it->second.fd = open(name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (it->second.fd < 0) {
      spdlog::warn("disk cache: cannot open {}: {}", name, std::strerror(errno));
    }
  }
  return it->second.fd >= 0 ? &it->second : nullptr;
}

// Until the rebuild is done, only past every slot the files held at open:
// an entry not yet rebuilt may name any of those.
uint64_t DiskCache::AllocateSlot(uint64_t slot_bytes) {
  SlotFile* file = File(slot_bytes);
  if (rebuilt_) {
    for (uint64_t w = file->first_maybe_free / 64; w < file->used.size(); ++w) {
      if (file->used[w] == ~0ULL) continue;
      const uint64_t slot = w * 64 + std::countr_one(file->used[w]);
      if (slot >= file->high_water) break;
      file->used[w] |= 1ULL << (slot % 64);
      file->first_maybe_free = slot + 1;
      return slot;
    }
    file->first_maybe_free = UINT64_MAX;  // every slot below high_water used
  }
  const uint64_t slot = file->high_water++;
  MarkUsed(slot_bytes, slot);
  return slot;
}

bool DiskCache::MarkUsed(uint64_t slot_bytes, uint64_t slot) {
  SlotFile* file = File(slot_bytes);
  if (slot >= file->high_water) file->high_water = slot + 1;
  if (file->used.size() * 64 < file->high_water) {
    file->used.resize(std::max<size_t>((file->high_water + 63) / 64, file->used.size() * 2));
  }
  uint64_t& word = file->used[slot / 64];
  const uint64_t bit = 1ULL << (slot % 64);
  const bool was_free = !(word & bit);
  word |= bit;
  return was_free;
}

void DiskCache::FreeSlot(uint64_t slot_bytes, uint64_t slot) {
  auto it = files_.find(slot_bytes);
  if (it == files_.end() || slot >= it->second.high_water) return;
  it->second.used[slot / 64] &= ~(1ULL << (slot % 64));
  it->second.first_maybe_free = std::min(it->second.first_maybe_free, slot);
}

Status DiskCache::Get(SampleId id, DecodedSample* out) {
  // No key names a file whose identity was not taken yet.
  std::string key, value;
  rocksdb::Status found = rocksdb::Status::NotFound();
  if (catalog_->identity_known(id)) {
    key = Key(id);
    found = db_->Get(rocksdb::ReadOptions(), key, &value);
  }
  if (!found.ok() || value.size() != kIndexValue) {
    // A damaged index block reads as a miss: the sample is decoded again.
    if (!found.ok() && !found.IsNotFound()) {
      Warnings().Warn("disk cache index read", "disk cache index read failed: {}",
                      found.ToString());
    }
    MutexLock lock(mu_);
    ++stats_.misses;
    return Status::NotFound("not on disk");
  }
  const char* v = value.data();
  const Location where{DecodeFixed<uint64_t>(v + 4), DecodeFixed<uint64_t>(v + 12),
                       DecodeFixed<uint64_t>(v + 20), DecodeFixed<uint32_t>(v + 28)};
  int fd = -1;
  {
    MutexLock lock(mu_);
    auto it = files_.find(where.slot_bytes);
    if (it != files_.end()) fd = it->second.fd;
  }
  // Read into a buffer the sample then owns: no further copy.
  const uint64_t length = kSlotHeader + where.bytes;
  bool good = fd >= 0 && where.bytes < (1ULL << 40);
  std::shared_ptr<uint8_t> buffer;
  if (good) {
    buffer.reset(new uint8_t[length], std::default_delete<uint8_t[]>());
    const ssize_t n =
        pread(fd, buffer.get(), length, static_cast<off_t>(where.slot * where.slot_bytes));
    const uint8_t* h = buffer.get();
    good = n == static_cast<ssize_t>(length) && DecodeFixed<uint32_t>(h) == kSlotMagic &&
           DecodeFixed<uint64_t>(h + 16) == KeyHash(key) &&
           DecodeFixed<uint32_t>(h + 24) == where.crc;
    if (good) {
      out->height = DecodeFixed<uint32_t>(h + 4);
      out->width = DecodeFixed<uint32_t>(h + 8);
      out->channels = DecodeFixed<uint32_t>(h + 12);
      good = out->bytes() == where.bytes && Crc32c(h + kSlotHeader, where.bytes) == where.crc;
    }
  }
  if (good) {
    out->pixels = std::shared_ptr<uint8_t>(buffer, buffer.get() + kSlotHeader);
    MutexLock lock(mu_);
    ++stats_.hits;
    return Status::Ok();
  }
  {
    MutexLock lock(mu_);
    const uint32_t at = entry_at_[id];
    const bool indexed = at < entries_.size() &&
                         uint64_t{entries_[at].slot_units} * kSlotUnit == where.slot_bytes &&
                         entries_[at].slot == where.slot;
    if (indexed) {
      Unindex(at);
    } else if (rebuilt_) {
      // Evicted while it was read, and its slot reused: a plain miss.
      ++stats_.misses;
      return Status::NotFound("not on disk");
    } else {
      // Not rebuilt yet (evictions only take rebuilt entries): the rebuild
      // must not count its slot used.
      dropped_early_.emplace(where.slot_bytes, where.slot);
    }
    ++stats_.corrupt;
  }
  DeleteKeys({key});
  spdlog::warn("disk cache: dropped corrupt entry for sample {} ({})", id, catalog_->relpath(id));
  return Status::Corruption("corrupt disk cache entry");
}

void DiskCache::Unindex(uint32_t at) {
  const Entry e = entries_[at];
  stats_.bytes -= uint64_t{e.slot_units} * kSlotUnit;
  FreeSlot(uint64_t{e.slot_units} * kSlotUnit, e.slot);
  if (at + 1 != entries_.size()) {
    entries_[at] = entries_.back();
    entry_at_[entries_[at].id] = at;
  }
  entries_.pop_back();
  entry_at_[e.id] = kNone;
}

void DiskCache::DeleteKeys(const std::vector<std::string>& keys) {
  if (keys.empty() || !index_writes_) return;
  rocksdb::WriteBatch batch;
  for (const std::string& key : keys) batch.Delete(key);
  const rocksdb::Status s = index_writes_->Write(rocksdb::WriteOptions(), &batch);
  // A lost delete leaves a stale entry, which the slot header check refuses.
  if (!s.ok()) spdlog::warn("disk cache: index delete failed: {}", s.ToString());
}

void DiskCache::PutAsync(SampleId id, SamplePtr sample) {
  {
    MutexLock lock(mu_);
    const uint64_t bytes = sample->bytes();
    if (stopping_ || SlotBytes(bytes) > stats_.budget || entry_at_[id] != kNone ||
        !catalog_->identity_known(id)) {
      return;
    }
    // One sample larger than the whole queue's bytes still goes in alone.
    if (!queue_.empty() && queued_bytes_ + bytes > kMaxQueuedBytes) {
      ++stats_.write_drops;
      return;
    }
    entry_at_[id] = kQueued;
    queued_bytes_ += bytes;
    queue_.push_back({id, std::move(sample)});
  }
  wake_.notify_one();
}

void DiskCache::Flush() {
  MutexLock lock(mu_);
  drained_.wait(lock, [this]() REQUIRES(mu_) { return queue_.empty() && !writing_; });
}

void DiskCache::WaitForRebuild() {
  MutexLock lock(mu_);
  drained_.wait(lock, [this]() REQUIRES(mu_) { return rebuilt_ || stopping_; });
}

void DiskCache::TEST_HoldRebuild(bool hold) { rebuild_held = hold; }

// Picks victims until the budget holds the new bytes: entries nobody needs
// (another base's, a changed file's) first, then of a few random entries
// the one the fewest jobs still need.
void DiskCache::EvictLocked(std::vector<std::string>* victims) {
  while (stats_.bytes > stats_.budget && !stale_.empty()) {
    const StaleEntry e = stale_.back();
    stale_.pop_back();
    const uint64_t begin = stale_.empty() ? 0 : stale_.back().key_end;
    victims->push_back(stale_keys_.substr(begin, e.key_end - begin));
    stale_keys_.resize(begin);
    stats_.bytes -= uint64_t{e.slot_units} * kSlotUnit;
    FreeSlot(uint64_t{e.slot_units} * kSlotUnit, e.slot);
    ++stats_.evictions;
  }
  while (stats_.bytes > stats_.budget && !entries_.empty()) {
    uint32_t victim = 0;
    uint32_t victim_need = UINT32_MAX;
    for (int i = 0; i < kEvictionSamples; ++i) {
      const auto at = static_cast<uint32_t>(rng_.Below(entries_.size()));
      uint32_t need = 0;
      ref_counts_->Counts(std::span(&entries_[at].id, 1), std::span(&need, 1));
      if (need < victim_need) {
        victim = at;
        victim_need = need;
      }
    }
    victims->push_back(Key(entries_[victim].id));
    Unindex(victim);
    ++stats_.evictions;
  }
}

void DiskCache::WriteLoop() {
  bool rebuilding = true;
  const auto started = std::chrono::steady_clock::now();
  for (;;) {
    std::vector<Write> writes;
    bool step = false;
    {
      MutexLock lock(mu_);
      for (;;) {
        // Entries are sorted by the catalog's fingerprints: once every
        // file's identity was taken, or after read_timeout, past which a
        // pass is held by stats that hang (on FUSE, one hung lookup holds
        // its folder's later ones), and the budget must count what the
        // tier holds. An entry of a file not stat'ed by then is taken as
        // nobody's: evicted first, and served once its file's identity
        // matches its key.
        step = rebuilding && !stopping_ && !rebuild_held &&
               (catalog_->identities_settled() ||
                std::chrono::steady_clock::now() - started >= catalog_->read_timeout());
        if (stopping_ || !queue_.empty() || step) break;
        if (rebuilding) {
          // Held by a test, or the catalog's identities not all taken.
          wake_.wait_for(lock, std::chrono::milliseconds(5));
        } else {
          wake_.wait(lock);
        }
      }
      if (queue_.empty() && !step) break;  // stopping, and every write done
      writes.reserve(queue_.size());
      for (Write& w : queue_) writes.push_back(std::move(w));
      queue_.clear();
      queued_bytes_ = 0;
      writing_ = true;
    }
    if (!writes.empty()) WriteAll(&writes);
    if (step && !RebuildStep()) {
      FinishRebuild();
      rebuilding = false;
    }
    MutexLock lock(mu_);
    writing_ = false;
    if (queue_.empty()) drained_.notify_all();
  }
  rebuild_it_.reset();
}

// Every queued write: their slots one pwritev each, then their index
// entries (and the victims' deletes) in one RocksDB batch.
void DiskCache::WriteAll(std::vector<Write>* writes) {
  struct Planned {
    SampleId id;
    const DecodedSample* sample;
    std::string key;
    Location where;
    int fd = -1;
    bool written = false;
  };
  std::vector<Planned> planned;
  planned.reserve(writes->size());
  bool rebuilt = false;
  {
    MutexLock lock(mu_);
    rebuilt = rebuilt_;
  }
  for (const Write& w : *writes) {
    Planned p{w.id, w.sample.get(), Key(w.id), {}};
    // Before the rebuild has been past it, only RocksDB knows whether the
    // sample is stored already.
    std::string value;
    if (!rebuilt && db_->Get(rocksdb::ReadOptions(), p.key, &value).ok()) continue;
    p.where.bytes = p.sample->bytes();
    p.where.slot_bytes = SlotBytes(p.where.bytes);
    p.where.crc = Crc32c(p.sample->pixels.get(), p.where.bytes);
    planned.push_back(std::move(p));
  }
  std::vector<std::string> victims;
  {
    MutexLock lock(mu_);
    for (Planned& p : planned) {
      if (entry_at_[p.id] != kQueued) continue;  // the rebuild found it meanwhile
      if (SlotFile* file = File(p.where.slot_bytes)) {
        p.fd = file->fd;
        stats_.bytes += p.where.slot_bytes;
      }
    }
    // Victims first, so that their slots are taken again at once.
    EvictLocked(&victims);
    // A batch larger than eviction could make room for (a writer that fell
    // behind takes up to 64 MiB at once) is cut to the budget: its last
    // writes are dropped and counted, never written past it.
    for (auto p = planned.rbegin(); p != planned.rend() && stats_.bytes > stats_.budget; ++p) {
      if (p->fd < 0) continue;
      p->fd = -1;
      stats_.bytes -= p->where.slot_bytes;
      ++stats_.write_drops;
    }
    for (Planned& p : planned) {
      if (p.fd >= 0) p.where.slot = AllocateSlot(p.where.slot_bytes);
    }
  }
  rocksdb::WriteBatch batch;
  for (const std::string& v : victims) batch.Delete(v);
  for (Planned& p : planned) {
    if (p.fd < 0) continue;
    const DecodedSample& sample = *p.sample;
    std::array<uint8_t, kSlotHeader> header{};
    EncodeFixed<uint32_t>(&header[0], kSlotMagic);
    EncodeFixed<uint32_t>(&header[4], sample.height);
    EncodeFixed<uint32_t>(&header[8], sample.width);
    EncodeFixed<uint32_t>(&header[12], sample.channels);
    EncodeFixed<uint64_t>(&header[16], KeyHash(p.key));
    EncodeFixed<uint32_t>(&header[24], p.where.crc);
    iovec iov[2] = {{header.data(), kSlotHeader}, {sample.pixels.get(), p.where.bytes}};
    const ssize_t n = pwritev(p.fd, iov, 2, static_cast<off_t>(p.where.slot * p.where.slot_bytes));
    if (n != static_cast<ssize_t>(kSlotHeader + p.where.bytes)) {
      const int error = n < 0 ? errno : 0;
      Warnings().Warn(error == ENOSPC ? "disk cache write: no space" : "disk cache write",
                      "disk cache write failed: {}", error ? std::strerror(error) : "short write");
      continue;
    }
    // The index entries go in after their slots: a crash between the two
    // leaves slots nobody names, which the next rebuild counts as free.
    std::string value;
    PutFixed<uint32_t>(&value, p.id);
    PutFixed<uint64_t>(&value, p.where.slot_bytes);
    PutFixed<uint64_t>(&value, p.where.slot);
    PutFixed<uint64_t>(&value, p.where.bytes);
    PutFixed<uint32_t>(&value, p.where.crc);
    batch.Put(p.key, value);
    p.written = true;
  }
  const rocksdb::Status s = index_writes_->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) {
    Warnings().Warn(s.IsNoSpace() ? "disk cache index write: no space" : "disk cache index write",
                    "disk cache index write failed: {}", s.ToString());
    DeleteKeys(victims);  // they are gone from the index all the same
  }
  MutexLock lock(mu_);
  for (const Write& w : *writes) {
    if (entry_at_[w.id] == kQueued) entry_at_[w.id] = kNone;
  }
  for (const Planned& p : planned) {
    if (p.fd < 0) continue;
    if (s.ok() && p.written) {
      entry_at_[p.id] = static_cast<uint32_t>(entries_.size());
      entries_.push_back({p.id, static_cast<uint32_t>(p.where.slot),
                          static_cast<uint32_t>(p.where.slot_bytes / kSlotUnit)});
      ++stats_.writes;
    } else {
      stats_.bytes -= p.where.slot_bytes;
      FreeSlot(p.where.slot_bytes, p.where.slot);
    }
  }
}

// Reads the next index entries from RocksDB (the writer thread's iterator,
// which sees the index as it was at open: entries written since are in RAM
// already, and evictions only take entries it has been past) and counts
// them in RAM: an entry of the current catalog and base by its id, any other
// by its key, each slot as used. An entry whose slot file cannot be opened
// is dropped.
bool DiskCache::RebuildStep() {
  struct Found {
    std::string key;  // empty for an entry of the current catalog and base
    SampleId id = 0;
    Location where;
  };
  std::vector<Found> found;
  found.reserve(kRebuildStep);
  rocksdb::Iterator* it = rebuild_it_.get();
  for (int n = 0; n < kRebuildStep && it->Valid(); ++n, it->Next()) {
    const rocksdb::Slice key = it->key(), v = it->value();
    if (v.size() != kIndexValue || key.size() < 12) continue;
    Found f;
    f.where = {DecodeFixed<uint64_t>(v.data() + 4), DecodeFixed<uint64_t>(v.data() + 12),
               DecodeFixed<uint64_t>(v.data() + 20), DecodeFixed<uint32_t>(v.data() + 28)};
    if (f.where.slot_bytes == 0 || f.where.slot_bytes % kSlotUnit != 0 ||
        f.where.slot >= UINT32_MAX || f.where.slot_bytes / kSlotUnit >= UINT32_MAX) {
      continue;  // no slot of ours: never read, and its key stays unused
    }
    // Ids shift when files come and go: the value's id is a hint, the
    // relpath (after the base and fingerprint) the truth.
    const std::string_view relpath(key.data() + 12, key.size() - 12);
    std::optional<SampleId> id;
    const SampleId hint = DecodeFixed<uint32_t>(v.data());
    if (hint < catalog_->size() && catalog_->relpath(hint) == relpath) {
      id = hint;
    } else {
      id = catalog_->FindRelpath(relpath);
    }
    if (DecodeFixed<uint32_t>(key.data()) == base_ && id &&
        catalog_->fingerprint(*id) == DecodeFixed<uint64_t>(key.data() + 4)) {
      f.id = *id;
    } else {
      f.key = key.ToString();
    }
    found.push_back(std::move(f));
  }
  const bool more = it->Valid();
  std::vector<std::string> orphans;
  {
    MutexLock lock(mu_);
    for (Found& f : found) {
      const std::pair<uint64_t, uint64_t> slot{f.where.slot_bytes, f.where.slot};
      if (dropped_early_.count(slot)) {
        continue;
      }
      if (!File(f.where.slot_bytes)) {
        orphans.push_back(f.key.empty() ? Key(f.id) : std::move(f.key));
        continue;
      }
      if (!MarkUsed(f.where.slot_bytes, f.where.slot)) shared_slots_.push_back(slot);
      stats_.bytes += f.where.slot_bytes;
      const auto units = static_cast<uint32_t>(f.where.slot_bytes / kSlotUnit);
      const auto at = static_cast<uint32_t>(f.where.slot);
      if (f.key.empty()) {
        // A write queued meanwhile finds it here and is skipped.
        entry_at_[f.id] = static_cast<uint32_t>(entries_.size());
        entries_.push_back({f.id, at, units});
      } else {
        stale_keys_ += f.key;
        stale_.push_back({stale_keys_.size(), at, units});
      }
    }
  }
  DeleteKeys(orphans);
  return more;
}

// The rebuild's end: entries naming one slot are all dropped (a crash lost
// an eviction's delete before the slot was reused: none can be trusted),
// free slots may be reused, and the budget is enforced over every entry.
void DiskCache::FinishRebuild() {
  const rocksdb::Status walked = rebuild_it_->status();
  rebuild_it_.reset();
  std::vector<std::string> dropped;
  uint64_t entries = 0, bytes = 0, budget = 0;
  {
    MutexLock lock(mu_);
    if (!shared_slots_.empty()) {
      const std::set<std::pair<uint64_t, uint64_t>> shared(shared_slots_.begin(),
                                                           shared_slots_.end());
      for (size_t at = entries_.size(); at-- > 0;) {
        const Entry& e = entries_[at];
        if (shared.count({uint64_t{e.slot_units} * kSlotUnit, e.slot})) {
          dropped.push_back(Key(e.id));
          Unindex(static_cast<uint32_t>(at));
        }
      }
      std::string keys;
      std::vector<StaleEntry> kept;
      uint64_t begin = 0;
      for (const StaleEntry& e : stale_) {
        std::string key = stale_keys_.substr(begin, e.key_end - begin);
        begin = e.key_end;
        const uint64_t slot_bytes = uint64_t{e.slot_units} * kSlotUnit;
        if (shared.count({slot_bytes, e.slot})) {
          stats_.bytes -= slot_bytes;
          dropped.push_back(std::move(key));
        } else {
          keys += key;
          kept.push_back({keys.size(), e.slot, e.slot_units});
        }
      }
      stale_keys_ = std::move(keys);
      stale_ = std::move(kept);
      for (const auto& [slot_bytes, slot] : shared) FreeSlot(slot_bytes, slot);
    }
    shared_slots_.clear();
    shared_slots_.shrink_to_fit();
    dropped_early_.clear();
    for (auto& [slot_bytes, file] : files_) file.first_maybe_free = 0;
    rebuilt_ = true;
    EvictLocked(&dropped);
    entries = entries_.size() + stale_.size();
    bytes = stats_.bytes;
    budget = stats_.budget;
  }
  drained_.notify_all();
  DeleteKeys(dropped);
  // A damaged index is read as far as it can be: what it names past the
  // damage is unknown to RAM, and reads refuse a slot written over since.
  if (!walked.ok()) spdlog::warn("disk cache {}: index read stopped: {}", path_, walked.ToString());
  spdlog::info("disk cache {}: {} samples, {} MiB of {} MiB", path_, entries, bytes >> 20,
               budget >> 20);
}

DiskCacheStats DiskCache::Stats() const {
  MutexLock lock(mu_);
  DiskCacheStats stats = stats_;
  stats.entries = entries_.size() + stale_.size();
  return stats;
}

}  // namespace joaderfs
