#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan, compiled directly by this script, not by
# the CMake build) and runs one or all of them, seeded with the repository's real files and the
# committed regression inputs (tests/fuzz/seeds/<target>/). Registered in ctest (label unit), one
# test per target, in the deterministic CI mode:
#
#   target              ctest                    fuzzes
#   safetensors_header  sharding_fuzz            ParseSafetensorsHeader (sharding/safetensors)
#   config              config_fuzz              model_index.json, config.json and index checks and
#                                                every transformer / text encoder / VAE config parser
#                                                and the Qwen2-VL processor's settings,
#                                                from memory (ParseJsonObjectFile, sharding/model_json.h)
#   tokenizer           tokenizer_fuzz           LoadHfTokenizer(tokenizer.json [+ tokenizer_config.json])
#                                                from memory (TokenizerFolder::InMemory), then Encode
#                                                of a fuzzer-chosen text
#   request_validator   request_validator_fuzz   ValidateRequest on a serialized ditserve.v1.GenerateRequest
#                                                (with server/input_images and imaging/ linked in)
#   image_decode        image_decode_fuzz        imaging/: DecodeImage (PNG, JPEG, WebP, limits from the
#                                                header) then Resize of what it decoded
#
#   tests/fuzz/run_fuzz.sh [--target NAME|all] [--runs M] [--seed N]            (CI mode, default)
#   tests/fuzz/run_fuzz.sh --explore [--target NAME|all] [--seconds N]          (exploration)
#       common: [--build-dir DIR] [--cxx clang++-14] [--fixtures DIR] [--proto-gen DIR] [--jobs N]
#               [--nice N] [--build-only] [-- extra libFuzzer flags]
#   A long run beside other work (--nice 19 and a large --runs): add `-- -timeout=300`. libFuzzer's
#   -timeout (10 s here) is wall-clock time, and a niced process starved by builds reported a
#   "timeout" for a tokenizer input that runs in 0.3 s alone (2026-12-05). The flags after -- come
#   last, so they override ours.
#
# CI mode (what ctest runs): the same inputs every time. Its corpus folder (corpus-ci/) is emptied
# first, so the run starts from the seeds alone (the fixture files, the hand-made cases and every
# committed regression input; all of them are run, a crash on one fails the test), then libFuzzer
# mutates with a fixed seed (-seed=N, default 1) for a fixed number of executions (-runs=M; default
# per target below, each about 10-20 s on the idle 2-core development machine), with no time bound,
# no corpus reloading, address-space randomisation off (setarch -R), an empty environment (PATH,
# TMPDIR; no target writes files: each fuzzes its readers from memory), a command line of relative
# paths and no trace-cmp guided mutation (compared pointers are not repeatable): two runs execute
# the same inputs and end with the same "cov:" / "ft:" / "corp:" figures
# (bench/results/2026-12-04-fuzz-determinism.txt). Exploration keeps trace-cmp.
#
# Explore mode (--explore, by hand): a random libFuzzer seed and a time bound (--seconds N per
# target, default 60); its corpus folder (corpus/) is kept between runs so exploration accumulates. When a
# run finds a crash, leak, timeout or out-of-memory input, it is copied into
# tests/fuzz/seeds/<target>/regression-<kind>-<sha1> (raw bytes, the fuzzer's input), where every
# later CI run replays it: fix the bug, then commit the seed with the fix.
#
# Each target lives in DIR/<target>/ (default build-fuzz/): the binary, its objects (rebuilt when
# a source or a header it includes changes), seeds/ (regenerated every run), corpus-ci/, corpus/
# and, after a failure, the crash-*/leak-*/timeout-*/oom-* input under artifacts/. The last run's
# libFuzzer output is DIR/<target>/last_run.log. Reproduce a finding with
# `DIR/<target>/<target>_fuzzer FILE`.
# Exit status: 0 when every target built and no run found anything; 1 otherwise; 2 for bad usage.
set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${SRC}/build-fuzz"
TARGET=all
MODE=ci
SECONDS_TO_RUN=""
RUNS=""
SEED=1
CXX_BIN="$(command -v clang++-14 || command -v clang++ || true)"
FIXTURES="${SRC}/tests/fixtures"
PROTO_GEN="${SRC}/build/proto/gen"
JOBS=2
NICE=10
BUILD_ONLY=0
EXTRA_FLAGS=()
ALL_TARGETS=(safetensors_header config tokenizer request_validator image_decode)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --target) TARGET="$2"; shift 2 ;;
    --explore) MODE=explore; shift ;;
    --seconds) SECONDS_TO_RUN="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
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
if [[ "${MODE}" == ci ]]; then
  [[ -z "${SECONDS_TO_RUN}" ]] || {
    echo "run_fuzz.sh: --seconds is for --explore (CI runs are bounded by --runs)" >&2; exit 2; }
  [[ -z "${RUNS}" || "${RUNS}" =~ ^[1-9][0-9]*$ ]] || {
    echo "run_fuzz.sh: --runs must be a positive integer" >&2; exit 2; }
  [[ "${SEED}" =~ ^[1-9][0-9]*$ ]] || {
    echo "run_fuzz.sh: --seed must be a positive integer (0 is libFuzzer's random seed)" >&2; exit 2; }
