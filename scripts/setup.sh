#!/usr/bin/env bash
# Installs every Debian package the build and the tests need (idempotent, non-interactive) and
# builds ditserve in Release into ./build. Usage: scripts/setup.sh [--no-apt] [--jobs N]
set -euo pipefail
cd "$(dirname "$0")/.."

apt=1
jobs=$(nproc)
while [ $# -gt 0 ]; do
  case "$1" in
    --no-apt) apt=0 ;;
    --jobs) jobs="$2"; shift ;;
    *) echo "setup.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

# Time per phase, printed as it ends and appended to build/phase-times.txt (scripts/test.sh prints
# the whole list at the end of a run).
phase_start=$(date +%s)
phase_times=()
phase_done() {
  local now; now=$(date +%s)
  phase_times+=("setup: phase $1 took $((now - phase_start)) s")
  echo "${phase_times[-1]}"
  phase_start=${now}
}

if [ "$apt" = 1 ]; then
  mapfile -t pkgs < <(grep -v '^\s*#' scripts/deps.txt | grep -v '^\s*$')
  missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  command -v npm >/dev/null 2>&1 || missing+=(npm)
  # Test-only, kept out of scripts/deps.txt (which the Docker build stage installs too): Debian's
  # headless-capable chromium, the browser playground_e2e drives (tests/e2e/playground).
  test_pkgs=(chromium)
  for p in "${test_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${#missing[@]} Debian packages: ${missing[*]}"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  else
    echo "setup: all ${#pkgs[@]} Debian packages present"
  fi
fi
phase_done apt

# clang, not GCC: every LibTorch translation unit loads the precompiled <torch/torch.h>, which is
# 570 MB under GCC (read whole, ~5 s a translation unit before any of our code) and 125 MB under
# clang (loaded lazily); our translation units compile 3-5x faster with clang (HACKING.md).
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++
phase_done configure
cmake --build build -j "$jobs"
echo "setup: build complete in ./build"
phase_done build

# The Node.js client's dependencies (@grpc/grpc-js, from the npm registry), pinned by its lockfile.
# Optional for the server: without them the Node client tests skip, saying why.
if command -v npm >/dev/null 2>&1; then
  if [ ! -d deploy/clients/node/node_modules/@grpc/grpc-js ]; then
    (cd deploy/clients/node && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) ||
      echo "setup: WARNING: npm ci failed in deploy/clients/node; the Node client tests will skip" >&2
  fi
  # The official openai npm client, pinned likewise, for the HTTP API's end-to-end test
  # (tests/e2e/http_api_e2e.sh openai); without it http_api_openai_e2e skips.
  if [ ! -d tests/e2e/openai_client/node_modules/openai ]; then
    (cd tests/e2e/openai_client && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) ||
      echo "setup: WARNING: npm ci failed in tests/e2e/openai_client; http_api_openai_e2e will skip" >&2
  fi
  # puppeteer-core, pinned likewise, which drives the system chromium for the playground's browser
  # test (tests/e2e/playground); without it playground_e2e skips.
  if [ ! -d tests/e2e/playground/node_modules/puppeteer-core ]; then
    (cd tests/e2e/playground && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) ||
      echo "setup: WARNING: npm ci failed in tests/e2e/playground; playground_e2e will skip" >&2
  fi
  # The offline validator of deploy/k8s (kubernetes-models' schemas, yaml), pinned likewise;
  # without it the deploy_k8s tests skip.
  if [ ! -d tests/deploy/k8s-validate/node_modules/kubernetes-models ]; then
    (cd tests/deploy/k8s-validate && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) ||
      echo "setup: WARNING: npm ci failed in tests/deploy/k8s-validate; the deploy_k8s tests will skip" >&2
  fi
fi
phase_done npm
printf '%s\n' "${phase_times[@]}" > build/phase-times.txt
