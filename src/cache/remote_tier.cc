#include "cache/remote_tier.h"

#include <libmemcached-1.0/memcached.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/hash.h"
#include "common/parse.h"
#include "common/rate_limited_log.h"

namespace joaderfs {
namespace {

// Bump when the key material or the value layout changes: values of another
// layout are then simply other keys.
constexpr char kKeyPrefix[] = "jfs1:";
constexpr char kLeasePrefix[] = "jfs1l:";
constexpr uint32_t kValueMagic = 0x3154524a;  // "JRT1"
// Header: magic, height, width, channels, key digest (8), material length,
// pixel crc; then the key material, then the pixels.
constexpr size_t kValueHeader = 32;
constexpr uint64_t kMaxQueuedBytes = uint64_t{64} << 20;
constexpr time_t kLeaseSeconds = 2;  // memcached expires in whole seconds
constexpr auto kLeasePoll = std::chrono::milliseconds(2);

uint64_t Digest(const std::string& s) { return Fnv1a(kFnv1aBasis, s.data(), s.size()); }

}  // namespace

Status ParseRemoteCache(std::string_view uri, std::vector<std::string>* servers) {
  constexpr std::string_view kScheme = "memcached://";
  if (uri.substr(0, kScheme.size()) != kScheme) {
    return Status::InvalidArgument("remote_cache=" + std::string(uri) +
                                   ": expected memcached://host:port[+host:port...]");
  }
  servers->clear();
  const std::string_view list = uri.substr(kScheme.size());
  for (size_t start = 0;;) {
    const size_t plus = list.find('+', start);
    const std::string_view server = list.substr(start, plus - start);
    const size_t colon = server.rfind(':');
    const auto port =
        colon == std::string_view::npos ? std::nullopt : ParseUint(server.substr(colon + 1));
    if (colon == 0 || !port || *port == 0 || *port > 65535) {
      return Status::InvalidArgument("remote_cache: '" + std::string(server) +
                                     "' is not host:port");
    }
    servers->emplace_back(server);
    if (plus == std::string_view::npos) break;
    start = plus + 1;
  }
  return Status::Ok();
}

Status RemoteTier::Open(const RemoteTierOptions& options, const Catalog* catalog, uint32_t base,
                        std::unique_ptr<RemoteTier>* out) {
  std::unique_ptr<RemoteTier> t(new RemoteTier());
  t->options_ = options;
  t->catalog_ = catalog;
  t->base_ = base;
  t->master_ = memcached_create(nullptr);
  if (!t->master_) return Status::IOError("remote_cache: cannot create a libmemcached handle");
  memcached_st* mc = t->master_;
  for (const std::string& server : options.servers) {
    const size_t colon = server.rfind(':');
    const std::string host = server.substr(0, colon);
    const auto port = static_cast<in_port_t>(std::atoi(server.c_str() + colon + 1));
    if (memcached_server_add(mc, host.c_str(), port) != MEMCACHED_SUCCESS) {
      return Status::InvalidArgument("remote_cache: cannot add server " + server);
    }
  }
  const uint64_t ms = static_cast<uint64_t>(options.timeout.count());
  // Consistent hashing: losing a server moves only its keys. A failed
  // server is ejected from the continuum at its first failure and tried
  // again after a second, so a dead one costs one timeout per handle and a
  // restarted one is used again.
  memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_DISTRIBUTION,
                         MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA);
  memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_NO_BLOCK, 1);  // connect timeout applies
  memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
  memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, ms);
  memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, ms);
  memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_SND_TIMEOUT, ms * 1000);
  memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_RCV_TIMEOUT, ms * 1000);
  memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_SERVER_FAILURE_LIMIT, 1);
  memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_REMOVE_FAILED_SERVERS, 1);
  memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_RETRY_TIMEOUT, 1);
  memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_DEAD_TIMEOUT, 1);

  // Which servers answer now: only for the log, the tier works either way.
  memcached_st* probe = t->Handle();
  memcached_return_t rc = memcached_version(probe);
  t->Return(probe);
  if (rc != MEMCACHED_SUCCESS) {
    std::string list;
    for (const std::string& server : options.servers) list += (list.empty() ? "" : "+") + server;
    spdlog::warn("remote cache {}: not every server answers ({}); misses until they do", list,
                 memcached_strerror(nullptr, rc));
  } else {
    spdlog::info("remote cache: {} servers", options.servers.size());
  }
  t->publisher_ = std::thread([raw = t.get()] { raw->PublishLoop(); });
  t->lease_waiter_ = std::thread([raw = t.get()] { raw->LeaseWaitLoop(); });
  *out = std::move(t);
  return Status::Ok();
}

