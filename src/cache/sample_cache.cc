#include "cache/sample_cache.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/printable.h"
#include "common/rate_limited_log.h"
#include "loader/decoder.h"

namespace joaderfs {

FailureRetry FailureRetryFrom(std::chrono::seconds start) {
  FailureRetry r;
  r.backoff = start;
  r.cap = 60 * start;
  r.check_interval = std::min<FailureRetry::Duration>(std::chrono::seconds(2), start);
  return r;
}

SampleCache::SampleCache(const Catalog* catalog, LoaderPool* pool, DiskCache* disk,
                         const RefCounts* counts, uint32_t base, uint64_t budget_bytes,
                         FailureRetry retry, SourceReader* reader, RemoteTier* remote)
    : catalog_(catalog),
      pool_(pool),
      disk_(disk),
      remote_(remote),
      ref_counts_(counts),
      base_(base),
      budget_(budget_bytes),
      retry_(retry),
      reader_(reader),
      evictable_(NewRefCntPolicy([counts](SampleId id) {
        uint32_t count = 0;
        counts->Counts(std::span(&id, 1), std::span(&count, 1));
        return count;
      })) {
  stats_.budget = budget_bytes;
  if (!reader_) {
    SourceReaderOptions ro;
    ro.threads = std::max(1u, pool->threads());
    ro.store = catalog->store();
    own_reader_ = std::make_unique<SourceReader>(ro);
    reader_ = own_reader_.get();
  }
}

// No read's callback may run into a cache that is gone.
SampleCache::~SampleCache() { StopReads(); }

void SampleCache::StopReads() {
  if (own_reader_) own_reader_->Stop();
  if (remote_) remote_->StopWaits();
}

void SampleCache::Acquire(SampleId id, Callback done) {
  AcquireWithTier(id, [done = std::move(done)](const SamplePtr& sample, Tier) { done(sample); });
}

void SampleCache::AcquireWithTier(SampleId id, TierCallback done) {
  SamplePtr ready;
  {
    MutexLock lock(mu_);
    // A bad sample with no load under way is answered null at once, unless
    // it may have healed.
    bool answer_bad = false;
    std::optional<FileIdentity> unless_same;
    if (auto bad = bad_.find(id); bad != bad_.end() && !entries_.count(id)) {
      Bad& b = bad->second;
      const Clock::time_point now = Clock::now();
      const bool backoff_over = now >= b.retry_at;
      if (!backoff_over && (b.stuck || now < b.checked_at + retry_.check_interval)) {
        answer_bad = true;
      } else {
        b.checked_at = now;
        if (!backoff_over) unless_same = b.file;
      }
    }
    if (answer_bad) {
      ++stats_.hits;
      ++owed_releases_[id];
    } else if (auto it = entries_.find(id); it != entries_.end()) {
      ++stats_.hits;
      Entry& e = it->second;
      if (e.pins++ == 0 && e.sample) {
        evictable_->Erase(id);
        stats_.pinned_bytes += e.sample->bytes();
      }
      UpdateCommitted();
      if (!e.sample) {
        e.waiters.push_back(std::move(done));
        return;
      }
      ready = e.sample;
    } else {
      ++stats_.misses;
      ++stats_.loading;
      Entry& e = entries_[id];
      e.pins = 1;
      // What it will hold, known from the base: the planner must not see a
      // huge sample as an average one while it decodes.
      e.loading_bytes = base_ > 0 ? SquareSampleBytes(base_) : average_bytes_.load();
      loading_bytes_ += e.loading_bytes;
      e.waiters.push_back(std::move(done));
      UpdateCommitted();
      pool_->Submit([this, id, unless_same] { Load(id, unless_same); });
      return;
    }
  }
  done(ready, Tier::kRam);
}

void SampleCache::Release(SampleId id) {
  MutexLock lock(mu_);
  if (auto owed = owed_releases_.find(id); owed != owed_releases_.end()) {
    if (--owed->second == 0) owed_releases_.erase(owed);
    return;
  }
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.pins == 0) return;  // an extra one
  Entry& e = it->second;
  if (--e.pins == 0 && e.sample) {
    evictable_->Insert(id);
    stats_.pinned_bytes -= e.sample->bytes();
    EvictLocked();
    UpdateCommitted();
  }
}

