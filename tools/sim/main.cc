// joaderfs-sim: the cache-miss simulator (see sim.h).
//
//   joaderfs-sim misses --jobs SPEC --cache N [--sampler dsa|isa]
//       [--policy refcnt|lru|fifo|random] [--speeds 1,1,..] [--starts 0,0,..]
//       [--seed S]
//     prints "misses=M requests=R union=U" for one epoch of every job.
//   joaderfs-sim orders --jobs SPEC --epochs E [--sampler dsa|isa]
//       [--speeds ..] [--starts ..] [--seed S]
//     prints "JOB EPOCH id id ..." per epoch of every job, in delivery order.
//   joaderfs-sim cadence --jobs SPEC --ram N [--sampler dsa|isa]
//       [--lookahead L] [--min-lookahead M] [--window W]
//       [--read-probability P] [--speeds ..] [--starts R,..] [--seed S]
//     replays the daemon's planning cadence with jittered readers and a RAM
//     tier of N samples (starts: samples job 0 has read when each arrives);
//     prints "misses=M requests=R union=U" for one epoch of every job.
//
// Bad arguments: one line on stderr, exit status 2.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/parse.h"
#include "sim/sim.h"

namespace joaderfs {
namespace {

constexpr char kUsage[] =
    "usage: joaderfs-sim misses --jobs SPEC --cache N [--sampler dsa|isa] "
    "[--policy refcnt|lru|fifo|random] [--speeds X,..] [--starts T,..] "
    "[--seed S] | joaderfs-sim orders --jobs SPEC --epochs E [--sampler "
    "dsa|isa] [--speeds X,..] [--starts T,..] [--seed S] | joaderfs-sim cadence --jobs SPEC "
    "--ram N [--sampler dsa|isa] [--lookahead L] [--min-lookahead M] [--window W] "
    "[--read-probability P] [--speeds X,..] [--starts R,..] [--seed S]";

[[noreturn]] void Fail(const std::string& message) {
  std::fprintf(stderr, "joaderfs-sim: %s\n", message.c_str());
  std::exit(2);
}

// Applies a comma-separated list, one value per job, through `parse`.
template <typename Parse>
void ApplyList(std::string_view name, std::string_view text, std::vector<SimJob>& jobs,
               Parse parse) {
  size_t j = 0;
  for (;;) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    if (j == jobs.size() || !parse(item, jobs[j])) {
      Fail("bad --" + std::string(name) + " '" + std::string(text) +
           "': expected one value per job");
    }
    ++j;
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  if (j != jobs.size()) {
    Fail("--" + std::string(name) + " gives " + std::to_string(j) + " values for " +
         std::to_string(jobs.size()) + " jobs");
  }
}

uint64_t RequireUint(std::string_view name, const std::string& value, uint64_t min) {
  const auto n = ParseUint(value);
  if (!n || *n < min) {
    Fail("bad --" + std::string(name) + " '" + value + "'");
  }
  return *n;
}

int Main(int argc, char** argv) {
  if (argc < 2) Fail(kUsage);
  const std::string_view mode = argv[1];
  if (mode != "misses" && mode != "orders" && mode != "cadence") {
    Fail("unknown mode '" + std::string(mode) + "'; " + kUsage);
  }
  const bool misses = mode == "misses";
  std::vector<std::string_view> allowed = {"jobs", "sampler", "speeds", "starts", "seed"};
  if (misses) {
    allowed.insert(allowed.end(), {"cache", "policy"});
  } else if (mode == "orders") {
    allowed.push_back("epochs");
  } else {
    allowed.insert(allowed.end(),
                   {"ram", "lookahead", "min-lookahead", "window", "read-probability"});
  }
  std::map<std::string, std::string, std::less<>> options;
  for (int i = 2; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (!arg.starts_with("--")) {
      Fail("unexpected argument '" + std::string(arg) + "'");
    }
    arg.remove_prefix(2);
    std::string name, value;
    if (const size_t eq = arg.find('='); eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    } else {
      name = arg;
      if (i + 1 == argc) Fail("--" + name + " needs a value");
      value = argv[++i];
    }
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      Fail("unknown option --" + name + " for " + std::string(mode));
    }
    if (!options.emplace(name, value).second) {
      Fail("--" + name + " given twice");
    }
  }

