#!/usr/bin/env bash
# Tensor parallelism across the GPUs of one node with real NCCL all-reduces (issue 17): one command
# on a multi-GPU host. Parts in order of value; each appends to its own file in OUT_DIR, so a run
# cut short keeps what it measured:
#   a. the whole CUDA build and every gpu-labelled test (ctest -L gpu): with two or more GPUs the
#      NCCL tests that skip on one run too                                  -> gpu_tests.txt
#   b. parity through the real binaries across GPUs: frontend + N workers (one per GPU, rank r on
#      GPU r) for the three tiny pipelines at each degree, the image of the CLI (--format raw)
#      against diffusers' float32 image (limit 1e-3) and, at tp > 1, against ours at tp 1 (float32,
#      limit 1e-5); FLUX.1 also in bf16 against diffusers' bf16 image (limit 5e-2). FLUX.2's text
#      encoder is sharded over the workers (--text-encoder-placement sharded).  -> parity_tp.txt
#   c. scaling, for FLUX.1-dev-size random weights (make-tiny-model --preset flux1-dev-size) and
#      Qwen-Image and FLUX.2-dev at their released sizes (random bf16 weights written by
#      bench/released_size_pipeline.py; FLUX.2's text encoder sharded over the workers, so at tp 4
#      each rank holds a quarter of both), 1024x1024, 28 steps, served at each degree: a cold and a
#      warm request's per-stage times, the workers' memory, step and all-reduce metrics, the rank's
#      compute alone at that degree (the step benchmark's projection), and the table of
#      scripts/scaling_table.py: warm step time, speed-up, efficiency, and the share of the step the
#      all-reduces (and waiting for the slowest rank) take               -> scaling_<family>.txt
#   e. a worker killed mid-request (SIGKILL of rank 1 at the largest degree): the request must fail
#      UNAVAILABLE, health come back SERVING with a new rank 1, the next request succeed, and the
#      killed process hold no GPU memory any more                           -> kill.txt
#
# Usage: scripts/gpu-multi.sh BUNDLE_TGZ OUT_DIR [FIXTURES_DIR]
#   TP_DEGREES: degrees to run (default "1 2 4 8"; those above the GPU count are skipped).
#   PARTS: which parts, in order (default "a b c e"). SCALING_FAMILIES: part c's models (default
#   "flux1 qwenimage flux2"; the last two need .carry/diffusers-src.tar.gz).
# Dry run of the script without GPUs, on the CPU build in build/ (Gloo ranks stand in for GPUs;
# part c on the tiny FLUX.1 fixture at 64x64, 4 steps, without the projection; part a skipped):
#   DEVICE=cpu TP_DEGREES="1 2" [BUILD_DIR=build] scripts/gpu-multi.sh - OUT_DIR   (tests/e2e/gpu_multi_dry_run.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
bundle="$1"
out="$2"
fixtures="${3:-$(pwd)/tests/fixtures}"
device="${DEVICE:-cuda}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

if [ "$device" = cuda ]; then
  bin=build-cuda
  gpus=$(nvidia-smi -L | wc -l)
  nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$out/gpu.txt"
  nvidia-smi topo -m >> "$out/gpu.txt" 2>&1
else
  bin="${BUILD_DIR:-build}"
  gpus=2
fi
degrees=()
for tp in ${TP_DEGREES:-1 2 4 8}; do [ "$tp" -le "$gpus" ] && degrees+=("$tp"); done
log "device $device, $gpus GPUs (or ranks), degrees ${degrees[*]}"
max_tp="${degrees[-1]}"

build() {
  [ "$device" = cuda ] || return 0
  scripts/gpu-build.sh --bundle "$bundle" --build-dir build-cuda --jobs "$(nproc)" "$@" \
    -- -DDITSERVE_TESTS=ON >> "$out/build.log" 2>&1 || { log "build failed: $(grep -m3 -E 'error|FAILED' "$out/build.log")"; return 1; }
}

