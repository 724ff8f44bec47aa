// RecordQueue: the records handed to one reader of a job stream and not yet
// read, and the framing of replies: a read may stop anywhere inside a
// record and the next read continues it.
//
// A reply is a list of iovecs over the records' frames (header and padding,
// or a TFRecord's framing; records/record.h RecordFrame) and the samples'
// pixels (never copied); the Reply keeps all of them alive until it is sent.
//
// Not thread-safe: its owner serialises calls.

#ifndef JOADERFS_RECORDS_RECORD_QUEUE_H_
#define JOADERFS_RECORDS_RECORD_QUEUE_H_

#include <sys/uio.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "loader/decoded_sample.h"
#include "records/record.h"

namespace joaderfs {

class RecordQueue {
 public:
  // The bytes of one reply, alive as long as this object. Its frames'
  // checksums are written by FinishChecksums, which the owner calls outside
  // its lock before sending `iov`.
  struct Reply {
    std::vector<SamplePtr> samples;
    std::vector<std::shared_ptr<const RecordFrame>> frames;
    std::vector<iovec> iov;
    // Frames whose checksum is still to be written, with their samples.
    std::vector<std::pair<std::shared_ptr<const RecordFrame>, SamplePtr>> unfinished;

    void FinishChecksums() const;
  };

  // Appends a whole JSF1 record of `sample` under `header`.
  void Push(SamplePtr sample, const RecordHeader& header);
  // Appends a whole record: `frame`'s head, the sample's pixels, its tail.
  void Push(SamplePtr sample, std::shared_ptr<const RecordFrame> frame);
  bool empty() const { return pieces_.empty(); }
  size_t records() const { return pieces_.size(); }
  // Bytes of the records it holds, whole even when partly read: each keeps
  // its sample alive until its last byte is taken.
  uint64_t held_bytes() const { return held_bytes_; }
  // Bytes not yet taken: held_bytes() less what was read of the front.
  uint64_t unread_bytes() const {
    return held_bytes_ - (pieces_.empty() ? 0 : pieces_.front().offset);
  }

  // Moves up to `max_bytes` (> 0) of the queue's front into a reply.
  // REQUIRES: !empty().
  std::shared_ptr<Reply> Take(uint64_t max_bytes);

 private:
  struct Piece {
    SamplePtr sample;
    std::shared_ptr<const RecordFrame> frame;
    uint64_t total = 0;   // head + payload + tail
    uint64_t offset = 0;  // bytes already read
  };
  // Appends bytes [from, from + n) of `piece` to `reply`.
  static void Append(const Piece& piece, uint64_t from, uint64_t n, Reply* reply);

  std::deque<Piece> pieces_;
  uint64_t held_bytes_ = 0;
};

}  // namespace joaderfs

#endif  // JOADERFS_RECORDS_RECORD_QUEUE_H_