  if (!options.contains("jobs")) Fail("--jobs is required");
  std::vector<SimJob> jobs;
  if (const Status s = ParseJobs(options["jobs"], &jobs); !s.ok()) {
    Fail(s.message());
  }
  if (auto it = options.find("speeds"); it != options.end()) {
    ApplyList("speeds", it->second, jobs, [](std::string_view v, SimJob& j) {
      const auto speed = ParseDouble(v);
      if (!speed || !(*speed > 0) || *speed > 1e6) return false;
      j.speed = *speed;
      return true;
    });
  }
  if (auto it = options.find("starts"); it != options.end()) {
    ApplyList("starts", it->second, jobs, [](std::string_view v, SimJob& j) {
      const auto start = ParseUint(v);
      if (!start || *start > (uint64_t{1} << 40)) return false;
      j.start = *start;
      return true;
    });
  }
  const uint64_t seed = options.contains("seed") ? RequireUint("seed", options["seed"], 0) : 1;
  Sampler sampler = Sampler::kDependent;
  if (auto it = options.find("sampler"); it != options.end()) {
    if (it->second == "isa") {
      sampler = Sampler::kIndependent;
    } else if (it->second != "dsa") {
      Fail("bad --sampler '" + it->second + "': expected dsa or isa");
    }
  }

  if (mode == "cadence") {
    if (!options.contains("ram")) Fail("--ram is required");
    CadenceSim sim;
    sim.ram = RequireUint("ram", options["ram"], 1);
    auto optional = [&](const char* name, uint64_t* value, uint64_t min) {
      if (auto it = options.find(name); it != options.end()) {
        *value = RequireUint(name, it->second, min);
      }
    };
    optional("lookahead", &sim.lookahead, 1);
    optional("min-lookahead", &sim.min_lookahead, 1);
    optional("window", &sim.window, 1);
    if (auto it = options.find("read-probability"); it != options.end()) {
      const auto p = ParseDouble(it->second);
      if (!p || !(*p > 0) || *p > 1) Fail("bad --read-probability '" + it->second + "'");
      sim.read_probability = *p;
    }
    const MissCount count = SimulateCadence(jobs, sampler, sim, seed);
    std::printf("misses=%llu requests=%llu union=%llu\n",
                static_cast<unsigned long long>(count.misses),
                static_cast<unsigned long long>(count.requests),
                static_cast<unsigned long long>(count.union_size));
    return 0;
  }

  if (misses) {
    if (!options.contains("cache")) Fail("--cache is required");
    const uint64_t cache = RequireUint("cache", options["cache"], 1);
    EvictionKind policy = EvictionKind::kRefCnt;
    if (auto it = options.find("policy"); it != options.end()) {
      const auto kind = ParseEvictionKind(it->second);
      if (!kind) {
        Fail("bad --policy '" + it->second + "': expected refcnt, lru, fifo or random");
      }
      policy = *kind;
    }
    const MissCount count = SimulateMisses(jobs, sampler, policy, cache, seed);
    std::printf("misses=%llu requests=%llu union=%llu\n",
                static_cast<unsigned long long>(count.misses),
                static_cast<unsigned long long>(count.requests),
                static_cast<unsigned long long>(count.union_size));
    return 0;
  }

  if (!options.contains("epochs")) Fail("--epochs is required");
  const uint64_t epochs = RequireUint("epochs", options["epochs"], 1);
  if (epochs > 1000000) Fail("bad --epochs '" + options["epochs"] + "'");
  const auto orders = SimulateOrders(jobs, sampler, static_cast<uint32_t>(epochs), seed);
  std::string line;
  for (size_t j = 0; j < orders.size(); ++j) {
    for (size_t e = 0; e < orders[j].size(); ++e) {
      line = std::to_string(j) + ' ' + std::to_string(e);
      for (SampleId id : orders[j][e]) {
        line += ' ';
        line += std::to_string(id);
      }
      line += '\n';
      std::fputs(line.c_str(), stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace joaderfs

int main(int argc, char** argv) { return joaderfs::Main(argc, argv); }
