#include "cache/disk_cache.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "common/hash.h"

namespace joaderfs {
namespace {

// Bump when the key or value layout changes: old databases are then left
// alone in their own folder.
constexpr char kFormat[] = "v1";
constexpr uint32_t kValueMagic = 0x3143444a;  // "JDC1"
constexpr size_t kValueHeader = 20;           // magic, height, width, channels, crc32
constexpr size_t kMetaBytes = 12;             // id, bytes
constexpr int kEvictionSamples = 8;           // candidates compared per eviction
constexpr size_t kMaxQueuedWrites = 512;

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
T Load(const char* at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

uint32_t Crc(const uint8_t* data, uint64_t n) {
  return static_cast<uint32_t>(crc32_z(crc32_z(0, nullptr, 0), data, n));
}

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  return Status::IOError(what + ": " + s.ToString());
}

}  // namespace

Status DiskCache::Open(const std::string& dir, const Catalog* catalog, const RefCounts* counts,
                       uint64_t budget_bytes, std::unique_ptr<DiskCache>* out) {
  std::unique_ptr<DiskCache> c(new DiskCache());
  c->catalog_ = catalog;
  c->ref_counts_ = counts;
  char folder[17];
  std::snprintf(folder, sizeof folder, "%016llx",
                static_cast<unsigned long long>(
                    Fnv1a(kFnv1aBasis, catalog->source().data(), catalog->source().size())));
  c->path_ = dir + "/" + folder + "-" + kFormat;
  std::error_code ec;
  std::filesystem::create_directories(c->path_, ec);
  if (ec) return Status::IOError("cannot create " + c->path_ + ": " + ec.message());

  c->fingerprints_.resize(catalog->size());
  for (SampleId id = 0; id < catalog->size(); ++id) c->fingerprints_[id] = catalog->fingerprint(id);
  Status s = c->OpenDatabase();
  if (s.code() == Status::Code::kCorruption) {
    // The tier only holds what can be decoded again: rather than serve from
    // (or give up on) a damaged database, start an empty one.
    spdlog::warn("disk cache {} is damaged ({}); starting it afresh", c->path_, s.message());
    c->index_.clear();
    c->keys_.clear();
    c->stats_ = {};
    rocksdb::DestroyDB(c->path_, rocksdb::Options());
    s = c->OpenDatabase();
  }
  if (!s.ok() && s.message().find("lock") != std::string::npos) {
    // RocksDB's LOCK file: another daemon serves this SOURCE from this folder.
    return Status::Busy("cache_dir " + dir + " is in use by another joaderfs (" + s.message() + ")");
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

// Opens the RocksDB database at path_ and rebuilds the index from the
// metadata records (no pixel is read). Corruption when RocksDB finds the
// files damaged.
Status DiskCache::OpenDatabase() {
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.max_background_jobs = 2;
  db_options.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  db_options.keep_log_file_num = 2;
  // Samples and their metadata are written without a WAL; flushing the two
  // families together keeps them consistent across a crash.
  db_options.atomic_flush = true;
  rocksdb::ColumnFamilyOptions meta_options;
  rocksdb::ColumnFamilyOptions sample_options;
  sample_options.enable_blob_files = true;
  sample_options.min_blob_size = 0;
  sample_options.blob_compression_type = rocksdb::kNoCompression;
  sample_options.enable_blob_garbage_collection = true;
  sample_options.compression = rocksdb::kNoCompression;
  sample_options.write_buffer_size = 16 << 20;  // keys only: values go to blob files
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, meta_options}, {"samples", sample_options}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_options, path_, families, &handles, &db);
  if (!s.ok()) {
    if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
      return Status::IOError("disk cache " + path_ + " is in use by another joaderfs");
    }
    if (s.IsCorruption()) return Status::Corruption(s.ToString());
    return FromRocks(s, "cannot open disk cache " + path_);
  }
  db_.reset(db);
  meta_ = handles[0];
  samples_ = handles[1];

  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), meta_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (it->value().size() != kMetaBytes) continue;
    const SampleId id = Load<uint32_t>(it->value().data());
    const uint64_t bytes = Load<uint64_t>(it->value().data() + 4);
    const std::string key = it->key().ToString();
    index_[key] = IndexEntry{id, Load<uint32_t>(key.data()), bytes, keys_.size()};
    keys_.push_back(key);
    stats_.bytes += bytes;
  }
  if (!it->status().ok()) {
    const std::string reason = it->status().ToString();
    it.reset();
    CloseDatabase();
    return Status::Corruption(reason);
  }
  return Status::Ok();
}

void DiskCache::CloseDatabase() {
  if (!db_) return;
  db_->DestroyColumnFamilyHandle(samples_);
  db_->DestroyColumnFamilyHandle(meta_);
  db_->Close();
  db_.reset();
}

