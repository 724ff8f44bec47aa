#include "catalog/tar_index.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/types.h"

namespace joaderfs {
namespace {

constexpr uint64_t kBlock = 512;
// Label members and .json members larger than this are not read.
constexpr uint64_t kMaxLabelBytes = 64 << 10;

// Reads a file through one window, so that the headers of small members
// come from one read and long members are skipped unread.
class Reader {
 public:
  Reader(const ShardReadFn& read, uint64_t size, uint64_t window)
      : read_(read), size_(size), buffer_(std::max(window, kMaxLabelBytes), '\0') {}

  // The `n` bytes at `offset` (n <= the window), or nullptr when the file
  // ends before them or cannot be read (then error() says why).
  const char* At(uint64_t offset, uint64_t n) {
    if (offset + n > size_) return nullptr;
    if (offset < start_ || offset + n > start_ + filled_) {
      start_ = offset;
      filled_ = 0;
      const uint64_t want = std::min<uint64_t>(buffer_.size(), size_ - offset);
      while (filled_ < want) {
        const int64_t r = read_(offset + filled_, buffer_.data() + filled_, want - filled_);
        if (r <= 0) {
          error_ = r < 0 ? static_cast<int>(-r) : EIO;
          break;
        }
        filled_ += static_cast<uint64_t>(r);
      }
      if (filled_ < n) return nullptr;
    }
    return buffer_.data() + (offset - start_);
  }
  int error() const { return error_; }

 private:
  const ShardReadFn& read_;
  uint64_t size_;
  std::string buffer_;
  uint64_t start_ = 0;
  uint64_t filled_ = 0;
  int error_ = 0;
};

// An octal field, or GNU's base-256 form (high bit of the first byte set).
std::optional<uint64_t> Number(const char* field, size_t n) {
  const auto* p = reinterpret_cast<const unsigned char*>(field);
  if (p[0] & 0x80) {
    uint64_t v = p[0] & 0x7f;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 55) return std::nullopt;
      v = (v << 8) | p[i];
    }
    return v;
  }
  size_t i = 0;
  while (i < n && (field[i] == ' ' || field[i] == '\0')) ++i;
  uint64_t v = 0;
  bool any = false;
  for (; i < n && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (v >> 60) return std::nullopt;
    v = v * 8 + static_cast<uint64_t>(field[i] - '0');
    any = true;
  }
  for (; i < n; ++i) {
    if (field[i] != ' ' && field[i] != '\0') return std::nullopt;
  }
  return any ? std::optional<uint64_t>(v) : std::nullopt;
}

bool IsZeroBlock(const char* h) {
  for (uint64_t i = 0; i < kBlock; ++i) {
    if (h[i] != 0) return false;
  }
  return true;
}

// The header checksum: the unsigned sum of its bytes with the checksum
// field read as spaces.
bool ChecksumOk(const char* h) {
  const std::optional<uint64_t> stored = Number(h + 148, 8);
  if (!stored) return false;
  uint64_t sum = 0;
  for (uint64_t i = 0; i < kBlock; ++i) {
    sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
  }
  return sum == *stored;
}

std::string_view Field(const char* f, size_t n) { return {f, strnlen(f, n)}; }

// The integer of a label member or JSON field, if it is one.
std::optional<int64_t> ParseLabel(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  if (v < 0 || v > kMaxLabel) return std::nullopt;
  return v;
}

std::optional<int64_t> JsonLabel(std::string_view text, std::string_view key) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  const int64_t v = it->get<int64_t>();
  if (v < 0 || v > kMaxLabel) return std::nullopt;
  return v;
}

bool IsImageExtension(std::string_view ext) {
  return ext == "jpg" || ext == "jpeg" || ext == "png" || ext == "webp";
}

// The sample being gathered: consecutive members sharing `key`.
struct Group {
  std::string key;
  bool open = false;
  std::string image;  // the image member's name, empty when none yet
  uint64_t offset = 0;
  uint64_t length = 0;
  std::optional<int64_t> member_label;
  std::optional<int64_t> json_label;
};

}  // namespace

