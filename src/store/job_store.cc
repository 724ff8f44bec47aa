#include "store/job_store.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "common/coding.h"
#include "common/hash.h"
#include "common/rate_limited_log.h"
#include "common/rocksdb_support.h"

namespace joaderfs {
namespace {

constexpr char kJobKey = 'j';
constexpr char kEpochKey = 'e';
constexpr char kHandedKey = 'h';
constexpr char kElasticKey = 'r';

std::string JobKey(const std::string& name) { return kJobKey + name; }
std::string ElasticKey(const std::string& name) { return kElasticKey + name; }

// <kind> <name> \0 <stream>: a job name holds no \0, so prefixes never collide.
std::string StreamKey(char kind, const std::string& name, StreamIndex stream) {
  std::string key = kind + name;
  key.push_back('\0');
  PutBigEndian(&key, stream, 4);
  return key;
}

std::string Serialize(const Roaring& ids) {
  std::string bytes(ids.getSizeInBytes(/*portable=*/true), '\0');
  ids.write(bytes.data(), /*portable=*/true);
  return bytes;
}

bool Deserialize(std::string_view bytes, Roaring* out) {
  try {
    *out = Roaring::readSafe(bytes.data(), bytes.size());
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

// CheckWalBeforeTail for each write-ahead log of the store at `path`.
Status CheckLogs(const std::string& path) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
    if (entry.path().extension() != ".log") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string wal{std::istreambuf_iterator<char>(in), {}};
    if (!in.good() && !in.eof()) {
      return Status::IOError("cannot read job store log " + entry.path().string());
    }
    if (Status s = CheckWalBeforeTail(wal, "job store " + entry.path().string()); !s.ok()) return s;
  }
  return Status::Ok();  // no folder yet: a new store
}

}  // namespace

JobStore::~JobStore() = default;

Status JobStore::Open(const std::string& cache_dir, const Catalog& catalog,
                      std::unique_ptr<JobStore>* out) {
  std::unique_ptr<JobStore> store(new JobStore());
  store->path_ = SourceFolder(cache_dir, catalog.source(), "jobs1");
  rocksdb::Options options;
  options.create_if_missing = true;
  options.paranoid_checks = true;
  // RocksDB's default replays the WAL up to its first damaged record and
  // drops the rest silently: hand-outs lost that way would hand an epoch's
  // samples out again. Only a torn last record (a crash inside a write) is
  // tolerated; damage before it fails Open() with Corruption.
  // That mode takes damage inside the last 32 KiB of a log for a torn
  // record: each log is checked before RocksDB replays it.
  options.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  options.max_background_jobs = 1;
  if (Status s = CheckLogs(store->path_); !s.ok()) return s;
  PrepareRocksDb(store->path_, &options);  // no LOG file to fail on a full disk
  rocksdb::DB* db = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(options, store->path_, &db);
  if (!s.ok()) {
    if (s.IsCorruption())
      return Status::Corruption("job store " + store->path_ + ": " + s.ToString());
    if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
      return Status::Busy("job store " + store->path_ + " is in use by another joaderfs");
    }
    return Status::IOError("cannot open job store " + store->path_ + ": " + s.ToString());
  }
  store->db_.reset(db);
  store->writes_ = std::make_unique<RocksDbWrites>(db);
  *out = std::move(store);
  return Status::Ok();
}

