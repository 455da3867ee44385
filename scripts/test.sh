#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test through ctest: unit, integration, e2e, and gpu
# (GPU tests skip themselves where no GPU exists). Extra arguments go to ctest (e.g. -L unit).
# Ends with the time of each phase (apt, configure, build, npm, ctest), ctest's time per label and
# the slowest tests, so a run shows where CI's time goes.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build
start=$(date +%s)
rc=0
ctest --output-on-failure --timeout 900 -j "$(nproc)" --output-junit ctest-junit.xml "$@" || rc=$?
echo "test: time per phase"
cat phase-times.txt 2>/dev/null || true
echo "test: phase ctest took $(( $(date +%s) - start )) s"
python3 ../scripts/slowest_tests.py ctest-junit.xml 15 || true
exit "${rc}"