int64_t ReadShardAt(int fd, uint64_t offset, char* buffer, uint64_t n) {
  for (;;) {
    const ssize_t r = ::pread(fd, buffer, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    return r < 0 ? -errno : r;
  }
}

Status ScanShard(int fd, uint64_t size, std::string_view label_key, ShardCounts* counts,
                 const ShardSampleFn& emit) {
  const ShardReadFn read = [fd](uint64_t offset, char* buffer, uint64_t n) {
    return ReadShardAt(fd, offset, buffer, n);
  };
  return ScanShard(read, size, kLocalShardWindow, label_key, counts, emit);
}

Status ScanShard(const ShardReadFn& read, uint64_t size, uint64_t window,
                 std::string_view label_key, ShardCounts* counts, const ShardSampleFn& emit) {
  Reader reader(read, size, window);
  Group group;
  auto finish = [&](bool keep) {
    if (!group.open) return;
    if (!keep) {
      ++counts->damaged;
    } else if (group.image.empty()) {
      ++counts->no_image;
    } else {
      std::optional<int64_t> label = group.member_label ? group.member_label : group.json_label;
      if (!label) ++counts->unlabeled;
      emit(group.image, group.offset, group.length, label.value_or(-1));
    }
    group = Group();
  };

  std::string long_name;  // from a GNU 'L' member or a pax header, for the next member
  std::optional<uint64_t> pax_size;
  uint64_t at = 0;
  bool ended = false;
  bool resyncing = false;
  while (at + kBlock <= size) {
    const char* h = reader.At(at, kBlock);
    if (!h) break;
    if (IsZeroBlock(h)) {
      if (!resyncing) {
        ended = true;
        break;
      }
      at += kBlock;
      continue;
    }
    if (!ChecksumOk(h)) {
      // Not a header where one should be: the member before it (or this
      // one) is damaged. Look for the next valid header.
      if (!resyncing) {
        finish(true);  // what it gathered so far is intact
        ++counts->damaged;
      }
      resyncing = true;
      long_name.clear();
      pax_size.reset();
      at += kBlock;
      continue;
    }
    resyncing = false;
    const char type = h[156];
    const bool pax_sized = pax_size && type != 'x' && type != 'g' && type != 'L' && type != 'K';
    const std::optional<uint64_t> length = pax_sized ? pax_size : Number(h + 124, 12);
    if (!length) {
      finish(true);
      ++counts->damaged;
      resyncing = true;
      at += kBlock;
      continue;
    }
    const uint64_t data = at + kBlock;
    // A member that would end past the shard: the shard was cut short inside
    // it, or its size field is implausible (a crafted pax size would wrap the
    // offset arithmetic). Its sample is lost; the scan goes on from the next
    // valid header after this one, so that the members behind a bad size
    // still serve. Otherwise data + length <= size: no overflow below.
    const bool past_end = *length > size - data;
    const uint64_t next = past_end ? data : data + (*length + kBlock - 1) / kBlock * kBlock;
    auto resync = [&] {
      resyncing = true;
      long_name.clear();
      pax_size.reset();
      at = data;
    };

    if (type == 'L' || type == 'x') {
      if (past_end) {
        finish(true);
        ++counts->damaged;
        resync();
        continue;
      }
      if (*length > kMaxLabelBytes) {
        at = next;
        continue;
      }
      const char* body = reader.At(data, *length);
      if (!body) break;
      if (type == 'L') {
        long_name.assign(body, strnlen(body, *length));
      } else {
        // pax records: "<len> <key>=<value>\n".
        std::string_view rest(body, *length);
        while (!rest.empty()) {
          const size_t space = rest.find(' ');
          uint64_t n = 0;
          if (space == std::string_view::npos ||
              std::from_chars(rest.data(), rest.data() + space, n).ec != std::errc() ||
              n <= space + 1 || n > rest.size()) {
            break;
          }
          std::string_view record = rest.substr(space + 1, n - space - 2);
          const size_t eq = record.find('=');
          if (eq != std::string_view::npos) {
            const std::string_view key = record.substr(0, eq), value = record.substr(eq + 1);
            if (key == "path") long_name.assign(value);
            if (key == "size") {
              uint64_t v = 0;
              if (std::from_chars(value.data(), value.data() + value.size(), v).ec == std::errc()) {
                pax_size = v;
              }
            }
          }
          rest.remove_prefix(n);
        }
      }
      at = next;
      continue;
    }
    std::string name;
    if (!long_name.empty()) {
      name = std::move(long_name);
    } else {
      const std::string_view prefix =
          std::memcmp(h + 257, "ustar\0", 6) == 0 ? Field(h + 345, 155) : std::string_view();
      if (!prefix.empty()) name.assign(prefix).append("/");
      name.append(Field(h, 100));
    }
    long_name.clear();
    pax_size.reset();
    at = next;
    // key: up to the first dot of the last component; extension: the rest.
    const size_t slash = name.rfind('/');
    const size_t dot = name.find('.', slash == std::string::npos ? 0 : slash + 1);
    const bool file = type == '0' || type == '\0' || type == '7';  // not folders, links, ...
    if (!file || dot == std::string::npos) {
      if (past_end) {
        finish(true);
        ++counts->damaged;
        resync();
      }
      continue;
    }
    std::string_view key(name.data(), dot);
    std::string ext = name.substr(dot + 1);
    for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!group.open || key != group.key) {
      finish(true);
      group.open = true;
      group.key.assign(key);
    }
    if (past_end) {
      finish(false);
      resync();
      continue;
    }
    if (IsImageExtension(ext)) {
      if (group.image.empty()) {
        if (*length > UINT32_MAX) {
          ++counts->too_large;
        } else {
          group.image = name;
          group.offset = data;
          group.length = *length;
        }
      }
    } else if ((ext == label_key || ext == "json") && *length <= kMaxLabelBytes) {
      const char* body = *length > 0 ? reader.At(data, *length) : "";
      if (!body) break;
      const std::string_view text(body, *length);
      if (ext == label_key) {
        group.member_label = ParseLabel(text);
      } else {
        group.json_label = JsonLabel(text, label_key);
      }
    }
  }
  if (reader.error() != 0 && at == 0) {
    return Status::IOError(std::string("cannot read: ") + std::strerror(reader.error()));
  }
  // Without its end-of-archive block the shard was cut short: its last
  // sample may lack members.
  finish(ended && !resyncing);
  return Status::Ok();
}

}  // namespace joaderfs
