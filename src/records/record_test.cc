#include "records/record.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "loader/augment.h"

namespace joaderfs {
namespace {

uint32_t U32At(const uint8_t* b, size_t offset) {
  return uint32_t{b[offset]} | uint32_t{b[offset + 1]} << 8 | uint32_t{b[offset + 2]} << 16 |
         uint32_t{b[offset + 3]} << 24;
}

uint64_t U64At(const uint8_t* b, size_t offset) {
  return uint64_t{U32At(b, offset)} | uint64_t{U32At(b, offset + 4)} << 32;
}

void PutU32(uint8_t* b, size_t offset, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[offset + i] = static_cast<uint8_t>(v >> (8 * i));
}

void PutU64(uint8_t* b, size_t offset, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[offset + i] = static_cast<uint8_t>(v >> (8 * i));
}

RecordHeader Sample() {
  RecordHeader h;
  h.sample_id = 0x0102030405060708ULL;
  h.label = -3;
  h.epoch = 0xA1B2C3D4;
  h.flags = 0;
  h.height = 224;
  h.width = 200;
  h.channels = 3;
  h.dtype = kDtypeUint8;
  return h;
}

TEST(RecordTest, Constants) {
  EXPECT_EQ(kRecordHeaderSize, 64u);
  EXPECT_EQ(kRecordAlignment, 64u);
  EXPECT_EQ(kDtypeUint8, 1u);
  const RecordHeader h;
  EXPECT_EQ(h.channels, 3u);
  EXPECT_EQ(h.dtype, 1u);
  EXPECT_EQ(h.flags, 0u);
}

TEST(RecordTest, HeaderByteLayout) {
  const auto bytes = EncodeRecordHeader(Sample());
  ASSERT_EQ(bytes.size(), 64u);
  const uint8_t* b = bytes.data();
  EXPECT_EQ(std::memcmp(b, "JSF1", 4), 0);
  EXPECT_EQ(U32At(b, 4), 64u);
  // Little-endian, byte by byte.
  const uint8_t id_bytes[8] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
  EXPECT_EQ(std::memcmp(b + 8, id_bytes, 8), 0);
  EXPECT_EQ(U64At(b, 16), static_cast<uint64_t>(int64_t{-3}));
  EXPECT_EQ(b[16], 0xFD);
  EXPECT_EQ(b[23], 0xFF);
  EXPECT_EQ(b[24], 0xD4);
  EXPECT_EQ(b[27], 0xA1);
  EXPECT_EQ(U32At(b, 24), 0xA1B2C3D4u);
  EXPECT_EQ(U32At(b, 28), 0u);
  EXPECT_EQ(U32At(b, 32), 224u);  // height
  EXPECT_EQ(U32At(b, 36), 200u);  // width
  EXPECT_EQ(U32At(b, 40), 3u);    // channels
  EXPECT_EQ(U32At(b, 44), 1u);    // dtype
  EXPECT_EQ(U64At(b, 48), 224u * 200u * 3u);
  EXPECT_EQ(U64At(b, 56), 0u);  // crop_box
}

TEST(RecordTest, PayloadBytesAreHeightWidthChannels) {
  RecordHeader h = Sample();
  EXPECT_EQ(h.payload_bytes(), 224u * 200u * 3u);
  h.height = 70000;
  h.width = 70000;
  h.channels = 3;
  // No 32-bit overflow.
  EXPECT_EQ(h.payload_bytes(), 70000ull * 70000ull * 3ull);
  EXPECT_EQ(U64At(EncodeRecordHeader(h).data(), 48), 70000ull * 70000ull * 3ull);
}

TEST(RecordTest, RecordBytesPadsToSixtyFour) {
  EXPECT_EQ(RecordHeader::RecordBytes(0), 64u);
  EXPECT_EQ(RecordHeader::RecordBytes(1), 128u);
  EXPECT_EQ(RecordHeader::RecordBytes(63), 128u);
  EXPECT_EQ(RecordHeader::RecordBytes(64), 128u);
  EXPECT_EQ(RecordHeader::RecordBytes(65), 192u);
  EXPECT_EQ(RecordHeader::RecordBytes(224 * 224 * 3), 64u + 224 * 224 * 3);  // 150528 = 2352*64
  RecordHeader h;
  h.height = 10;
  h.width = 10;
  h.channels = 3;  // 300 bytes -> 320
  EXPECT_EQ(h.record_bytes(), 64u + 320u);
  h.height = 7;
  h.width = 5;  // 105 -> 128
  EXPECT_EQ(h.record_bytes(), 64u + 128u);
  for (uint64_t payload = 0; payload < 1000; ++payload) {
    const uint64_t total = RecordHeader::RecordBytes(payload);
    EXPECT_EQ(total % 64, 0u) << payload;
    EXPECT_GE(total, 64 + payload) << payload;
    EXPECT_LT(total, 64 + payload + 64) << payload;
  }
}

TEST(RecordTest, RoundTrip) {
  const RecordHeader h = Sample();
  const auto bytes = EncodeRecordHeader(h);
  const auto back = DecodeRecordHeader(bytes.data());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->sample_id, h.sample_id);
  EXPECT_EQ(back->label, h.label);
  EXPECT_EQ(back->epoch, h.epoch);
  EXPECT_EQ(back->flags, h.flags);
  EXPECT_EQ(back->height, h.height);
  EXPECT_EQ(back->width, h.width);
  EXPECT_EQ(back->channels, h.channels);
  EXPECT_EQ(back->dtype, h.dtype);
  EXPECT_EQ(back->payload_bytes(), h.payload_bytes());
}

TEST(RecordTest, DecodesHandWrittenHeader) {
  uint8_t b[64] = {};
  std::memcpy(b, "JSF1", 4);
  PutU32(b, 4, 64);
  PutU64(b, 8, 123456789);
  PutU64(b, 16, 999);
  PutU32(b, 24, 4);
  PutU32(b, 28, 0);
  PutU32(b, 32, 2);  // height
  PutU32(b, 36, 5);  // width
  PutU32(b, 40, 3);
  PutU32(b, 44, 1);
  PutU64(b, 48, 30);
  const auto h = DecodeRecordHeader(b);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->sample_id, 123456789u);
  EXPECT_EQ(h->label, 999);
  EXPECT_EQ(h->epoch, 4u);
  EXPECT_EQ(h->height, 2u);
  EXPECT_EQ(h->width, 5u);
  EXPECT_EQ(h->channels, 3u);
  EXPECT_EQ(h->record_bytes(), 128u);
}

