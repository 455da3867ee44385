#!/usr/bin/env bash
# The GPU tests (label gpu) under AddressSanitizer + UndefinedBehaviorSanitizer on the GPU host: the
# CUDA variant built with -DDITSERVE_SANITIZE=address (g++, -O1, line tables; nvcc's kernels stay
# uninstrumented, CMakeLists.txt) into build-cuda-asan, then each GPU test binary in turn with
# sanitize.sh's options plus protect_shadow_gap=0 (CUDA maps memory in ASan's shadow gap).
# Every process's reports go to OUT/reports/report.PID.
#
# Resumable under a device call's time limit: a second run continues the build (ninja) and runs only
# the tests not yet finished (OUT/done.txt); LIMIT (seconds, default 570) is this run's budget.
#
#   scripts/gpu-asan.sh BUNDLE_ARCHIVE OUT_DIR      (the archive from scripts/gpu-bundle.sh)
set -u
cd "$(dirname "$0")/.."
archive="$1"
mkdir -p "$2" /tmp/ditserve-deps
R=$(cd "$2" && pwd)  # absolute: the tests run from build-cuda-asan
T0=$(date +%s) LIMIT=${LIMIT:-570}
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$R/log.txt"; }
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
[ -n "$(ls /tmp/ditserve-deps)" ] || tar xf "$archive" -C /tmp/ditserve-deps
bundle=$(ls -d /tmp/ditserve-deps/*/ | head -1)
tests="norm_modulate_test gated_residual_test swiglu_test attention_inputs_test fp8_linear_test comm_nccl_test
       comm_nccl_torch_test cuda_engine_test cuda_lora_test step_cache_gpu_test
       image_inputs_gpu_test qwen_edit_gpu_test cuda_pipeline_test cuda_server_test"
targets=(--target ditserve-frontend --target ditserve-worker)
for t in $tests; do targets+=(--target "$t"); done
if [ ! -f build-cuda-asan/CMakeCache.txt ]; then
  scripts/gpu-build.sh --bundle "$bundle" --build-dir build-cuda-asan --configure-only -- \
    -DDITSERVE_TESTS=ON -DDITSERVE_SANITIZE=address -DDITSERVE_TORCH_PCH=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" > "$R/configure.log" 2>&1
  log "configure rc $?"
fi
(cd build-cuda-asan && timeout $(( $(left) - 60 )) cmake --build . -j "$(( $(nproc) + 1 ))" \
  "${targets[@]}" -- -k 0) >> "$R/build.log" 2>&1
rc=$?
log "build rc $rc"
[ $rc = 0 ] || { grep -E "error|FAILED" -A3 "$R/build.log" | head -60; exit 1; }

reports="$R/reports"
mkdir -p "$reports"
# shellcheck source=tests/sanitizers/asan_env.sh
. tests/sanitizers/asan_env.sh
asan_env "$reports" cuda
cd build-cuda-asan
# shellcheck disable=SC1091
[ -f ditserve-env.sh ] && . ./ditserve-env.sh
touch "$R/done.txt"
for t in $tests; do
  grep -qx "$t" "$R/done.txt" && continue
  l=$(left)
  [ "$l" -lt 40 ] && { log "stopped before $t ($l s left): run again to go on"; break; }
  timeout $(( l - 20 )) "tests/gpu/$t" > "$R/test_$t.txt" 2>&1
  rc=$?
  log "$t rc $rc $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$R/test_$t.txt" | tr '\n' ' ')"
  [ $rc = 124 ] || echo "$t" >> "$R/done.txt"
done
n=$(find "$reports" -type f | wc -l)
log "$n sanitizer report file(s) in $reports"
for f in "$reports"/*; do
  [ -f "$f" ] && { echo "== $f"; grep -m1 -E "ERROR|runtime error" "$f"; grep -m1 SUMMARY "$f"; }
done | tee -a "$R/log.txt"
