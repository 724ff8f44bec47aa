// Record v1 of the sample stream (docs/design.md 2.4, joaderfs-stream(5)): a
// 64-byte little-endian header, the HWC uint8 payload, zero padding to a
// multiple of 64 bytes. Or, for jobs with `format=tfrecord`, the same sample
// as a TFRecord holding a tf.train.Example (FrameRecord below).

#ifndef JOADERFS_RECORDS_RECORD_H_
#define JOADERFS_RECORDS_RECORD_H_

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace joaderfs {

// The last epoch a record can name: its header's epoch field has 32 bits.
// Specs and resume writes are held to it (docs/design.md 2.4).
inline constexpr uint64_t kMaxRecordEpoch = 0xffffffffu;

// A flag of the header beside loader/augment.h's: the record repeats the
// reader's previous one, in place of a skipped sample, so that a reader
// that sized the file reads the bytes it was told (docs/design.md 2.4
// "File semantics").
inline constexpr uint32_t kRecordRepeat = 1u << 2;

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

// The framing of a job's records (spec key `format`).
enum class RecordFormat : uint8_t {
  kPlain,     // JSF1 records, above
  kTfRecord,  // TFRecords of tf.train.Example (docs/design.md 2.4)
};

// The bytes of one record around its payload: `head`, the payload's pixels
// (never copied), then the tail. A TFRecord's tail is its Example's
// checksum, which reads every pixel (about 30 ms for a 268 MB record), so
// FrameRecord leaves it to FinishChecksum: the reply runs it outside the job
// manager's lock, before the tail is sent. The tail's size is fixed from the
// start, so a reply may point into it first.
//
// Shared by queues and replies; thread-safe.
class RecordFrame {
 public:
  RecordFrame(std::string head, std::string tail, std::optional<uint32_t> example_crc);

  const std::string& head() const { return head_; }
  // The tail's bytes: the padding, or the checksum once FinishChecksum ran.
  const char* tail_data() const { return tail_.data(); }
  size_t tail_size() const { return tail_.size(); }
  uint64_t bytes(uint64_t payload) const { return head_.size() + payload + tail_.size(); }

  bool checksum_pending() const { return example_crc_.has_value(); }
  // Writes the checksum of the Example ending in `pixels` (the payload, all
  // of it) into the tail, once; nothing for a frame without one.
  void FinishChecksum(const uint8_t* pixels, uint64_t n) const;

 private:
  const std::string head_;
  mutable std::string tail_;
  // The CRC-32C of the Example's bytes before the pixels (kTfRecord).
  const std::optional<uint32_t> example_crc_;
  mutable std::once_flag checksummed_;
};

// The frame of a record of `h`. kPlain: the 64-byte header and the zero
// padding. kTfRecord: the TFRecord length and its masked CRC-32C, the
// Example's bytes up to its last field's pixels, and the masked CRC-32C of
// the Example (FinishChecksum). The Example's features: image/encoded (the
// pixels), image/format "raw", image/height, image/width, image/channels,
// image/class/label, image/id, image/epoch; image/crop/{x,y,width,height}
// where `h` holds a crop box; image/flipped (0 or 1) where `flip_feature`
// (the job may flip).
std::shared_ptr<const RecordFrame> FrameRecord(RecordFormat format, const RecordHeader& h,
                                               bool flip_feature);

}  // namespace joaderfs

#endif  // JOADERFS_RECORDS_RECORD_H_