# serve MODEL TP DTYPE [frontend flags...]: frontend + TP spawned workers; sets fpid, port, mport.
serve() {
  local model="$1" tp="$2" dtype="$3"
  shift 3
  flog="$out/frontend_tp${tp}_$(date +%s%N).log"
  "$bin/server/ditserve-frontend" --model "$model" --spawn-workers "$tp" --device "$device" \
    --dtype "$dtype" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 "$@" > "$flog" 2>&1 &
  fpid=$!
  port="" mport=""
  for _ in $(seq 1500); do grep -q "^METRICS" "$flog" && break; sleep 0.2; done
  port=$(awk '/^LISTENING/ {print $2}' "$flog")
  mport=$(awk '/^METRICS/ {print $2}' "$flog")
  for _ in $(seq 9000); do
    [ -n "$port" ] && "$bin/cli/ditserve-cli" health --server "127.0.0.1:$port" > /dev/null 2>&1 && return 0
    kill -0 "$fpid" 2>/dev/null || break
    sleep 0.2
  done
  log "the server (tp $tp, $model) never became SERVING: $(grep -m1 -i error "$flog")"
  stop
  return 1
}
stop() { kill "$fpid" 2>/dev/null; wait "$fpid" 2>/dev/null; }
fpid=""
trap '[ -n "$fpid" ] && kill "$fpid" 2>/dev/null' EXIT  # no server left behind by a run cut short
scrape() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=30).read().decode())' "http://127.0.0.1:$1/metrics"; }
cli() { "$bin/cli/ditserve-cli" "$@" --server "127.0.0.1:$port"; }

# The CLI arguments of a tiny fixture's reference call (tests/fixtures: flux1_call.json, pipelines.json).
call_args() {
  python3 - "$fixtures" "$1" <<'EOF'
import json, sys
fixtures, model = sys.argv[1], sys.argv[2]
if model == "flux1":
    c = json.load(open(f"{fixtures}/flux1_call.json"))
    args = ["--prompt", c["prompt"], "--height", c["height"], "--width", c["width"], "--steps", c["steps"],
            "--seed", c["seed"], "--guidance", c["guidance_scale"], "--max-sequence-length", c["max_sequence_length"]]
else:
    c = json.load(open(f"{fixtures}/pipelines.json"))[model]
    args = ["--prompt", c["prompt"], "--height", c["height"], "--width", c["width"], "--steps",
            c["num_inference_steps"], "--seed", c["seed"], "--max-sequence-length", c["max_sequence_length"]]
    if model == "flux2":
        args += ["--guidance", c["guidance_scale"]]
    if "negative_prompt" in c:
        args += ["--negative-prompt", c["negative_prompt"], "--true-cfg-scale", c["true_cfg_scale"]]
print("\0".join(str(a) for a in args), end="")
EOF
}

parta() {
  log "part a: CUDA build and gpu tests"
  [ "$device" = cuda ] || { log "part a: skipped on $device"; return; }
  build || return
  (cd build-cuda && . ./ditserve-env.sh && DITSERVE_FIXTURES_DIR="$fixtures" ctest -L gpu -V --timeout 600) \
    > "$out/gpu_tests.txt" 2>&1
  grep -E "relative error|Passed|Failed|SKIPPED|tests passed|tests failed" "$out/gpu_tests.txt" | tail -40
}

