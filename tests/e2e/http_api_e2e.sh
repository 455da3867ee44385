#!/usr/bin/env bash
# ctest entry for the OpenAI-style images HTTP API through the real binaries
# (tests/e2e/CMakeLists.txt: http_api_openai_e2e, http_api_curl_e2e): starts ditserve-frontend with
# --http-listen 127.0.0.1:0 (the port read from its "HTTP <port>" line), a bearer token, --max-batch 2
# and 2 CPU workers on the flux1-tiny fixture, then
#   openai  runs tests/e2e/openai_client/images_test.js (the official openai npm client);
#   curl    checks every route and the main error answers with curl and python3;
# then SIGTERM: the frontend must drain and exit 0. Exits 77 (ctest SKIP_RETURN_CODE), saying why,
# when the mode's client is missing: node or openai_client/node_modules (npm ci there;
# scripts/setup.sh does it), or curl.
# Usage: http_api_e2e.sh openai|curl BUILD_DIR
set -euo pipefail
mode=${1:-}
build=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
[ -n "$build" ] || { echo "usage: http_api_e2e.sh openai|curl BUILD_DIR" >&2; exit 2; }

case "$mode" in
  openai)
    if ! command -v node >/dev/null 2>&1; then
      echo "SKIP: node is not installed (scripts/setup.sh installs npm, which brings it)"; exit 77
    fi
    if [ ! -d "$here/openai_client/node_modules/openai" ]; then
      echo "SKIP: tests/e2e/openai_client/node_modules is absent (run npm ci there; scripts/setup.sh does)"
      exit 77
    fi ;;
  curl)
    command -v curl >/dev/null 2>&1 || { echo "SKIP: curl is not installed (scripts/deps.txt)"; exit 77; }
    command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is not installed"; exit 77; } ;;
  *) echo "usage: http_api_e2e.sh openai|curl BUILD_DIR" >&2; exit 2 ;;
esac

