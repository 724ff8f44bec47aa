#include "common/rocksdb_support.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "testing/test_util.h"

namespace joaderfs {
namespace {

// The log of a RocksDB database that took `batches` writes, as a kill -9
// leaves it: copied while the database is open. Some values span blocks
// (fragments); `records` gets where each record's header begins.
std::string WriteLog(int batches, std::vector<size_t>* records) {
  testing::TempDir dir("joaderfs-wal");
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  EXPECT_TRUE(rocksdb::DB::Open(options, dir.path(), &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  for (int i = 0; i < batches; ++i) {
    const size_t bytes = i % 7 == 3 ? 40000 : 20 + i * 13 % 300;
    EXPECT_TRUE(db->Put({}, "k" + std::to_string(i), std::string(bytes, 'a' + i % 26)).ok());
  }
  std::string wal;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().extension() == ".log") wal = testing::ReadFile(entry.path());
  }
  // Record headers, following each one's length (7-byte headers: RocksDB
  // recycles no logs by default) and skipping block padding.
  for (size_t pos = 0; pos + 7 <= wal.size();) {
    if (32768 - pos % 32768 < 7) {
      pos += 32768 - pos % 32768;
      continue;
    }
    records->push_back(pos);
    pos += 7 + (uint8_t(wal[pos + 4]) | size_t{uint8_t(wal[pos + 5])} << 8);
  }
  return wal;
}

TEST(CheckWalBeforeTail, AWholeLogAndEveryTornTailAreNoDamage) {
  std::vector<size_t> records;
  const std::string wal = WriteLog(60, &records);
  ASSERT_GT(wal.size(), 3 * 32768u) << "fragments across blocks";
  EXPECT_TRUE(CheckWalBeforeTail(wal, "log").ok());
  for (size_t cut = 0; cut < wal.size(); cut += 101) {
    const Status s = CheckWalBeforeTail(std::string_view(wal).substr(0, cut), "log");
    EXPECT_TRUE(s.ok()) << "cut at " << cut << ": " << s.message();
  }
}

TEST(CheckWalBeforeTail, DamageWithRecordsAfterItIsFound) {
  std::vector<size_t> records;
  const std::string wal = WriteLog(60, &records);
  ASSERT_GT(records.size(), 60u);
  // The damage RocksDB took for a torn tail: a length past the file's end
  // in its last block. Every record but the last two.
  for (size_t i = 0; i + 2 < records.size(); ++i) {
    std::string damaged = wal;
    damaged[records[i] + 4] = damaged[records[i] + 5] = '\xff';
    const Status s = CheckWalBeforeTail(damaged, "log");
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << "record " << i << " at " << records[i];
  }
  // Garbage anywhere before the last records.
  std::mt19937 random(7);
  for (size_t at = 0; at + 64 < records[records.size() - 3]; at += 509) {
    std::string damaged = wal;
    for (size_t i = 0; i < 64; ++i) damaged[at + i] = static_cast<char>(random());
    const Status s = CheckWalBeforeTail(damaged, "log");
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << "garbage at " << at;
    EXPECT_NE(s.message().find("log: damaged at byte"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace joaderfs
