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
#include <cerrno>
#include <cstring>
#include <filesystem>
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
constexpr size_t kMaxQueuedWrites = 512;

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

  c->fingerprints_.resize(catalog->size());
  for (SampleId id = 0; id < catalog->size(); ++id) c->fingerprints_[id] = catalog->fingerprint(id);
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
  c->stats_.entries = c->index_.size();
  c->stats_.budget = budget_bytes;
  spdlog::info("disk cache {}: {} samples, {} MiB of {} MiB", c->path_, c->stats_.entries,
               c->stats_.bytes >> 20, budget_bytes >> 20);
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
  index_.clear();
  keys_.clear();
  stats_ = {};
  std::error_code ec;
  fs::remove_all(path_, ec);
  fs::create_directories(path_, ec);
}

// Opens the RocksDB index at path_ and rebuilds the in-memory index from it
// (no pixel is read). Corruption when RocksDB finds its files damaged.
Status DiskCache::OpenIndex() {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.max_background_jobs = 1;
  PrepareRocksDb(path_ + "/index", &options);  // no LOG file to fail on a full disk
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path_ + "/index", &db);
  if (!s.ok()) {
    if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
      return Status::Busy("disk cache " + path_ + " is in use by another joaderfs");
    }
    if (s.IsCorruption()) return Status::Corruption(s.ToString());
    return FromRocks(s, "cannot open disk cache " + path_);
  }
  db_.reset(db);
  index_writes_ = std::make_unique<RocksDbWrites>(db);
  // Two entries naming one slot (a crash lost an eviction's delete before
  // the slot was reused) are both dropped: neither can be trusted.
  std::map<std::pair<uint64_t, uint64_t>, std::vector<std::string>> owners;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (it->value().size() != kIndexValue || it->key().size() < 12) continue;
    const char* v = it->value().data();
    Location where{DecodeFixed<uint64_t>(v + 4), DecodeFixed<uint64_t>(v + 12),
                   DecodeFixed<uint64_t>(v + 20), DecodeFixed<uint32_t>(v + 28)};
    const std::string key = it->key().ToString();
    index_[key] = IndexEntry{DecodeFixed<uint32_t>(v), DecodeFixed<uint32_t>(key.data()), where,
                             keys_.size()};
    keys_.push_back(key);
    stats_.bytes += where.slot_bytes;
    owners[{where.slot_bytes, where.slot}].push_back(key);
  }
  if (!it->status().ok()) {
    const std::string reason = it->status().ToString();
    it.reset();
    index_writes_.reset();
    db_.reset();
    return Status::Corruption(reason);
  }
  it.reset();
  std::vector<std::string> shared;
  for (const auto& [slot, keys] : owners) {
    if (keys.size() > 1) shared.insert(shared.end(), keys.begin(), keys.end());
  }
  for (const std::string& key : shared) Unindex(key);
  DeleteKeys(shared);
  return Status::Ok();
}