void SampleCache::RefreshNeeds() {
  MutexLock lock(mu_);
  evictable_->RefreshAll();
}

void SampleCache::UpdateCommitted() { committed_ = stats_.pinned_bytes + loading_bytes_; }

SampleCache::FileIdentity SampleCache::Identify(SampleId id) const {
  const SourceIdentity now = catalog_->store()->Identify(catalog_->path(id));
  return {now.size, now.version};
}

void SampleCache::Load(SampleId id, std::optional<FileIdentity> unless_same) {
  Outcome o;
  if (unless_same && Identify(id) == *unless_same) {
    o.unchanged = true;
    return Finish(id, std::move(o));
  }
  if (disk_) {
    o.status = disk_->Get(id, o.loaded.get());
    o.from_disk = o.status.ok();
    if (o.from_disk) return Finish(id, std::move(o));
  }
  if (remote_) {
    o.status = remote_->Fetch(id, o.loaded.get());
    o.from_remote = o.status.ok();
    if (o.from_remote) return Finish(id, std::move(o));
    if (o.status.code() == Status::Code::kBusy) {
      // Another daemon is decoding it: its value is awaited on the tier's
      // thread, and this decode thread goes on to other samples.
      remote_->AwaitLeased(id, [this, id](Status s, std::shared_ptr<DecodedSample> sample) {
        if (!s.ok()) return ReadAndDecode(id);
        pool_->Submit([this, id, sample = std::move(sample)]() mutable {
          Outcome fetched;
          fetched.status = Status::Ok();
          fetched.loaded = std::move(sample);
          fetched.from_remote = true;
          Finish(id, std::move(fetched));
        });
      });
      return;
    }
  }
  ReadAndDecode(id);
}

void SampleCache::ReadAndDecode(SampleId id) {
  // The read runs on the reader's I/O threads, so that a file whose reads
  // hang holds no decode thread; its bytes come back to a decode thread.
  FileRange range = catalog_->location(id);
  const uint64_t expected = range.partial ? range.length : range.file_size;
  reader_->Read(range, MaxImageFileBytes(), expected, [this, id, range](SourceReader::Result read) {
    pool_->Submit([this, id, range, read = std::move(read)]() mutable {
      Decode(id, range, std::move(read));
    });
  });
}

void SampleCache::Decode(SampleId id, const FileRange& range, SourceReader::Result read) {
  Outcome o;
  o.status = std::move(read.status);
  // A file whose identity the catalog had not taken when it was located
  // gets the one its bytes were read with (or is compared with the one
  // taken meanwhile), so that its decode may be kept.
  o.as_scanned =
      read.as_scanned || (o.status.ok() && !range.checked && catalog_->Confirm(id, read.seen));
  o.stuck = read.stuck;
  if (o.status.ok()) {
    const auto started = std::chrono::steady_clock::now();
    o.status = DecodeBaseFromBytes(range, *read.bytes, base_, o.loaded.get());
    decode_latency_.Observe(std::chrono::steady_clock::now() - started);
  }
  read.bytes.reset();  // no longer in flight
  Finish(id, std::move(o));
}

