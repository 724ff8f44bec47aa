#!/usr/bin/env bash
# Sets up (packages, build) and runs every test through ctest: unit tests,
# mount-level integration tests and the Python client tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build
ctest --output-on-failure --timeout 900 "$@"