else
  [[ -z "${RUNS}" ]] || { echo "run_fuzz.sh: --runs is for the CI mode" >&2; exit 2; }
  SECONDS_TO_RUN="${SECONDS_TO_RUN:-60}"
  [[ "${SECONDS_TO_RUN}" =~ ^[1-9][0-9]*$ ]] || {
    echo "run_fuzz.sh: --seconds must be a positive integer" >&2; exit 2; }
fi
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
# The CI mode runs with -use_cmp=0, so the trace-cmp callbacks that -fsanitize=fuzzer-no-link
# inserts at every comparison record values the mutator never uses (about 30% of a run's time in
# perf): its build leaves them out, 1.3x the executions a second. (They still feed libFuzzer's
# automatic dictionary, so the two builds mutate differently: each is deterministic on its own.)
# Exploration uses them, so it builds its own objects and binary (obj-explore/,
# <target>_fuzzer_explore) beside the CI ones.
FLAVOR=""
if [[ "${MODE}" == ci ]]; then
  COMMON_CXXFLAGS+=(-fno-sanitize-coverage=trace-cmp)
else
  FLAVOR="_explore"
fi

# Per target: SOURCES (relative to SRC unless absolute), PKGS (pkg-config), CXXFLAGS_T, LIBS_T,
# MAX_LEN, DICT, CI_RUNS (the CI mode's -runs: about 10-20 s each here, seeds included).
configure_target() {
  SOURCES=(); PKGS=(absl_strings absl_status absl_statusor); CXXFLAGS_T=(); LIBS_T=(); DICT=""
  MAX_LEN=65536
  case "$1" in
    safetensors_header)
      SOURCES=(tests/fuzz/safetensors_header_fuzzer.cc sharding/safetensors.cc)
      DICT="${FUZZ_DIR}/dicts/safetensors.dict"
      CI_RUNS=8000
      ;;
    config)
      # LibTorch is linked only for models/text/activations.cc (ParseActivation lives beside the
      # activation functions); nothing in the run touches a tensor.
      SOURCES=(tests/fuzz/config_fuzzer.cc common/config_json.cc sharding/checkpoint.cc
               sharding/model_files.cc sharding/model_json.cc sharding/pipeline_index.cc
               sharding/safetensors.cc
               models/flux1/flux1_config.cc models/flux2/flux2_config.cc
               models/qwenimage/qwenimage_config.cc models/text/causal_lm_config.cc
               models/text/clip_text_config.cc models/text/t5_config.cc models/text/activations.cc
               models/vae/autoencoder_kl_config.cc models/vae/autoencoder_kl_flux2_config.cc
               models/vae/autoencoder_kl_qwenimage_config.cc
               models/text/qwen2_5_vl_vision_config.cc pipeline/qwen2vl_processor_config.cc)
      CXXFLAGS_T=(-isystem /usr/include/torch/csrc/api/include)
      LIBS_T=(-ltorch -ltorch_cpu -lc10)
      DICT="${FUZZ_DIR}/dicts/config.dict"
      CI_RUNS=20000
      ;;
    tokenizer)
      SOURCES=(tests/fuzz/tokenizer_fuzzer.cc common/config_json.cc models/tokenizers/added_tokens.cc
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
      CI_RUNS=15000
      ;;
    request_validator)
      [[ -f "${PROTO_GEN}/ditserve/v1/ditserve.pb.cc" ]] || {
        echo "run_fuzz.sh: ${PROTO_GEN}/ditserve/v1/ditserve.pb.cc missing (build the proto target" \
             "first, or pass --proto-gen)" >&2; return 1; }
      # server/input_images (ValidateRequest checks and decodes GenerateRequest.images) brings in
      # imaging/.
      SOURCES=(tests/fuzz/request_validator_fuzzer.cc server/request_validator.cc
               server/input_images.cc imaging/decode.cc imaging/exif.cc imaging/format.cc
               imaging/jpeg_decode.cc imaging/png_decode.cc imaging/preprocess.cc
               imaging/qwen_edit_sizes.cc imaging/resample.cc imaging/transform.cc
               imaging/webp_decode.cc
               "${PROTO_GEN}/ditserve/v1/ditserve.pb.cc"
               "${PROTO_GEN}/ditserve/worker/v1/worker.pb.cc")
      PKGS+=(protobuf libpng libjpeg libwebp libwebpdemux)
      CXXFLAGS_T=(-I"${PROTO_GEN}" '-DDITSERVE_VERSION="fuzz"')
      MAX_LEN=16384
      CI_RUNS=1000000
      ;;
    image_decode)
      SOURCES=(tests/fuzz/image_decode_fuzzer.cc imaging/decode.cc imaging/exif.cc imaging/format.cc
               imaging/jpeg_decode.cc imaging/png_decode.cc imaging/resample.cc imaging/transform.cc
               imaging/webp_decode.cc)
      PKGS+=(libpng libjpeg libwebp libwebpdemux)
      MAX_LEN=65536
      CI_RUNS=40000
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
  local bin="${dir}/${name}_fuzzer${FLAVOR}" objdir="${dir}/obj${FLAVOR/_/-}"
  mkdir -p "${objdir}"
  # shellcheck disable=SC2046
  local pkg_cflags=($(pkg-config --cflags "${PKGS[@]}")) pkg_libs=($(pkg-config --libs "${PKGS[@]}"))
  local objs=() pids=() src obj relink=0
  for src in "${SOURCES[@]}"; do
    [[ "${src}" == /* ]] || src="${SRC}/${src}"
    obj="${objdir}/$(basename "${src}" .cc).o"
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
  done < <(find "${FIXTURES}" -name '*.safetensors' -print0 2>/dev/null | sort -z)
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
             -o -name '*.safetensors.index.json' -o -name scheduler_config.json \
             -o -name preprocessor_config.json \) -print0 2>/dev/null |
             sort -z)
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
    done < <(find "${FIXTURES}" -name tokenizer.json -print0 2>/dev/null | sort -z)
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

seed_image_decode() {
  local seeds="$1"
  # The regression-* inputs come in through copy_regression_seeds, like every target's.
  find "${FUZZ_DIR}/seeds/image_decode" -maxdepth 1 -type f ! -name 'regression-*' \
    -exec cp {} "${seeds}/" \;
  echo "$(ls "${seeds}" | wc -l) small images (PNG, JPEG, WebP)"
}

# The committed regression inputs of a target (tests/fuzz/seeds/<target>/regression-*: raw fuzzer
# inputs saved by --explore, or written by hand), copied as they are.
copy_regression_seeds() {
  local name="$1" seeds="$2" f n=0
  for f in "${FUZZ_DIR}/seeds/${name}"/regression-*; do
    [[ -f "$f" ]] || continue
    cp "$f" "${seeds}/"
    n=$((n + 1))
  done
  echo "${n}"
}

# After an --explore run: every artifact it left becomes a committed regression seed.
save_findings() {
  local name="$1" artifacts="$2" f base dest
  mkdir -p "${FUZZ_DIR}/seeds/${name}"
  for f in "${artifacts}"/*; do
    [[ -f "$f" ]] || continue
    base="$(basename "$f")"  # crash-<sha1>, leak-<sha1>, timeout-<sha1>, oom-<sha1>, slow-unit-...
    dest="${FUZZ_DIR}/seeds/${name}/regression-${base}"
    [[ -e "${dest}" ]] && continue
    cp "$f" "${dest}"
    echo "run_fuzz.sh: [${name}] saved ${dest#"${SRC}"/} (reproduce: ${BUILD}/${name}/${name}_fuzzer${FLAVOR} ${dest}); commit it with the fix"
  done
}

run_target() {
  local name="$1" dir="${BUILD}/$1"
  configure_target "${name}" || return 1
  # Paths relative to ${dir}, where the fuzzer runs: its command line is the same in every checkout.
  local seeds=seeds corpus=corpus artifacts=artifacts dict_flag=()
  # CI: a fresh corpus every run, so two runs see the same inputs (the exploration's corpus/ stays).
  [[ "${MODE}" == ci ]] && corpus=corpus-ci
  (cd "${dir}" && rm -rf "${seeds}" "${artifacts}")
  [[ "${MODE}" == ci ]] && (cd "${dir}" && rm -rf "${corpus}")
  (cd "${dir}" && mkdir -p "${seeds}" "${corpus}" "${artifacts}")
  seeds="${dir}/${seeds}"
  local what regressions
  what=$("seed_${name}" "${seeds}")
  regressions=$(copy_regression_seeds "${name}" "${seeds}")
  if [[ -n "${DICT}" ]]; then
    cp "${DICT}" "${dir}/fuzz.dict"
    dict_flag=(-dict=fuzz.dict)
  fi
  local bound=()
  if [[ "${MODE}" == ci ]]; then
    local runs="${RUNS:-${CI_RUNS}}"
    # -use_cmp=0: trace-cmp hands compared values to the mutator, and some are pointers, which
    # move with timing (LibTorch's second thread in the config target, allocator state): with it,
    # two runs of one seed part after some thousand inputs.
    bound=(-seed="${SEED}" -runs="${runs}" -reload=0 -use_cmp=0)
    echo "run_fuzz.sh: [${name}] seeds: ${what}, ${regressions} regression inputs; CI mode:" \
         "-seed=${SEED} -runs=${runs}"
  else
    bound=(-max_total_time="${SECONDS_TO_RUN}")
    echo "run_fuzz.sh: [${name}] seeds: ${what}, ${regressions} regression inputs; exploring for" \
         "${SECONDS_TO_RUN} s (random seed, corpus kept in ${corpus})"
  fi
  # CI: without address-space randomisation and with a fixed environment. trace-cmp hands the
  # compared values to the mutator, and some comparisons are of pointers (absl's hash seeds are
  # addresses too): with ASLR on, or with a stack that starts elsewhere because the environment is
  # longer, two runs of the same seed mutate differently after a few thousand inputs.
  # No target writes files (every one fuzzes from memory); TMPDIR is passed on for libFuzzer's own
  # temporary files.
  local tmp="${TMPDIR:-/tmp}"
  local no_aslr=() fixed_env=(env)
  if [[ "${MODE}" == ci ]]; then
    fixed_env=(env -i PATH=/usr/local/bin:/usr/bin:/bin)
    if setarch "$(uname -m)" -R true 2> /dev/null; then
      no_aslr=(setarch "$(uname -m)" -R)
    else
      echo "run_fuzz.sh: [${name}] warning: cannot turn ASLR off (setarch -R); the run may not" \
           "repeat exactly" >&2
    fi
  fi
  local rc=0
  (cd "${dir}" && "${NICE_CMD[@]}" "${fixed_env[@]}" TMPDIR="${tmp}" "${no_aslr[@]}" \
     "./${name}_fuzzer${FLAVOR}" "${bound[@]}" -max_len="${MAX_LEN}" -timeout=10 -rss_limit_mb=2048 \
     -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="${artifacts}/" "${dict_flag[@]}" \
     "${EXTRA_FLAGS[@]}" "${corpus}" seeds) > "${dir}/last_run.log" 2>&1 || rc=$?
  grep -E '^(stat::|Done |INFO: Seed:|INFO: -max_total_time|==[0-9]+==ERROR|SUMMARY|.*Test unit written|#[0-9]+[[:space:]]+(INITED|DONE))' \
    "${dir}/last_run.log" | sed "s/^/run_fuzz.sh: [${name}] /" || true
  if [[ ${rc} -ne 0 ]]; then
    echo "run_fuzz.sh: [${name}] FAILED (exit ${rc}); the end of ${dir}/last_run.log:" >&2
    tail -60 "${dir}/last_run.log" >&2
  fi
  [[ "${MODE}" == explore ]] && save_findings "${name}" "${dir}/${artifacts}"
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