void SampleCache::Finish(SampleId id, Outcome o) {
  const Status& s = o.status;
  const bool from_disk = o.from_disk;
  const bool unchanged = o.unchanged;
  const bool as_scanned = o.as_scanned;
  auto& loaded = o.loaded;
  SamplePtr sample;
  if (!unchanged && s.ok()) sample = std::move(loaded);
  // Written through: a later epoch, a later job or a restarted daemon may
  // want it, and its pixels are at hand now. The tier's key names the file
  // the scan saw: pixels of a file replaced since then would be served
  // under it after a remount (docs/design.md 2.4), so they are not kept.
  // A remote value's key names the same file identity, less its inode.
  if (sample && !from_disk && (as_scanned || o.from_remote) && disk_) disk_->PutAsync(id, sample);
  // Shared with the other daemons under the same rule; a failed decode
  // gives its lease up so that none of them waits for it.
  if (remote_ && !from_disk && !o.from_remote && !unchanged && !o.stuck) {
    if (sample && as_scanned) {
      remote_->PublishAsync(id, sample);
    } else if (!sample) {
      remote_->Abandon(id);
    }
  }
  // Taken after the attempt, so that a file rewritten during it counts as
  // changed at the next look.
  // Not for an abandoned read: that stat may hang too.
  const FileIdentity file = sample || unchanged || o.stuck ? FileIdentity{} : Identify(id);

  std::vector<TierCallback> waiters;
  bool healed = false;
  {
    MutexLock lock(mu_);
    auto it = entries_.find(id);
    Entry& e = it->second;
    waiters = std::move(e.waiters);
    --stats_.loading;
    loading_bytes_ -= e.loading_bytes;
    auto bad = bad_.find(id);
    if (bad != bad_.end() && !unchanged) ++stats_.retries;
    if (sample) {
      if (!from_disk && !o.from_remote) ++stats_.decoded;
      if (bad != bad_.end()) {
        bad_.erase(bad);
        --stats_.failed;
        ++stats_.healed;
        healed = true;
      }
      e.sample = sample;
      stats_.bytes += sample->bytes();
      ++stats_.entries;
      average_bytes_ = (average_bytes_ * 15 + sample->bytes()) / 16;
      if (e.pins > 0) {
        stats_.pinned_bytes += sample->bytes();
      } else {
        evictable_->Insert(id);  // every job that wanted it has gone
      }
      EvictLocked();
    } else {
      if (e.pins > 0) owed_releases_[id] += e.pins;
      entries_.erase(it);
      if (!unchanged) {
        // A first failure waits the first back-off; a failed retry twice
        // the last one, up to the cap.
        const Clock::time_point now = Clock::now();
        Bad& b = bad_[id];
        if (bad == bad_.end()) {
          ++stats_.failed;
          b.backoff = retry_.backoff;
        } else {
          b.backoff = std::min(2 * b.backoff, retry_.cap);
        }
        b.file = file;
        b.stuck = o.stuck;
        b.retry_at = now + b.backoff;
        b.checked_at = now;
      }
    }
    UpdateCommitted();
  }
  if (healed) spdlog::debug("sample {} loads again", id);
  if (!sample && !unchanged) {
    Warnings().Warn(s.code() == Status::Code::kIOError ? "skip: unreadable" : "skip: undecodable",
                    "skipping sample {} ({}): {}", id, Printable(catalog_->relpath(id)),
                    Printable(s.message(), 1024));
  }
  const Tier loaded_from = from_disk ? Tier::kDisk : o.from_remote ? Tier::kRemote : Tier::kDecode;
  for (size_t i = 0; i < waiters.size(); ++i) waiters[i](sample, i == 0 ? loaded_from : Tier::kRam);
}

// Evicts the RefCnt policy's choices until the budget holds.
void SampleCache::EvictLocked() {
  while (stats_.bytes > stats_.budget && evictable_->size() > 0) {
    const SampleId id = evictable_->Evict();
    auto it = entries_.find(id);
    if (disk_) {
      // A second chance for a sample a job still needs whose write was
      // dropped (a full queue); the disk tier ignores what it holds.
      uint32_t count = 0;
      ref_counts_->Counts(std::span(&id, 1), std::span(&count, 1));
      if (count > 0) disk_->PutAsync(id, it->second.sample);
    }
    stats_.bytes -= it->second.sample->bytes();
    --stats_.entries;
    ++stats_.evictions;
    entries_.erase(it);
  }
}

CacheStats SampleCache::Stats() const {
  CacheStats stats;
  {
    MutexLock lock(mu_);
    stats = stats_;
  }
  stats.decode_latency = decode_latency_.Take();
  return stats;
}

}  // namespace joaderfs
