#!/usr/bin/env bash
# Sets up (packages, build) and runs every test through ctest: unit tests,
# mount-level integration tests and the Python client tests; arguments go
# to that ctest. Then, in one clang build folder of its own (build-fuzz:
# ASan + UBSan, libFuzzer coverage, and -Werror=thread-safety, so that a
# GUARDED_BY member touched without its lock fails the build):
#   - the unit tests again under ASan + UBSan (skip: SANITIZE=0), but for
#     the statistical planner tests (DependentPlannerRandomness: minutes
#     plain; FirstRoundMatchesTheFormulaExactly: 2 s plain, 2 minutes under
#     ASan, which pays for each of its 120000 fresh planners' allocations),
#     whose planner code the property tests that do run cover;
#   - every libFuzzer target of fuzz/ for FUZZ_SECONDS (default 25) from its
#     checked-in seeds, nproc at a time (skip: FUZZ_SECONDS=0).
# And the daemon alone built without its optional parts (build-minimal:
# JOADERFS_S3=OFF, JOADERFS_REMOTE=OFF, so no libcurl, libxml2 or OpenSSL;
# -O0, no tests or benchmarks; skip: MINIMAL=0): it must link, run, and
# refuse at mount, saying why, an s3:// SOURCE and remote_cache=.
# One sanitizer build serves both stages: a second full build (gcc ASan)
# cost CI minutes that 30 do not spare, for the same ASan + UBSan checks.
# Any failure, sanitizer report or fuzzer crash fails the script.
#
# Where the minutes go, and why the order: the unit tests run two at a time
# (nproc): they share nothing, and the planner's statistical tests alone
# take minutes of one core. The mount-level tests (every label but unit)
# run one at a time, as a user's jobs would on a quiet machine: several time
# the daemon. The sanitizer build runs beside the tests at idle priority
# (SCHED_IDLE, idle I/O class, its autogroup at nice 19: run_idle below),
# so it takes only the CPU the tests leave
# (mount tests wait on daemons and Python start-ups) and never delays them;
# so does the minimal build, beside it.
#
# scripts/test.sh --soak MINUTES runs only the soak test (tests/soak), for
# MINUTES instead of the 1 minute it gets in the full run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ "${1:-}" = --soak ]; then
  minutes=${2:?usage: scripts/test.sh --soak MINUTES}
  export JOADERFS_SOAK_SECONDS=$((minutes * 60))
  cd build && exec ctest -R '^soak$' --output-on-failure --timeout $((minutes * 60 + 600))
fi

