#!/usr/bin/env bash
# Installs the Debian packages joaderfs needs (only those missing), the Python
# test environment (.venv-test, pinned pip packages), and builds
# it into build/. Idempotent: a second run installs nothing and rebuilds only
# what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config git
  libfuse3-dev fuse3 autofs libroaring-dev libvips-dev librocksdb-dev libspdlog-dev
  libjpeg62-turbo-dev libgtest-dev libbenchmark-dev zlib1g-dev nlohmann-json3-dev
  libcurl4-openssl-dev libxml2-dev  # s3:// SOURCEs: signed requests, listings
  python3-torch python3-torchvision python3-numpy python3-pil
  python3-venv  # the client's test venvs (.venv-test, ctest client_pip_install)
  gnuplot-nox
  clang libclang-rt-dev  # the fuzz targets (libFuzzer) in scripts/test.sh
  clang-format  # formats the C++ (.clang-format)
  libmicrohttpd-dev  # metrics_listen=: /metrics over HTTP (src/daemon/metrics_endpoint.h)
  python3-prometheus-client  # the endpoint's test parses it with Prometheus's own parser
  libsystemd-dev  # sd_notify: Type=notify readiness and the watchdog (src/daemon/main.cc)
  libssl-dev openssl  # the remote tier: sealed values, TLS (src/cache/cluster_key.h); test certificates
  memcached  # the remote tier's servers in its tests and benchmarks
  libmemcached-tools  # memcstat, memccat: looking at the tier by hand
  iproute2  # tests/cluster: each memcached in a network namespace (as root)
  prometheus  # promtool checks deploy/prometheus in tests
)
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

build_type=${BUILD_TYPE:-RelWithDebInfo}
cmake -S . -B build -DCMAKE_BUILD_TYPE="$build_type" >/dev/null
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
