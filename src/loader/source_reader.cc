#include "loader/source_reader.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <list>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/ranked_mutex.h"
#include "loader/decoder.h"

namespace joaderfs {

using Clock = std::chrono::steady_clock;

namespace {

// How far into the queue a read looks for neighbours to coalesce with.
constexpr size_t kCoalesceScan = 4096;

struct Request {
  FileRange range;
  uint64_t max_bytes = 0;
  uint64_t charged = 0;  // counted in flight while it runs
  SourceReader::Done done;
};

// One read of the store: a request, or neighbouring members of one shard
// read as one range (SourceReaderOptions coalesce_*), split among them.
struct Batch {
  std::vector<std::shared_ptr<Request>> members;  // by offset when coalesced
  FileRange range;
  uint64_t max_bytes = 0;
  uint64_t charged = 0;  // the members' charges
  Clock::time_point started;
  Clock::time_point deadline;
  bool timed_out = false;
};

// A member whose neighbours may share its read: a checked range (its
// shard's identity is compared with the scan's) within its own limit.
bool Coalescable(const Request& r) {
  return r.range.partial && r.range.checked && r.range.length > 0 && r.range.length <= r.max_bytes;
}

bool SameFile(const FileRange& a, const FileRange& b) {
  return a.path == b.path && a.file_size == b.file_size && a.mtime_ns == b.mtime_ns &&
         a.inode == b.inode;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

// Shared by the SourceReader and every I/O thread, which are detached: the
// last of them frees it, so a stuck thread that returns after Stop() (or
// after the process began to exit) touches only this.
struct SourceReader::State : std::enable_shared_from_this<State> {
  explicit State(SourceReaderOptions o) : options(o) {}

  const SourceReaderOptions options;
  mutable Mutex mu;
  std::condition_variable_any work;   // a read to start, room in flight, or stop
  std::condition_variable_any watch;  // a new deadline, or stop
  std::condition_variable_any calls;  // a `done` call ended
  std::deque<std::shared_ptr<Request>> queue GUARDED_BY(mu);
  std::list<std::shared_ptr<Batch>> running GUARDED_BY(mu);
  std::unordered_map<std::string, unsigned> stuck_paths GUARDED_BY(mu);
  unsigned live GUARDED_BY(mu) = 0;  // threads not stuck
  unsigned stuck GUARDED_BY(mu) = 0;
  unsigned calls_running GUARDED_BY(mu) = 0;
  uint64_t in_flight GUARDED_BY(mu) = 0;
  bool stopping GUARDED_BY(mu) = false;
  SourceReaderStats stats GUARDED_BY(mu);
  LatencyHistogram read_latency;  // each read's time (a timed-out one's: its deadline)

  void StartThread() REQUIRES(mu) {
    ++live;
    std::thread([self = shared_from_this()] { self->Work(); }).detach();
  }

  // Why a read of `path` cannot have a thread now, or empty.
  std::string RefusalLocked(const std::string& path) const REQUIRES(mu) {
    if (stuck_paths.count(path)) {
      return path +
             ": an earlier read of it is still blocked (past read_timeout); not read again "
             "until it returns";
    }
    if (live == 0) {
      return path + ": every I/O thread is blocked in a read (" + std::to_string(stuck) +
             " past read_timeout)";
    }
    return {};
  }

  // Calls `done`, if any, without the lock; Stop() waits for such calls to
  // end. The result is dropped without the lock too: freeing its bytes
  // takes it (Release()).
  void Call(Done done, Result result) REQUIRES(mu) {
    ++calls_running;
    mu.unlock();
    if (done) done(std::move(result));
    done = nullptr;  // its captures go before Stop() may return
    result = Result{};
    mu.lock();
    if (--calls_running == 0) calls.notify_all();
  }

  Result Refused(std::string message) REQUIRES(mu) {
    ++stats.refused;
    Result r;
    r.status = Status::IOError(std::move(message));
    r.stuck = true;
    return r;
  }

  // Whether no running read is still within its deadline.
  bool NoLiveRead() const REQUIRES(mu) {
    return std::none_of(running.begin(), running.end(),
                        [](const auto& r) { return !r->timed_out; });
  }

  bool Startable() const REQUIRES(mu) {
    return !queue.empty() &&
           (in_flight == 0 || in_flight + queue.front()->charged <= options.max_bytes_in_flight);
  }

  void Release(uint64_t bytes) {
    {
      MutexLock lock(mu);
      in_flight -= bytes;
    }
    work.notify_one();  // the thread it wakes passes on what is left (Work)
  }

  // `first` and, when it is a shard member, the queued members of the same
  // shard near it (taken from the queue): while each gap is at most
  // coalesce_max_gap, the whole span at most coalesce_max_span, and their
  // bytes fit in flight beside what runs.
  std::shared_ptr<Batch> TakeBatch(std::shared_ptr<Request> first) REQUIRES(mu) {
    auto b = std::make_shared<Batch>();
    b->range = first->range;
    b->max_bytes = first->max_bytes;
    b->charged = first->charged;
    b->members.push_back(first);
    if (!Coalescable(*first) || options.coalesce_max_span == 0) return b;
    std::vector<std::shared_ptr<Request>> near;
    const size_t scan = std::min<size_t>(queue.size(), kCoalesceScan);
    for (size_t i = 0; i < scan; ++i) {
      const Request& r = *queue[i];
      if (Coalescable(r) && SameFile(r.range, first->range)) near.push_back(queue[i]);
    }
    if (near.empty()) return b;
    near.push_back(first);
    std::sort(near.begin(), near.end(),
              [](const auto& x, const auto& y) { return x->range.offset < y->range.offset; });
    const size_t at = std::find(near.begin(), near.end(), first) - near.begin();
    uint64_t begin = first->range.offset, end = begin + first->range.length;
    // Grows the span by `r` if the rules allow.
    auto fits = [&](const Request& r) REQUIRES(mu) {
      const uint64_t r_begin = r.range.offset, r_end = r_begin + r.range.length;
      const uint64_t gap = r_begin > end ? r_begin - end : begin > r_end ? begin - r_end : 0;
      const uint64_t span = std::max(end, r_end) - std::min(begin, r_begin);
      if (gap > options.coalesce_max_gap || span > options.coalesce_max_span) return false;
      if (in_flight + b->charged + r.charged > options.max_bytes_in_flight) return false;
      begin = std::min(begin, r_begin);
      end = std::max(end, r_end);
      b->charged += r.charged;
      return true;
    };
    size_t lo = at, hi = at + 1;
    while (hi < near.size() && fits(*near[hi])) ++hi;
    while (lo > 0 && fits(*near[lo - 1])) --lo;
    if (hi - lo == 1) return b;
    b->members.assign(near.begin() + lo, near.begin() + hi);
    for (const auto& m : b->members) {
      if (m != first) queue.erase(std::find(queue.begin(), queue.end(), m));
    }
    b->range.offset = begin;
    b->range.length = end - begin;
    b->max_bytes = end - begin;
    stats.coalesced += b->members.size() - 1;
    return b;
  }

  // Each member's bytes, cut from the read of the batch's range (without
  // the lock: up to coalesce_max_span bytes are copied).
  static Status Cut(const Batch& b, Status status, std::string bytes,
                    std::vector<std::string>* parts) {
    parts->resize(b.members.size());
    if (!status.ok()) return status;
    if (b.members.size() == 1) {
      (*parts)[0] = std::move(bytes);
      return status;
    }
    if (bytes.size() != b.range.length) {
      return Status::IOError(fmt::format("{}: a ranged read of {} bytes gave {}", b.range.path,
                                         b.range.length, bytes.size()));
    }
    for (size_t i = 0; i < b.members.size(); ++i) {
      const FileRange& r = b.members[i]->range;
      (*parts)[i] = bytes.substr(r.offset - b.range.offset, r.length);
    }
    return status;
  }

  // The result of each member of `b`: its part, counted in flight until the
  // decode frees it.
  std::vector<Result> Results(const Batch& b, const Status& status, std::vector<std::string> parts,
                              bool as_scanned, const FileStamp& seen) REQUIRES(mu) {
    std::vector<Result> results(b.members.size());
    for (size_t i = 0; i < b.members.size(); ++i) {
      Result& result = results[i];
      result.status = status;
      result.as_scanned = as_scanned;
      result.seen = seen;
      if (!status.ok()) continue;
      const uint64_t size = parts[i].size();
      stats.bytes += size;
      in_flight += size;
      auto held = new std::string(std::move(parts[i]));
      result.bytes = Bytes(held, [self = shared_from_this(), size](const std::string* h) {
        delete h;
        self->Release(size);
      });
    }
    return results;
  }

  void Work() {
    MutexLock lock(mu);
    for (;;) {
      work.wait(lock, [this]() REQUIRES(mu) { return stopping || Startable(); });
      if (stopping) break;
      std::shared_ptr<Request> first = std::move(queue.front());
      queue.pop_front();
      if (std::string why = RefusalLocked(first->range.path); !why.empty()) {
        Call(std::move(first->done), Refused(std::move(why)));
        continue;
      }
      const std::shared_ptr<Batch> b = TakeBatch(std::move(first));
      in_flight += b->charged;
      b->started = Clock::now();
      b->deadline = b->started + options.timeout;
      // Deadlines follow start order, so the watchdog needs waking only
      // when this read is the one it has to watch.
      if (NoLiveRead()) watch.notify_one();
      const auto at = running.insert(running.end(), b);
      // Each wake-up is handed on by the thread it woke: waking every idle
      // thread per event (there may be hundreds, one per read in flight on
      // a far store) cost a millisecond of CPU per GET.
      if (Startable()) work.notify_one();
      lock.unlock();

      bool as_scanned = false;
      FileStamp seen;
      std::string bytes;
      std::vector<std::string> parts;
      Status status = options.store->Read(b->range, b->max_bytes, &bytes, &as_scanned, &seen);
      status = Cut(*b, std::move(status), std::move(bytes), &parts);

      lock.lock();
      running.erase(at);
      if (b->timed_out) {
        // Failed and replaced by the watchdog: the result is dropped. The
        // thread serves again only where one is missing.
        --stuck;
        if (--stuck_paths[b->range.path] == 0) stuck_paths.erase(b->range.path);
        // After Stop() the logger may be gone already.
        if (stopping) return;
        spdlog::info("a read of {} returned {:.1f} s after its deadline", b->range.path,
                     Seconds(Clock::now() - b->deadline));
        if (live >= options.threads) return;
        ++live;
        continue;
      }
      stats.wait_seconds += Seconds(Clock::now() - b->started) * b->members.size();
      stats.reads += b->members.size();
      for (size_t i = 0; i < b->members.size(); ++i) {
        read_latency.Observe(Clock::now() - b->started);
      }
      in_flight -= b->charged;
      std::vector<Result> results = Results(*b, status, std::move(parts), as_scanned, seen);
      work.notify_one();
      for (size_t i = 0; i < results.size(); ++i) {
        Call(std::move(b->members[i]->done), std::move(results[i]));
      }
    }
    --live;
  }

  void Watch() {
    MutexLock lock(mu);
    while (!stopping) {
      Clock::time_point next = Clock::time_point::max();
      for (const auto& r : running) {
        if (!r->timed_out) next = std::min(next, r->deadline);
      }
      if (next == Clock::time_point::max()) {
        watch.wait(lock);
      } else {
        watch.wait_until(lock, next);
      }
      if (stopping) break;
      const Clock::time_point now = Clock::now();
      std::vector<std::pair<Done, Result>> failed;
      for (const auto& b : running) {
        if (b->timed_out || b->deadline > now) continue;
        b->timed_out = true;
        --live;
        ++stuck;
        ++stuck_paths[b->range.path];
        stats.timed_out += b->members.size();
        stats.reads += b->members.size();
        stats.wait_seconds += Seconds(options.timeout) * b->members.size();
        for (size_t i = 0; i < b->members.size(); ++i) read_latency.Observe(options.timeout);
        in_flight -= b->charged;
        for (const auto& r : b->members) {
          Result result;
          result.status = Status::IOError(
              fmt::format("{}: no answer within read_timeout={:g} s (the read is abandoned)",
                          r->range.path, Seconds(options.timeout)));
          result.stuck = true;
          failed.emplace_back(std::move(r->done), std::move(result));
        }
        if (live + stuck < options.threads + options.max_extra_threads) StartThread();
      }
      if (live == 0) {  // no thread left to run what waits
        for (auto& r : queue) {
          failed.emplace_back(std::move(r->done), Refused(RefusalLocked(r->range.path)));
        }
        queue.clear();
      }
      if (failed.empty()) continue;
      spdlog::warn("{} read(s) of SOURCE passed read_timeout; {} I/O thread(s) blocked now",
                   failed.size(), stuck);
      work.notify_all();
      for (auto& [done, result] : failed) Call(std::move(done), std::move(result));
    }
  }
};

SourceReader::SourceReader(SourceReaderOptions options) : state_(std::make_shared<State>(options)) {
  MutexLock lock(state_->mu);
  for (unsigned i = 0; i < options.threads; ++i) state_->StartThread();
  watchdog_ = std::thread([s = state_] { s->Watch(); });
}

SourceReader::~SourceReader() { Stop(); }

void SourceReader::Stop() {
  std::deque<std::shared_ptr<Request>> dropped;
  std::vector<Done> running_dones;
  {
    MutexLock lock(state_->mu);
    if (state_->stopping) return;
    state_->stopping = true;
    dropped.swap(state_->queue);
    for (auto& b : state_->running) {
      for (auto& r : b->members) running_dones.push_back(std::move(r->done));
    }
    state_->work.notify_all();
    state_->watch.notify_all();
    state_->calls.wait(lock, [this]() REQUIRES(state_->mu) { return state_->calls_running == 0; });
  }
  watchdog_.join();
  // Dropped here, while what their captures name is alive.
  dropped.clear();
  running_dones.clear();
}

void SourceReader::Read(FileRange range, uint64_t max_bytes, uint64_t expected_bytes, Done done) {
  auto r = std::make_shared<Request>();
  r->range = std::move(range);
  r->max_bytes = max_bytes;
  r->charged = expected_bytes;
  r->done = std::move(done);
  State& s = *state_;
  MutexLock lock(s.mu);
  if (s.stopping) return;
  if (std::string why = s.RefusalLocked(r->range.path); !why.empty()) {
    s.Call(std::move(r->done), s.Refused(std::move(why)));
    return;
  }
  s.queue.push_back(std::move(r));
  s.work.notify_one();
}

SourceReaderStats SourceReader::Stats() const {
  MutexLock lock(state_->mu);
  SourceReaderStats st = state_->stats;
  st.stuck_threads = state_->stuck;
  st.threads = state_->live + state_->stuck;
  st.bytes_in_flight = state_->in_flight;
  st.max_bytes_in_flight = state_->options.max_bytes_in_flight;
  st.queued = state_->queue.size();
  st.running = state_->running.size();
  st.read_latency = state_->read_latency.Take();
  return st;
}

const SourceReaderOptions& SourceReader::options() const { return state_->options; }

}  // namespace joaderfs
