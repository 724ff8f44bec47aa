#include "records/record_queue.h"

#include <algorithm>
#include <cassert>

namespace joaderfs {

void RecordQueue::Push(SamplePtr sample, const RecordHeader& header) {
  Push(std::move(sample), FrameRecord(RecordFormat::kPlain, header, false));
}

void RecordQueue::Push(SamplePtr sample, std::shared_ptr<const RecordFrame> frame) {
  const uint64_t total = frame->bytes(sample->bytes());
  pieces_.push_back({std::move(sample), std::move(frame), total, 0});
  held_bytes_ += total;
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
  const RecordFrame& frame = *piece.frame;
  const std::string& head = frame.head();
  const uint64_t payload = piece.sample->bytes();
  const uint64_t header_end = head.size(), payload_end = header_end + payload;
  const uint64_t to = from + n;
  if (from < header_end || to > payload_end) {
    reply->frames.push_back(piece.frame);
    if (frame.checksum_pending()) reply->unfinished.emplace_back(piece.frame, piece.sample);
  }
  if (from < header_end) {
    reply->iov.push_back({const_cast<char*>(head.data()) + from, std::min(to, header_end) - from});
  }
  if (to > header_end && from < payload_end) {
    const uint64_t a = std::max(from, header_end), b = std::min(to, payload_end);
    reply->samples.push_back(piece.sample);
    reply->iov.push_back({piece.sample->pixels.get() + (a - header_end), b - a});
  }
  if (to > payload_end) {
    const uint64_t a = std::max(from, payload_end);
    reply->iov.push_back({const_cast<char*>(frame.tail_data()) + (a - payload_end), to - a});
  }
}

void RecordQueue::Reply::FinishChecksums() const {
  for (const auto& [frame, sample] : unfinished)
    frame->FinishChecksum(sample->pixels.get(), sample->bytes());
}

}  // namespace joaderfs
