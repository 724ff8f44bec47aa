#include "common/rocksdb_support.h"

#include <rocksdb/cache.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common/crc32c.h"
#include "common/rate_limited_log.h"

namespace joaderfs {
namespace {

class SpdlogLogger : public rocksdb::Logger {
 public:
  SpdlogLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    char line[512];
    std::vsnprintf(line, sizeof(line), format, ap);
    // Its no-space recovery repeats itself: one line per interval.
    Warnings().Warn(level >= rocksdb::InfoLogLevel::ERROR_LEVEL ? "rocksdb error" : "rocksdb",
                    "rocksdb: {}", line);
  }
};

// RocksDB's log format (its db/log_format.h): 32 KiB blocks of records,
// each a header (masked CRC-32C, 2-byte length, type; the recyclable types
// add a 4-byte log number) and its payload; a block's last bytes, too few
// for a header, are padding.
constexpr size_t kWalBlock = 32768;
constexpr size_t kWalHeader = 7;
constexpr size_t kWalRecyclableHeader = 11;
constexpr uint8_t kWalMaxType = 9;  // kSetCompressionType

uint32_t UnmaskCrc(uint32_t masked) {
  const uint32_t rotated = masked - 0xa282ead8u;
  return (rotated >> 17) | (rotated << 15);
}

// The bytes of the whole, valid record at `pos`, or 0.
size_t WalRecordAt(std::string_view wal, size_t pos) {
  const size_t room = std::min(kWalBlock - pos % kWalBlock, wal.size() - pos);
  if (room < kWalHeader) return 0;
  const auto* p = reinterpret_cast<const uint8_t*>(wal.data() + pos);
  const uint8_t type = p[6];
  if (type == 0 || type > kWalMaxType) return 0;
  const size_t header = type >= 5 && type <= 8 ? kWalRecyclableHeader : kWalHeader;
  const size_t length = p[4] | size_t{p[5]} << 8;
  if (header + length > room) return 0;
  uint32_t stored;
  std::memcpy(&stored, p, 4);  // little-endian, as RocksDB writes it on x86
  // The CRC covers the type, the log number if any, and the payload.
  return UnmaskCrc(stored) == Crc32c(p + 6, header - 6 + length) ? header + length : 0;
}

}  // namespace

void PrepareRocksDb(const std::string& path, rocksdb::Options* options) {
  std::error_code ec;  // DB::Open reports what is wrong with the folder
  std::filesystem::create_directories(path, ec);
  options->info_log = std::make_shared<SpdlogLogger>();
  options->info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  options->write_buffer_size = 4 << 20;
  options->max_write_buffer_number = 2;
  options->max_total_wal_size = 8 << 20;
  // Data blocks go through a bounded block cache. Index and filter blocks
  // stay beside their table files (~2 bytes a record): in the cache, one
  // table's were read again and again (150 us a Get over 1.28M records).
  // Keys arrive in random order, so every L0 file spans them all: without
  // a filter a Get reads a block of each (50 us a hit over 1.28M records).
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(kRocksDbBlockCacheBytes);
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  options->table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
}

rocksdb::Status RocksDbWrites::Write(const rocksdb::WriteOptions& options,
                                     rocksdb::WriteBatch* batch) {
  MutexLock lock(mu_);
  if (!failure_.ok()) return failure_;
  rocksdb::Status s = db_->Write(options, batch);
  if (!s.ok()) {
    failure_ = s;
    spdlog::error("{}: a write failed ({}); no more writes to it until the daemon restarts",
                  db_->GetName(), s.ToString());
  }
  return s;
}

bool RocksDbWrites::failed() const {
  MutexLock lock(mu_);
  return !failure_.ok();
}

Status CheckWalBeforeTail(std::string_view wal, const std::string& name) {
  size_t pos = 0;
  while (pos < wal.size()) {
    const size_t in_block = kWalBlock - pos % kWalBlock;
    if (in_block < kWalHeader) {  // the block's padding
      pos += in_block;
    } else if (const size_t n = WalRecordAt(wal, pos)) {
      pos += n;
    } else {
      break;
    }
  }
  // What follows the last good record must be that of a torn write: no
  // whole record after it (a false match of a CRC-32C is 1 in 2^32).
  for (size_t at = pos + 1; at + kWalHeader <= wal.size(); ++at) {
    if (WalRecordAt(wal, at) > 0) {
      return Status::Corruption(name + ": damaged at byte " + std::to_string(pos) +
                                ", with whole records after it at byte " + std::to_string(at));
    }
  }
  return Status::Ok();
}

}  // namespace joaderfs