RemoteTier::~RemoteTier() {
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
  MutexLock lock(mu_);
  for (memcached_st* mc : idle_) memcached_free(mc);
  if (master_) memcached_free(master_);
}

memcached_st* RemoteTier::Handle() {
  {
    MutexLock lock(mu_);
    if (!idle_.empty()) {
      memcached_st* mc = idle_.back();
      idle_.pop_back();
      return mc;
    }
  }
  return memcached_clone(nullptr, master_);
}

void RemoteTier::Return(memcached_st* mc) {
  if (!mc) return;
  MutexLock lock(mu_);
  idle_.push_back(mc);
}

RemoteTier::ValueKey RemoteTier::KeyOf(SampleId id) const {
  const FileRange r = catalog_->location(id);
  ValueKey k;
  std::string& m = k.material;
  PutFixed<uint32_t>(&m, base_);
  PutFixed<uint64_t>(&m, r.file_size);
  PutFixed<uint64_t>(&m, static_cast<uint64_t>(r.mtime_ns));
  PutFixed<uint64_t>(&m, r.partial ? r.offset : 0);
  PutFixed<uint64_t>(&m, r.partial ? r.length : 0);
  m += catalog_->relpath(id);
  k.digest = Digest(m);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(k.digest));
  k.name = std::string(kKeyPrefix) + hex;
  return k;
}

// The lease on a value's decode: its key under the lease prefix.
std::string RemoteTier::LeaseName(const ValueKey& key) {
  return kLeasePrefix + key.name.substr(sizeof(kKeyPrefix) - 1);
}

Status RemoteTier::GetOnce(memcached_st* mc, const ValueKey& key, DecodedSample* out) {
  size_t length = 0;
  uint32_t flags = 0;
  memcached_return_t rc = MEMCACHED_SUCCESS;
  char* value = memcached_get(mc, key.name.data(), key.name.size(), &length, &flags, &rc);
  if (!value) {
    if (rc != MEMCACHED_NOTFOUND) CountError(mc);
    return Status::NotFound("not in the remote tier");
  }
  return TakeValue(key, value, length, out);
}

void RemoteTier::GetMany(memcached_st* mc, const std::vector<LeaseWait>& waits,
                         std::vector<Status>* found,
                         std::vector<std::shared_ptr<DecodedSample>>* samples) {
  found->assign(waits.size(), Status::NotFound("not in the remote tier"));
  samples->assign(waits.size(), nullptr);
  std::vector<const char*> names;
  std::vector<size_t> lengths;
  std::unordered_map<std::string_view, size_t> index;
  for (size_t i = 0; i < waits.size(); ++i) {
    names.push_back(waits[i].key.name.data());
    lengths.push_back(waits[i].key.name.size());
    index.emplace(waits[i].key.name, i);
  }
  memcached_return_t rc = memcached_mget(mc, names.data(), lengths.data(), names.size());
  // Some servers failed: the others' values are still fetched.
  if (rc == MEMCACHED_SOME_ERRORS) CountError(mc);
  if (rc != MEMCACHED_SUCCESS && rc != MEMCACHED_SOME_ERRORS) return CountError(mc);
  while (memcached_result_st* result = memcached_fetch_result(mc, nullptr, &rc)) {
    // The key lives in the result: looked up before the result is freed.
    const auto at = index.find(
        std::string_view(memcached_result_key_value(result), memcached_result_key_length(result)));
    const size_t length = memcached_result_length(result);
    char* value = memcached_result_take_value(result);
    memcached_result_free(result);
    if (at == index.end() || !value) {
      free(value);
      continue;
    }
    auto sample = std::make_shared<DecodedSample>();
    (*found)[at->second] = TakeValue(waits[at->second].key, value, length, sample.get());
    if ((*found)[at->second].ok()) (*samples)[at->second] = std::move(sample);
  }
  if (rc != MEMCACHED_END && rc != MEMCACHED_SUCCESS && rc != MEMCACHED_NOTFOUND) CountError(mc);
}

