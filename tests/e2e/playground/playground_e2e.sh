#!/usr/bin/env bash
# ctest entry playground_e2e (tests/e2e/CMakeLists.txt): the playground page (GET / on
# --http-listen, server/playground.h) through the real binaries and a real browser. Starts
# ditserve-frontend with --http-listen 127.0.0.1:0, a bearer token, the flux1-tiny fixture with its
# "style" LoRA adapter and 1 CPU worker (the browser and the worker share CI's cores; one rank is
# the cheapest real group); checks the page's routes with curl (public, content types, the
# Content-Security-Policy; the API still needs the token); then runs playground_test.js: headless
# Chromium (Debian's chromium) through puppeteer-core makes an image in the page and compares it
# with the API's for the same request. The screenshot goes to BUILD_DIR/tests/e2e/playground/
# playground.png. SIGTERM at the end: the frontend must drain and exit 0.
# Exits 77 (ctest SKIP_RETURN_CODE), saying why, when chromium, node, curl or this folder's
# node_modules (npm ci here; scripts/setup.sh does it) are missing.
# Usage: playground_e2e.sh BUILD_DIR
set -euo pipefail
build=${1:-}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
[ -n "$build" ] || { echo "usage: playground_e2e.sh BUILD_DIR" >&2; exit 2; }
build=$(cd "$build" && pwd)
started=$(date +%s.%N)

chromium=${CHROMIUM:-}
if [ -z "$chromium" ]; then
  chromium=$(command -v chromium || command -v chromium-browser || true)
fi
if [ -z "$chromium" ]; then
  echo "SKIP: chromium is not installed (Debian's chromium package; scripts/setup.sh installs it)"
  exit 77
fi
if ! command -v node >/dev/null 2>&1; then
  echo "SKIP: node is not installed (scripts/setup.sh installs npm, which brings it)"; exit 77
fi
if [ ! -d "$here/node_modules/puppeteer-core" ]; then
  echo "SKIP: tests/e2e/playground/node_modules is absent (run npm ci there; scripts/setup.sh does)"
  exit 77
fi
command -v curl >/dev/null 2>&1 || { echo "SKIP: curl is not installed (scripts/deps.txt)"; exit 77; }

out="$build/tests/e2e/playground"
mkdir -p "$out"
model_name=flux1-tiny
model="$repo/tests/fixtures/$model_name"
# shellcheck source=tests/e2e/http_frontend.sh
. "$here/../http_frontend.sh"
http_frontend_start "$build" playground-e2e --model "$model" --spawn-workers 1 --max-batch 1 \
  --max-queue 4 --lora "style=$repo/tests/fixtures/lora/style"
elapsed() { awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }


# head_of PATH [curl args]: "STATUS CONTENT-TYPE" of a GET; the headers go to $tmp/headers.
head_of() {
  local path=$1; shift
  curl -s -D "$tmp/headers" -o "$tmp/body" -w '%{http_code} %{content_type}' "$base$path" "$@" || true
}

# The page is served while the workers still load (it says so itself), without a token.
expect "GET / without a token is the page" "200 text/html; charset=utf-8" "$(head_of /)"
grep -qi "^content-security-policy: default-src 'none'; script-src 'self'" "$tmp/headers" ||
  fail "GET / has no Content-Security-Policy allowing only self ($(cat "$tmp/headers"))"
echo "ok   ... with a Content-Security-Policy that allows only self"
grep -q '<script src="/playground/app.js"' "$tmp/body" || fail "GET / is not the playground page"
expect "GET /playground/app.js is the script" "200 text/javascript; charset=utf-8" \
  "$(head_of /playground/app.js)"
cmp -s "$tmp/body" "$repo/server/playground/app.js" || fail "/playground/app.js differs from the source"
expect "GET /playground/style.css is the style sheet" "200 text/css; charset=utf-8" \
  "$(head_of /playground/style.css)"
expect "GET /playground/nothing is 404" 404 "$(head_of /playground/nothing | cut -d' ' -f1)"
expect "GET /v1/models still needs the token" 401 "$(head_of /v1/models | cut -d' ' -f1)"

# /health: 200 once SERVING.
http_frontend_wait_serving
echo "[measured] frontend + 1 worker SERVING after $(elapsed) s"

screenshot="$out/playground.png"
rm -f "$screenshot"
(cd "$here" && CHROMIUM="$chromium" node playground_test.js "$base" "$tmp/token" "$model_name" \
  "$screenshot") || fail "the browser test failed"
[ -s "$screenshot" ] || fail "no screenshot at $screenshot"

kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=""
[ "$status" = 0 ] || fail "the frontend exited with status $status after SIGTERM"
echo "ok   the frontend drained and exited 0"
echo "[measured] playground_e2e: $(elapsed) s in all"
echo "PASSED (playground)"
