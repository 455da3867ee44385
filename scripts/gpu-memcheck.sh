#!/usr/bin/env bash
# Our CUDA kernels (models/cuda) under NVIDIA's compute-sanitizer on the GPU host: memcheck (out of
# bounds and misaligned device accesses, leaked device allocations) over the five kernel test
# binaries, then racecheck (shared-memory hazards) and synccheck over those whose kernels use shared
# memory and __syncthreads (NormModulate, the gated residual + NormModulate pair, the FP8
# activation quantization). The tests drive each kernel over the models' shapes and the odd ones
# of their fallback paths. PyTorch's caching allocator is off for these runs
# (PYTORCH_NO_CUDA_MEMORY_CACHING=1), so that an access past a tensor's end is past its allocation
# too. compute-sanitizer needs the hardware's debug interface:
# the device tool's KINDS.md has it working on its Firecracker machines and not under gVisor.
#
#   scripts/gpu-memcheck.sh BUNDLE_ARCHIVE OUT_DIR      (the archive from scripts/gpu-bundle.sh)
#
# Builds the five targets into build-cuda (scripts/gpu-build.sh); OUT_DIR/<tool>_<test>.txt per run,
# OUT_DIR/summary.txt the sanitizer's verdict line of each. Exit status 0 when every run reports
# no errors.
set -u
cd "$(dirname "$0")/.."
archive="$1" out="$2"
mkdir -p "$out" /tmp/ditserve-deps
[ -n "$(ls /tmp/ditserve-deps)" ] || tar xf "$archive" -C /tmp/ditserve-deps
bundle=$(ls -d /tmp/ditserve-deps/*/ | head -1)
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
[ -n "$sanitizer" ] || { echo "gpu-memcheck: no compute-sanitizer on this host" >&2; exit 1; }
all="norm_modulate_test gated_residual_test swiglu_test attention_inputs_test fp8_linear_test"
shared="norm_modulate_test gated_residual_test fp8_linear_test"
args=()
for t in $all; do args+=(--target "$t"); done
scripts/gpu-build.sh --bundle "$bundle" --build-dir build-cuda "${args[@]}" -- -DDITSERVE_TESTS=ON \
  > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
rc=0
: > "$out/summary.txt"
run() {  # tool test [extra sanitizer flags]
  local tool="$1" t="$2"
  shift 2
  (cd build-cuda && "$sanitizer" --tool "$tool" "$@" --error-exitcode 99 "tests/gpu/$t") \
    > "$out/${tool}_$t.txt" 2>&1
  local r=$?
  echo "$tool $t: exit $r, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/${tool}_$t.txt" | tail -1)" |
    tee -a "$out/summary.txt"
  [ $r = 0 ] || rc=1
}
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
for t in $all; do run memcheck "$t"; done
for t in $shared; do
  run racecheck "$t"
  run synccheck "$t"
done
exit $rc
