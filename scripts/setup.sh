#!/usr/bin/env bash
# Installs the Debian packages joaderfs needs (only those missing) and builds.
#
# usage: scripts/setup.sh [--demo]
#   (none)  every package, the Python test environment (.venv-test, pinned
#           pip packages) and every target into build/: what scripts/test.sh
#           runs.
#   --demo  the daemon's packages only, no venv, and only joaderfs and
#           joaderfs-gendata into build-demo/: what scripts/demo.sh runs.
# Idempotent: a second run installs nothing and rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

case ${1:-} in
  "") demo=false ;;
  --demo) demo=true ;;
  *) echo "usage: scripts/setup.sh [--demo]" >&2; exit 2 ;;
esac

# What builds and runs the daemon and joaderfs-gendata, and the client under
# Debian's /usr/bin/python3 with its torch: all that scripts/demo.sh needs.
daemon_packages=(
  build-essential cmake pkg-config
  libfuse3-dev fuse3 libroaring-dev libvips-dev librocksdb-dev libspdlog-dev
  libjpeg62-turbo-dev zlib1g-dev nlohmann-json3-dev
  libisal-dev  # CRC-32C of disk-tier samples and TFRecords (src/common/crc32c.h)
  libcurl4-openssl-dev libxml2-dev  # s3:// SOURCEs: signed requests, listings
  libmicrohttpd-dev  # metrics_listen=: /metrics over HTTP (src/daemon/metrics_endpoint.h)
  libsystemd-dev  # sd_notify: Type=notify readiness and the watchdog (src/daemon/main.cc)
  libssl-dev  # the remote tier: sealed values, TLS (src/cache/cluster_key.h)
  python3-torch python3-numpy  # the client (python/joaderfs) and its DataLoader
)
# The rest: what the tests, benchmarks and fuzzers of scripts/test.sh need.
test_packages=(
  git  # ctest client_pip_install checks that the work tree stays clean
  autofs  # tests/mount/test_autofs
  libgtest-dev libbenchmark-dev
  python3-torchvision python3-pil
  python3-venv  # the client's test venvs (.venv-test, ctest client_pip_install)
  gnuplot-nox  # plots of bench/ and scripts/sim-appendix.sh
  clang libclang-rt-dev  # the fuzz targets (libFuzzer) in scripts/test.sh
  clang-format  # formats the C++ (.clang-format)
  python3-prometheus-client  # the endpoint's test parses it with Prometheus's own parser
  openssl  # test certificates of the remote tier
  memcached  # the remote tier's servers in its tests and benchmarks
  libmemcached-tools  # memcstat, memccat: looking at the tier by hand
  iproute2  # tests/cluster: each memcached in a network namespace (as root)
  prometheus  # promtool checks deploy/prometheus in tests
)
packages=("${daemon_packages[@]}")
$demo || packages+=("${test_packages[@]}")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

if $demo; then
  # A folder of its own, so that build/ keeps the configuration that
  # scripts/test.sh builds. No debug info, and a unity build (one compile for
  # each batch of 8 sources of a target, so their file-local names must
  # differ): 2-3 CPU minutes for the two programs against 7 as build/ makes
  # them. gcc's -Wsubobject-linkage would take a batched .cc's own types in
  # an anonymous namespace for a header's.
  cmake -S . -B build-demo -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG -Wno-subobject-linkage" -DCMAKE_UNITY_BUILD=ON \
    -DJOADERFS_BUILD_TESTS=OFF -DJOADERFS_BUILD_BENCH=OFF >/dev/null
  cmake --build build-demo -j"$(nproc)" --target joaderfs joaderfs-gendata
  exit 0
fi

# The Python client's test environment, .venv-test: torch 2.x, TensorFlow and
# JAX from PyPI, pinned in python/requirements-test.txt (ctest runs the
# client's tests in it and under Debian's /usr/bin/python3 with its torch
# 1.13). Re-installed only when that file changes, beside the build below:
# pip spends most of its minutes downloading, which the compilers do not.
venv=.venv-test
requirements=python/requirements-test.txt
stamp="$venv/requirements.sha256"
want=$(sha256sum "$requirements" | cut -d' ' -f1)
venv_pid=
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  # The python3 on PATH (pyenv, say) if it can make venvs, else Debian's
  # (python3-venv above).
  python=python3
  "$python" -c "import venv, ensurepip" 2>/dev/null || python=/usr/bin/python3
  echo "setup: installing $requirements into $venv with $python (a few minutes)"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q -r "$requirements" >"$venv/pip.log" 2>&1 &
  venv_pid=$!
  trap 'kill "$venv_pid" 2>/dev/null || true' EXIT  # a failed build stops pip too
fi

# Line tables only (-g1): a crash's backtrace and a debugger's stack still
# name file and line, and the build, the longest step of a fresh
# scripts/test.sh, takes a fifth less CPU than with full -g (13.6 s against
# 9.8 s for one of the jobs/ sources; tests the same ratio).
build_type=${BUILD_TYPE:-RelWithDebInfo}
cmake -S . -B build -DCMAKE_BUILD_TYPE="$build_type" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" >/dev/null
cmake --build build -j"$(nproc)"

if [ -n "$venv_pid" ]; then
  if ! wait "$venv_pid"; then
    cat "$venv/pip.log"
    echo "setup: pip could not install $requirements into $venv (its log is above)"
    exit 1
  fi
  trap - EXIT
  echo "$want" >"$stamp"
fi
