#include "records/record.h"

#include <cstring>
#include <string_view>

#include "common/crc32c.h"
#include "loader/augment.h"

#include "common/coding.h"

namespace joaderfs {
namespace {

constexpr char kMagic[4] = {'J', 'S', 'F', '1'};

// The protobuf wire format, as much of it as a tf.train.Example of ints and
// one bytes value needs: written here rather than through a protobuf
// library, which the daemon does not link (docs/design.md 2.4).
constexpr uint8_t kTagField1Bytes = 0x0a;  // field 1, length-delimited
constexpr uint8_t kTagField2Bytes = 0x12;  // field 2, length-delimited
constexpr uint8_t kTagField3Bytes = 0x1a;  // field 3, length-delimited

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}

void PutVarint(std::string* out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out->push_back(static_cast<char>((v & 0x7f) | 0x80));
  out->push_back(static_cast<char>(v));
}

// A length-delimited field's tag and length; its `length` bytes follow.
void PutDelimited(std::string* out, uint8_t tag, uint64_t length) {
  out->push_back(static_cast<char>(tag));
  PutVarint(out, length);
}

size_t DelimitedSize(uint64_t length) { return 1 + VarintSize(length) + length; }

// One entry of Features' map<string, Feature>: key (1), value (2).
void PutEntry(std::string* out, std::string_view key, const std::string& feature) {
  PutDelimited(out, kTagField1Bytes, DelimitedSize(key.size()) + DelimitedSize(feature.size()));
  PutDelimited(out, kTagField1Bytes, key.size());
  out->append(key);
  PutDelimited(out, kTagField2Bytes, feature.size());
  out->append(feature);
}

// Feature{int64_list (3): Int64List{value (1), packed}} of one value;
// negative values take ten bytes, as protobuf writes them.
void PutInt64Entry(std::string* out, std::string_view key, int64_t value) {
  const auto v = static_cast<uint64_t>(value);
  std::string feature;
  PutDelimited(&feature, kTagField3Bytes, DelimitedSize(VarintSize(v)));
  PutDelimited(&feature, kTagField1Bytes, VarintSize(v));
  PutVarint(&feature, v);
  PutEntry(out, key, feature);
}

// Feature{bytes_list (1): BytesList{value (1)}} of one value.
void PutBytesEntry(std::string* out, std::string_view key, std::string_view value) {
  std::string feature;
  PutDelimited(&feature, kTagField1Bytes, DelimitedSize(value.size()));
  PutDelimited(&feature, kTagField1Bytes, value.size());
  feature.append(value);
  PutEntry(out, key, feature);
}

// TFRecord's checksum: the CRC-32C rotated and offset, so that a CRC of
// data holding CRCs stays well mixed.
uint32_t MaskedCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

void PutLe32(std::string* out, uint32_t v) {
  char b[4];
  std::memcpy(b, &v, 4);
  out->append(b, 4);
}

std::shared_ptr<const RecordFrame> FrameTfRecord(const RecordHeader& h, bool flip_feature) {
  // Every feature but the pixels, then the pixels' entry last, so that the
  // pixels end the Example and need no copy.
  std::string features;
  PutBytesEntry(&features, "image/format", "raw");
  PutInt64Entry(&features, "image/height", h.height);
  PutInt64Entry(&features, "image/width", h.width);
  PutInt64Entry(&features, "image/channels", h.channels);
  PutInt64Entry(&features, "image/class/label", h.label);
  PutInt64Entry(&features, "image/id", static_cast<int64_t>(h.sample_id));
  PutInt64Entry(&features, "image/epoch", h.epoch);
  if (h.flags & kRecordCropBox) {
    PutInt64Entry(&features, "image/crop/x", static_cast<int64_t>(h.crop_box & 0xffff));
    PutInt64Entry(&features, "image/crop/y", static_cast<int64_t>((h.crop_box >> 16) & 0xffff));
    PutInt64Entry(&features, "image/crop/width", static_cast<int64_t>((h.crop_box >> 32) & 0xffff));
    PutInt64Entry(&features, "image/crop/height", static_cast<int64_t>(h.crop_box >> 48));
  }
  if (flip_feature) PutInt64Entry(&features, "image/flipped", (h.flags & kRecordFlipped) ? 1 : 0);
  const uint64_t n = h.payload_bytes();
  constexpr std::string_view kEncoded = "image/encoded";
  const uint64_t bytes_list = DelimitedSize(n);
  const uint64_t feature = DelimitedSize(bytes_list);
  const uint64_t entry = DelimitedSize(kEncoded.size()) + DelimitedSize(feature);
  PutDelimited(&features, kTagField1Bytes, entry);
  PutDelimited(&features, kTagField1Bytes, kEncoded.size());
  features.append(kEncoded);
  PutDelimited(&features, kTagField2Bytes, feature);
  PutDelimited(&features, kTagField1Bytes, bytes_list);
  PutDelimited(&features, kTagField1Bytes, n);
  // Example{features (1)}: the Features' length counts the pixels too.
  const uint64_t features_length = features.size() + n;
  std::string example;
  PutDelimited(&example, kTagField1Bytes, features_length);
  example += features;
  const uint64_t length = example.size() + n;

  std::string head;
  char length_bytes[8];
  std::memcpy(length_bytes, &length, 8);
  head.append(length_bytes, 8);
  PutLe32(&head, MaskedCrc(Crc32c(length_bytes, 8)));
  head += example;
  const uint32_t example_crc = Crc32c(example.data(), example.size());
  return std::make_shared<const RecordFrame>(std::move(head), std::string(4, '\0'), example_crc);
}

}  // namespace

RecordFrame::RecordFrame(std::string head, std::string tail, std::optional<uint32_t> example_crc)
    : head_(std::move(head)), tail_(std::move(tail)), example_crc_(example_crc) {}

void RecordFrame::FinishChecksum(const uint8_t* pixels, uint64_t n) const {
  if (!example_crc_) return;
  std::call_once(checksummed_, [&] {
    std::string checksum;
    PutLe32(&checksum, MaskedCrc(Crc32cExtend(*example_crc_, pixels, n)));
    std::memcpy(tail_.data(), checksum.data(), checksum.size());
  });
}

std::shared_ptr<const RecordFrame> FrameRecord(RecordFormat format, const RecordHeader& h,
                                               bool flip_feature) {
  if (format == RecordFormat::kTfRecord) return FrameTfRecord(h, flip_feature);
  const auto header = EncodeRecordHeader(h);
  return std::make_shared<const RecordFrame>(
      std::string(reinterpret_cast<const char*>(header.data()), header.size()),
      std::string(h.record_bytes() - kRecordHeaderSize - h.payload_bytes(), '\0'), std::nullopt);
}

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
