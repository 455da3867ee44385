#!/usr/bin/env bash
# One command on the GPU host: build the CUDA variant (scripts/gpu-build.sh with the offline
# bundle), run the GPU-labelled tests, check FLUX.1 bf16 parity on the tiny fixture, and time one
# full-size FLUX.1-dev transformer step (random weights, bf16, 4096 image + 512 text tokens).
# Usage: scripts/gpu-bench.sh BUNDLE_TGZ OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
bundle_tgz="$1"
out="$2"
mkdir -p "$out" /tmp/ditserve-deps
tar xzf "$bundle_tgz" -C /tmp/ditserve-deps
bundle=$(ls -d /tmp/ditserve-deps/*/ | head -1)
fixtures="$(pwd)/../shared/fixtures"

start=$(date +%s)
scripts/gpu-build.sh --bundle "$bundle" --build-dir build-cuda --jobs "$(nproc)" \
  --target ditserve-tool --target ditserve-flux1-bench --target ditserve-worker \
  --target ditserve-frontend --target ditserve-cli -- -DDITSERVE_TESTS=ON > "$out/build.log" 2>&1
grep -E "error|FAILED" -A3 "$out/build.log" | head -60
tail -3 "$out/build.log"
echo "gpu-bench: build took $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

echo "== FLUX.1 tiny fixture, bf16 on cuda, tp=1 (reference: float32 diffusers)"
build-cuda/tools/ditserve-tool forward --model "$fixtures/flux1-tiny" \
  --inputs "$fixtures/reference.safetensors" --prefix flux1.step0.in. \
  --output "$out/flux1_bf16.safetensors" --device cuda --dtype bfloat16
python3 - "$out/flux1_bf16.safetensors" "$fixtures/reference.safetensors" <<'PY'
import json, struct, sys
import numpy as np
def read(path, name):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        b, e = h[name]["data_offsets"]
        f.seek(8 + n + b)
        return np.frombuffer(f.read(e - b), dtype=np.float32).reshape(h[name]["shape"])
ours, ref = read(sys.argv[1], "out"), read(sys.argv[2], "flux1.step0.out")
err = float(np.linalg.norm(ours.astype(np.float64) - ref) / np.linalg.norm(ref))
print(f"flux1.step0.out bf16 relative error {err:.3e} (limit 2e-2): {'PASS' if err < 2e-2 else 'FAIL'}")
PY

echo "== FLUX.1-dev transformer step, random weights, bf16, 4096 + 512 tokens, tp=1"
build-cuda/models/flux1/ditserve-flux1-bench --device cuda --runs 10 --warmup 3 2>&1 | tail -15