DiskCache::~DiskCache() {
  if (!db_) return;
  {
    std::unique_lock lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (writer_.joinable()) writer_.join();
  CloseDatabase();
}

// Output size, then what identifies the source file's content, then its
// path (so that two files can never share a key).
std::string DiskCache::Key(uint32_t size, SampleId id) const {
  std::string key;
  Put<uint32_t>(&key, size);
  Put<uint64_t>(&key, fingerprints_[id]);
  key += catalog_->relpath(id);
  return key;
}

Status DiskCache::Get(uint32_t size, SampleId id, DecodedSample* out) {
  const std::string key = Key(size, id);
  {
    std::lock_guard lock(mu_);
    if (!index_.count(key)) {
      ++stats_.misses;
      return Status::NotFound("not on disk");
    }
  }
  // The sample's pixels stay where RocksDB read them: the slice is kept
  // alive by the sample instead of copied out.
  auto value = std::make_shared<rocksdb::PinnableSlice>();
  rocksdb::ReadOptions read_options;
  read_options.verify_checksums = true;
  rocksdb::Status s = db_->Get(read_options, samples_, key, value.get());
  bool good = s.ok() && value->size() >= kValueHeader && Load<uint32_t>(value->data()) == kValueMagic;
  if (good) {
    out->height = Load<uint32_t>(value->data() + 4);
    out->width = Load<uint32_t>(value->data() + 8);
    out->channels = Load<uint32_t>(value->data() + 12);
    good = value->size() == kValueHeader + out->bytes();
  }
  if (good) {
    auto* pixels = reinterpret_cast<uint8_t*>(const_cast<char*>(value->data() + kValueHeader));
    good = Crc(pixels, out->bytes()) == Load<uint32_t>(value->data() + 16);
    if (good) out->pixels = std::shared_ptr<uint8_t>(value, pixels);
  }
  {
    std::lock_guard lock(mu_);
    if (good) {
      ++stats_.hits;
      return Status::Ok();
    }
    Unindex(key);
    ++(s.IsNotFound() ? stats_.misses : stats_.corrupt);
  }
  Delete(key);
  if (s.IsNotFound()) return Status::NotFound("not on disk");
  spdlog::warn("disk cache: dropped corrupt entry for sample {} ({}): {}", id,
               catalog_->relpath(id), s.ok() ? "bad checksum" : s.ToString());
  return Status::Corruption("corrupt disk cache entry");
}

void DiskCache::Unindex(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  const size_t slot = it->second.slot;
  stats_.bytes -= it->second.bytes;
  if (slot + 1 != keys_.size()) {
    keys_[slot] = std::move(keys_.back());
    index_[keys_[slot]].slot = slot;
  }
  keys_.pop_back();
  index_.erase(it);
  stats_.entries = index_.size();
}

void DiskCache::Delete(const std::string& key) {
  rocksdb::WriteBatch batch;
  batch.Delete(samples_, key);
  batch.Delete(meta_, key);
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;  // a lost delete only leaves a stale index record
  db_->Write(wo, &batch);
}

void DiskCache::PutAsync(uint32_t size, SampleId id, SamplePtr sample) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || sample->bytes() > stats_.budget || index_.count(Key(size, id))) return;
    if (queue_.size() >= kMaxQueuedWrites) {
      ++stats_.write_drops;
      return;
    }
    queue_.push_back({size, id, std::move(sample)});
  }
  wake_.notify_one();
}

void DiskCache::Flush() {
  std::unique_lock lock(mu_);
  drained_.wait(lock, [this] { return queue_.empty() && !writing_; });
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
      uint32_t need = 0;
      ref_counts_->Counts(e.size, std::span(&e.id, 1), std::span(&need, 1));
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
      std::unique_lock lock(mu_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every write done
      w = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
    }
    const std::string key = Key(w.size, w.id);
    const DecodedSample& sample = *w.sample;
    std::string value;
    value.reserve(kValueHeader + sample.bytes());
    Put<uint32_t>(&value, kValueMagic);
    Put<uint32_t>(&value, sample.height);
    Put<uint32_t>(&value, sample.width);
    Put<uint32_t>(&value, sample.channels);
    Put<uint32_t>(&value, Crc(sample.pixels.get(), sample.bytes()));
    value.append(reinterpret_cast<const char*>(sample.pixels.get()), sample.bytes());
    std::string meta;
    Put<uint32_t>(&meta, w.id);
    Put<uint64_t>(&meta, sample.bytes());

    std::vector<std::string> victims;
    {
      std::lock_guard lock(mu_);
      if (!index_.count(key)) {
        index_[key] = {w.id, w.size, sample.bytes(), keys_.size()};
        keys_.push_back(key);
        stats_.bytes += sample.bytes();
        stats_.entries = index_.size();
        ++stats_.writes;
        EvictLocked(&victims);
      }
    }
    // The sample and its metadata land together or not at all. Without a
    // WAL a crash loses the newest writes, which are only cache misses.
    rocksdb::WriteBatch batch;
    for (const std::string& v : victims) {
      batch.Delete(samples_, v);
      batch.Delete(meta_, v);
    }
    if (std::find(victims.begin(), victims.end(), key) == victims.end()) {
      batch.Put(samples_, key, value);
      batch.Put(meta_, key, meta);
    }
    rocksdb::WriteOptions wo;
    wo.disableWAL = true;
    rocksdb::Status s = db_->Write(wo, &batch);
    if (!s.ok()) {
      spdlog::warn("disk cache write failed: {}", s.ToString());
      {
        std::lock_guard lock(mu_);
        Unindex(key);
      }
      Delete(key);
    }
    std::lock_guard lock(mu_);
    writing_ = false;
    if (queue_.empty()) drained_.notify_all();
  }
}

DiskCacheStats DiskCache::Stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace joaderfs
