#!/usr/bin/env bash
# One command on the GPU host, in stages ordered by value so that a run cut short by its time limit
# still leaves the earlier results in OUT_DIR (each stage writes its own file as it goes):
#   1. build ditserve-flux1-bench; time a full-size FLUX.1-dev step (random weights, bf16, 4096 image
#      + 512 text tokens), again with DITSERVE_FUSED_KERNELS=0 (A/B of models/cuda), with
#      DITSERVE_CUDA_GRAPHS=0 (A/B of the step's CUDA graph, also at 512x512), and with
#      --weights fp8 (which also prints the FP8 step's relative error against the same weights in
#      bf16)   -> flux1_bench.txt, _unfused.txt, _nographs.txt, _512_graphs{1,0}.txt, _fp8.txt
#   2. build ditserve-tool; bf16, float32 and FP8-weight forwards of the FLUX.1, FLUX.2 and Qwen-Image
#      tiny fixtures on the GPU against diffusers' float32 outputs (limits 2e-2 / 1e-4 / 2e-2)
#                                                                            -> parity.txt
#   3. per-kernel table of one whole step for each model of PROFILE_MODELS (default "flux1 flux2
#      qwenimage"; ditserve-<model>-profile), and its time by kind (GEMM, attention, ours, other)
#                                                                         -> <model>_profile.tsv
#   4. build and time the FLUX.2-dev and Qwen-Image steps, each also with DITSERVE_FUSED_KERNELS=0,
#      with DITSERVE_CUDA_GRAPHS=0 and with --weights fp8
#                          -> <model>_bench.txt, _bench_unfused.txt, _bench_nographs.txt, _bench_fp8.txt
#   5. the end-to-end server on the GPU: a FLUX.1-dev-size random-weight pipeline
#      (make-tiny-model --preset flux1-dev-size, bf16), frontend + 1 CUDA worker, two 1024x1024
#      28-step generations through the CLI (per-stage times; with --warmup a third one streaming 3
#      previews, their cost), then the worker's GPU memory and
#      step metrics from /metrics                                            -> e2e_gpu.txt
#   7. FLUX.2-dev's Mistral text encoder at its released size, one 512-token prompt, ours and
#      transformers' MistralModel in the same call                          -> mistral_encoder_bench.txt
#   8. Qwen-Image and FLUX.2-dev at their released sizes (random bf16 weights written by
#      bench/released_size_pipeline.py), 1024x1024 with the pipelines' default 50 steps (Qwen-Image
#      with true CFG): frontend + 1 CUDA worker (load, per-stage times, memory), then diffusers'
#      pipeline on the same weights in the same call            -> e2e_qwenimage.txt, e2e_flux2.txt
#      (E2E_FAMILIES picks; needs .carry/diffusers-src or DIFFUSERS_SRC)
#   9. Qwen-Image's true CFG: a step of two batch-1 passes (prompt, negative prompt) against one
#      padded, masked batch of two                                       -> qwenimage_cfg_batch.txt
#  10. the tensor-parallel projection: each model's step benchmark at --tp 1 2 4 8 (TP_DEGREES), rank
#      0's real shard with the all-reduces counted instead of done, modulation sharded and
#      replicated, and tp 4 again with DITSERVE_CUDA_GRAPHS=0             -> tp_projection.txt
#  11. side by side: for each model of SBS_MODELS (default "flux1 flux2 qwenimage"; one model a call
#      fits the time limit), our step benchmark (bf16, then --weights fp8), then diffusers' transformer at the released size with
#      the same inputs (bench/diffusers_step.py, random bf16 weights) eager and under torch.compile,
#      back to back in separate processes; after each, bench/side_by_side_table.py rewrites the
#      table with the ratios and the goals    -> sbs_<model>_*, side_by_side.md
#      (SBS_COMPILE=regional compiles the repeated blocks only; needs .carry/diffusers-src or DIFFUSERS_SRC)
#  12. LoRA: the FLUX.1-dev step with and without a random rank-64 adapter on every block linear, two
#      adapters, switching on and off, merged and as runtime terms (--lora-rank 64) -> lora_bench.txt
#  13. FLUX.2 editing at released size, 1024x1024 output with EDIT_REFS (default "1 3") reference
#      images of 1024x1024 (4096 tokens each): EDIT_PARTS (default "step diffusers e2e"; "build"
#      builds the binaries of all three and runs nothing) picks
#        step: our step (ditserve-flux2-bench --reference-images N)     -> edit_step_ours_<N>ref.txt
#        diffusers: diffusers' transformer step with the same inputs (bench/diffusers_step.py
#          --reference-images N), eager and under torch.compile -> edit_step_diffusers_<N>ref_*.json/.log
#        e2e: released-size random weights (bench/released_size_pipeline.py write), frontend + 1 CUDA
#          worker, ditserve-cli generate --image x N (a 2-step warm-up request, then one of
#          EDIT_STEPS, default 28, steps), then diffusers' Flux2Pipeline with the same images and
#          steps in the same call                                                 -> edit_e2e.txt
#      (diffusers parts need .carry/diffusers-src or DIFFUSERS_SRC)
#  14. image-input fixtures and their tests: tests/fixtures/make_image_fixtures.py with diffusers on
#      the host's CPU (float32) and --bf16-device cuda (diffusers' bf16 CUDA run), image-inputs/
#      copied into FIXTURES_DIR (and packed as image-inputs.tar.gz for the repository), re-configured
#      so that the REQUIRES tests register, then image_inputs_parity_test (CPU, float32, tp 1/2) and
#      image_inputs_gpu_test (CUDA, float32 and bf16)  -> image_fixtures.txt, image_tests.txt,
#      image-inputs.tar.gz (needs .carry/diffusers-src or DIFFUSERS_SRC)
#  15. step-cache fixtures and their test: tests/fixtures/make_step_cache_fixtures.py with diffusers
#      on the host's CPU (float32; diffusers' First Block Cache decisions and images) and
#      --bf16-device cuda, step-cache/ copied into FIXTURES_DIR (and packed as step-cache.tar.gz for
#      the repository), re-configured so that step_cache_parity_test registers, then run (CPU,
#      float32, tp 1/2)          -> step_cache_fixtures.txt, step_cache_tests.txt, step-cache.tar.gz
#  16. step caching's speed: FLUX.1-dev-size and Qwen-Image-size steps (bf16, 4096 image tokens)
#      with --step-cache (a cached pass: first block + output layers; a full pass through the
#      cache's path: the head's and the rest's CUDA graphs), then the FLUX.1-dev-size pipeline end to end, 1024x1024 28 steps,
#      without the cache and at CACHE_THRESHOLDS (default "0.05 0.12 0.25"; the response's
#      full/cached pass counts), each request's per-step times (step_cache_<t>_<format>_steps.txt),
#      the step benchmark just before the server (the server's step against it), and threshold 0
#      again as raw float32 (the PNG encoder's share). CACHE_PARTS (default "bench e2e")
#      picks the step benchmarks, the end-to-end part or both   -> step_cache_bench.txt
#  17. Qwen-Image-Edit fixtures: tests/fixtures/make_qwen_edit_fixtures.py (diffusers, CPU float32 + --bf16-device cuda), qwen-edit/ into FIXTURES_DIR -> qwen_edit_fixtures.txt, qwen-edit.tar.gz
#  18. Qwen-Image-Edit-2509 editing at released size (issue 34), 1024x1024 output with QEDIT_REFS
#      (default "1 2") input images of 1024x1024 (4096 tokens each on the VAE side), true CFG
#      (negative prompt " ", true_cfg_scale 4): QEDIT_PARTS (default "step diffusers e2e"; "build"
#      builds the binaries of all three and runs nothing) picks
#        step: our step (ditserve-qwenimage-bench --reference-images N --text-tokens T, T the edit
#          prompt's length, QEDIT_TEXT_TOKENS overrides)                -> qedit_step_ours_<N>ref.txt
#        diffusers: diffusers' transformer step with the same inputs (bench/diffusers_step.py
#          --model qwenimage --reference-images N), eager and under torch.compile
#                                                        -> qedit_step_diffusers_<N>ref_*.json/.log
#        e2e: a released-size random-weight Qwen-Image-Edit-2509 folder (bench/released_size_pipeline.py
#          write --family qwenimage_edit: the vision tower, the processor, the VAE's encoder),
#          frontend + 1 CUDA worker, ditserve-cli generate --image x N (a 2-step warm-up request,
#          then one of QEDIT_STEPS, default 40, steps), then diffusers' QwenImageEditPlusPipeline
#          with the same images and steps in the same call                       -> qedit_e2e.txt
#      (diffusers parts need .carry/diffusers-src or DIFFUSERS_SRC)
#   6. the rest of the CUDA build and the gpu-labelled tests (ctest -L gpu: NCCL, the tiny
#      pipeline and transformers on the GPU in float32 / bfloat16, frontend + 1 CUDA worker)
#                                                                            -> gpu_tests.txt
# Usage: [STAGES="5 6 1"] scripts/gpu-bench.sh BUNDLE_ARCHIVE OUT_DIR [FIXTURES_DIR]
#   STAGES: which stages to run, in the given order (default "1 2 3 4 5"; FULL=1 adds 6).
#   FIXTURES_DIR defaults to tests/fixtures. GPU_TESTS: a ctest -R regex narrowing stage 6's gpu tests.
#   Stage 13's CPU dry run of its plumbing (no GPU, no diffusers; the CPU build in BIN_DIR, nothing
#   built): NO_BUILD=1 BIN_DIR=build DEVICE=cpu EDIT_MODEL=tests/fixtures/flux2-tiny EDIT_SIZE=64
#   EDIT_STEPS=2 EDIT_IMAGES=DIR_OF_PNGS EDIT_STEP_ARGS="<tiny shape flags> --reference-size 64x64"
#   STAGES=13 scripts/gpu-bench.sh ANY.tgz OUT
#   Stage 18's the same way: NO_BUILD=1 BIN_DIR=build DEVICE=cpu QEDIT_MODEL=<a tiny edit folder,
#   build/tests/e2e/ditserve-test-qwen-edit-folder DIR> QEDIT_SIZE=64 QEDIT_STEPS=2
#   QEDIT_IMAGES=DIR_OF_PNGS QEDIT_STEP_ARGS="<tiny shape flags> --reference-size 64x64"
#   QEDIT_TEXT_TOKENS=10 STAGES=18 scripts/gpu-bench.sh ANY.tgz OUT
set -uo pipefail
cd "$(dirname "$0")/.."
bundle_tgz="$1"
out="$2"
fixtures="${3:-$(pwd)/tests/fixtures}"
mkdir -p "$out" /tmp/ditserve-deps
tar xf "$bundle_tgz" -C /tmp/ditserve-deps  # .tar.xz (gpu-bundle.sh) or .tar.gz
bundle=$(ls -d /tmp/ditserve-deps/*/ | head -1)
fixtures=$(cd "$fixtures" && pwd)
# diffusers' source for the reference side of stage 8 (carried: git archive of a diffusers commit).
diffusers_src="${DIFFUSERS_SRC:-$(pwd)/.carry/diffusers-src/src}"
for packed in .carry/diffusers-src.tar.xz .carry/diffusers-src.tar.gz; do  # carried packed (smaller)
  if [ ! -d "$diffusers_src" ] && [ -f "$packed" ]; then
    tar xf "$packed" -C /tmp && diffusers_src=/tmp/diffusers-src/src
  fi
done
stages="${STAGES:-1 2 3 4 5}"
bin="${BIN_DIR:-build-cuda}"  # stage 13's and 18's binaries (a dry run points it at a CPU build)
device="${DEVICE:-cuda}"      # stage 13's and 18's device (cpu: the dry run)
[ "${FULL:-0}" = 1 ] && stages="$stages 6"
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
# GET http://127.0.0.1:$1/metrics (python3: the GPU host has no curl for certain)
scrape() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=30).read().decode())' "http://127.0.0.1:$1/metrics"; }

build() {  # build the given targets (configures on first use); log to $out/build.log
  [ "${NO_BUILD:-0}" = 1 ] && return 0  # dry runs: the binaries in $bin are used as they are
  local args=()
  for t in "$@"; do args+=(--target "$t"); done
  scripts/gpu-build.sh --bundle "$bundle" --build-dir build-cuda --jobs "$(nproc)" "${args[@]}" \
    -- -DDITSERVE_TESTS=ON >> "$out/build.log" 2>&1
  local rc=$?
  [ $rc = 0 ] || { grep -E "error|FAILED" -A3 "$out/build.log" | head -40; log "build of $* failed"; }
  return $rc
}

# Starts frontend + 1 worker on MODEL ($1; $bin's binaries, on $device: bf16 on CUDA, float32 on
# the CPU) and waits until it serves; sets fpid, port and mport, and appends the load line to
# RESULT_FILE ($2). 1 when it never serves (the frontend is stopped).
start_frontend() {
  local model="$1" result="$2" flog="$out/frontend.log" serving=0 dtype=bfloat16
  [ "$device" = cpu ] && dtype=float32
  "$bin/server/ditserve-frontend" --model "$model" --spawn-workers 1 --device "$device" \
    --dtype "$dtype" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 ${frontend_extra:-} > "$flog" 2>&1 &
  fpid=$!
  for _ in $(seq 600); do grep -q "^METRICS" "$flog" && break; sleep 0.2; done
  port=$(awk '/^LISTENING/ {print $2}' "$flog"); mport=$(awk '/^METRICS/ {print $2}' "$flog")
  for _ in $(seq 3000); do
    "$bin/cli/ditserve-cli" health --server "127.0.0.1:$port" > /dev/null 2>&1 && { serving=1; break; }
    grep -q "forming the worker group failed" "$flog" && break
    sleep 0.2
  done
  if [ $serving = 0 ]; then log "the server never became SERVING: $(grep -m1 -i error "$flog")"; kill "$fpid"; return 1; fi
  log "serving: $(grep -m1 -o 'ready in .*' "$flog")" | tee -a "$result"
}

# Starts frontend + 1 CUDA worker on MODEL, makes a cold and a warm 1024x1024 image through the CLI
# (extra CLI arguments after RESULT_FILE), then appends the worker's memory and step metrics.
serve_and_generate() {
  local model="$1" result="$2"; shift 2
  local fpid port mport
  start_frontend "$model" "$result" || return 1
  # EXTRA_RUN (optional): CLI flags of a third, warm run (stage 5: --previews 3, the previews' cost).
  for run in cold warm ${EXTRA_RUN:+extra}; do
    local extra=()
    [ "$run" = extra ] && read -r -a extra <<< "$EXTRA_RUN"
    echo "$run${extra:+ (${extra[*]})}: $("$bin/cli/ditserve-cli" generate --server "127.0.0.1:$port" \
      --prompt "a lighthouse on a cliff at dawn" --height 1024 --width 1024 --seed 0 "$@" \
      "${extra[@]}" --quiet -o "$out/e2e_1024.png" 2>&1 | tail -1)" | tee -a "$result"
  done
  scrape "$mport" | grep -E "^ditserve_worker_(device_memory|weight_bytes|denoise|load_duration|resident)" |
    tee -a "$result"
  kill "$fpid"; wait "$fpid" 2>/dev/null
}

# Writes FAMILY's ($1) released-size random bf16 weights (bench/released_size_pipeline.py write, on
# the GPU) where they fit, logging to RESULT_FILE ($2), and prints the folder; 1 on failure. The
# disk (64 GiB) holds Qwen-Image's; FLUX.2-dev's 112 GB go to a tmpfs in host memory (128 GiB),
# mounted when /dev/shm is too small.
write_released_weights() {
  local family="$1" res="$2" need=60 dir=""
  [ "$family" = flux2 ] && need=118
  for d in /dev/shm /tmp; do
    [ "$(df -B1G --output=avail "$d" | tail -1)" -ge "$need" ] && { dir="$d/ditserve-$family"; break; }
  done
  if [ -z "$dir" ]; then
    mkdir -p /mnt/ditserve-weights && mount -t tmpfs -o size=${need}g tmpfs /mnt/ditserve-weights &&
      dir=/mnt/ditserve-weights/$family
  fi
  [ -n "$dir" ] || { log "no room for $need GB of $family weights: $(df -h /tmp /dev/shm | tr '\n' ' ')" >&2; return 1; }
  rm -rf "$dir"
  PYTHONPATH="$diffusers_src" python3 bench/released_size_pipeline.py write --family "$family" \
    --out "$dir" --fixtures "$fixtures" 2>&1 | tee -a "$res" | grep -v Warning >&2
  [ -f "$dir/vae/config.json" ] || { log "writing the $family weights failed" >&2; rm -rf "$dir"; return 1; }
  sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null
  log "$family weights written to $dir" >&2
  echo "$dir"
}

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"

stage1() {
log "stage 1: FLUX.1-dev step"
if build ditserve-flux1-bench; then
  log "built"
  build-cuda/bench/ditserve-flux1-bench --device cuda --runs 10 --warmup 3 2>&1 |
    tee "$out/flux1_bench.txt" | tail -4
  # A/B on the same machine: the reference op sequences instead of our CUDA kernels (models/cuda),
  # and every step op by op instead of a CUDA graph replay (models/common/step_graphs.h), at
  # 1024x1024 and at 512x512 (1024 image tokens), where launches weigh more.
  DITSERVE_FUSED_KERNELS=0 build-cuda/bench/ditserve-flux1-bench --device cuda --runs 10 \
    --warmup 3 2>&1 | tee "$out/flux1_bench_unfused.txt" | grep median | sed 's/^/unfused: /'
  DITSERVE_CUDA_GRAPHS=0 build-cuda/bench/ditserve-flux1-bench --device cuda --runs 10 \
    --warmup 3 2>&1 | tee "$out/flux1_bench_nographs.txt" | grep -E "median|graphs" | sed 's/^/no graphs: /'
  for g in 1 0; do
    DITSERVE_CUDA_GRAPHS=$g build-cuda/bench/ditserve-flux1-bench --device cuda --runs 10 \
      --warmup 3 --image-tokens 1024 2>&1 | tee "$out/flux1_bench_512_graphs$g.txt" |
      grep -E "median|graphs" | sed "s/^/512x512, DITSERVE_CUDA_GRAPHS=$g: /"
  done
  # FP8 weights (--weights fp8: the blocks' token GEMMs in e4m3).
  build-cuda/bench/ditserve-flux1-bench --device cuda --runs 10 --warmup 3 --weights fp8 2>&1 |
    tee "$out/flux1_bench_fp8.txt" | grep -E "median|relative error" | sed 's/^/fp8: /'
fi

}

stage2() {
log "stage 2: bf16 parity on the tiny fixtures"
if build ditserve-tool; then
  for m in flux1:flux1-tiny:flux1.step0.in.:flux1.step0.out \
           flux2:flux2-tiny/transformer:flux2.:flux2.out \
           qwenimage:qwenimage-tiny/transformer:qwenimage.:qwenimage.out; do
    IFS=: read -r name dir prefix ref <<< "$m"
    for dt in bfloat16:2e-2:dtype float32:1e-4:dtype bfloat16:2e-2:fp8; do
      IFS=: read -r dtype limit weights <<< "$dt"
      build-cuda/tools/ditserve-tool forward --model "$fixtures/$dir" \
        --inputs "$fixtures/reference.safetensors" --prefix "$prefix" --weights "$weights" \
        --output "$out/$name.safetensors" --device cuda --dtype "$dtype" > /dev/null 2>> "$out/parity.txt"
      python3 scripts/relative_error.py "$out/$name.safetensors" out \
        "$fixtures/reference.safetensors" "$ref" --limit "$limit" \
        --label "$name $dtype $([ "$weights" = fp8 ] && echo "fp8-weights ")cuda" |
        tee -a "$out/parity.txt"
      rm -f "$out/$name.safetensors"
    done
  done
fi

}

stage3() {
for m in ${PROFILE_MODELS:-flux1 flux2 qwenimage}; do
  log "stage 3: $m kernel profile"
  if build "ditserve-$m-profile"; then
    build-cuda/bench/ditserve-$m-profile --device cuda --runs 3 --warmup 2 \
      --profile "$out/${m}_profile.tsv" 2>&1 | grep -E "median|graphs|profile"
    rm -f "$out/${m}_profile.tsv.json"
    head -25 "$out/${m}_profile.tsv" | cut -c1-160
  fi
done

}

stage4() {
log "stage 4: FLUX.2-dev and Qwen-Image steps (bf16, our kernels off, FP8 weights)"
if build ditserve-flux2-bench ditserve-qwenimage-bench; then
  for m in qwenimage flux2; do
    build-cuda/bench/ditserve-$m-bench --device cuda --runs 5 --warmup 2 2>&1 |
      tee "$out/${m}_bench.txt" | grep -E "median|graphs" | sed "s/^/$m: /"
    DITSERVE_FUSED_KERNELS=0 build-cuda/bench/ditserve-$m-bench --device cuda --runs 5 \
      --warmup 2 2>&1 | tee "$out/${m}_bench_unfused.txt" | grep median | sed "s/^/$m unfused: /"
    DITSERVE_CUDA_GRAPHS=0 build-cuda/bench/ditserve-$m-bench --device cuda --runs 5 \
      --warmup 2 2>&1 | tee "$out/${m}_bench_nographs.txt" | grep median | sed "s/^/$m no graphs: /"
    build-cuda/bench/ditserve-$m-bench --device cuda --runs 5 --warmup 2 --weights fp8 2>&1 |
      tee "$out/${m}_bench_fp8.txt" | grep -E "median|relative error" | sed "s/^/$m fp8: /"
  done
fi

}

stage5() {
log "stage 5: end-to-end server on the GPU (FLUX.1-dev-size random weights, 1024x1024)"
if build ditserve-tool ditserve-spm-train ditserve-frontend ditserve-worker ditserve-cli; then
  model=/tmp/ditserve-flux1-dev-size
  # When stage 6 follows, the rest of the build runs (niced) while the weights are generated; it
  # is waited for before the server starts, so the timings below share the CPU with nothing.
  if [[ " $stages " == *" 6 "* ]]; then nice -n 19 bash -c "$(declare -f build log); $(declare -p out bundle t0); build" & bg_build=$!; fi
  gen=(build-cuda/tools/ditserve-tool make-tiny-model "$model" --preset flux1-dev-size
       --dtype bfloat16 --transformer-shards 3 --force)
  if ! "${gen[@]}" > "$out/e2e_gpu.txt" 2>&1; then
    log "make-tiny-model failed: $(tail -2 "$out/e2e_gpu.txt")"
    if command -v cuda-gdb > /dev/null; then  # a backtrace for the record (no gdb there)
      timeout 300 cuda-gdb -q -batch -ex run -ex bt --args "${gen[@]}" --threads 4 2>&1 |
        tail -30 > "$out/make_tiny_model_bt.txt"
    fi
    "${gen[@]}" --threads 1 > "$out/e2e_gpu.txt" 2>&1 || { log "make-tiny-model failed again"; return; }
  fi
  log "weights written: $(tail -1 "$out/e2e_gpu.txt")"
  if [ -n "$bg_build" ]; then wait "$bg_build"; log "full build finished (rc $?)"; fi
  # Cold start without and with the warm-up job (--warmup; auto = on for CUDA).
  # With the warm-up, a third run streams 3 previews (each one VAE decode on rank 0): their cost
  # is that run's total against the warm one's.
  for w in off on; do
    echo "--warmup $w" >> "$out/e2e_gpu.txt"
    EXTRA_RUN=$([ "$w" = on ] && echo "--previews 3") frontend_extra="--warmup $w" \
      serve_and_generate "$model" "$out/e2e_gpu.txt" --steps 28
  done
  rm -rf "$model"
fi

}

stage6() {
  log "stage 6: full CUDA build and gpu tests"
  build && log "built" && (cd build-cuda && . ./ditserve-env.sh && DITSERVE_FIXTURES_DIR="$fixtures" \
    ctest -L gpu ${GPU_TESTS:+-R "$GPU_TESTS"} -V --timeout 600) > "$out/gpu_tests.txt" 2>&1
  grep -E "relative error|weights .* bytes|Passed|Failed|SKIPPED|tests passed|tests failed" "$out/gpu_tests.txt" | tail -40
}

stage7() {
log "stage 7: FLUX.2-dev's Mistral text encoder, released size, one 512-token prompt (ours, then transformers)"
if build ditserve-mistral-encoder-bench; then
  build-cuda/bench/ditserve-mistral-encoder-bench --device cuda --runs 5 --warmup 2 \
    --text-tokens 512 2>&1 | tee "$out/mistral_encoder_bench.txt" | tail -1
  python3 bench/mistral_encoder_reference.py --tokens 512 --runs 5 --warmup 2 2>&1 |
    tee -a "$out/mistral_encoder_bench.txt" | tail -1
fi

}

stage8() {
for family in ${E2E_FAMILIES:-qwenimage flux2}; do
log "stage 8: $family at its released size, 1024x1024 end to end (ours, then diffusers)"
build ditserve-frontend ditserve-worker ditserve-cli || return
local res="$out/e2e_$family.txt" dir
: > "$res"
dir=$(write_released_weights "$family" "$res") || continue
local args=()
[ "$family" = qwenimage ] && args=(--negative-prompt " ")
[ "${E2E_OURS:-1}" = 1 ] && serve_and_generate "$dir" "$res" "${args[@]}"
log "ours done; diffusers next"
PYTHONPATH="$diffusers_src" python3 bench/released_size_pipeline.py run --family "$family" \
  --dir "$dir" 2>&1 | grep -v -i warn | tee -a "$res"
rm -rf "$dir"
done
}

stage9() {
log "stage 9: Qwen-Image true CFG, two batch-1 passes against one padded batch of two"
# Prompt and negative prompt lengths after the template drop: 13 / 6 tokens ("a lighthouse on a
# cliff at dawn" / " "), and a 200-token prompt against " ".
if build ditserve-qwenimage-bench; then
  for cfg in "1 13 0" "1 6 0" "2 13 7" "1 200 0" "2 200 194"; do
    read -r b t m <<< "$cfg"
    build-cuda/bench/ditserve-qwenimage-bench --device cuda --runs 8 --warmup 3 \
      --batch "$b" --text-tokens "$t" --masked-text-tokens "$m" 2>&1 | tail -2 |
      tee -a "$out/qwenimage_cfg_batch.txt"
  done
fi
}

stage10() {
log "stage 10: tensor-parallel projection (rank 0's shard, all-reduces counted), FLUX.1 / FLUX.2 / Qwen-Image"
if build ditserve-flux1-bench ditserve-flux2-bench ditserve-qwenimage-bench; then
  local f="$out/tp_projection.txt" bin tp mod
  for bin in ditserve-flux1-bench ditserve-qwenimage-bench ditserve-flux2-bench; do
    for tp in ${TP_DEGREES:-1 2 4 8}; do
      for mod in "" --replicate-modulation; do
        [ "$tp" = 1 ] && [ -n "$mod" ] && continue
        echo "== $bin --tp $tp $mod" >> "$f"
        build-cuda/bench/$bin --device cuda --runs 5 --warmup 2 --tp "$tp" $mod 2>&1 |
          grep -E "median|projection|graphs" >> "$f"
      done
    done
    # The step's CUDA graph where a rank's share is small: tp 4 again with every step op by op.
    echo "== $bin --tp 4, DITSERVE_CUDA_GRAPHS=0" >> "$f"
    DITSERVE_CUDA_GRAPHS=0 build-cuda/bench/$bin --device cuda --runs 5 --warmup 2 --tp 4 2>&1 |
      grep -E "median|projection|graphs" >> "$f"
  done
  cat "$f"
fi
}

stage11() {
local models="${SBS_MODELS:-flux1 flux2 qwenimage}" m res compile_args=(--compile)
[ "${SBS_COMPILE:-full}" = regional ] && compile_args+=(--regional)
log "stage 11: step time side by side, ours then diffusers eager and + torch.compile ($models)"
# The table over everything in $out so far (rewritten after each measurement: a call cut short by
# its time limit still leaves one).
sbs_table() { python3 bench/side_by_side_table.py "$out" --out "$out/side_by_side.md" > /dev/null; }
for m in $models; do
  case "$m" in
    flux1|flux2|qwenimage) ;;
    *) log "stage 11: unknown model '$m' (flux1 | flux2 | qwenimage)"; continue ;;
  esac
  res="$out/sbs_$m"
  rm -f "$res"_*  # a row never mixes two calls' files
  if build "ditserve-$m-bench"; then
    log "$m: ours"
    "build-cuda/bench/ditserve-$m-bench" --device cuda --runs 10 --warmup 3 2>&1 |
      tee "${res}_ours.txt" | tail -1
    "build-cuda/bench/ditserve-$m-bench" --device cuda --runs 10 --warmup 3 --weights fp8 2>&1 |
      tee "${res}_ours_fp8.txt" | grep -E "median|relative error" | sed 's/^/fp8: /'
    sbs_table
  fi
  if [ ! -d "$diffusers_src" ]; then
    log "no diffusers source at $diffusers_src: diffusers' side of $m skipped"
    continue
  fi
  log "$m: diffusers eager"
  PYTHONPATH="$diffusers_src" python3 bench/diffusers_step.py --model "$m" --runs 10 --warmup 3 \
    --out "${res}_diffusers_eager.json" > "${res}_diffusers_eager.log" 2>&1
  grep -E "ms/step|failed:" "${res}_diffusers_eager.log" | tail -1
  sbs_table
  log "$m: diffusers + torch.compile (${SBS_COMPILE:-full})"
  PYTHONPATH="$diffusers_src" python3 bench/diffusers_step.py --model "$m" "${compile_args[@]}" \
    --runs 5 --warmup 2 --out "${res}_diffusers_compile.json" > "${res}_diffusers_compile.log" 2>&1
  grep -E "ms/step|failed:" "${res}_diffusers_compile.log" | tail -1
  sbs_table
done
[ -f "$out/side_by_side.md" ] && cat "$out/side_by_side.md"
}

stage12() {
log "stage 12: LoRA on the FLUX.1-dev step (rank ${LORA_RANK:-64})"
if build ditserve-flux1-bench; then
  # Line-buffered, and the exit status kept: a crash must not lose the lines before it.
  stdbuf -oL -eL build-cuda/bench/ditserve-flux1-bench --device cuda --runs 10 --warmup 3 \
    --lora-rank "${LORA_RANK:-64}" > "$out/lora_bench.txt" 2>&1
  rc=$?
  echo "exit status $rc" >> "$out/lora_bench.txt"
  grep -E "^lora( merge| runtime)?: (step|switch)|^exit" "$out/lora_bench.txt"
  if [ "$rc" != 0 ] && command -v cuda-gdb > /dev/null; then
    # Where it crashed: a small model (1 + 1 blocks) again under cuda-gdb (the host has no gdb).
    log "stage 12: exit status $rc; the small model under cuda-gdb"
    timeout 240 cuda-gdb -batch -ex run -ex bt -ex "info sharedlibrary" --args \
      build-cuda/bench/ditserve-flux1-bench --device cuda --runs 2 --warmup 1 --layers 1 \
      --single-layers 1 --image-tokens 256 --text-tokens 64 --lora-rank 8 \
      > "$out/lora_bench_gdb.txt" 2>&1
    grep -E "^#|signal|SIG" "$out/lora_bench_gdb.txt" | head -30
  fi
fi
}

# The editing benchmark of stages 13 (FLUX.2) and 18 (Qwen-Image-Edit-2509), set up by them in
# locals it reads: stage (13, 18), model (flux2, qwenimage: the step benchmark's and
# diffusers_step.py's), family (released_size_pipeline.py's: flux2, qwenimage_edit), prefix (the
# result files': edit, qedit), what ("reference image(s)", "input image(s)"), parts, refs, steps,
# size, model_dir and images (EDIT_MODEL / QEDIT_MODEL, EDIT_IMAGES / QEDIT_IMAGES), step_args
# (the dry run's tiny shapes), cli_args (generate's flags beyond the prompt, size, seed, steps and
# images: true CFG's), and text_tokens (a function of the image count giving --text-tokens, or "").
editing_parts() {
  local n res mode nsteps tt
  # "build": every binary of the parts, built and nothing run (a first call builds for later calls).
  if [[ " $parts " == *" build "* ]]; then
    build "ditserve-$model-bench" ditserve-frontend ditserve-worker ditserve-cli && log "stage $stage: built"
  fi
  if [[ " $parts " == *" step "* ]] && build "ditserve-$model-bench"; then
    for n in $refs; do
      tt=(); [ -n "$text_tokens" ] && tt=(--text-tokens "$($text_tokens "$n")")
      log "stage $stage: our step with $n $what ${tt[*]}"
      # shellcheck disable=SC2086  # step_args: the dry run's tiny shapes
      "$bin/bench/ditserve-$model-bench" --device "$device" --runs 5 --warmup 2 \
        --reference-images "$n" "${tt[@]}" $step_args > "$out/${prefix}_step_ours_${n}ref.txt" 2>&1
      grep -E "^editing|median|graphs|Error|error" "$out/${prefix}_step_ours_${n}ref.txt" |
        sed "s/^/ours, $n image(s): /"
    done
  fi
  if [[ " $parts " == *" diffusers "* ]]; then
    if [ ! -d "$diffusers_src" ]; then
      log "no diffusers source at $diffusers_src: diffusers' $model editing step skipped"
    else
      for n in $refs; do
        tt=(); [ -n "$text_tokens" ] && tt=(--text-tokens "$($text_tokens "$n")")
        for mode in eager compile; do
          log "stage $stage: diffusers' step with $n $what ${tt[*]}, $mode"
          res="$out/${prefix}_step_diffusers_${n}ref_$mode"
          local compile=()
          [ "$mode" = compile ] && compile=(--compile)
          PYTHONPATH="$diffusers_src" python3 bench/diffusers_step.py --model "$model" --runs 5 \
            --warmup 2 --reference-images "$n" "${tt[@]}" "${compile[@]}" --out "$res.json" \
            > "$res.log" 2>&1
          grep -E "ms/step|failed:" "$res.log" | tail -1
        done
      done
    fi
  fi
  [[ " $parts " == *" e2e "* ]] && editing_e2e
}

# editing_parts' e2e part: released-size random weights (written while the binaries build), ours
# through frontend + 1 worker and ditserve-cli generate --image x N (a 2-step request first: this
# shape's first request, its CUDA graphs captured and the encoders' kernels chosen, as diffusers'
# side runs a 2-step call first; then the timed one), then diffusers' pipeline on the same weights
# and images in the same call.
editing_e2e() {
  local res="$out/${prefix}_e2e.txt" dir="$model_dir" most=0 i n nsteps args
  : > "$res"
  for n in $refs; do [ "$n" -gt "$most" ] && most=$n; done
  if [ -z "$images_given" ]; then
    python3 bench/released_size_pipeline.py images --out "$images" --count "$most" --size 1024 \
      2>&1 | tee -a "$res"
  fi
  local files=()
  # shellcheck disable=SC2012  # the images' names are ours (ref-<i>.png)
  mapfile -t files < <(ls "$images"/*.png | sort | head -"$most")
  [ "${#files[@]}" -ge "$most" ] || { log "stage $stage: fewer than $most images in $images"; return; }
  # The weights (~58-118 GB, GPU and disk) are written while the binaries build (CPU): a cold call
  # saves the write's minute.
  local wpid=""
  if [ -z "$dir" ]; then
    write_released_weights "$family" "$res" > "$out/${prefix}_weights_dir.txt" &
    wpid=$!
  fi
  local built=0
  build ditserve-frontend ditserve-worker ditserve-cli && built=1
  if [ -n "$wpid" ]; then
    wait "$wpid" && dir=$(tail -1 "$out/${prefix}_weights_dir.txt")
    if [ -z "$dir" ] || [ ! -f "$dir/vae/config.json" ]; then log "stage $stage: no weights written"; return; fi
  fi
  if [ "$built" = 0 ]; then
    [ -z "$model_dir" ] && rm -rf "$dir"
    return
  fi
  local fpid port mport
  if start_frontend "$dir" "$res"; then
    for n in $refs; do
      args=()
      for ((i = 0; i < n; i++)); do args+=(--image "${files[$i]}"); done
      for nsteps in 2 "$steps"; do
        echo "ours, $n $what, $nsteps steps: $("$bin/cli/ditserve-cli" generate \
          --server "127.0.0.1:$port" --prompt "a lighthouse on a cliff at dawn" "${cli_args[@]}" \
          --height "$size" --width "$size" --seed 0 --steps "$nsteps" "${args[@]}" --quiet \
          -o "/tmp/ditserve-$prefix.png" 2>&1 | tail -1)" | tee -a "$res"
      done
    done
    scrape "$mport" | grep -E "^ditserve_worker_(device_memory|weight_bytes|denoise|load_duration|resident)" |
      tee -a "$res"
    kill "$fpid"; wait "$fpid" 2>/dev/null
  fi
  log "stage $stage: ours done; diffusers next"
  if [ -d "$diffusers_src" ]; then
    args=()
    for ((i = 0; i < most; i++)); do args+=(--image "${files[$i]}"); done
    # shellcheck disable=SC2086  # $refs: the counts
    PYTHONPATH="$diffusers_src" python3 bench/released_size_pipeline.py run --family "$family" \
      --dir "$dir" --steps "$steps" --size "$size" "${args[@]}" --reference-counts $refs 2>&1 |
      grep -v -i warn | tee -a "$res"
  else
    log "no diffusers source at $diffusers_src: diffusers' $family pipeline skipped" | tee -a "$res"
  fi
  [ -z "$model_dir" ] && rm -rf "$dir"
}

stage13() {
local stage=13 model=flux2 family=flux2 prefix=edit what="reference image(s)" text_tokens=""
local parts="${EDIT_PARTS:-step diffusers e2e}" refs="${EDIT_REFS:-1 3}" steps="${EDIT_STEPS:-28}"
local size="${EDIT_SIZE:-1024}"  # the output's sides (the dry run's tiny model: 64)
local model_dir="${EDIT_MODEL:-}" images="${EDIT_IMAGES:-/tmp/ditserve-edit-images}"
local images_given="${EDIT_IMAGES:-}" step_args="${EDIT_STEP_ARGS:-}" cli_args=()
log "stage 13: FLUX.2 editing, ${size}x${size} with $refs reference images ($parts)"
editing_parts
}

stage14() {
log "stage 14: image-input fixtures (diffusers: CPU float32 + CUDA bf16), then their tests"
[ -d "$diffusers_src" ] || { log "no diffusers source at $diffusers_src: stage 14 skipped"; return; }
local imgfx=/tmp/ditserve-imgfx res="$out/image_fixtures.txt" tests_build
rm -rf "$imgfx"
# The two tests compile (niced) while diffusers makes the fixtures; relinked below once they exist.
nice -n 10 bash -c "$(declare -f build log); $(declare -p out bundle t0); build image_inputs_parity_test image_inputs_gpu_test" &
tests_build=$!
PYTHONPATH="$diffusers_src" PYTHONUNBUFFERED=1 python3 tests/fixtures/make_image_fixtures.py \
  --out "$imgfx" --bf16-device cuda > "$res" 2>&1
local rc=$?
wait "$tests_build"
log "fixtures made (exit status $rc), tests compiled"
grep -v -i warn "$res" | tail -5
if [ $rc != 0 ] || [ ! -f "$imgfx/image-inputs/image_reference_bf16.safetensors" ]; then
  log "make_image_fixtures.py failed (exit status $rc): $(grep -m1 -E 'Error|error' "$res")"
  return
fi
install_fixtures "$imgfx" image-inputs
run_requires_tests "ImageInputsParity|ImageInputsGpu" "$out/image_tests.txt" \
  tests/unit/image_inputs_parity_test tests/gpu/image_inputs_gpu_test
}

# Fixtures made on this host (SRC_PARENT/NAME): packed as $out/NAME.tar.gz for the repository's
# tests/fixtures, and copied into the fixtures the tests read and where the build's REQUIRES looks
# (the configured DITSERVE_FIXTURES_DIR: the repository's tests/fixtures unless the cache says
# otherwise).
install_fixtures() {
  local src_parent="$1" name="$2" configured d
  tar czf "$out/$name.tar.gz" -C "$src_parent" "$name"
  configured=$(sed -n 's/^DITSERVE_FIXTURES_DIR:PATH=//p' build-cuda/CMakeCache.txt 2>/dev/null)
  for d in "$fixtures" "${configured:-$(pwd)/tests/fixtures}"; do
    rm -rf "${d:?}/$name" && cp -r "$src_parent/$name" "$d/"
  done
}

# The REQUIRES tests (build-cuda-relative binary paths after RESULT) relinked, since
# gtest_discover_tests lists a test's cases after its link (POST_BUILD) and the re-configured
# registration needs them, then run (ctest -R REGEX) into RESULT.
run_requires_tests() {
  local regex="$1" result="$2" t targets=()
  shift 2
  for t in "$@"; do rm -f "build-cuda/$t"; targets+=("$(basename "$t")"); done
  build "${targets[@]}" || return
  (cd build-cuda && . ./ditserve-env.sh && DITSERVE_FIXTURES_DIR="$fixtures" \
    ctest -R "$regex" -V --timeout 900) > "$result" 2>&1
  grep -E "decisions|relative error|Passed|Failed|SKIPPED|NOT_BUILT|No tests|tests passed|tests failed" \
    "$result" | tail -40
}

# A fixture script of tests/fixtures ($2) run with diffusers (CPU float32, then its
# --bf16-device cuda run) into a scratch folder, its log in $out/$5 (lines matching $4 shown), and
# its folder $3 installed (install_fixtures); 1, said, when diffusers is missing or the script made
# no $3/<$3's reference file> ($6). $1: the stage, for the messages.
diffusers_fixtures() {
  local stage="$1" script="$2" name="$3" pattern="$4" res="$out/$5" reference="$6"
  local scratch="/tmp/ditserve-fx-$name"
  [ -d "$diffusers_src" ] || { log "no diffusers source at $diffusers_src: stage $stage skipped"; return 1; }
  rm -rf "$scratch"
  PYTHONPATH="$diffusers_src" PYTHONUNBUFFERED=1 python3 "tests/fixtures/$script" \
    --out "$scratch" --bf16-device cuda > "$res" 2>&1
  local rc=$?
  grep -E "$pattern" "$res" | tail -40
  [ -f "$scratch/$name/$reference" ] || { log "$script failed ($rc)"; return 1; }
  log "fixtures made (exit status $rc)"
  install_fixtures "$scratch" "$name"
}

stage15() {
log "stage 15: step-cache fixtures (diffusers: CPU float32 + CUDA bf16), then their test"
diffusers_fixtures 15 make_step_cache_fixtures.py step-cache "cached|WARN|warn|check" \
  step_cache_fixtures.txt step_cache_reference.safetensors || return
run_requires_tests "StepCacheParity" "$out/step_cache_tests.txt" tests/unit/step_cache_parity_test
}

stage16() {
log "stage 16: step caching's speed (${CACHE_PARTS:=bench e2e})"
local res="$out/step_cache_bench.txt" m t
: > "$res"
if [[ " $CACHE_PARTS " == *" bench "* ]] && build ditserve-flux1-bench ditserve-qwenimage-bench; then
  for m in flux1 qwenimage; do
    # shellcheck disable=SC2086  # CACHE_BENCH_ARGS: the dry run's tiny shapes
    "$bin/bench/ditserve-$m-bench" --device "$device" --runs 10 --warmup 3 --step-cache \
      ${CACHE_BENCH_ARGS:-} 2>&1 |
      grep -E "transformer:|median|graphs|step cache|rror" | sed "s/^/$m: /" | tee -a "$res"
  done
fi
[[ " $CACHE_PARTS " == *" e2e "* ]] || return 0
build ditserve-flux1-bench ditserve-frontend ditserve-worker ditserve-cli ditserve-tool \
  ditserve-spm-train || return
local dir="${CACHE_MODEL:-/tmp/ditserve-flux1-dev-size}"  # stage 5's, when it ran
[ -f "$dir/model_index.json" ] || "$bin/tools/ditserve-tool" make-tiny-model "$dir" \
  --preset flux1-dev-size --dtype bfloat16 --transformer-shards 3 --force >> "$res" 2>&1
# The step alone, just before the server's steps (the server's step should equal it; issue 32).
# shellcheck disable=SC2086
"$bin/bench/ditserve-flux1-bench" --device "$device" --runs 10 --warmup 3 ${CACHE_BENCH_ARGS:-} \
  2>&1 | grep -E "median|graphs" | sed "s/^/step bench: /" | tee -a "$res"
local fpid port mport
start_frontend "$dir" "$res" || return
local size="${CACHE_SIZE:-1024}"  # the dry run's tiny model: 64
"$bin/cli/ditserve-cli" generate --server "127.0.0.1:$port" --prompt "warm-up" --height "$size" \
  --width "$size" --steps 2 --quiet -o /dev/null > /dev/null 2>&1
# The CLI's summary is one JSON line on stdout (timings with full_steps / cached_steps); its
# progress lines (step i/n step_seconds=...) go to step_cache_<t>_<format>_steps.txt. Threshold 0
# runs once more with the image as raw float32 (what the PNG encoder costs of the total).
for t in 0 ${CACHE_THRESHOLDS:-0.05 0.12 0.25} 0:raw; do
  local thr="${t%%:*}" fmt=png ext=png
  [ "$t" != "$thr" ] && fmt="${t#*:}" && ext="$fmt"
  echo "threshold $thr, $fmt: $("$bin/cli/ditserve-cli" generate --server "127.0.0.1:$port" \
    --prompt "a lighthouse on a cliff at dawn" --height "$size" --width "$size" --steps 28 \
    --seed 0 --cache-threshold "$thr" --format "$fmt" -o "$out/step_cache_$thr.$ext" \
    2> "$out/step_cache_${thr}_${fmt}_steps.txt" | tail -1)" | tee -a "$res"
done
scrape "$mport" | grep -E "^ditserve_worker_(denoise|cached)" | tee -a "$res"
kill "$fpid"; wait "$fpid" 2>/dev/null
}

stage17() {
log "stage 17: Qwen-Image-Edit fixtures (diffusers: CPU float32 + CUDA bf16)"
diffusers_fixtures 17 make_qwen_edit_fixtures.py qwen-edit \
  "^(edit_|img2img|qwenimage-edit|processor|note|WARNING|CHECK|  )|checks|wrote" \
  qwen_edit_fixtures.txt qwen_edit_reference.safetensors
}

# The text length of stage 18's prompt ("a lighthouse on a cliff at dawn") with N ($1) images,
# after QwenImageEditPlusPipeline drops the template's first 64 tokens, with Qwen2.5-VL's
# tokenizer: per image "Picture i: " (5 tokens), <|vision_start|>, the condition image's vision
# tokens (~384x384 -> the processor's 392x392: 28x28 patches of 14, merged 2x2: 196) and
# <|vision_end|>, then the prompt (7) and "<|im_end|>\n<|im_start|>assistant\n" (5). Counted by
# hand from the template, not with the tokenizer (the repository's is the tiny one): an estimate,
# within a few tokens; the negative prompt " " is 6 shorter.
qedit_text_tokens() { echo $((203 * $1 + 12)); }
qedit_text_tokens_given() { echo "$QEDIT_TEXT_TOKENS"; }

stage18() {
local stage=18 model=qwenimage family=qwenimage_edit prefix=qedit what="input image(s)"
local text_tokens=qedit_text_tokens
[ -n "${QEDIT_TEXT_TOKENS:-}" ] && text_tokens=qedit_text_tokens_given
local parts="${QEDIT_PARTS:-step diffusers e2e}" refs="${QEDIT_REFS:-1 2}" steps="${QEDIT_STEPS:-40}"
local size="${QEDIT_SIZE:-1024}"  # the output's sides (the dry run's tiny model: 64)
local model_dir="${QEDIT_MODEL:-}" images="${QEDIT_IMAGES:-/tmp/ditserve-qedit-images}"
local images_given="${QEDIT_IMAGES:-}" step_args="${QEDIT_STEP_ARGS:-}"
local cli_args=(--negative-prompt " " --true-cfg-scale 4)
log "stage 18: Qwen-Image-Edit-2509, ${size}x${size} with $refs input images, true CFG ($parts)"
editing_parts
}

bg_build=""
for s in $stages; do "stage$s"; done
log "done"
