#include "common/rocksdb_support.h"

#include <spdlog/spdlog.h>

#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <memory>

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

}  // namespace

void PrepareRocksDb(const std::string& path, rocksdb::Options* options) {
  std::error_code ec;  // DB::Open reports what is wrong with the folder
  std::filesystem::create_directories(path, ec);
  options->info_log = std::make_shared<SpdlogLogger>();
  options->info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  options->write_buffer_size = 4 << 20;
  options->max_write_buffer_number = 2;
  options->max_total_wal_size = 8 << 20;
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

}  // namespace joaderfs
