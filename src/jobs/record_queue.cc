#include "jobs/record_queue.h"

#include <algorithm>
#include <cassert>

namespace joaderfs {
namespace {

const std::array<uint8_t, kRecordAlignment> kZeros{};

}  // namespace

void RecordQueue::Push(SamplePtr sample, const RecordHeader& header) {
  pieces_.push_back({std::move(sample), EncodeRecordHeader(header), header.record_bytes(), 0});
  held_bytes_ += header.record_bytes();
}

std::shared_ptr<RecordQueue::Reply> RecordQueue::Take(uint64_t max_bytes) {
  assert(!pieces_.empty() && max_bytes > 0);
  auto reply = std::make_shared<Reply>();
  uint64_t left = max_bytes;
  while (left > 0 && !pieces_.empty()) {
    Piece& piece = pieces_.front();
    const uint64_t n = std::min(left, piece.total - piece.offset);
    Append(piece, piece.offset, n, reply.get());
    piece.offset += n;
    left -= n;
    if (piece.offset == piece.total) {
      held_bytes_ -= piece.total;
      pieces_.pop_front();
    }
  }
  return reply;
}

void RecordQueue::Append(const Piece& piece, uint64_t from, uint64_t n, Reply* reply) {
  const uint64_t payload = piece.sample->bytes();
  const uint64_t header_end = kRecordHeaderSize, payload_end = kRecordHeaderSize + payload;
  const uint64_t to = from + n;
  if (from < header_end) {
    reply->headers.push_back(piece.header);
    reply->iov.push_back({reply->headers.back().data() + from, std::min(to, header_end) - from});
  }
  if (to > header_end && from < payload_end) {
    const uint64_t a = std::max(from, header_end), b = std::min(to, payload_end);
    reply->samples.push_back(piece.sample);
    reply->iov.push_back({piece.sample->pixels.get() + (a - header_end), b - a});
  }
  if (to > payload_end) {
    const uint64_t a = std::max(from, payload_end);
    reply->iov.push_back({const_cast<uint8_t*>(kZeros.data()), to - a});
  }
}

}  // namespace joaderfs