Status JobStore::Load(std::vector<StoredJob>* jobs) {
  // Keys sort 'e' < 'h' < 'j' < 'r': collect all, then join.
  std::map<std::string, StoredJob> by_name;
  std::map<std::pair<std::string, StreamIndex>, uint64_t> epochs;
  std::map<std::string, std::pair<uint64_t, Roaring>> elastic;
  struct HandOut {
    std::string key, name;
    StreamIndex stream;
    uint64_t epoch;
    Roaring ids;
  };
  std::vector<HandOut> hand_outs;
  uint64_t max_seq = 0;
  rocksdb::ReadOptions read;
  read.verify_checksums = true;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
  auto corrupt = [&](std::string_view key) {
    std::string shown(key);
    for (char& c : shown) c = c == '\0' ? '/' : c;
    return Status::Corruption("job store " + path_ + ": bad record '" + shown + "'");
  };
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const std::string_view key(it->key().data(), it->key().size());
    const std::string_view value(it->value().data(), it->value().size());
    if (key.empty()) return corrupt(key);
    if (key[0] == kJobKey) {
      StoredJob& job = by_name[std::string(key.substr(1))];
      job.name = std::string(key.substr(1));
      if (value.size() < 14) return corrupt(key);
      job.uid = static_cast<uint32_t>(DecodeBigEndian(value, 0, 4));
      job.fixed = value[4] != 0;
      job.has_ids = value[5] != 0;
      const uint64_t spec_bytes = DecodeBigEndian(value, 6, 8);
      if (spec_bytes == 0 || value.size() < 14 + spec_bytes) return corrupt(key);
      job.spec = std::string(value.substr(14, spec_bytes));
      if (job.has_ids && !Deserialize(value.substr(14 + spec_bytes), &job.ids)) {
        return corrupt(key);
      }
      continue;
    }
    if (key[0] == kElasticKey) {
      auto& [epoch, consumed] = elastic[std::string(key.substr(1))];
      if (value.size() < 8 || !Deserialize(value.substr(8), &consumed)) return corrupt(key);
      epoch = DecodeBigEndian(value, 0, 8);
      continue;
    }
    const size_t nul = key.find('\0');
    if ((key[0] != kEpochKey && key[0] != kHandedKey) || nul == std::string_view::npos ||
        key.size() < nul + 5) {
      return corrupt(key);
    }
    std::string name(key.substr(1, nul - 1));
    const auto stream = static_cast<StreamIndex>(DecodeBigEndian(key, nul + 1, 4));
    if (key[0] == kEpochKey) {
      if (value.size() != 8) return corrupt(key);
      epochs[{std::move(name), stream}] = DecodeBigEndian(value, 0, 8);
      continue;
    }
    HandOut h{std::string(key), std::move(name), stream, 0, Roaring()};
    if (key.size() != nul + 5 + 16 || !Deserialize(value, &h.ids)) return corrupt(key);
    h.epoch = DecodeBigEndian(key, nul + 5, 8);
    max_seq = std::max(max_seq, DecodeBigEndian(key, nul + 13, 8));
    hand_outs.push_back(std::move(h));
  }
  if (!it->status().ok()) {
    return Status::Corruption("job store " + path_ + ": " + it->status().ToString());
  }
  next_seq_ = max_seq + 1;
  for (auto& [name, resume] : elastic) {
    auto job = by_name.find(name);
    if (job == by_name.end()) return corrupt(ElasticKey(name));
    job->second.elastic_epoch = resume.first;
    job->second.elastic_consumed = std::move(resume.second);
  }
  for (const auto& [key, epoch] : epochs) {
    auto job = by_name.find(key.first);
    if (job == by_name.end()) return corrupt(StreamKey(kEpochKey, key.first, key.second));
    job->second.streams.push_back({key.second, epoch, Roaring()});
  }
  // Hand-outs of another epoch raced the next epoch's start: dropped.
  rocksdb::WriteBatch stale;
  for (HandOut& h : hand_outs) {
    StoredStream* s = nullptr;
    if (auto job = by_name.find(h.name); job != by_name.end()) {
      for (StoredStream& candidate : job->second.streams) {
        if (candidate.index == h.stream) s = &candidate;
      }
    }
    if (s && s->epoch == h.epoch) {
      s->handed_out |= h.ids;
    } else {
      stale.Delete(h.key);
    }
  }
  if (stale.Count() > 0) Write("dropping stale hand-outs", path_, &stale);
  jobs->clear();
  for (auto& [name, job] : by_name) jobs->push_back(std::move(job));
  return Status::Ok();
}

void JobStore::Write(const char* what, const std::string& name, void* batch) {
  rocksdb::WriteOptions options;
  options.sync = false;  // the WAL survives a kill -9 of the process
  const rocksdb::Status s = writes_->Write(options, static_cast<rocksdb::WriteBatch*>(batch));
  // A full or failing disk fails every write: one line per cause and interval.
  if (!s.ok()) Warnings().Warn(what, "job store: {} {}: {}", what, name, s.ToString());
}

void JobStore::PutJob(const std::string& name, uint32_t uid, bool fixed, const std::string& spec,
                      const Roaring* ids) {
  std::string value;
  PutBigEndian(&value, uid, 4);
  value.push_back(fixed ? 1 : 0);
  value.push_back(ids ? 1 : 0);
  PutBigEndian(&value, spec.size(), 8);
  value += spec;
  if (ids) value += Serialize(*ids);
  rocksdb::WriteBatch batch;
  batch.Put(JobKey(name), value);
  Write("saving job", name, &batch);
}

void JobStore::RemoveJob(const std::string& name) {
  rocksdb::WriteBatch batch;
  batch.Delete(JobKey(name));
  batch.Delete(ElasticKey(name));
  for (char kind : {kEpochKey, kHandedKey}) {
    std::string begin = kind + name;
    begin.push_back('\0');
    std::string end = kind + name;
    end.push_back('\1');
    batch.DeleteRange(begin, end);
  }
  Write("removing job", name, &batch);
}

void JobStore::PutElasticResume(const std::string& name, uint64_t epoch, const Roaring& consumed) {
  std::string value;
  PutBigEndian(&value, epoch, 8);
  value += Serialize(consumed);
  rocksdb::WriteBatch batch;
  batch.Put(ElasticKey(name), value);
  Write("saving the elastic resume of", name, &batch);
}

void JobStore::StartEpoch(const std::string& name, StreamIndex stream, uint64_t epoch,
                          const Roaring& handed_out) {
  rocksdb::WriteBatch batch;
  std::string value;
  PutBigEndian(&value, epoch, 8);
  batch.Put(StreamKey(kEpochKey, name, stream), value);
  const std::string handed = StreamKey(kHandedKey, name, stream);
  std::string end = handed;
  PutBigEndian(&end, ~uint64_t{0}, 8);
  PutBigEndian(&end, ~uint64_t{0}, 8);
  batch.DeleteRange(handed, end);
  if (!handed_out.isEmpty()) {
    std::string key = handed;
    PutBigEndian(&key, epoch, 8);
    PutBigEndian(&key, next_seq_++, 8);
    batch.Put(key, Serialize(handed_out));
  }
  Write("starting an epoch of", name, &batch);
}

void JobStore::AddHandedOut(const std::string& name, StreamIndex stream, uint64_t epoch,
                            std::span<const SampleId> ids) {
  Roaring set;
  set.addMany(ids.size(), ids.data());
  std::string key = StreamKey(kHandedKey, name, stream);
  PutBigEndian(&key, epoch, 8);
  PutBigEndian(&key, next_seq_++, 8);
  rocksdb::WriteBatch batch;
  batch.Put(key, Serialize(set));
  Write("recording hand-outs of", name, &batch);
}

}  // namespace joaderfs
