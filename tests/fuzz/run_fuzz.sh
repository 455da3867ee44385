#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan, compiled directly by this script, not by
# the CMake build) and runs one or all of them for a fixed time each, seeded with the repository's
# real files. Registered in ctest (label unit), one test per target:
#
#   target              ctest                    fuzzes
#   safetensors_header  sharding_fuzz            ParseSafetensorsHeader (sharding/safetensors)
#   config              config_fuzz              model_index.json, config.json and index readers and
#                                                every transformer / text encoder / VAE config parser
#   tokenizer           tokenizer_fuzz           LoadHfTokenizer(tokenizer.json [+ tokenizer_config.json])
#                                                then Encode of a fuzzer-chosen text
#   request_validator   request_validator_fuzz   ValidateRequest on a serialized ditserve.v1.GenerateRequest
#
#   tests/fuzz/run_fuzz.sh [--target NAME|all] [--seconds N] [--build-dir DIR] [--cxx clang++-14]
#                          [--fixtures DIR] [--proto-gen DIR] [--jobs N] [--nice N] [--build-only]
#                          [-- extra libFuzzer flags]
#
# --seconds is per target (default 60). Each target lives in DIR/<target>/ (default build-fuzz/):
# the binary, its objects (rebuilt when a source or a header it includes changes), seeds/
# (regenerated every run), corpus/ (kept between runs) and, after a failure, the crash-*/leak-*/
# timeout-* input. The last run's libFuzzer output is DIR/<target>/last_run.log. Reproduce a
# finding with `DIR/<target>/<target>_fuzzer FILE`.
# Exit status: 0 when every target built and no run found anything; 1 otherwise; 2 for bad usage.
set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${SRC}/build-fuzz"
TARGET=all
SECONDS_TO_RUN=60
CXX_BIN="$(command -v clang++-14 || command -v clang++ || true)"
FIXTURES="${SRC}/tests/fixtures"
PROTO_GEN="${SRC}/build/proto/gen"
JOBS=2
NICE=10
BUILD_ONLY=0
EXTRA_FLAGS=()
ALL_TARGETS=(safetensors_header config tokenizer request_validator)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --target) TARGET="$2"; shift 2 ;;
    --seconds) SECONDS_TO_RUN="$2"; shift 2 ;;
    --build-dir) BUILD="$2"; shift 2 ;;
    --cxx) CXX_BIN="$2"; shift 2 ;;
    --fixtures) FIXTURES="$2"; shift 2 ;;
    --proto-gen) PROTO_GEN="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --nice) NICE="$2"; shift 2 ;;
    --build-only) BUILD_ONLY=1; shift ;;
    --) shift; EXTRA_FLAGS=("$@"); break ;;
    *) echo "run_fuzz.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n "${CXX_BIN}" ]] || { echo "run_fuzz.sh: clang++ not found" >&2; exit 2; }
if [[ "${TARGET}" == all ]]; then
  TARGETS=("${ALL_TARGETS[@]}")
else
  case " ${ALL_TARGETS[*]} " in
    *" ${TARGET} "*) TARGETS=("${TARGET}") ;;
    *) echo "run_fuzz.sh: unknown target ${TARGET} (${ALL_TARGETS[*]} or all)" >&2; exit 2 ;;
  esac
fi
NICE_CMD=(nice -n "${NICE}")
FUZZ_DIR="${SRC}/tests/fuzz"

COMMON_CXXFLAGS=(-std=c++17 -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined
                 -fno-sanitize-recover=undefined -fsanitize=fuzzer-no-link -D_GLIBCXX_USE_CXX11_ABI=1
                 -pthread -I"${SRC}")
LINK_FLAGS=(-fsanitize=fuzzer,address,undefined -pthread)

