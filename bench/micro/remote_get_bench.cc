// The remote tier's fetch: one memcached get per value (what
// RemoteTier::Fetch does per load) against a multi-get of a batch
// (memcached_mget, then memcached_fetch_result: one request per server for
// the whole batch), over 3 memcached servers on loopback that this program
// starts and stops (Debian's /usr/bin/memcached, `-I 4m`). The client is
// configured as the tier's (ketama, TCP_NODELAY, non-blocking, 100 ms
// timeouts), and every value's CRC32C is computed, as the tier checks every
// value. Values of 12 KB (a small image), 50 KB (base 128) and 200 KB
// (base 256); batches of 8 and 32 (a planning round's picks). items/s is
// values fetched per second, both ways in one run:
//   joaderfs-remote-get-bench --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
// docs/benchmarks.md "Cluster" has the figures, docs/design.md 3.2 what was
// decided from them.

#include <benchmark/benchmark.h>
#include <libmemcached-1.0/memcached.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/crc32c.h"

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

// A handle configured as the tier's (cache/remote_tier.cc RemoteTier::Open).
memcached_st* Connect() {
  memcached_st* mc = memcached_create(nullptr);
  for (int port : servers->ports) memcached_server_add(mc, "127.0.0.1", port);
  memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_DISTRIBUTION,
                         MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA);
  memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_NO_BLOCK, 1);
  memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
  memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, 100);
  memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, 100);
  return mc;
}

std::string KeyOf(int64_t size, int i) {
  return "bench:" + std::to_string(size) + ":" + std::to_string(i);
}

// Sets kKeys values of `size` bytes once per size.
void Fill(memcached_st* mc, int64_t size) {
  static std::vector<int64_t> done;
  for (int64_t d : done) {
    if (d == size) return;
  }
  std::string value(static_cast<size_t>(size), 'x');
  for (int i = 0; i < kKeys; ++i) {
    value[0] = static_cast<char>(i);
    const std::string key = KeyOf(size, i);
    // A server still starting refuses the first calls: retry for a while.
    for (int tries = 0;; ++tries) {
      if (memcached_set(mc, key.data(), key.size(), value.data(), value.size(), 0, 0) ==
          MEMCACHED_SUCCESS) {
        break;
      }
      if (tries == 200) {
        std::fprintf(stderr, "memcached set failed\n");
        std::exit(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  done.push_back(size);
}

void SingleGets(benchmark::State& state) {
  const int64_t size = state.range(0);
  const int batch = static_cast<int>(state.range(1));
  memcached_st* mc = Connect();
  Fill(mc, size);
  int next = 0;
  uint32_t crc = 0;
  for (auto _ : state) {
    for (int b = 0; b < batch; ++b) {
      const std::string key = KeyOf(size, next++ % kKeys);
      size_t length = 0;
      uint32_t flags = 0;
      memcached_return_t rc;
      char* value = memcached_get(mc, key.data(), key.size(), &length, &flags, &rc);
      if (!value || static_cast<int64_t>(length) != size) {
        state.SkipWithError("get failed");
        break;
      }
      crc ^= Crc32c(value, length);
      free(value);
    }
  }
  benchmark::DoNotOptimize(crc);
  state.SetItemsProcessed(state.iterations() * batch);
  state.SetBytesProcessed(state.iterations() * batch * size);
  memcached_free(mc);
}

void MultiGet(benchmark::State& state) {
  const int64_t size = state.range(0);
  const int batch = static_cast<int>(state.range(1));
  memcached_st* mc = Connect();
  Fill(mc, size);
  int next = 0;
  uint32_t crc = 0;
  std::vector<std::string> keys(batch);
  std::vector<const char*> names(batch);
  std::vector<size_t> lengths(batch);
  for (auto _ : state) {
    for (int b = 0; b < batch; ++b) {
      keys[b] = KeyOf(size, next++ % kKeys);
      names[b] = keys[b].data();
      lengths[b] = keys[b].size();
    }
    if (memcached_mget(mc, names.data(), lengths.data(), batch) != MEMCACHED_SUCCESS) {
      state.SkipWithError("mget failed");
      break;
    }
    int got = 0;
    memcached_return_t rc;
    while (memcached_result_st* r = memcached_fetch_result(mc, nullptr, &rc)) {
      crc ^= Crc32c(memcached_result_value(r), memcached_result_length(r));
      ++got;
      memcached_result_free(r);
    }
    if (got != batch) {
      state.SkipWithError("mget: values missing");
      break;
    }
  }
  benchmark::DoNotOptimize(crc);
  state.SetItemsProcessed(state.iterations() * batch);
  state.SetBytesProcessed(state.iterations() * batch * size);
  memcached_free(mc);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int64_t size : {12 << 10, 50 << 10, 200 << 10}) {
    for (int64_t batch : {8, 32}) b->Args({size, batch});
  }
  b->ArgNames({"bytes", "batch"})->UseRealTime();
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