Status RemoteTier::TakeValue(const ValueKey& key, char* value, size_t length, DecodedSample* out) {
  std::shared_ptr<uint8_t> buffer(reinterpret_cast<uint8_t*>(value), [](uint8_t* p) { free(p); });
  const uint8_t* h = buffer.get();
  const std::string& material = key.material;
  bool good = length >= kValueHeader && DecodeFixed<uint32_t>(h) == kValueMagic &&
              DecodeFixed<uint64_t>(h + 16) == key.digest &&
              DecodeFixed<uint32_t>(h + 24) == material.size() &&
              length >= kValueHeader + material.size() &&
              std::memcmp(h + kValueHeader, material.data(), material.size()) == 0;
  if (good) {
    out->height = DecodeFixed<uint32_t>(h + 4);
    out->width = DecodeFixed<uint32_t>(h + 8);
    out->channels = DecodeFixed<uint32_t>(h + 12);
    const size_t at = kValueHeader + material.size();
    good = out->channels >= 1 && out->channels <= 4 && out->bytes() == length - at &&
           Crc32c(h + at, out->bytes()) == DecodeFixed<uint32_t>(h + 28);
    if (good) out->pixels = std::shared_ptr<uint8_t>(buffer, buffer.get() + at);
  }
  MutexLock lock(mu_);
  if (!good) {
    ++stats_.corrupt;
    Warnings().Warn("remote: corrupt", "remote cache: ignored a damaged or foreign value for {}",
                    key.name);
    return Status::Corruption("damaged remote value");
  }
  stats_.bytes_in += length;
  return Status::Ok();
}

Status RemoteTier::Fetch(SampleId id, DecodedSample* out) {
  const ValueKey key = KeyOf(id);
  memcached_st* mc = Handle();
  if (!mc) return Status::NotFound("no libmemcached handle");
  Status s = GetOnce(mc, key, out);
  bool leased_elsewhere = false;
  // A damaged value is not waited on: a lease's holder has published it.
  if (s.code() == Status::Code::kNotFound) {
    // One daemon decodes it; the others wait for its value, briefly.
    const std::string lease = LeaseName(key);
    const memcached_return_t rc =
        memcached_add(mc, lease.data(), lease.size(), "1", 1, kLeaseSeconds, 0);
    if (rc == MEMCACHED_NOTSTORED || rc == MEMCACHED_DATA_EXISTS) {
      leased_elsewhere = true;
    } else if (rc == MEMCACHED_SUCCESS) {
      MutexLock lock(mu_);
      leased_.insert(id);
    } else {
      CountError(mc);
    }
  }
  Return(mc);
  MutexLock lock(mu_);
  if (leased_elsewhere) {
    ++stats_.lease_waits;  // a hit or a miss once the wait is answered
    return Status::Busy("leased by another daemon");
  }
  if (s.ok()) {
    ++stats_.hits;
    return s;
  }
  ++stats_.misses;
  return Status::NotFound("not in the remote tier");
}

void RemoteTier::AwaitLeased(SampleId id, LeaseDone done) {
  LeaseWait wait{KeyOf(id), std::chrono::steady_clock::now() + options_.lease_wait,
                 std::move(done)};
  {
    MutexLock lock(mu_);
    if (waits_stopped_) return;
    lease_waits_.push_back(std::move(wait));
  }
  lease_wake_.notify_all();
}

void RemoteTier::StopWaits() {
  {
    MutexLock lock(mu_);
    waits_stopped_ = true;
  }
  lease_wake_.notify_all();
  if (lease_waiter_.joinable()) lease_waiter_.join();
}