TEST(RecordTest, RejectsBadMagic) {
  auto bytes = EncodeRecordHeader(Sample());
  for (int i = 0; i < 4; ++i) {
    auto bad = bytes;
    bad[i] ^= 0x20;  // e.g. "jSF1"
    EXPECT_FALSE(DecodeRecordHeader(bad.data()).has_value()) << i;
  }
  auto v2 = bytes;
  v2[3] = '2';
  EXPECT_FALSE(DecodeRecordHeader(v2.data()).has_value());
}

TEST(RecordTest, RejectsBadHeaderSize) {
  for (uint32_t size : {0u, 32u, 63u, 65u, 128u, 0x40000000u}) {
    auto bytes = EncodeRecordHeader(Sample());
    PutU32(bytes.data(), 4, size);
    EXPECT_FALSE(DecodeRecordHeader(bytes.data()).has_value()) << size;
  }
}

TEST(RecordTest, RejectsBadDtype) {
  for (uint32_t dtype : {0u, 2u, 0x01000000u}) {
    auto bytes = EncodeRecordHeader(Sample());
    PutU32(bytes.data(), 44, dtype);
    EXPECT_FALSE(DecodeRecordHeader(bytes.data()).has_value()) << dtype;
  }
}

TEST(RecordTest, RejectsPayloadMismatch) {
  const RecordHeader h = Sample();
  for (uint64_t payload :
       {h.payload_bytes() - 1, h.payload_bytes() + 1, uint64_t{0}, h.payload_bytes() << 32}) {
    auto bytes = EncodeRecordHeader(h);
    PutU64(bytes.data(), 48, payload);
    EXPECT_FALSE(DecodeRecordHeader(bytes.data()).has_value()) << payload;
  }
  // Dimensions changed under the payload size.
  auto bytes = EncodeRecordHeader(h);
  PutU32(bytes.data(), 36, h.width + 1);
  EXPECT_FALSE(DecodeRecordHeader(bytes.data()).has_value());
  bytes = EncodeRecordHeader(h);
  PutU32(bytes.data(), 40, 4);
  EXPECT_FALSE(DecodeRecordHeader(bytes.data()).has_value());
}

