// Framing of the stream: records read in arbitrary slices.

#include "records/record_queue.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

namespace joaderfs {
namespace {

SamplePtr Pixels(uint32_t h, uint32_t w, uint8_t value) {
  auto s = std::make_shared<DecodedSample>();
  s->height = h;
  s->width = w;
  s->channels = 3;
  s->pixels.reset(new uint8_t[s->bytes()], std::default_delete<uint8_t[]>());
  std::memset(s->pixels.get(), value, s->bytes());
  return s;
}

RecordHeader Header(const SamplePtr& s, uint64_t id) {
  RecordHeader h;
  h.sample_id = id;
  h.height = s->height;
  h.width = s->width;
  h.channels = s->channels;
  return h;
}

std::vector<uint8_t> Bytes(const RecordQueue::Reply& reply) {
  std::vector<uint8_t> out;
  for (const iovec& v : reply.iov) {
    const auto* p = static_cast<const uint8_t*>(v.iov_base);
    out.insert(out.end(), p, p + v.iov_len);
  }
  return out;
}

TEST(RecordQueue, AnySliceSizeGivesTheSameBytes) {
  const SamplePtr a = Pixels(3, 5, 7), b = Pixels(2, 2, 9);
  std::vector<uint8_t> whole;
  {
    RecordQueue q;
    q.Push(a, Header(a, 1));
    q.Push(b, Header(b, 2));
    whole = Bytes(*q.Take(1 << 20));
    EXPECT_TRUE(q.empty());
  }
  ASSERT_EQ(whole.size(), Header(a, 1).record_bytes() + Header(b, 2).record_bytes());
  EXPECT_EQ(std::memcmp(whole.data(), "JSF1", 4), 0);
  EXPECT_EQ(whole[64], 7);       // a's first pixel byte
  EXPECT_EQ(whole[64 + 45], 0);  // padding after a's 45 bytes
  for (uint64_t slice : {1, 7, 63, 64, 65, 100}) {
    RecordQueue q;
    q.Push(a, Header(a, 1));
    q.Push(b, Header(b, 2));
    std::vector<uint8_t> got;
    while (!q.empty()) {
      const auto part = Bytes(*q.Take(slice));
      ASSERT_LE(part.size(), slice);
      got.insert(got.end(), part.begin(), part.end());
    }
    EXPECT_EQ(got, whole) << "slices of " << slice;
  }
}

TEST(RecordQueue, RepliesKeepTheirBytesAlive) {
  RecordQueue q;
  std::shared_ptr<RecordQueue::Reply> reply;
  {
    const SamplePtr a = Pixels(4, 4, 5);
    q.Push(a, Header(a, 3));
    reply = q.Take(1 << 20);
  }
  EXPECT_EQ(q.records(), 0u);
  EXPECT_EQ(Bytes(*reply)[64], 5);
}

// A TFRecord's checksum is written by FinishChecksums, outside the owner's
// lock, even into a reply holding only the tail: the reply keeps the pixels
// the checksum reads alive after the queue dropped them.
TEST(RecordQueue, TfRecordChecksumsAreFinishedByTheReply) {
  std::vector<uint8_t> whole;
  {
    const SamplePtr a = Pixels(5, 7, 3);
    RecordQueue q;
    q.Push(a, FrameRecord(RecordFormat::kTfRecord, Header(a, 4), false));
    const auto reply = q.Take(1 << 20);
    reply->FinishChecksums();
    whole = Bytes(*reply);
  }
  for (uint64_t slice : {1, 13, 200}) {
    std::vector<uint8_t> got;
    std::vector<std::shared_ptr<RecordQueue::Reply>> replies;
    {
      const SamplePtr a = Pixels(5, 7, 3);
      RecordQueue q;
      q.Push(a, FrameRecord(RecordFormat::kTfRecord, Header(a, 4), false));
      while (!q.empty()) replies.push_back(q.Take(slice));
    }
    for (const auto& reply : replies) {
      reply->FinishChecksums();
      const auto part = Bytes(*reply);
      got.insert(got.end(), part.begin(), part.end());
    }
    EXPECT_EQ(got, whole) << "slices of " << slice;
  }
  // Unfinished, the tail is no checksum: the test above would catch a reply
  // that skipped FinishChecksums.
  const SamplePtr a = Pixels(5, 7, 3);
  RecordQueue q;
  q.Push(a, FrameRecord(RecordFormat::kTfRecord, Header(a, 4), false));
  EXPECT_NE(Bytes(*q.Take(1 << 20)), whole);
}

}  // namespace
}  // namespace joaderfs