void RemoteTier::LeaseWaitLoop() {
  memcached_st* mc = nullptr;
  std::vector<LeaseWait> polling;  // the waits this round polls
  std::vector<Status> found;       // ... what the round found of each
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
    if (!mc) mc = memcached_clone(nullptr, master_);
    // One multi-get for every value awaited: a request per server a round,
    // not one per value.
    if (mc) {
      GetMany(mc, polling, &found, &samples);
    } else {
      found.assign(polling.size(), Status::NotFound("no libmemcached handle"));
      samples.assign(polling.size(), nullptr);
    }
    const auto now = std::chrono::steady_clock::now();
    std::vector<LeaseWait> unanswered;
    for (size_t i = 0; i < polling.size(); ++i) {
      const Status& s = found[i];
      // A damaged value is not waited on further: its holder published it.
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
  if (mc) memcached_free(mc);
}

void RemoteTier::Abandon(SampleId id) {
  {
    MutexLock lock(mu_);
    leased_.erase(id);
  }
  const std::string lease = LeaseName(KeyOf(id));
  memcached_st* mc = Handle();
  if (!mc) return;
  memcached_delete(mc, lease.data(), lease.size(), 0);
  Return(mc);
}

void RemoteTier::PublishAsync(SampleId id, SamplePtr sample) {
  bool now = false;
  {
    MutexLock lock(mu_);
    const uint64_t bytes = sample->bytes();
    // Other daemons poll for a leased value: it is set at once, on this
    // thread, not behind the queue.
    now =
        leased_.erase(id) > 0 && stats_.bytes_out + queued_bytes_ + bytes <= options_.publish_limit;
  }
  if (now) {
    memcached_st* mc = Handle();
    if (mc) Set(mc, id, *sample);
    Return(mc);
    return;
  }
  {
    MutexLock lock(mu_);
    const uint64_t bytes = sample->bytes();
    if (stopping_ || queued_bytes_ + bytes > kMaxQueuedBytes ||
        stats_.bytes_out + queued_bytes_ + bytes > options_.publish_limit) {
      ++stats_.publish_drops;
      return;
    }
    queued_bytes_ += bytes;
    queue_.push_back({id, std::move(sample)});
  }
  wake_.notify_one();
}

void RemoteTier::Flush() {
  MutexLock lock(mu_);
  drained_.wait(lock,
                [this]() REQUIRES(mu_) { return stopping_ || (queue_.empty() && !writing_); });
}

void RemoteTier::PublishLoop() {
  memcached_st* mc = nullptr;
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
    if (!mc) mc = memcached_clone(nullptr, master_);
    if (mc) Set(mc, w.id, *w.sample);
  }
  if (mc) memcached_free(mc);
}

void RemoteTier::Set(memcached_st* mc, SampleId id, const DecodedSample& s) {
  const ValueKey key = KeyOf(id);
  const std::string& material = key.material;
  std::string value;
  value.reserve(kValueHeader + material.size() + s.bytes());
  PutFixed<uint32_t>(&value, kValueMagic);
  PutFixed<uint32_t>(&value, s.height);
  PutFixed<uint32_t>(&value, s.width);
  PutFixed<uint32_t>(&value, s.channels);
  PutFixed<uint64_t>(&value, key.digest);
  PutFixed<uint32_t>(&value, static_cast<uint32_t>(material.size()));
  PutFixed<uint32_t>(&value, Crc32c(s.pixels.get(), s.bytes()));
  value += material;
  value.append(reinterpret_cast<const char*>(s.pixels.get()), s.bytes());
  const memcached_return_t rc =
      memcached_set(mc, key.name.data(), key.name.size(), value.data(), value.size(), 0, 0);
  if (rc != MEMCACHED_SUCCESS) return CountError(mc);
  MutexLock lock(mu_);
  ++stats_.published;
  stats_.bytes_out += value.size();
}

void RemoteTier::CountError(memcached_st* mc) {
  {
    MutexLock lock(mu_);
    ++stats_.errors;
  }
  Warnings().Warn("remote: error", "remote cache: {}; misses until the server answers",
                  memcached_last_error_message(mc));
}

RemoteTierStats RemoteTier::Stats() const {
  MutexLock lock(mu_);
  return stats_;
}

}  // namespace joaderfs
