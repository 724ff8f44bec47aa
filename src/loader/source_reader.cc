#include "loader/source_reader.h"

#include <spdlog/spdlog.h>

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

struct Request {
  FileRange range;
  uint64_t max_bytes = 0;
  uint64_t charged = 0;  // counted in flight while it runs
  SourceReader::Done done;
  Clock::time_point started;
  Clock::time_point deadline;
  bool timed_out = false;
};

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
  std::list<std::shared_ptr<Request>> running GUARDED_BY(mu);
  std::unordered_map<std::string, unsigned> stuck_paths GUARDED_BY(mu);
  unsigned live GUARDED_BY(mu) = 0;  // threads not stuck
  unsigned stuck GUARDED_BY(mu) = 0;
  unsigned calls_running GUARDED_BY(mu) = 0;
  uint64_t in_flight GUARDED_BY(mu) = 0;
  bool stopping GUARDED_BY(mu) = false;
  SourceReaderStats stats GUARDED_BY(mu);

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

  bool Startable() const REQUIRES(mu) {
    return !queue.empty() &&
           (in_flight == 0 || in_flight + queue.front()->charged <= options.max_bytes_in_flight);
  }

  void Release(uint64_t bytes) {
    {
      MutexLock lock(mu);
      in_flight -= bytes;
    }
    work.notify_all();
  }

  void Work() {
    MutexLock lock(mu);
    for (;;) {
      work.wait(lock, [this]() REQUIRES(mu) { return stopping || Startable(); });
      if (stopping) break;
      std::shared_ptr<Request> r = std::move(queue.front());
      queue.pop_front();
      if (std::string why = RefusalLocked(r->range.path); !why.empty()) {
        Call(std::move(r->done), Refused(std::move(why)));
        continue;
      }
      in_flight += r->charged;
      r->started = Clock::now();
      r->deadline = r->started + options.timeout;
      const auto at = running.insert(running.end(), r);
      watch.notify_all();
      lock.unlock();

      Result result;
      std::string bytes;
      result.status = options.store->Read(r->range, r->max_bytes, &bytes, &result.as_scanned);

      lock.lock();
      running.erase(at);
      if (r->timed_out) {
        // Failed and replaced by the watchdog: the result is dropped. The
        // thread serves again only where one is missing.
        --stuck;
        if (--stuck_paths[r->range.path] == 0) stuck_paths.erase(r->range.path);
        // After Stop() the logger may be gone already.
        if (stopping) return;
        spdlog::info("a read of {} returned {:.1f} s after its deadline", r->range.path,
                     Seconds(Clock::now() - r->deadline));
        if (live >= options.threads) return;
        ++live;
        continue;
      }
      stats.wait_seconds += Seconds(Clock::now() - r->started);
      ++stats.reads;
      in_flight -= r->charged;
      if (result.status.ok()) {
        stats.bytes += bytes.size();
        // Counted in flight until the decode frees them.
        const uint64_t size = bytes.size();
        in_flight += size;
        auto held = new std::string(std::move(bytes));
        result.bytes = Bytes(held, [self = shared_from_this(), size](const std::string* b) {
          delete b;
          self->Release(size);
        });
      }
      work.notify_all();
      Call(std::move(r->done), std::move(result));
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
      for (const auto& r : running) {
        if (r->timed_out || r->deadline > now) continue;
        r->timed_out = true;
        --live;
        ++stuck;
        ++stuck_paths[r->range.path];
        ++stats.timed_out;
        ++stats.reads;
        stats.wait_seconds += Seconds(options.timeout);
        in_flight -= r->charged;
        Result result;
        result.status = Status::IOError(
            fmt::format("{}: no answer within read_timeout={:g} s (the read is abandoned)",
                        r->range.path, Seconds(options.timeout)));
        result.stuck = true;
        failed.emplace_back(std::move(r->done), std::move(result));
        if (live + stuck < options.threads + options.max_extra_threads) StartThread();
      }
      if (live == 0) {  // no thread left to run what waits
        for (auto& r : queue) {
          failed.emplace_back(std::move(r->done), Refused(RefusalLocked(r->range.path)));
        }
        queue.clear();
      }
      if (!failed.empty()) {
        spdlog::warn("{} read(s) of SOURCE passed read_timeout; {} I/O thread(s) blocked now",
                     failed.size(), stuck);
      }
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
    for (auto& r : state_->running) running_dones.push_back(std::move(r->done));
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
  st.queued = state_->queue.size();
  return st;
}

const SourceReaderOptions& SourceReader::options() const { return state_->options; }

}  // namespace joaderfs
