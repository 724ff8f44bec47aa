// Record v1 of the sample stream (docs/design.md 2.4, joaderfs-stream(5)): a
// 64-byte little-endian header, the HWC uint8 payload, zero padding to a
// multiple of 64 bytes.

#ifndef JOADERFS_JOBS_RECORD_H_
#define JOADERFS_JOBS_RECORD_H_

#include <array>
#include <cstdint>
#include <optional>

namespace joaderfs {

// The last epoch a record can name: its header's epoch field has 32 bits.
// Specs and resume writes are held to it (docs/design.md 2.4).
inline constexpr uint64_t kMaxRecordEpoch = 0xffffffffu;

inline constexpr size_t kRecordHeaderSize = 64;
inline constexpr size_t kRecordAlignment = 64;
inline constexpr uint32_t kDtypeUint8 = 1;

struct RecordHeader {
  uint64_t sample_id = 0;
  int64_t label = 0;
  uint32_t epoch = 0;
  // 0 for centre-crop, flip=0 jobs; else loader/augment.h's kRecordFlipped
  // and kRecordCropBox, with the crop box (in the base image's pixels) in
  // `crop_box` as x | y << 16 | w << 32 | h << 48.
  uint32_t flags = 0;
  uint32_t height = 0;
  uint32_t width = 0;
  uint32_t channels = 3;
  uint32_t dtype = kDtypeUint8;
  uint64_t crop_box = 0;  // 0 without kRecordCropBox

  uint64_t payload_bytes() const { return uint64_t{height} * width * channels; }
  // Header, payload and padding.
  uint64_t record_bytes() const { return RecordBytes(payload_bytes()); }

  static uint64_t RecordBytes(uint64_t payload) {
    return kRecordHeaderSize +
           (payload + kRecordAlignment - 1) / kRecordAlignment * kRecordAlignment;
  }
};

std::array<uint8_t, kRecordHeaderSize> EncodeRecordHeader(const RecordHeader& h);

// Returns the header, or nothing when the bytes are not a v1 header (magic,
// header size, dtype, or payload size disagree).
std::optional<RecordHeader> DecodeRecordHeader(const uint8_t* bytes);

}  // namespace joaderfs

#endif  // JOADERFS_JOBS_RECORD_H_