partb() {
  log "part b: the tiny pipelines through the real server at tp ${degrees[*]}"
  build --target ditserve-frontend --target ditserve-worker --target ditserve-cli || return
  local f="$out/parity_tp.txt" m dtype tp img ref limit args extra
  for m in flux1 flux2 qwenimage; do
    mapfile -d '' -t args < <(call_args "$m")
    for dtype in float32 bfloat16; do
      [ "$dtype" = bfloat16 ] && [ "$m" != flux1 ] && continue  # FLUX.1's is the bf16 pipeline reference
      ref="$m.pipe.image" limit=1e-3
      [ "$m" = flux1 ] && ref=flux1.image
      [ "$dtype" = bfloat16 ] && ref=flux1.bf16.image limit=5e-2
      for tp in "${degrees[@]}"; do
        extra=()
        [ "$m" = flux2 ] && [ "$tp" -gt 1 ] && extra=(--text-encoder-placement sharded)
        serve "$fixtures/$m-tiny" "$tp" "$dtype" "${extra[@]}" || continue
        img="$out/${m}_${dtype}_tp$tp.safetensors"
        cli generate "${args[@]}" --format raw --quiet -o "$img" >> "$f" 2>&1 || echo "FAIL: $m $dtype tp $tp: generate failed" | tee -a "$f"
        stop
        [ -f "$img" ] || continue
        python3 scripts/relative_error.py "$img" image "$fixtures/reference.safetensors" "$ref" \
          --limit "$limit" --label "$m $dtype tp $tp on $device, against diffusers" | tee -a "$f"
        if [ "$tp" != 1 ] && [ "$dtype" = float32 ] && [ -f "$out/${m}_${dtype}_tp1.safetensors" ]; then
          python3 scripts/relative_error.py "$img" image "$out/${m}_${dtype}_tp1.safetensors" image \
            --limit 1e-5 --label "$m $dtype tp $tp on $device, against ours at tp 1" | tee -a "$f"
        fi
      done
    done
  done
}

# The folder of FAMILY's model for part c: FLUX.1-dev-size random weights from make-tiny-model, or
# FLUX.2-dev / Qwen-Image at their released sizes from bench/released_size_pipeline.py (random bf16
# weights, the real text encoders' sizes) in a tmpfs or on the disk, wherever they fit.
write_model() {
  local family="$1" dir need=60
  if [ "$family" = flux1 ]; then
    dir=/tmp/ditserve-flux1-dev-size
    "$bin/tools/ditserve-tool" make-tiny-model "$dir" --preset flux1-dev-size --dtype bfloat16 \
      --transformer-shards 3 --force > "$out/make_model_$family.txt" 2>&1 || return 1
  else
    [ "$family" = flux2 ] && need=118
    dir=""
    for d in /dev/shm /tmp; do
      [ "$(df -B1G --output=avail "$d" | tail -1)" -ge "$need" ] && { dir="$d/ditserve-$family"; break; }
    done
    [ -n "$dir" ] || return 1
    local src=/tmp/diffusers-src/src
    [ -d "$src" ] || tar xzf .carry/diffusers-src.tar.gz -C /tmp
    PYTHONPATH="$src" python3 bench/released_size_pipeline.py write --family "$family" --out "$dir" \
      --fixtures "$fixtures" > "$out/make_model_$family.txt" 2>&1 || return 1
  fi
  echo "$dir"
}

partc() {
  local families="${SCALING_FAMILIES:-flux1 qwenimage flux2}"
  [ "$device" = cpu ] && families=flux1
  log "part c: scaling at tp ${degrees[*]} ($families)"
  build --target ditserve-frontend --target ditserve-worker --target ditserve-cli --target ditserve-tool \
    --target ditserve-spm-train --target ditserve-flux1-bench --target ditserve-flux2-bench \
    --target ditserve-qwenimage-bench || return
  local family model size=1024 steps=28 dtype=bfloat16 tp f extra
  for family in $families; do
    f="$out/scaling_$family.txt"
    if [ "$device" = cuda ]; then
      model=$(write_model "$family") || { log "part c: the $family weights could not be written: $(tail -2 "$out/make_model_$family.txt")"; continue; }
    else
      model="$fixtures/flux1-tiny" size=64 steps=4 dtype=float32
    fi
    log "part c: $family weights at $model"
    for tp in "${degrees[@]}"; do
      extra=()
      [ "$family" = flux2 ] && [ "$tp" -gt 1 ] && extra=(--text-encoder-placement sharded)
      serve "$model" "$tp" "$dtype" "${extra[@]}" || continue
      echo "== tp $tp: $(grep -m1 -o 'ready in .*' "$flog")" | tee -a "$f"
      for run in cold warm; do
        echo "$run tp $tp: $(cli generate --prompt "a lighthouse on a cliff at dawn" --height "$size" \
          --width "$size" --steps "$steps" --seed 0 --quiet -o "$out/scaling.png" 2>&1 | tail -1)" | tee -a "$f"
      done
      scrape "$mport" | grep -E "^ditserve_worker_(device_memory|weight_bytes|denoise_step|allreduce|cuda_graph)" >> "$f"
      stop
      # The same rank's compute alone: the step benchmark's projection (rank 0's shard, all-reduces
      # counted, not performed), so that step - compute is what the all-reduces (and waiting for
      # the slowest rank) cost.
      if [ "$device" = cuda ]; then
        echo "compute tp $tp: $("$bin/bench/ditserve-$family-bench" --device cuda --runs 5 \
          --warmup 2 --tp "$tp" 2>&1 | awk '/^median/ {print $2}')" | tee -a "$f"
      fi
    done
    python3 scripts/scaling_table.py "$f" "$steps" | tee -a "$f"
    [ "$device" = cuda ] && rm -rf "$model"
  done
}

