#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test through ctest: unit, integration, e2e, and gpu
# (GPU tests skip themselves where no GPU exists). Extra arguments go to ctest (e.g. -L unit).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build
ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@"
