// The remote tier's fetch: one memcached get per value (what
// MemcachedTier::Fetch does per load) against a multi-get of a batch (one
// pipelined request per server), over 3 memcached servers on loopback that
// this program starts and stops (Debian's /usr/bin/memcached, `-I 4m`),
// through the tier's own client (cache/memcached_client.h). Each value is
// checked as the tier checks it: opened with the cluster key (sealed=1,
// AES-256-GCM over every byte), against the CRC32C alone that the unsealed
// tier computed (sealed=0), for what sealing costs a fetch. Values of 12 KB
// (a small image), 50 KB (base 128) and 200 KB (base 256); batches of 8
// and 32 (a planning round's picks). items/s is values fetched per second:
//   joaderfs-remote-get-bench --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
// docs/benchmarks.md "Cluster" has the figures, docs/design.md 3.2 what was
// decided from them.

#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cache/cluster_key.h"
#include "cache/memcached_client.h"
#include "common/crc32c.h"
#include "loader/decoded_sample.h"

extern char** environ;

namespace joaderfs {
namespace {

constexpr int kServers = 3;
constexpr int kKeys = 256;  // per value size: 51 MB at 200 KB, within 3 x 64 MB

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// memcached servers on loopback, killed and reaped at exit.
struct Servers {
  std::vector<pid_t> pids;
  std::vector<int> ports;

  void Start() {
    for (int i = 0; i < kServers; ++i) {
      const int port = FreePort();
      std::vector<std::string> args = {"/usr/bin/memcached",
                                       "-l",
                                       "127.0.0.1",
                                       "-p",
                                       std::to_string(port),
                                       "-U",
                                       "0",
                                       "-m",
                                       "64",
                                       "-I",
                                       "4m",
                                       "-t",
                                       "2"};
      if (geteuid() == 0) args.insert(args.end(), {"-u", "root"});
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      pid_t pid = 0;
      if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) {
        std::fprintf(stderr, "cannot start /usr/bin/memcached\n");
        std::exit(1);
      }
      pids.push_back(pid);
      ports.push_back(port);
    }
  }
  ~Servers() {
    for (pid_t pid : pids) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

Servers* servers = nullptr;

// A client configured as the tier's (cache/memcached_tier.cc MemcachedTier::Open).
std::unique_ptr<MemcachedClient> Connect() {
  MemcachedClientOptions o;
  for (int port : servers->ports) o.servers.push_back("127.0.0.1:" + std::to_string(port));
  std::unique_ptr<MemcachedClient> c;
  if (!MemcachedClient::Open(o, &c).ok()) std::exit(1);
  return c;
}

// A sample of `size` bytes (a row of RGB pixels) and the key material it is
// sealed for.
DecodedSample SampleOf(int64_t size, int i) {
  DecodedSample s;
  s.height = 1;
  s.width = static_cast<uint32_t>(size / 3);
  std::shared_ptr<uint8_t> pixels(new uint8_t[s.bytes()], std::default_delete<uint8_t[]>());
  std::memset(pixels.get(), i, s.bytes());
  s.pixels = pixels;
  return s;
}

std::string KeyOf(int64_t size, int i) {
  return "bench:" + std::to_string(size) + ":" + std::to_string(i);
}

const ClusterKey& Key() {
  static const ClusterKey key = ClusterKey::Insecure();  // the same AES-GCM as a secret key
  return key;
}

// Sets kKeys values of `size` pixel bytes, sealed, once per size.
void Fill(MemcachedClient* mc, int64_t size) {
  static std::vector<int64_t> done;
  for (int64_t d : done) {
    if (d == size) return;
  }
  for (int i = 0; i < kKeys; ++i) {
    const std::string key = KeyOf(size, i);
    const std::string value = Key().Seal(key, SampleOf(size, i));
    // A server still starting refuses the first calls: retry for a while.
    for (int tries = 0;; ++tries) {
      if (mc->Set(key, value, 0).ok()) break;
      if (tries == 200) {
        std::fprintf(stderr, "memcached set failed\n");
        std::exit(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  done.push_back(size);
}

// What the tier does with a value fetched: open it (`sealed`, the AES-GCM
// tag checked over every byte), or only the CRC32C the unsealed tier
// checked, for the cost of sealing against that.
bool Check(const std::string& key, const std::string& value, bool sealed, uint32_t* crc) {
  if (!sealed) {
    *crc ^= Crc32c(value.data(), value.size());
    return true;
  }
  DecodedSample s;
  return Key().Open(key, value, &s).ok();
}

void SingleGets(benchmark::State& state) {
  const int64_t size = state.range(0);
  const int batch = static_cast<int>(state.range(1));
  const bool sealed = state.range(2) != 0;
  std::unique_ptr<MemcachedClient> mc = Connect();
  Fill(mc.get(), size);
  int next = 0;
  uint32_t crc = 0;
  std::string value;
  for (auto _ : state) {
    for (int b = 0; b < batch; ++b) {
      const std::string key = KeyOf(size, next++ % kKeys);
      if (!mc->Get(key, &value).ok() || !Check(key, value, sealed, &crc)) {
        state.SkipWithError("get failed");
        break;
      }
    }
  }
  benchmark::DoNotOptimize(crc);
  state.SetItemsProcessed(state.iterations() * batch);
  state.SetBytesProcessed(state.iterations() * batch * size);
}

void MultiGet(benchmark::State& state) {
  const int64_t size = state.range(0);
  const int batch = static_cast<int>(state.range(1));
  const bool sealed = state.range(2) != 0;
  std::unique_ptr<MemcachedClient> mc = Connect();
  Fill(mc.get(), size);
  int next = 0;
  uint32_t crc = 0;
  std::vector<std::string> keys(batch);
  for (auto _ : state) {
    for (int b = 0; b < batch; ++b) keys[b] = KeyOf(size, next++ % kKeys);
    int got = 0;
    const auto failures = mc->GetMany(keys, [&](size_t i, std::string&& value, const std::string&) {
      got += Check(keys[i], value, sealed, &crc);
    });
    if (!failures.empty() || got != batch) {
      state.SkipWithError("multi-get: values missing");
      break;
    }
  }
  benchmark::DoNotOptimize(crc);
  state.SetItemsProcessed(state.iterations() * batch);
  state.SetBytesProcessed(state.iterations() * batch * size);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int64_t size : {12 << 10, 50 << 10, 200 << 10}) {
    for (int64_t batch : {8, 32}) {
      for (int64_t sealed : {0, 1}) b->Args({size, batch, sealed});
    }
  }
  b->ArgNames({"bytes", "batch", "sealed"})->UseRealTime();
}

BENCHMARK(SingleGets)->Apply(Args);
BENCHMARK(MultiGet)->Apply(Args);

}  // namespace
}  // namespace joaderfs

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  joaderfs::Servers s;
  joaderfs::servers = &s;
  s.Start();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
