#!/usr/bin/env bash
# Builds the libFuzzer target for ParseSafetensorsHeader with clang (ASan + UBSan) and runs it for
# a fixed time, seeded with the headers of the fixture checkpoints. Registered in ctest as
# `sharding_fuzz` (label unit). Exit status: 0 when the run found nothing.
#
#   tests/fuzz/run_fuzz.sh [--build-dir DIR] [--seconds N] [--cxx clang++-14] [--fixtures DIR]
set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${SRC}/build-fuzz"
SECONDS_TO_RUN=60
CXX_BIN="$(command -v clang++-14 || command -v clang++ || true)"
FIXTURES="${SRC}/tests/fixtures"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) BUILD="$2"; shift 2 ;;
    --seconds) SECONDS_TO_RUN="$2"; shift 2 ;;
    --cxx) CXX_BIN="$2"; shift 2 ;;
    --fixtures) FIXTURES="$2"; shift 2 ;;
    *) echo "run_fuzz.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n "${CXX_BIN}" ]] || { echo "run_fuzz.sh: clang++ not found" >&2; exit 2; }
mkdir -p "${BUILD}"
BIN="${BUILD}/safetensors_header_fuzzer"
SOURCES=("${SRC}/tests/fuzz/safetensors_header_fuzzer.cc" "${SRC}/sharding/safetensors.cc")

# Rebuild only when a source or header is newer than the binary.
needs_build=1
if [[ -x "${BIN}" ]]; then
  needs_build=0
  for f in "${SOURCES[@]}" "${SRC}/sharding/safetensors.h" "$0"; do
    [[ "$f" -nt "${BIN}" ]] && needs_build=1
  done
fi
if [[ ${needs_build} -eq 1 ]]; then
  echo "run_fuzz.sh: building ${BIN}"
  # shellcheck disable=SC2046
  "${CXX_BIN}" -std=c++17 -g -O1 -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"${SRC}" $(pkg-config --cflags absl_strings absl_status absl_statusor) \
    "${SOURCES[@]}" -o "${BIN}.tmp" \
    $(pkg-config --libs absl_strings absl_status absl_statusor)
  mv "${BIN}.tmp" "${BIN}"
fi

# Seed corpus: the JSON header of every fixture safetensors file, plus a few hand-made edge cases.
SEEDS="${BUILD}/seeds"
CORPUS="${BUILD}/corpus"
rm -rf "${SEEDS}"
mkdir -p "${SEEDS}" "${CORPUS}"
i=0
while IFS= read -r -d '' f; do
  n=$(od -An -tu8 -N8 "$f" | tr -d ' ')
  if [[ -n "$n" && "$n" -gt 0 && "$n" -lt 100000000 ]]; then
    head -c "$((n + 8))" "$f" | tail -c +9 > "${SEEDS}/fixture_${i}.json"
    i=$((i + 1))
  fi
done < <(find "${FIXTURES}" -name '*.safetensors' -print0 2>/dev/null)
printf '%s' '{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"b":{"dtype":"F8_E4M3","shape":[],"data_offsets":[8,9]}}' > "${SEEDS}/edge_1.json"
printf '%s' '{"a":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},"b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}' > "${SEEDS}/edge_2.json"
echo "run_fuzz.sh: ${i} fixture headers as seeds; fuzzing for ${SECONDS_TO_RUN} s"

"${BIN}" -max_total_time="${SECONDS_TO_RUN}" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="${BUILD}/" "${CORPUS}" "${SEEDS}"