# Per target: SOURCES (relative to SRC unless absolute), PKGS (pkg-config), CXXFLAGS_T, LIBS_T,
# MAX_LEN, DICT.
configure_target() {
  SOURCES=(); PKGS=(absl_strings absl_status absl_statusor); CXXFLAGS_T=(); LIBS_T=(); DICT=""
  MAX_LEN=65536
  case "$1" in
    safetensors_header)
      SOURCES=(tests/fuzz/safetensors_header_fuzzer.cc sharding/safetensors.cc)
      DICT="${FUZZ_DIR}/dicts/safetensors.dict"
      ;;
    config)
      # LibTorch is linked only for models/text/activations.cc (ParseActivation lives beside the
      # activation functions); nothing in the run touches a tensor.
      SOURCES=(tests/fuzz/config_fuzzer.cc common/config_json.cc sharding/checkpoint.cc
               sharding/model_files.cc sharding/pipeline_index.cc sharding/safetensors.cc
               models/flux1/flux1_config.cc models/flux2/flux2_config.cc
               models/qwenimage/qwenimage_config.cc models/text/causal_lm_config.cc
               models/text/clip_text_config.cc models/text/t5_config.cc models/text/activations.cc
               models/vae/autoencoder_kl_config.cc models/vae/autoencoder_kl_flux2_config.cc
               models/vae/autoencoder_kl_qwenimage_config.cc)
      CXXFLAGS_T=(-isystem /usr/include/torch/csrc/api/include)
      LIBS_T=(-ltorch -ltorch_cpu -lc10)
      DICT="${FUZZ_DIR}/dicts/config.dict"
      ;;
    tokenizer)
      SOURCES=(tests/fuzz/tokenizer_fuzzer.cc models/tokenizers/added_tokens.cc
               models/tokenizers/bpe_model.cc models/tokenizers/byte_level.cc
               models/tokenizers/hf_added_vocabulary.cc models/tokenizers/hf_normalizer.cc
               models/tokenizers/hf_post_processor.cc models/tokenizers/hf_pre_tokenizer.cc
               models/tokenizers/hf_tokenizer.cc models/tokenizers/hf_tokenizer_json.cc
               models/tokenizers/hf_tokenizer_loader.cc models/tokenizers/pcre2_regex.cc
               models/tokenizers/qwen2_slow_tokenizer.cc models/tokenizers/tokenizer_files.cc
               models/tokenizers/unicode_text.cc)
      PKGS+=(absl_flat_hash_map absl_hash absl_raw_hash_set absl_synchronization icu-uc
             libpcre2-8)
      DICT="${FUZZ_DIR}/dicts/tokenizer.dict"
      MAX_LEN=65536
      ;;
    request_validator)
      [[ -f "${PROTO_GEN}/ditserve/v1/ditserve.pb.cc" ]] || {
        echo "run_fuzz.sh: ${PROTO_GEN}/ditserve/v1/ditserve.pb.cc missing (build the proto target" \
             "first, or pass --proto-gen)" >&2; return 1; }
      SOURCES=(tests/fuzz/request_validator_fuzzer.cc server/request_validator.cc
               "${PROTO_GEN}/ditserve/v1/ditserve.pb.cc"
               "${PROTO_GEN}/ditserve/worker/v1/worker.pb.cc")
      PKGS+=(protobuf)
      CXXFLAGS_T=(-I"${PROTO_GEN}" '-DDITSERVE_VERSION="fuzz"')
      MAX_LEN=16384
      ;;
  esac
}

# True when $1 (an object with a make-style depfile $1.d) is missing or older than a dependency.
stale() {
  local obj="$1" dep
  [[ -f "${obj}" && -f "${obj}.d" ]] || return 0
  while read -r dep; do
    [[ -z "${dep}" ]] && continue
    [[ ! -e "${dep}" || "${dep}" -nt "${obj}" ]] && return 0
  done < <(sed -e 's/^[^:]*://' -e 's/\\$//' "${obj}.d" | tr ' ' '\n')
  [[ "$0" -nt "${obj}" ]]
}

