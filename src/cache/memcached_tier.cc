#include "cache/memcached_tier.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "common/coding.h"
#include "common/rate_limited_log.h"

namespace joaderfs {
namespace {

constexpr uint64_t kMaxQueuedBytes = uint64_t{64} << 20;
constexpr uint32_t kLeaseSeconds = 2;  // memcached expires in whole seconds
constexpr auto kLeasePoll = std::chrono::milliseconds(2);

int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Status MemcachedTier::Open(const RemoteTierOptions& options, const Catalog* catalog, uint32_t base,
                           std::unique_ptr<RemoteTier>* out) {
  std::unique_ptr<MemcachedTier> t(new MemcachedTier());
  t->options_ = options;
  t->catalog_ = catalog;
  t->base_ = base;
  MemcachedClientOptions mo;
  mo.servers = options.servers;
  mo.timeout = options.timeout;
  mo.max_value = options.max_value;
  mo.tls = options.tls;
  if (Status s = MemcachedClient::Open(mo, &t->client_); !s.ok()) return s;
  if (options.key.insecure()) {
    spdlog::warn(
        "remote cache: remote_key=insecure: anyone who can reach the servers can choose what "
        "this daemon's jobs train on, and read their images");
  }
  // Which servers answer now: only for the log, the tier works either way.
  const std::vector<MemcachedClient::Result> down = t->client_->Ping();
  for (const MemcachedClient::Result& r : down) t->CountError(r);
  if (!down.empty()) {
    spdlog::warn(
        "remote cache: {} of {} servers do not answer (first: {}: {}); misses until they do",
        down.size(), options.servers.size(), down[0].server, down[0].error);
  } else {
    spdlog::info("remote cache: {} servers{}, {} ms a call", options.servers.size(),
                 options.tls.ca_file.empty() ? "" : ", over TLS", options.timeout.count());
  }
  t->publisher_ = std::thread([raw = t.get()] { raw->PublishLoop(); });
  t->lease_waiter_ = std::thread([raw = t.get()] { raw->LeaseWaitLoop(); });
  *out = std::move(t);
  return Status::Ok();
}

MemcachedTier::~MemcachedTier() {
  StopWaits();
  {
    MutexLock lock(mu_);
    stopping_ = true;
    queue_.clear();
    queued_bytes_ = 0;
  }
  wake_.notify_all();
  drained_.notify_all();
  if (publisher_.joinable()) publisher_.join();
}

MemcachedTier::ValueKey MemcachedTier::KeyOf(SampleId id) const {
  const FileRange r = catalog_->location(id);
  ValueKey k;
  std::string& m = k.material;
  PutFixed<uint32_t>(&m, base_);
  PutFixed<uint64_t>(&m, r.file_size);
  PutFixed<uint64_t>(&m, static_cast<uint64_t>(r.mtime_ns));
  PutFixed<uint64_t>(&m, r.partial ? r.offset : 0);
  PutFixed<uint64_t>(&m, r.partial ? r.length : 0);
  m += catalog_->relpath(id);
  k.name = options_.key.ValueName(m);
  k.lease = options_.key.LeaseName(m);
  if (options_.old_key) k.old_name = options_.old_key->ValueName(m);
  return k;
}

Status MemcachedTier::OpenValue(const ClusterKey& key, const ValueKey& k, std::string_view value,
                                const std::string& server, DecodedSample* out) {
  const Status s = key.Open(k.material, value, out);
  MutexLock lock(mu_);
  if (!s.ok()) {
    ++stats_.rejected;
    Warnings().Warn("remote: rejected " + server,
                    "remote cache {}: rejected a value that does not open with the cluster key "
                    "(forged, damaged or sealed by another cluster); decoding instead",
                    server);
    return s;
  }
  stats_.bytes_in += value.size();
  return s;
}

Status MemcachedTier::GetValue(const std::string& name, const ClusterKey& key, const ValueKey& k,
                               DecodedSample* out) {
  std::string value;
  const auto started = Clock::now();
  const MemcachedClient::Result r = client_->Get(name, &value);
  get_latency_.Observe(Clock::now() - started);
  if (r.kind == MemcachedClient::Result::Kind::kError) {
    CountError(r);
    return Status::IOError(r.error);
  }
  if (!r.ok()) return Status::NotFound("not in the remote tier");
  return OpenValue(key, k, value, r.server, out);
}

Status MemcachedTier::TakeLease(SampleId id, const ValueKey& k, Clock::time_point* until) {
  const ClusterKey& key = options_.key;
  const int64_t now_ms = UnixMillis();
  const MemcachedClient::Result r =
      client_->Add(k.lease, key.Lease(k.lease, now_ms + kLeaseSeconds * 1000), kLeaseSeconds);
  if (r.ok()) {
    MutexLock lock(mu_);
    leased_.insert(id);
    return Status::Ok();
  }
  if (r.kind == MemcachedClient::Result::Kind::kError) {
    CountError(r);
    return Status::NotFound("no lease");
  }
  // Another lease exists: waited on only while it is authentic and
  // unexpired, for no longer than its own expiry.
  std::string lease;
  const MemcachedClient::Result got = client_->Get(k.lease, &lease);
  if (got.kind == MemcachedClient::Result::Kind::kError) CountError(got);
  const int64_t expiry = got.ok() ? key.LeaseExpiry(k.lease, lease) : -1;
  if (expiry < 0 && got.ok()) {
    MutexLock lock(mu_);
    ++stats_.rejected;
    Warnings().Warn("remote: rejected lease " + got.server,
                    "remote cache {}: ignored a lease that is not the cluster's", got.server);
  }
  const int64_t left_ms = std::min<int64_t>(expiry - now_ms, kLeaseSeconds * 1000);
  if (left_ms <= 0) return Status::NotFound("no lease to wait on");
  *until = Clock::now() +
           std::min<Clock::duration>(std::chrono::milliseconds(left_ms), options_.lease_wait);
  return Status::Busy("leased by another daemon");
}

Status MemcachedTier::Fetch(SampleId id, DecodedSample* out) {
  if (!catalog_->identity_known(id)) {
    // No key names it yet: decoded here, no lease taken.
    MutexLock lock(mu_);
    ++stats_.misses;
    return Status::NotFound("identity not taken yet");
  }
  const ValueKey key = KeyOf(id);
  Status s = GetValue(key.name, options_.key, key, out);
  if (s.code() == Status::Code::kNotFound && options_.old_key) {
    s = GetValue(key.old_name, *options_.old_key, key, out);
  }
  Clock::time_point until;
  // A rejected value is not waited on: the decode that follows replaces it.
  const Status lease = s.code() == Status::Code::kNotFound ? TakeLease(id, key, &until)
                                                           : Status::NotFound("no lease");
  MutexLock lock(mu_);
  if (lease.code() == Status::Code::kBusy) {
    ++stats_.lease_waits;  // a hit or a miss once the wait is answered
    leased_elsewhere_[id] = until;
    return lease;
  }
  if (s.ok()) {
    ++stats_.hits;
    return s;
  }
  ++stats_.misses;
  return Status::NotFound("not in the remote tier");
}

void MemcachedTier::AwaitLeased(SampleId id, LeaseDone done) {
  {
    MutexLock lock(mu_);
    if (waits_stopped_) return;
    const auto at = leased_elsewhere_.find(id);
    const Clock::time_point until =
        at != leased_elsewhere_.end() ? at->second : Clock::now() + options_.lease_wait;
    if (at != leased_elsewhere_.end()) leased_elsewhere_.erase(at);
    lease_waits_.push_back(LeaseWait{KeyOf(id), until, std::move(done)});
  }
  lease_wake_.notify_all();
}

void MemcachedTier::StopWaits() {
  {
    MutexLock lock(mu_);
    waits_stopped_ = true;
  }
  lease_wake_.notify_all();
  if (lease_waiter_.joinable()) lease_waiter_.join();
}

void MemcachedTier::LeaseWaitLoop() {
  std::vector<LeaseWait> polling;  // the waits this round polls
  std::vector<std::string> names;
  std::vector<Status> found;  // ... what the round found of each
  std::vector<std::shared_ptr<DecodedSample>> samples;
  for (;;) {
    {
      MutexLock lock(mu_);
      // The unanswered go back beside those that came meanwhile, and all
      // are polled again one kLeasePoll later.
      for (LeaseWait& w : polling) lease_waits_.push_back(std::move(w));
      const bool again = !polling.empty();
      polling.clear();
      if (again)
        lease_wake_.wait_for(lock, kLeasePoll, [this]() REQUIRES(mu_) { return waits_stopped_; });
      lease_wake_.wait(lock,
                       [this]() REQUIRES(mu_) { return waits_stopped_ || !lease_waits_.empty(); });
      if (waits_stopped_) break;
      polling.swap(lease_waits_);
    }
    // One multi-get for every value awaited: a request per server a round,
    // not one per value.
    names.clear();
    for (const LeaseWait& w : polling) names.push_back(w.key.name);
    found.assign(polling.size(), Status::NotFound("not in the remote tier"));
    samples.assign(polling.size(), nullptr);
    const auto failures =
        client_->GetMany(names, [&](size_t i, std::string&& value, const std::string& server) {
          auto sample = std::make_shared<DecodedSample>();
          found[i] = OpenValue(options_.key, polling[i].key, value, server, sample.get());
          if (found[i].ok()) samples[i] = std::move(sample);
        });
    for (const MemcachedClient::Result& r : failures) CountError(r);
    const auto now = Clock::now();
    std::vector<LeaseWait> unanswered;
    for (size_t i = 0; i < polling.size(); ++i) {
      const Status& s = found[i];
      // A rejected value is not waited on further: the decode replaces it.
      if (s.code() == Status::Code::kNotFound && now < polling[i].until) {
        unanswered.push_back(std::move(polling[i]));
        continue;
      }
      {
        MutexLock lock(mu_);
        if (s.ok()) {
          ++stats_.hits;
          ++stats_.lease_hits;
        } else {
          ++stats_.misses;
        }
      }
      if (s.ok()) {
        polling[i].done(Status::Ok(), std::move(samples[i]));
      } else {
        polling[i].done(Status::NotFound("not in the remote tier"), nullptr);
      }
    }
    polling = std::move(unanswered);
  }
}

void MemcachedTier::Abandon(SampleId id) {
  {
    MutexLock lock(mu_);
    if (leased_.erase(id) == 0) return;
  }
  const MemcachedClient::Result r = client_->Delete(KeyOf(id).lease);
  if (r.kind == MemcachedClient::Result::Kind::kError) CountError(r);
}

void MemcachedTier::PublishAsync(SampleId id, SamplePtr sample) {
  const uint64_t bytes = sample->bytes();
  bool now = false;
  if (!catalog_->identity_known(id)) return;  // no key names it yet
  {
    MutexLock lock(mu_);
    const bool leased = leased_.erase(id) > 0;
    if (stopping_ || bytes + ClusterKey::kSealOverhead > options_.max_value ||
        stats_.bytes_out + queued_bytes_ + bytes > options_.publish_limit) {
      ++stats_.publish_drops;
      return;
    }
    // Other daemons poll for a leased value: it is set at once, on this
    // thread, not behind the queue.
    now = leased;
    if (!now) {
      if (queued_bytes_ + bytes > kMaxQueuedBytes) {
        ++stats_.publish_drops;
        return;
      }
      queued_bytes_ += bytes;
      queue_.push_back({id, std::move(sample)});
    }
  }
  if (now) {
    Set(id, *sample);
  } else {
    wake_.notify_one();
  }
}

void MemcachedTier::Flush() {
  MutexLock lock(mu_);
  drained_.wait(lock,
                [this]() REQUIRES(mu_) { return stopping_ || (queue_.empty() && !writing_); });
}

void MemcachedTier::PublishLoop() {
  for (;;) {
    Write w;
    {
      MutexLock lock(mu_);
      writing_ = false;
      if (queue_.empty()) drained_.notify_all();
      wake_.wait(lock, [this]() REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
      if (stopping_) break;
      w = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= w.sample->bytes();
      writing_ = true;
    }
    Set(w.id, *w.sample);
  }
}

void MemcachedTier::Set(SampleId id, const DecodedSample& s) {
  const ValueKey key = KeyOf(id);
  const std::string value = options_.key.Seal(key.material, s);
  const auto started = Clock::now();
  const MemcachedClient::Result r = client_->Set(key.name, value, 0);
  set_latency_.Observe(Clock::now() - started);
  if (!r.ok()) return CountError(r);
  MutexLock lock(mu_);
  ++stats_.published;
  stats_.bytes_out += value.size();
}

void MemcachedTier::CountError(const MemcachedClient::Result& r) {
  {
    MutexLock lock(mu_);
    ++stats_.errors;
  }
  Warnings().Warn("remote: error " + r.server,
                  "remote cache {}: {}; its keys are misses until it answers again", r.server,
                  r.error);
}

RemoteTierStats MemcachedTier::Stats() const {
  RemoteTierStats stats;
  {
    MutexLock lock(mu_);
    stats = stats_;
  }
  stats.get_latency = get_latency_.Take();
  stats.set_latency = set_latency_.Take();
  return stats;
}

}  // namespace joaderfs