uint32_t Unmask(uint32_t masked) {
  const uint32_t rotated = masked - 0xa282ead8u;
  return (rotated >> 17) | (rotated << 15);
}

// The framing TensorFlow's record reader checks (python/tests/test_native.py
// parses the Examples with TensorFlow itself).
TEST(RecordTest, TfRecordFraming) {
  RecordHeader h;
  h.sample_id = 300;
  h.label = -1;  // ten bytes as a varint
  h.epoch = 2;
  h.height = 2;
  h.width = 3;
  h.flags = kRecordFlipped | kRecordCropBox;
  h.crop_box = 1 | uint64_t{2} << 16 | uint64_t{30} << 32 | uint64_t{40} << 48;
  std::vector<uint8_t> pixels(h.payload_bytes());
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 11);
  const auto frame = FrameRecord(RecordFormat::kTfRecord, h, true);
  ASSERT_TRUE(frame->checksum_pending());
  frame->FinishChecksum(pixels.data(), pixels.size());
  std::string record = frame->head() + std::string(pixels.begin(), pixels.end()) +
                       std::string(frame->tail_data(), frame->tail_size());
  ASSERT_EQ(record.size(), frame->bytes(pixels.size()));
  const auto* b = reinterpret_cast<const uint8_t*>(record.data());
  const uint64_t length = U64At(b, 0);
  ASSERT_EQ(record.size(), 8 + 4 + length + 4);
  EXPECT_EQ(Unmask(U32At(b, 8)), Crc32c(b, 8));
  EXPECT_EQ(Unmask(U32At(b, 12 + length)), Crc32c(b + 12, length));
  // The pixels end the Example, which names its features.
  EXPECT_EQ(record.substr(12 + length - pixels.size(), pixels.size()),
            std::string(pixels.begin(), pixels.end()));
  for (const char* key : {"image/encoded", "image/format", "raw", "image/height", "image/width",
                          "image/channels", "image/class/label", "image/id", "image/epoch",
                          "image/crop/x", "image/crop/height", "image/flipped"}) {
    EXPECT_NE(record.find(key), std::string::npos) << key;
  }
  // No crop box, no flip: no such features.
  h.flags = 0;
  const auto plain = FrameRecord(RecordFormat::kTfRecord, h, false);
  EXPECT_EQ(plain->head().find("image/crop"), std::string::npos);
  EXPECT_EQ(plain->head().find("image/flipped"), std::string::npos);
  // JSF1: the header and the zero padding, nothing left to finish.
  const auto jsf1 = FrameRecord(RecordFormat::kPlain, h, false);
  EXPECT_FALSE(jsf1->checksum_pending());
  EXPECT_EQ(jsf1->head().size(), kRecordHeaderSize);
  EXPECT_EQ(jsf1->bytes(pixels.size()), h.record_bytes());
  EXPECT_EQ(std::string(jsf1->tail_data(), jsf1->tail_size()),
            std::string(jsf1->tail_size(), '\0'));
}

}  // namespace
}  // namespace joaderfs