model="$repo/tests/fixtures/flux1-tiny"
tmp=$(mktemp -d /tmp/ditserve-http-e2e.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
token="e2e-$RANDOM$RANDOM"
echo "$token" >"$tmp/token"

"$build/server/ditserve-frontend" --model "$model" --spawn-workers 2 --listen 127.0.0.1:0 \
  --metrics-listen "" --http-listen 127.0.0.1:0 --max-batch 2 --max-queue 4 \
  --api-token-file "$tmp/token" --lora "style=$repo/tests/fixtures/lora/style" \
  --log-level info >"$tmp/stdout" 2>"$tmp/log" &
pid=$!

fail() {
  echo "FAIL: $*"
  echo "--- frontend log (last 40 lines) ---"; tail -n 40 "$tmp/log" || true
  exit 1
}

port=""
for _ in $(seq 600); do  # 60 s
  port=$(sed -n 's/^HTTP \([0-9]*\)$/\1/p' "$tmp/stdout" | head -n 1)
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || fail "the frontend exited before listening"
  sleep 0.1
done
[ -n "$port" ] || fail "no 'HTTP <port>' line within 60 s"
base="http://127.0.0.1:$port"
echo "frontend pid $pid, HTTP API on $base"

# /health answers 503 while the workers load, 200 once SERVING (no token needed).
health() { curl -s -o /dev/null -w '%{http_code}' "$base/health" 2>/dev/null || true; }
if command -v curl >/dev/null 2>&1; then
  first=$(health)
  for _ in $(seq 1800); do  # 180 s
    [ "$(health)" = 200 ] && break
    kill -0 "$pid" 2>/dev/null || fail "the frontend exited while loading"
    sleep 0.1
  done
  [ "$(health)" = 200 ] || fail "never SERVING within 180 s"
  echo "health: $first while loading, 200 once SERVING"
else
  # node's fetch, for a machine without curl.
  node -e '
    const url = process.argv[1] + "/health"; const until = Date.now() + 180000;
    (async () => { while (Date.now() < until) { try { if ((await fetch(url)).status === 200) process.exit(0); } catch (e) {}
      await new Promise((r) => setTimeout(r, 100)); } process.exit(1); })();' "$base" ||
    fail "never SERVING within 180 s"
fi

case "$mode" in
  openai)
    (cd "$here/openai_client" && node images_test.js "$base/v1" "$tmp/token" flux1-tiny) ||
      fail "the openai client test failed"
    grep -q "2 request(s), 64x64" "$tmp/log" || fail "the two images did not run as one batch"
    echo "ok   the two images ran as one job (--max-batch 2)" ;;
  curl)
    auth=(-H "Authorization: Bearer $token")
    # code BODY_FILE METHOD PATH [curl args...]: the HTTP status; the body goes to BODY_FILE.
    call() {
      local out=$1 method=$2 path=$3; shift 3
      curl -s -o "$out" -w '%{http_code}' -X "$method" "$base$path" "$@" || true
    }
    expect() {  # expect WHAT WANT GOT
      if [ "$2" = "$3" ]; then echo "ok   $1"; else fail "$1: want $2, got $3 ($(head -c 400 "$tmp/body"))"; fi
    }
    field() {  # field PYTHON_EXPR: evaluated on the JSON in $tmp/body as j
      python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($1)" "$tmp/body"
    }

    code=$(call "$tmp/body" GET /v1/models "${auth[@]}")
    expect "GET /v1/models is 200" 200 "$code"
    expect "  ... listing the served model" flux1-tiny "$(field 'j["data"][0]["id"]')"

    code=$(call "$tmp/body" POST /v1/images/generations "${auth[@]}" -H 'Content-Type: application/json' \
      -d '{"model": "flux1-tiny", "prompt": "a cat holding a sign", "size": "64x48", "n": 1,
           "response_format": "b64_json", "seed": 5, "num_inference_steps": 3}')
    expect "POST /v1/images/generations is 200" 200 "$code"
    size=$(python3 - "$tmp/body" <<'EOF'
import base64, json, struct, sys
j = json.load(open(sys.argv[1]))
png = base64.b64decode(j["data"][0]["b64_json"])
assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR", "not a PNG"
w, h = struct.unpack(">II", png[16:24])
print(f"{w}x{h} seed={j['data'][0]['seed']} created={isinstance(j['created'], int)}")
EOF
    )
    expect "  ... a 64 wide, 48 high PNG with the seed asked for" "64x48 seed=5 created=True" "$size"

    # LoRA: the adapter started with --lora is listed, and a request naming it gets another image
    # than the same request without it (lora_e2e_test holds the gRPC path to diffusers' pixels).
    code=$(call "$tmp/body" GET /v1/models/flux1-tiny "${auth[@]}")
    expect "GET /v1/models/flux1-tiny lists the LoRA adapter" "200 style" "$code $(field 'j["loras"][0]["name"]')"
    lora_png() {  # lora_png LORAS_JSON: the b64 PNG of the fixture-like call with those adapters
      call "$tmp/lora" POST /v1/images/generations "${auth[@]}" -H 'Content-Type: application/json' \
        -d '{"prompt": "a cat holding a sign", "size": "32x32", "response_format": "b64_json",
             "seed": 42, "num_inference_steps": 4, "loras": '"$1"'}' >/dev/null
      python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["data"][0]["b64_json"])' "$tmp/lora"
    }
    base_png=$(lora_png '[]')
    styled_png=$(lora_png '[{"name": "style", "scale": 0.8}]')
    expect "  ... and loras [style 0.8] changes the image" "changed" \
      "$([ -n "$styled_png" ] && [ "$styled_png" != "$base_png" ] && echo changed || echo same)"
    expect "  ... and loras [] gives the same image again" "$base_png" "$(lora_png '[]')"
    code=$(call "$tmp/body" POST /v1/images/generations "${auth[@]}" -d '{"prompt": "x", "loras": [{"name": "nope"}]}')
    expect "an unknown LoRA is 400" 400 "$code"
    expect "  ... with param loras" loras "$(field 'j["error"]["param"]')"

    code=$(call "$tmp/body" POST /v1/images/generations "${auth[@]}" -d '{"prompt": "x", "size": "64by64"}')
    expect "a bad size is 400" 400 "$code"
    expect "  ... with param size" size "$(field 'j["error"]["param"]')"
    expect "  ... and type invalid_request_error" invalid_request_error "$(field 'j["error"]["type"]')"
    code=$(call "$tmp/body" POST /v1/images/generations "${auth[@]}" -d '{"prompt": "x", "response_format": "url"}')
    expect "response_format url is 400" 400 "$code"
    code=$(call "$tmp/body" POST /v1/images/generations "${auth[@]}" -d '{"prompt": "x",')
    expect "malformed JSON is 400" 400 "$code"
    code=$(call "$tmp/body" POST /v1/images/generations -d '{"prompt": "x"}')
    expect "no token is 401" 401 "$code"
    code=$(call "$tmp/body" GET /v1/models)
    expect "GET /v1/models without a token is 401" 401 "$code"
    python3 -c 'import json; print(json.dumps({"prompt": "a" * 600000}))' >"$tmp/big.json"
    code=$(call "$tmp/body" POST /v1/images/generations "${auth[@]}" --data-binary "@$tmp/big.json")
    expect "a body over the limit is 413" 413 "$code"
    code=$(call "$tmp/body" GET /v1/nothing "${auth[@]}")
    expect "an unknown route is 404" 404 "$code"
    expect "  ... as an OpenAI error object" not_found_error "$(field 'j["error"]["type"]')" ;;
esac

# SIGTERM: the frontend drains (HTTP API included) and exits 0.
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=""
[ "$status" = 0 ] || fail "the frontend exited with status $status after SIGTERM"
echo "ok   the frontend drained and exited 0"
echo "PASSED ($mode)"
