#include "jobs/record.h"

#include <cstring>

#include "common/coding.h"

namespace joaderfs {
namespace {

constexpr char kMagic[4] = {'J', 'S', 'F', '1'};

}  // namespace

std::array<uint8_t, kRecordHeaderSize> EncodeRecordHeader(const RecordHeader& h) {
  std::array<uint8_t, kRecordHeaderSize> b{};
  std::memcpy(b.data(), kMagic, 4);
  EncodeFixed<uint32_t>(b.data() + 4, kRecordHeaderSize);
  EncodeFixed<uint64_t>(b.data() + 8, h.sample_id);
  EncodeFixed<int64_t>(b.data() + 16, h.label);
  EncodeFixed<uint32_t>(b.data() + 24, h.epoch);
  EncodeFixed<uint32_t>(b.data() + 28, h.flags);
  EncodeFixed<uint32_t>(b.data() + 32, h.height);
  EncodeFixed<uint32_t>(b.data() + 36, h.width);
  EncodeFixed<uint32_t>(b.data() + 40, h.channels);
  EncodeFixed<uint32_t>(b.data() + 44, h.dtype);
  EncodeFixed<uint64_t>(b.data() + 48, h.payload_bytes());
  EncodeFixed<uint64_t>(b.data() + 56, h.crop_box);
  return b;
}

std::optional<RecordHeader> DecodeRecordHeader(const uint8_t* b) {
  if (std::memcmp(b, kMagic, 4) != 0 || DecodeFixed<uint32_t>(b + 4) != kRecordHeaderSize)
    return {};
  RecordHeader h;
  h.sample_id = DecodeFixed<uint64_t>(b + 8);
  h.label = DecodeFixed<int64_t>(b + 16);
  h.epoch = DecodeFixed<uint32_t>(b + 24);
  h.flags = DecodeFixed<uint32_t>(b + 28);
  h.height = DecodeFixed<uint32_t>(b + 32);
  h.width = DecodeFixed<uint32_t>(b + 36);
  h.channels = DecodeFixed<uint32_t>(b + 40);
  h.dtype = DecodeFixed<uint32_t>(b + 44);
  h.crop_box = DecodeFixed<uint64_t>(b + 56);
  if (h.dtype != kDtypeUint8 || DecodeFixed<uint64_t>(b + 48) != h.payload_bytes()) return {};
  return h;
}

}  // namespace joaderfs