// Opens every slot file the index uses (and any other left behind), and
// rebuilds their free lists: what the index does not name is free.
Status DiskCache::OpenSlotFiles() {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(path_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kSlotFilePrefix, 0) != 0) continue;
    const uint64_t slot_bytes =
        std::strtoull(name.c_str() + sizeof(kSlotFilePrefix) - 1, nullptr, 10);
    if (slot_bytes > 0) File(slot_bytes);
  }
  std::map<uint64_t, std::set<uint64_t>> used;
  std::vector<std::string> orphans;
  for (const auto& [key, entry] : index_) {
    if (!File(entry.where.slot_bytes)) {
      orphans.push_back(key);
    } else {
      used[entry.where.slot_bytes].insert(entry.where.slot);
    }
  }
  for (const std::string& key : orphans) Unindex(key);
  DeleteKeys(orphans);
  for (auto& [slot_bytes, file] : files_) {
    struct stat st {};
    const uint64_t on_disk =
        fstat(file.fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) / slot_bytes : 0;
    const std::set<uint64_t>& in_use = used[slot_bytes];
    file.high_water = std::max(on_disk, in_use.empty() ? 0 : *in_use.rbegin() + 1);
    file.free.clear();
    for (uint64_t slot = file.high_water; slot-- > 0;) {
      if (!in_use.count(slot)) file.free.push_back(slot);
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
  for (auto& [slot_bytes, file] : files_) {
    if (file.fd >= 0) close(file.fd);
  }
  if (db_) db_->Close();
}

// The base, then what identifies the source file's content, then its path
// (so that two files can never share a key).
std::string DiskCache::Key(SampleId id) const {
  std::string key;
  PutFixed<uint32_t>(&key, base_);
  PutFixed<uint64_t>(&key, fingerprints_[id]);
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

uint64_t DiskCache::AllocateSlot(uint64_t slot_bytes) {
  SlotFile* file = File(slot_bytes);
  if (!file->free.empty()) {
    const uint64_t slot = file->free.back();
    file->free.pop_back();
    return slot;
  }
  return file->high_water++;
}

Status DiskCache::Get(SampleId id, DecodedSample* out) {
  const std::string key = Key(id);
  Location where;
  int fd = -1;
  {
    MutexLock lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end()) {
      ++stats_.misses;
      return Status::NotFound("not on disk");
    }
    where = it->second.where;
    fd = files_.at(where.slot_bytes).fd;
  }
  // Read into a buffer the sample then owns: no further copy.
  const uint64_t length = kSlotHeader + where.bytes;
  std::shared_ptr<uint8_t> buffer(new uint8_t[length], std::default_delete<uint8_t[]>());
  const ssize_t n =
      pread(fd, buffer.get(), length, static_cast<off_t>(where.slot * where.slot_bytes));
  const uint8_t* h = buffer.get();
  bool good = n == static_cast<ssize_t>(length) && DecodeFixed<uint32_t>(h) == kSlotMagic &&
              DecodeFixed<uint64_t>(h + 16) == KeyHash(key) &&
              DecodeFixed<uint32_t>(h + 24) == where.crc;
  if (good) {
    out->height = DecodeFixed<uint32_t>(h + 4);
    out->width = DecodeFixed<uint32_t>(h + 8);
    out->channels = DecodeFixed<uint32_t>(h + 12);
    good = out->bytes() == where.bytes && Crc32c(h + kSlotHeader, where.bytes) == where.crc;
  }
  if (good) {
    out->pixels = std::shared_ptr<uint8_t>(buffer, buffer.get() + kSlotHeader);
    MutexLock lock(mu_);
    ++stats_.hits;
    return Status::Ok();
  }
  {
    MutexLock lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end() || it->second.where.slot_bytes != where.slot_bytes ||
        it->second.where.slot != where.slot) {
      // Evicted while it was read, and its slot reused: a plain miss.
      ++stats_.misses;
      return Status::NotFound("not on disk");
    }
    Unindex(key);
    ++stats_.corrupt;
  }
  DeleteKeys({key});
  spdlog::warn("disk cache: dropped corrupt entry for sample {} ({})", id, catalog_->relpath(id));
  return Status::Corruption("corrupt disk cache entry");
}

void DiskCache::Unindex(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  const size_t at = it->second.at;
  const Location where = it->second.where;
  stats_.bytes -= where.slot_bytes;
  if (SlotFile* file = File(where.slot_bytes)) file->free.push_back(where.slot);
  if (at + 1 != keys_.size()) {
    keys_[at] = std::move(keys_.back());
    index_[keys_[at]].at = at;
  }
  keys_.pop_back();
  index_.erase(it);
  stats_.entries = index_.size();
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
    if (stopping_ || SlotBytes(sample->bytes()) > stats_.budget || index_.count(Key(id))) {
      return;
    }
    if (queue_.size() >= kMaxQueuedWrites) {
      ++stats_.write_drops;
      return;
    }
    queue_.push_back({id, std::move(sample)});
  }
  wake_.notify_one();
}

void DiskCache::Flush() {
  MutexLock lock(mu_);
  drained_.wait(lock, [this]() REQUIRES(mu_) { return queue_.empty() && !writing_; });
}

