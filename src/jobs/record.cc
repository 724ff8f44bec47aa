#include "jobs/record.h"

#include <cstring>

namespace joaderfs {
namespace {

// The format is little-endian; so are the machines we build for.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__);

template <typename T>
void Put(uint8_t* at, T v) {
  std::memcpy(at, &v, sizeof v);
}

template <typename T>
T Get(const uint8_t* at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

constexpr char kMagic[4] = {'J', 'S', 'F', '1'};

}  // namespace

std::array<uint8_t, kRecordHeaderSize> EncodeRecordHeader(const RecordHeader& h) {
  std::array<uint8_t, kRecordHeaderSize> b{};
  std::memcpy(b.data(), kMagic, 4);
  Put<uint32_t>(b.data() + 4, kRecordHeaderSize);
  Put<uint64_t>(b.data() + 8, h.sample_id);
  Put<int64_t>(b.data() + 16, h.label);
  Put<uint32_t>(b.data() + 24, h.epoch);
  Put<uint32_t>(b.data() + 28, h.flags);
  Put<uint32_t>(b.data() + 32, h.height);
  Put<uint32_t>(b.data() + 36, h.width);
  Put<uint32_t>(b.data() + 40, h.channels);
  Put<uint32_t>(b.data() + 44, h.dtype);
  Put<uint64_t>(b.data() + 48, h.payload_bytes());
  Put<uint64_t>(b.data() + 56, h.reserved);
  return b;
}

std::optional<RecordHeader> DecodeRecordHeader(const uint8_t* b) {
  if (std::memcmp(b, kMagic, 4) != 0 || Get<uint32_t>(b + 4) != kRecordHeaderSize) return {};
  RecordHeader h;
  h.sample_id = Get<uint64_t>(b + 8);
  h.label = Get<int64_t>(b + 16);
  h.epoch = Get<uint32_t>(b + 24);
  h.flags = Get<uint32_t>(b + 28);
  h.height = Get<uint32_t>(b + 32);
  h.width = Get<uint32_t>(b + 36);
  h.channels = Get<uint32_t>(b + 40);
  h.dtype = Get<uint32_t>(b + 44);
  h.reserved = Get<uint64_t>(b + 56);
  if (h.dtype != kDtypeUint8 || Get<uint64_t>(b + 48) != h.payload_bytes()) return {};
  return h;
}

}  // namespace joaderfs
