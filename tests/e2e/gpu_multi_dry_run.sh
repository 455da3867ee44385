#!/usr/bin/env bash
# scripts/gpu-multi.sh (tensor parallelism across a node's GPUs) kept working until a multi-GPU
# machine runs it: its CPU dry run, two Gloo ranks for GPUs, on this build. Every parity line must
# PASS (the three tiny pipelines at tp 1 and 2 against diffusers, tp 2 against tp 1), the scaling
# table must have both degrees, and the killed rank's request must end UNAVAILABLE with the group
# SERVING again and the next image right.
# Usage: gpu_multi_dry_run.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src="$1"
build="$2"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
DEVICE=cpu TP_DEGREES="1 2" BUILD_DIR="$build" "$src/scripts/gpu-multi.sh" - "$out/results" \
  > "$out/log.txt" 2>&1
status=0
fail() { echo "FAIL: $*"; status=1; }
cat "$out/log.txt"
grep -q "FAIL" "$out/log.txt" && fail "a check of the script failed"
passes=$(grep -c "PASS" "$out/log.txt")
[ "$passes" = 12 ] || fail "expected 12 PASS lines (11 parity + the request after the kill), got $passes"
grep -qE "^\| 1 \| .* \| 1.00x \| 100 % \|" "$out/log.txt" || fail "no tp 1 row in the scaling table"
grep -qE "^\| 2 \| " "$out/log.txt" || fail "no tp 2 row in the scaling table"
grep -q "the request: exit 1 .*UNAVAILABLE" "$out/log.txt" || fail "the killed rank's request did not end UNAVAILABLE"
grep -q "^health SERVING .* rank 1 now pid [0-9]" "$out/log.txt" || fail "the group did not re-form"
exit $status