build_target() {
  local name="$1" dir="${BUILD}/$1"
  configure_target "${name}" || return 1
  local bin="${dir}/${name}_fuzzer"
  mkdir -p "${dir}/obj"
  # shellcheck disable=SC2046
  local pkg_cflags=($(pkg-config --cflags "${PKGS[@]}")) pkg_libs=($(pkg-config --libs "${PKGS[@]}"))
  local objs=() pids=() src obj relink=0
  for src in "${SOURCES[@]}"; do
    [[ "${src}" == /* ]] || src="${SRC}/${src}"
    obj="${dir}/obj/$(basename "${src}" .cc).o"
    objs+=("${obj}")
    if stale "${obj}"; then
      relink=1
      echo "run_fuzz.sh: [${name}] compiling ${src#"${SRC}"/}"
      while [[ $(jobs -rp | wc -l) -ge ${JOBS} ]]; do wait -n || true; done
      "${NICE_CMD[@]}" "${CXX_BIN}" "${COMMON_CXXFLAGS[@]}" "${CXXFLAGS_T[@]}" "${pkg_cflags[@]}" \
        -MMD -MF "${obj}.d" -c "${src}" -o "${obj}" &
      pids+=($!)
    fi
  done
  local failed=0 pid
  for pid in "${pids[@]}"; do wait "${pid}" || failed=1; done
  [[ ${failed} -eq 0 ]] || { echo "run_fuzz.sh: [${name}] compile failed" >&2; return 1; }
  [[ -x "${bin}" ]] || relink=1
  for obj in "${objs[@]}"; do [[ "${obj}" -nt "${bin}" ]] && relink=1; done
  if [[ ${relink} -eq 1 ]]; then
    echo "run_fuzz.sh: [${name}] linking ${bin}"
    "${NICE_CMD[@]}" "${CXX_BIN}" "${LINK_FLAGS[@]}" "${objs[@]}" -o "${bin}.tmp" \
      "${pkg_libs[@]}" "${LIBS_T[@]}"
    mv "${bin}.tmp" "${bin}"
  fi
}

# Seed corpora: rewritten on every run from the repository's files (the corpus/ folder keeps what
# the fuzzer found interesting across runs).
seed_safetensors_header() {
  local seeds="$1" i=0 f n
  while IFS= read -r -d '' f; do
    n=$(od -An -tu8 -N8 "$f" | tr -d ' ')
    if [[ -n "$n" && "$n" -gt 0 && "$n" -lt 100000000 ]]; then
      head -c "$((n + 8))" "$f" | tail -c +9 > "${seeds}/fixture_${i}.json"
      i=$((i + 1))
    fi
  done < <(find "${FIXTURES}" -name '*.safetensors' -print0 2>/dev/null)
  printf '%s' '{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"b":{"dtype":"F8_E4M3","shape":[],"data_offsets":[8,9]}}' > "${seeds}/edge_1.json"
  printf '%s' '{"a":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},"b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}' > "${seeds}/edge_2.json"
  echo "${i} fixture headers"
}

seed_config() {
  local seeds="$1" i=0 f
  while IFS= read -r -d '' f; do
    cp "$f" "${seeds}/fixture_${i}_$(basename "$f")"
    i=$((i + 1))
  done < <(find "${FIXTURES}" \( -name config.json -o -name model_index.json \
             -o -name '*.safetensors.index.json' -o -name scheduler_config.json \) -print0 2>/dev/null)
  cp "${FUZZ_DIR}"/seeds/config/*.json "${seeds}/"
  echo "${i} fixture files + $(ls "${FUZZ_DIR}"/seeds/config/*.json | wc -l) hand-made"
}

seed_tokenizer() {
  # Small copies of the fixture tokenizers and the one-feature cases of the unit tests (python3,
  # standard library); without python3, the fixture files as they are.
  local seeds="$1" i=0 dir
  if command -v python3 > /dev/null; then
    i=$(python3 "${FUZZ_DIR}/make_tokenizer_seeds.py" "${seeds}" "${FIXTURES}" \
          "${SRC}/tests/unit/data/hf_tokenizer_cases.json")
  else
    while IFS= read -r -d '' dir; do
      dir="$(dirname "${dir}")"
      i=$((i + 1))
      { printf 'a cat holding a sign\0'; head -c 60000 "${dir}/tokenizer.json"; } > "${seeds}/full_${i}"
    done < <(find "${FIXTURES}" -name tokenizer.json -print0 2>/dev/null)
  fi
  echo "${i} tokenizer folders (small copies of the fixtures, one-feature cases)"
}

seed_request_validator() {
  local seeds="$1" f proto="${SRC}/proto"
  command -v protoc > /dev/null || { echo "protoc not found: no seeds"; return 0; }
  # float32 payloads: 0.5 (0x3f000000) repeated; text format escapes.
  local half='\000\000\000?' one='\000\000\200?' e16="" e32="" e128="" m2=""
  for _ in $(seq 16); do e16+="${half}"; done
  for _ in $(seq 32); do e32+="${half}"; done
  for _ in $(seq 128); do e128+="${half}"; done
  m2="${one}\\000\\000\\000\\000"
  local text
  for f in "${FUZZ_DIR}"/seeds/request_validator/*.txtpb; do
    text="$(< "$f")"
    text="${text//@E16@/${e16}}"; text="${text//@E32@/${e32}}"
    text="${text//@E128@/${e128}}"; text="${text//@M2@/${m2}}"
    printf '%s\n' "${text}" |
      protoc --encode=ditserve.v1.GenerateRequest -I"${proto}" "${proto}/ditserve/v1/ditserve.proto" \
        > "${seeds}/$(basename "$f" .txtpb).bin"
  done
  echo "$(ls "${seeds}" | wc -l) encoded requests"
}

run_target() {
  local name="$1" dir="${BUILD}/$1"
  configure_target "${name}" || return 1
  local seeds="${dir}/seeds" corpus="${dir}/corpus" dict_flag=()
  rm -rf "${seeds}"
  mkdir -p "${seeds}" "${corpus}"
  local what
  what=$("seed_${name}" "${seeds}")
  [[ -n "${DICT}" ]] && dict_flag=(-dict="${DICT}")
  echo "run_fuzz.sh: [${name}] seeds: ${what}; fuzzing for ${SECONDS_TO_RUN} s"
  local rc=0
  # The config and tokenizer targets write their input to files each run: keep those in memory.
  local tmp="${TMPDIR:-/tmp}"
  [[ -d /dev/shm && -w /dev/shm ]] && tmp=/dev/shm
  (cd "${dir}" && TMPDIR="${tmp}" "${NICE_CMD[@]}" "./${name}_fuzzer" -max_total_time="${SECONDS_TO_RUN}" \
     -max_len="${MAX_LEN}" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
     -print_final_stats=1 -artifact_prefix="${dir}/" "${dict_flag[@]}" "${EXTRA_FLAGS[@]}" \
     "${corpus}" "${seeds}") > "${dir}/last_run.log" 2>&1 || rc=$?
  grep -E '^(stat::|Done |INFO: -max_total_time|==[0-9]+==ERROR|SUMMARY|.*Test unit written|#[0-9]+ *DONE)' \
    "${dir}/last_run.log" | sed "s/^/run_fuzz.sh: [${name}] /" || true
  if [[ ${rc} -ne 0 ]]; then
    echo "run_fuzz.sh: [${name}] FAILED (exit ${rc}); the end of ${dir}/last_run.log:" >&2
    tail -60 "${dir}/last_run.log" >&2
  fi
  return "${rc}"
}

mkdir -p "${BUILD}"
BUILD="$(cd "${BUILD}" && pwd)"  # the runs cd into their target's folder
status=0
for t in "${TARGETS[@]}"; do
  build_target "$t" || { echo "run_fuzz.sh: [$t] build FAILED" >&2; status=1; }
done
[[ ${status} -eq 0 && ${BUILD_ONLY} -eq 1 ]] && exit 0
[[ ${status} -eq 0 ]] || exit 1
for t in "${TARGETS[@]}"; do
  run_target "$t" || status=1
done
exit "${status}"
