#!/usr/bin/env bash
# Installs the Debian packages joaderfs needs (only those missing) and builds
# it into build/. Idempotent: a second run installs nothing and rebuilds only
# what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config git
  libfuse3-dev fuse3 autofs libroaring-dev libvips-dev librocksdb-dev libspdlog-dev
  libjpeg62-turbo-dev libgtest-dev libbenchmark-dev zlib1g-dev nlohmann-json3-dev
  python3-torch python3-torchvision python3-numpy python3-pil
  gnuplot-nox
  clang libclang-rt-dev  # the fuzz targets (libFuzzer) in scripts/test.sh
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

build_type=${BUILD_TYPE:-RelWithDebInfo}
cmake -S . -B build -DCMAKE_BUILD_TYPE="$build_type" >/dev/null
cmake --build build -j"$(nproc)"
