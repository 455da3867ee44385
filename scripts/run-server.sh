#!/usr/bin/env bash
# Sets up (scripts/setup.sh), generates the embedded default model once (a tiny random-weight
# FLUX.1 in diffusers format, cached in ~/.cache/ditserve/flux1-tiny), and runs the frontend with
# two CPU workers on it. Extra arguments go to ditserve-frontend (e.g. --model DIR --spawn-workers 4).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
model="${DITSERVE_DEFAULT_MODEL:-$HOME/.cache/ditserve/flux1-tiny}"
if [ ! -f "$model/model_index.json" ]; then
  build/tools/ditserve-tool make-tiny-model "$model"
fi
# The tiny model runs on CPU: default to small images (requests may still ask for up to 2048).
args=(--model "$model" --spawn-workers 2 --default-height 128 --default-width 128 --default-steps 8)
exec build/server/ditserve-frontend "${args[@]}" "$@"