parte() {
  log "part e: SIGKILL of rank 1 mid-request at tp $max_tp"
  [ "$max_tp" -ge 2 ] || { log "part e: needs two GPUs"; return; }
  build --target ditserve-frontend --target ditserve-worker --target ditserve-cli || return
  local f="$out/kill.txt" victim new rc dtype=bfloat16
  [ "$device" = cpu ] && dtype=float32
  serve "$fixtures/flux1-tiny" "$max_tp" "$dtype" || return
  victim=$(pgrep -P "$fpid" -f -- "--rank 1( |$)")
  [ -n "$victim" ] || { echo "FAIL: no worker process of rank 1 under the frontend" | tee -a "$f"; stop; return; }
  echo "rank 1 is pid $victim" | tee -a "$f"
  cli generate --prompt "a slow request" --height 256 --width 256 --steps 200 --seed 1 \
    -o "$out/killed.png" > "$out/killed_request.txt" 2>&1 &
  local gen=$!
  for _ in $(seq 300); do grep -q "step 3/" "$out/killed_request.txt" && break; sleep 0.2; done
  local killed_at
  killed_at=$(date +%s.%N)
  kill -KILL "$victim"
  wait "$gen"
  rc=$?
  grep -q UNAVAILABLE "$out/killed_request.txt" || echo "FAIL: the request did not end UNAVAILABLE" | tee -a "$f"
  echo "the request: exit $rc after $(python3 -c "import time; print(f'{time.time() - $killed_at:.2f}')") s: $(grep -m1 -iE 'unavailable|error' "$out/killed_request.txt")" | tee -a "$f"
  local health=""
  for _ in $(seq 900); do
    health=$("$bin/cli/ditserve-cli" health --server "127.0.0.1:$port" 2>&1 | tail -1)
    [ "$health" = SERVING ] && break
    sleep 0.2
  done
  new=$(pgrep -P "$fpid" -f -- "--rank 1( |$)")
  [ "$health" = SERVING ] || echo "FAIL: not SERVING again within 180 s" | tee -a "$f"
  echo "health $health $(python3 -c "import time; print(f'{time.time() - $killed_at:.2f}')") s after the kill; rank 1 now pid $new" | tee -a "$f"
  kill -0 "$victim" 2>/dev/null && echo "FAIL: the killed pid $victim still exists" | tee -a "$f"
  [ -n "$new" ] && [ "$new" != "$victim" ] || echo "FAIL: rank 1 was not replaced" | tee -a "$f"
  mapfile -d '' -t args < <(call_args flux1)
  cli generate "${args[@]}" --format raw --quiet -o "$out/after_kill.safetensors" >> "$f" 2>&1
  python3 scripts/relative_error.py "$out/after_kill.safetensors" image "$fixtures/reference.safetensors" \
    "$([ "$dtype" = bfloat16 ] && echo flux1.bf16.image || echo flux1.image)" \
    --limit "$([ "$dtype" = bfloat16 ] && echo 5e-2 || echo 1e-3)" --label "the next request after the kill" | tee -a "$f"
  if [ "$device" = cuda ]; then
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tee -a "$f" |
      grep -q "^$victim," && echo "FAIL: the killed pid $victim still holds GPU memory" | tee -a "$f"
  fi
  stop
}

for p in ${PARTS:-a b c e}; do "part$p"; done
log "done"