jobs=$(nproc)
sanitize=${SANITIZE:-1}
fuzz_seconds=${FUZZ_SECONDS:-25}
minimal=${MINIMAL:-1}
targets=()
[ "$sanitize" != 0 ] && targets+=(unit_tests)
[ "$fuzz_seconds" != 0 ] && targets+=(fuzzers joaderfs)
# The background builds, each in a session and process group of its own
# (setsid), so that a failing test run stops their compilers too. A new
# session is also a new scheduler autogroup, which competes with the tests'
# as an equal whatever its tasks' policy: SCHED_IDLE alone left the two
# builds two thirds of the CPU and the unit tests ran 3x slower. So the
# autogroup is set to nice 19 as well (where the kernel has autogroups).
run_idle() {
  setsid bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null; exec chrt --idle 0 ionice -c3 "$@"' \
    run_idle "$@"
}
background=()
trap 'for pid in "${background[@]}"; do kill -- -"$pid" 2>/dev/null || true; done' EXIT
build_pid=
if [ ${#targets[@]} != 0 ]; then
  # -O1 (ASan's advice) and line tables only: a sanitizer report still names
  # file and line, and the build, the critical path of this script, is
  # cheaper than with -O2 -g.
  CXX=clang++ CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
    -DJOADERFS_FUZZ=ON -DJOADERFS_SANITIZE=address >/dev/null
  run_idle cmake --build build-fuzz -j"$jobs" --target "${targets[@]}" >build-fuzz/build.log 2>&1 &
  build_pid=$!
  background+=("$build_pid")
fi
minimal_pid=
if [ "$minimal" != 0 ]; then
  cmake -S . -B build-minimal -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O0 \
    -DJOADERFS_S3=OFF -DJOADERFS_REMOTE=OFF -DJOADERFS_BUILD_TESTS=OFF -DJOADERFS_BUILD_BENCH=OFF \
    >/dev/null
  run_idle cmake --build build-minimal -j"$jobs" --target joaderfs >build-minimal/build.log 2>&1 &
  minimal_pid=$!
  background+=("$minimal_pid")
fi

(cd build &&
 ctest -L unit -j"$jobs" --output-on-failure --timeout 900 "$@" &&
 ctest -LE unit --output-on-failure --timeout 900 "$@")

# The minimal daemon refuses what it lacks before mounting anything: no
# FUSE is needed for these.
check_minimal() {
  local bin=build-minimal/joaderfs scratch out status=0
  "$bin" --version
  scratch=$(mktemp -d)
  mkdir -p "$scratch/source/a" "$scratch/mnt"
  out=$("$bin" -f -o cache_dir=none,remote_cache=memcached://127.0.0.1:11211 \
    "$scratch/source" "$scratch/mnt" 2>&1) && status=1
  grep -qF "built without the remote tier (JOADERFS_REMOTE=OFF)" <<<"$out" || status=1
  echo "$out"
  out=$("$bin" -f -o cache_dir=none s3://bucket/prefix "$scratch/mnt" 2>&1) && status=1
  grep -qF "built without S3 support (JOADERFS_S3=OFF)" <<<"$out" || status=1
  echo "$out"
  rm -rf "$scratch"
  return "$status"
}

if [ -n "$minimal_pid" ]; then
  if ! wait "$minimal_pid"; then
    tail -n 60 build-minimal/build.log
    echo "test.sh: the build without S3 and the remote tier (build-minimal) failed; its log is build-minimal/build.log"
    exit 1
  fi
  if ! check_minimal; then
    echo "test.sh: build-minimal/joaderfs did not refuse an s3:// SOURCE and remote_cache= as it should"
    exit 1
  fi
fi

if [ -n "$build_pid" ]; then
  if ! wait "$build_pid"; then
    tail -n 60 build-fuzz/build.log
    echo "test.sh: the sanitizer build (build-fuzz) failed; its log is build-fuzz/build.log"
    exit 1
  fi
fi
trap - EXIT

if [ "$sanitize" != 0 ]; then
  (cd build-fuzz &&
   ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
   UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
   ctest -L unit -E '^(DependentPlannerRandomness\.|DependentPlannerLocality\.FirstRoundMatchesTheFormulaExactly$)' \
     --output-on-failure --timeout 900 -j"$jobs")
fi

# One fuzzer: its failure prints the log's tail and the input that did it.
fuzz_one() {
  local seeds=$1 target scratch log
  target=$(basename "$seeds")
  # New inputs go to a scratch folder; the checked-in seeds stay as they are.
  scratch=build-fuzz/corpus/$target
  mkdir -p "$scratch"
  log=build-fuzz/$target.log
  if ! "build-fuzz/$target" -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="build-fuzz/$target-" "$scratch" "$seeds" \
      >"$log" 2>&1; then
    tail -n 40 "$log"
    echo "fuzz: $target failed; the input that did it is build-fuzz/$target-*"
    return 1
  fi
  echo "fuzz: $target ${fuzz_seconds}s, $(grep -oE 'number_of_executed_units: *[0-9]+' "$log" |
    grep -oE '[0-9]+') inputs, no crash"
}

if [ "$fuzz_seconds" != 0 ]; then
  # Each fuzzer is one process on one core: nproc of them at a time.
  failed=0 running=0
  for seeds in fuzz/corpus/*/; do
    if [ "$running" = "$jobs" ]; then
      wait -n || failed=1
      running=$((running - 1))
    fi
    fuzz_one "$seeds" &
    running=$((running + 1))
  done
  while [ "$running" != 0 ]; do
    wait -n || failed=1
    running=$((running - 1))
  done
  [ "$failed" = 0 ] || exit 1
fi