// Picks victims until the budget holds the new bytes: of a few random
// entries, the one the fewest jobs still need goes first.
void DiskCache::EvictLocked(std::vector<std::string>* victims) {
  while (stats_.bytes > stats_.budget && !keys_.empty()) {
    const std::string* victim = nullptr;
    uint32_t victim_need = UINT32_MAX;
    for (int i = 0; i < kEvictionSamples; ++i) {
      const std::string& key = keys_[rng_.Below(keys_.size())];
      const IndexEntry& e = index_[key];
      // An entry of another base (an earlier mount's) is needed by nobody.
      uint32_t need = 0;
      if (e.base == base_) ref_counts_->Counts(std::span(&e.id, 1), std::span(&need, 1));
      if (need < victim_need) {
        victim = &key;
        victim_need = need;
      }
    }
    victims->push_back(*victim);
    Unindex(victims->back());
    ++stats_.evictions;
  }
}

void DiskCache::WriteLoop() {
  for (;;) {
    Write w;
    {
      MutexLock lock(mu_);
      wake_.wait(lock, [this]() REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every write done
      w = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
    }
    const std::string key = Key(w.id);
    const DecodedSample& sample = *w.sample;
    Location where;
    where.bytes = sample.bytes();
    where.slot_bytes = SlotBytes(where.bytes);
    where.crc = Crc32c(sample.pixels.get(), where.bytes);
    std::vector<std::string> victims;
    int fd = -1;
    {
      MutexLock lock(mu_);
      if (!index_.count(key)) {
        if (SlotFile* file = File(where.slot_bytes)) {
          fd = file->fd;
          where.slot = AllocateSlot(where.slot_bytes);
          stats_.bytes += where.slot_bytes;
          EvictLocked(&victims);
        }
      }
    }
    bool stored = false;
    if (fd >= 0) {
      std::array<uint8_t, kSlotHeader> header{};
      EncodeFixed<uint32_t>(&header[0], kSlotMagic);
      EncodeFixed<uint32_t>(&header[4], sample.height);
      EncodeFixed<uint32_t>(&header[8], sample.width);
      EncodeFixed<uint32_t>(&header[12], sample.channels);
      EncodeFixed<uint64_t>(&header[16], KeyHash(key));
      EncodeFixed<uint32_t>(&header[24], where.crc);
      iovec iov[2] = {{header.data(), kSlotHeader}, {sample.pixels.get(), where.bytes}};
      const ssize_t n = pwritev(fd, iov, 2, static_cast<off_t>(where.slot * where.slot_bytes));
      if (n != static_cast<ssize_t>(kSlotHeader + where.bytes)) {
        const int error = n < 0 ? errno : 0;
        Warnings().Warn(error == ENOSPC ? "disk cache write: no space" : "disk cache write",
                        "disk cache write failed: {}",
                        error ? std::strerror(error) : "short write");
      } else {
        // The index entry goes in after its slot: a crash between the two
        // leaves a slot nobody names, which the next open counts as free.
        std::string value;
        PutFixed<uint32_t>(&value, w.id);
        PutFixed<uint64_t>(&value, where.slot_bytes);
        PutFixed<uint64_t>(&value, where.slot);
        PutFixed<uint64_t>(&value, where.bytes);
        PutFixed<uint32_t>(&value, where.crc);
        rocksdb::WriteBatch batch;
        for (const std::string& v : victims) batch.Delete(v);
        batch.Put(key, value);
        const rocksdb::Status s = index_writes_->Write(rocksdb::WriteOptions(), &batch);
        stored = s.ok();
        if (!stored) {
          Warnings().Warn(
              s.IsNoSpace() ? "disk cache index write: no space" : "disk cache index write",
              "disk cache index write failed: {}", s.ToString());
        }
      }
    }
    if (!stored) DeleteKeys(victims);  // they are gone from the index all the same
    MutexLock lock(mu_);
    if (stored) {
      index_[key] = {w.id, base_, where, keys_.size()};
      keys_.push_back(key);
      stats_.entries = index_.size();
      ++stats_.writes;
    } else if (fd >= 0) {
      stats_.bytes -= where.slot_bytes;
      files_.at(where.slot_bytes).free.push_back(where.slot);
    }
    writing_ = false;
    if (queue_.empty()) drained_.notify_all();
  }
}

DiskCacheStats DiskCache::Stats() const {
  MutexLock lock(mu_);
  return stats_;
}

}  // namespace joaderfs
