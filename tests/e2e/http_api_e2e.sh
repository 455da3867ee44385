#!/usr/bin/env bash
# ctest entry for the OpenAI-style images HTTP API through the real binaries
# (tests/e2e/CMakeLists.txt: http_api_openai_e2e, http_api_curl_e2e, http_api_edits_e2e,
# http_api_edits_parity_e2e, http_api_qwen_edits_e2e, http_api_qwen_edits_parity_e2e): starts ditserve-frontend with --http-listen
# 127.0.0.1:0 (the port read from its "HTTP <port>" line), a bearer token, --max-batch 2 and 2 CPU
# workers on the flux1-tiny fixture (edits: flux2-tiny; qwen_edits: the tiny Qwen-Image-Edit-2509
# folder written into a temporary folder, removed at exit, by BUILD_DIR/tests/e2e/
# ditserve-test-qwen-edit-folder, i.e. tests/support/qwen_edit_tiny_folder.h), then
#   openai  runs tests/e2e/openai_client/images_test.js (the official openai npm client), with
#           --quality-steps low=2 and an image store (response_format "url"), and checks that
#           quality "low" ran 2 steps and `user` was logged;
#   curl    checks every route and the main error answers with curl and python3, POST
#           /v1/images/edits' errors included (no image, a mask, images the model does not take),
#           and every error of OpenAI's fields (the image store off here: "url" refused, GET
#           /v1/images/files/{id} 404), output_format jpeg/webp decoded with python3;
#   edits   POST /v1/images/edits' success path on flux2-tiny (reference images) with curl -F and
#           the openai client's images.edit (when node and its node_modules are there);
#   edits_parity  the openai client's images.edit on calls of tests/fixtures/image-inputs (made by
#           the real diffusers: FLUX.2 editing with one reference and with two of odd sizes), the
#           folder assembled as the fixture script assembles it (flux2-tiny with the call's VAE):
#           the PNG it returns is diffusers' image, every byte within 1;
#   qwen_edits  Qwen-Image-Edit-2509 (QwenImageEditPlusPipeline, 1 to 3 images, 2 steps): the
#           openai client's images.edit (images_test.js qwen_edits: image_inputs use qwen_edit,
#           min 1 max 3; a given size; without one the last image's calculate_dimensions; n 2;
#           4 images refused), then curl: an edit without an image and a generation (no image)
#           are 400 naming image(s); two images (image[]=@...) with size 128x96 give a 128x96 PNG;
#   qwen_edits_parity  the openai client's images.edit (images_test.js qwen_parity) on the calls of
#           tests/fixtures/qwen-edit (made by the real diffusers, make_qwen_edit_fixtures.py; the
#           folder DITSERVE_QWEN_EDIT_FIXTURES replaces it): edit_one and edit_two on
#           qwenimage-edit-tiny/ (QwenImageEditPlusPipeline), then, with a second frontend (the
#           script runs itself once per folder: qwen_edits_parity BUILD_DIR plus|v1), edit_v1 on
#           qwenimage-edit-v1-tiny/ (QwenImageEditPipeline); --dtype float32. Each call's prompt,
#           negative_prompt, true_cfg_scale, seed, num_inference_steps, size "<width>x<height>" (the
#           frontend floors it) and its inputs/ images in order: the PNG is qwen_edit_reference
#           .safetensors' <call>.image, every byte within 1 of (x * 255).round();
# then SIGTERM: the frontend must drain and exit 0. Exits 77 (ctest SKIP_RETURN_CODE), saying why,
# when the mode's client is missing: node or openai_client/node_modules (npm ci there;
# scripts/setup.sh does it), or curl (qwen_edits needs both); edits also while flux2-tiny's GET
# /v1/models says image_inputs.max_images 0 (a folder whose VAE has no encoder); edits_parity and
# qwen_edits_parity also while their diffusers fixtures are absent (image_reference.safetensors,
# qwen_edit_reference.safetensors).
# Usage: http_api_e2e.sh openai|curl|edits|edits_parity|qwen_edits BUILD_DIR
#        http_api_e2e.sh qwen_edits_parity BUILD_DIR [plus|v1]
set -euo pipefail
mode=${1:-}
build=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
usage="usage: http_api_e2e.sh openai|curl|edits|edits_parity|qwen_edits|qwen_edits_parity BUILD_DIR"
[ -n "$build" ] || { echo "$usage" >&2; exit 2; }

case "$mode" in
  openai|edits_parity|qwen_edits|qwen_edits_parity)
    if ! command -v node >/dev/null 2>&1; then
      echo "SKIP: node is not installed (scripts/setup.sh installs npm, which brings it)"; exit 77
    fi
    if [ ! -d "$here/openai_client/node_modules/openai" ]; then
      echo "SKIP: tests/e2e/openai_client/node_modules is absent (run npm ci there; scripts/setup.sh does)"
      exit 77
    fi ;;
  curl|edits) ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
case "$mode" in
  curl|edits|qwen_edits)
    command -v curl >/dev/null 2>&1 || { echo "SKIP: curl is not installed (scripts/deps.txt)"; exit 77; }
    command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is not installed"; exit 77; } ;;
esac
image_inputs="$repo/tests/fixtures/image-inputs"
if [ "$mode" = edits_parity ] && [ ! -f "$image_inputs/image_reference.safetensors" ]; then
  echo "SKIP: tests/fixtures/image-inputs is absent (tests/fixtures/make_image_fixtures.py makes it)"
  exit 77
fi
qwen_edit_dir=${DITSERVE_QWEN_EDIT_FIXTURES:-$repo/tests/fixtures/qwen-edit}
if [ "$mode" = qwen_edits_parity ]; then
  if [ ! -f "$qwen_edit_dir/qwen_edit_reference.safetensors" ]; then
    echo "SKIP: $qwen_edit_dir/qwen_edit_reference.safetensors is absent" \
      "(tests/fixtures/make_qwen_edit_fixtures.py makes it)"
    exit 77
  fi
  if [ -z "${3:-}" ]; then
    # One frontend per folder: this script again for each, one after the other.
    for part in plus v1; do
      echo "=== qwen_edits_parity $part ==="
      "$0" qwen_edits_parity "$build" "$part" || { echo "FAIL: qwen_edits_parity $part"; exit 1; }
    done
    echo "PASSED ($mode${3:+ $3})"
    exit 0
  fi
  case "$3" in
    plus) model_name=qwenimage-edit-tiny; qwen_calls=(edit_one edit_two) ;;
    v1) model_name=qwenimage-edit-v1-tiny; qwen_calls=(edit_v1) ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
fi

if [ "$mode" = edits ]; then
  model_name=flux2-tiny
  extra=()
elif [ "$mode" = edits_parity ]; then
  # As make_image_fixtures.py assembles the FLUX.2 calls' folder: flux2-tiny with flux2-vae.
  model_name=flux2-edit
  assembled=$(mktemp -d /tmp/ditserve-edit-parity.XXXXXX)
  cp -r "$repo/tests/fixtures/flux2-tiny" "$assembled/$model_name"
  rm -rf "$assembled/$model_name/vae"
  cp -r "$image_inputs/flux2-vae" "$assembled/$model_name/vae"
  extra=()
elif [ "$mode" = qwen_edits_parity ]; then
  # The diffusers folder as committed (model_name set above), float32 as diffusers ran it.
  [ -d "$qwen_edit_dir/$model_name" ] || { echo "FAIL: $qwen_edit_dir/$model_name is absent"; exit 1; }
  extra=(--dtype float32)
elif [ "$mode" = qwen_edits ]; then
  # The tiny random-weight Qwen-Image-Edit-2509 folder (seed 11, as qwen_edit_e2e_test's).
  model_name="qwen-edit-tiny"
  writer="$build/tests/e2e/ditserve-test-qwen-edit-folder"
  [ -x "$writer" ] || { echo "FAIL: $writer is not built (it is part of the default build)"; exit 1; }
  assembled=$(mktemp -d /tmp/ditserve-qwen-edit.XXXXXX)
  trap 'rm -rf "$assembled"' EXIT
  "$writer" "$assembled/$model_name" 11 >/dev/null ||
    { echo "FAIL: $writer could not write the edit folder"; exit 1; }
  extra=()
else
  model_name=flux1-tiny
  extra=(--lora "style=$repo/tests/fixtures/lora/style")
fi
if [ "$mode" = openai ]; then
  extra+=(--quality-steps low=2 --http-image-store-bytes 16777216 --http-image-store-ttl 600)
fi
model="$repo/tests/fixtures/$model_name"
[ "$mode" = qwen_edits_parity ] && model="$qwen_edit_dir/$model_name"
if [ "$mode" = edits_parity ] || [ "$mode" = qwen_edits ]; then model="$assembled/$model_name"; fi
# shellcheck source=tests/e2e/http_frontend.sh
. "$here/http_frontend.sh"
http_frontend_start "$build" http-e2e --model "$model" --spawn-workers 2 --max-batch 2 \
  --max-queue 4 "${extra[@]}"
if [ -n "${assembled:-}" ]; then trap 'http_frontend_cleanup; rm -rf "$assembled"' EXIT; fi

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
png_size() {  # png_size: "WxH seed=S n=N" of the images in $tmp/body (the first one's size and seed)
  python3 - "$tmp/body" <<'EOF'
import base64, json, struct, sys
j = json.load(open(sys.argv[1]))
png = base64.b64decode(j["data"][0]["b64_json"])
assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR", "not a PNG"
w, h = struct.unpack(">II", png[16:24])
print(f"{w}x{h} seed={j['data'][0]['seed']} n={len(j['data'])}")
EOF
}
# make_png FILE WIDTH HEIGHT R G B: a solid RGB PNG, written with zlib alone (no imaging module).
make_png() {
  python3 - "$@" <<'EOF'
import struct, sys, zlib
path, w, h, r, g, b = sys.argv[1], *map(int, sys.argv[2:])
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
rows = b"".join(b"\x00" + bytes([r, g, b]) * w for _ in range(h))
open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                       + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
EOF
}
# What the served model takes: "MAX_IMAGES USE" from GET /v1/models/<model> (curl, else node).
image_inputs() {
  if command -v curl >/dev/null 2>&1; then
    call "$tmp/body" GET "/v1/models/$model_name" "${auth[@]}" >/dev/null
    field 'str(j["image_inputs"]["max_images"]) + " " + (j["image_inputs"]["use"] or "-")'
  else
    node -e '
      fetch(process.argv[1], {headers: {Authorization: "Bearer " + process.argv[2]}})
        .then((r) => r.json()).then((j) => console.log(`${j.image_inputs.max_images} ${j.image_inputs.use || "-"}`));' \
      "$base/v1/models/$model_name" "$token"
  fi
}

case "$mode" in
  openai)
    (cd "$here/openai_client" && node images_test.js "$base/v1" "$tmp/token" flux1-tiny) ||
      fail "the openai client test failed"
    grep -q "2 request(s), 64x64" "$tmp/log" || fail "the two images did not run as one batch"
    echo "ok   the two images ran as one job (--max-batch 2)"
    grep -q "admitted (48x48, 2 steps" "$tmp/log" || fail "quality low did not run 2 steps"
    echo "ok   quality low ran --quality-steps low=2 steps"
    grep -q 'user="e2e-user"' "$tmp/log" || fail "the user was not logged"
    echo "ok   the user was logged with its request id" ;;
  curl)
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

    # stream: true: OpenAI's server-sent events; a refusal before the stream begins is a plain 400.
    code=$(call "$tmp/body" POST /v1/images/generations "${auth[@]}" -H 'Content-Type: application/json' \
      -d '{"prompt": "a cat", "size": "32x32", "stream": true, "partial_images": 1, "seed": 5,
           "num_inference_steps": 3}')
    expect "stream: true is 200" 200 "$code"
    expect "  ... with one partial_image then completed" \
      "image_generation.partial_image image_generation.completed" \
      "$(grep '^event: ' "$tmp/body" | cut -d' ' -f2 | tr '\n' ' ' | sed 's/ $//')"
    code=$(call "$tmp/body" POST /v1/images/generations "${auth[@]}" -H 'Content-Type: application/json' \
      -d '{"prompt": "a cat", "size": "33x32", "stream": true}')
    expect "stream: true with a bad size is 400 before any event" "400 size" \
      "$code $(field 'j["error"]["param"]')"

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
    expect "response_format url without the image store is 400" 400 "$code"
    expect "  ... saying why (param response_format)" "response_format True" \
      "$(field 'j["error"]["param"], "--http-image-store-bytes" in j["error"]["message"]')"
    # OpenAI's fields: every error is 400 naming its field.
    for bad in '"background": "transparent"' '"background": "white"' '"quality": "ultra"' \
               '"output_format": "gif"' '"output_compression": 101' '"output_compression": "high"' \
               '"style": "photo"' '"moderation": "none"' '"user": 5' '"response_format": "png"'; do
      code=$(call "$tmp/body" POST /v1/images/generations "${auth[@]}" -d "{\"prompt\": \"x\", $bad}")
      want=$(python3 -c 'import json,sys; print(next(iter(json.loads("{" + sys.argv[1] + "}"))))' "$bad")
      expect "{$bad} is 400 with param $want" "400 $want" "$code $(field 'j["error"]["param"]')"
    done
    call "$tmp/body" POST /v1/images/generations "${auth[@]}" \
      -d '{"prompt": "x", "background": "transparent"}' >/dev/null
    expect "  ... background transparent says there is no alpha" True \
      "$(field '"no alpha" in j["error"]["message"]')"
    code=$(call "$tmp/body" POST /v1/images/edits "${auth[@]}" -F prompt=x -F "input_fidelity=max" \
      -F "image=@$tmp/token")
    expect "an edit with input_fidelity max is 400 with param input_fidelity" "400 input_fidelity" \
      "$code $(field 'j["error"]["param"]')"
    code=$(call "$tmp/body" GET /v1/images/files/img_00000000000000000000000000000000.png "${auth[@]}")
    expect "GET /v1/images/files/{id} without the image store is 404" "404 True" \
      "$code $(field '"keeps no images" in j["error"]["message"]')"
    code=$(call "$tmp/body" GET /v1/images/files/img_00000000000000000000000000000000.png)
    expect "GET /v1/images/files/{id} without a token is 401" 401 "$code"
    # Accepted: OpenAI's other fields, and output_format jpeg / webp decoded by their headers.
    code=$(call "$tmp/body" POST /v1/images/generations "${auth[@]}" -d '{"prompt": "a cat", "size": "48x32",
      "seed": 5, "num_inference_steps": 3, "output_format": "jpeg", "output_compression": 60,
      "quality": "auto", "background": "opaque", "style": "natural", "moderation": "auto", "user": "u1"}')
    expect "output_format jpeg with OpenAI's other fields is 200" 200 "$code"
    jpeg=$(python3 - "$tmp/body" <<'EOF'
import base64, json, struct, sys
j = json.load(open(sys.argv[1]))
b = base64.b64decode(j["data"][0]["b64_json"])
assert b[:3] == b"\xff\xd8\xff" and b[-2:] == b"\xff\xd9", "not a JPEG"
at = 2
while True:
    marker, length = b[at + 1], struct.unpack(">H", b[at + 2:at + 4])[0]
    if 0xC0 <= marker <= 0xC3:
        h, w = struct.unpack(">HH", b[at + 5:at + 9])
        break
    at += 2 + length
print(j["output_format"], f"{w}x{h}", j["size"])
EOF
    )
    expect "  ... a 48x32 JPEG (its SOF), the response saying jpeg" "jpeg 48x32 48x32" "$jpeg"
    code=$(call "$tmp/body" POST /v1/images/generations "${auth[@]}" -d '{"prompt": "a cat", "size": "32x32",
      "seed": 5, "num_inference_steps": 3, "output_format": "webp"}')
    expect "output_format webp is a WebP" "200 webp True" \
      "$code $(field 'j["output_format"], __import__("base64").b64decode(j["data"][0]["b64_json"])[8:12] == b"WEBP"')"
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
    expect "  ... as an OpenAI error object" not_found_error "$(field 'j["error"]["type"]')"

    # POST /v1/images/edits (multipart/form-data): the form's errors, and the images a model does
    # not take, named by Serve (images[i] / images) and answered with param "image".
    make_png "$tmp/a.png" 64 64 200 30 30
    make_png "$tmp/b.png" 64 64 30 30 200
    edit=(-F "model=$model_name" -F "prompt=make it blue" -F size=64x64 -F num_inference_steps=3 -F seed=5
          -F response_format=b64_json)
    code=$(call "$tmp/body" POST /v1/images/edits "${auth[@]}" "${edit[@]}")
    expect "an edit without an image is 400" 400 "$code"
    expect "  ... with param image" image "$(field 'j["error"]["param"]')"
    code=$(call "$tmp/body" POST /v1/images/edits "${auth[@]}" "${edit[@]}" -F "image=@$tmp/a.png" \
      -F "mask=@$tmp/b.png")
    expect "an edit with a mask is 400" 400 "$code"
    expect "  ... saying inpainting is not supported" "mask True" \
      "$(field 'j["error"]["param"], "inpainting is not supported" in j["error"]["message"]')"
    code=$(call "$tmp/body" POST /v1/images/edits "${auth[@]}" -F "image=@$tmp/a.png" -F size=64x64)
    expect "an edit without a prompt is 400" "400 prompt" "$code $(field 'j["error"]["param"]')"
    code=$(call "$tmp/body" POST /v1/images/edits "${auth[@]}" -H 'Content-Type: application/json' \
      -d '{"prompt": "x"}')
    expect "an edit that is not a multipart form is 400" 400 "$code"
    code=$(call "$tmp/body" POST /v1/images/edits -F prompt=x -F "image=@$tmp/a.png")
    expect "an edit without a token is 401" 401 "$code"
    read -r max_images use <<<"$(image_inputs)"
    echo "     $model_name takes $max_images input image(s) (use $use)"
    # More images than the model takes (at least two: image=@a.png image=@b.png) are refused
    # naming images.
    too_many=(-F "image=@$tmp/a.png")
    while [ "${#too_many[@]}" -lt $((2 * (max_images + 1))) ] || [ "${#too_many[@]}" -lt 4 ]; do
      too_many+=(-F "image=@$tmp/b.png")
    done
    code=$(call "$tmp/body" POST /v1/images/edits "${auth[@]}" "${edit[@]}" "${too_many[@]}")
    expect "$((${#too_many[@]} / 2)) images to a model that takes $max_images is 400" 400 "$code"
    expect "  ... with param image, naming images" "image True" \
      "$(field 'j["error"]["param"], "images" in j["error"]["message"]')"
    if [ "$max_images" -gt 0 ]; then
      # The model takes images (FLUX.1 image-to-image once its pipeline lands): one edit succeeds.
      strength=()
      [ "$use" = image_to_image ] && strength=(-F strength=0.7)
      code=$(call "$tmp/body" POST /v1/images/edits "${auth[@]}" "${edit[@]}" "${strength[@]}" \
        -F "image=@$tmp/a.png")
      expect "an edit with one image is 200" 200 "$code"
      expect "  ... a 64x64 PNG with the seed asked for" "64x64 seed=5 n=1" "$(png_size)"
    fi ;;
  edits)
    # The success path of POST /v1/images/edits on flux2-tiny: reference images.
    read -r max_images use <<<"$(image_inputs)"
    [ "$max_images" -ge 2 ] && [ "$use" = reference ] ||
      fail "$model_name's GET /v1/models says image_inputs max_images $max_images, use '$use' (expected FLUX.2 references)"
    echo "     $model_name takes $max_images input image(s) (use $use)"
    make_png "$tmp/a.png" 96 64 200 30 30
    make_png "$tmp/b.png" 64 64 30 30 200
    # size absent: the output takes the first image's size (FLUX.2), here 96 x 64.
    code=$(call "$tmp/body" POST /v1/images/edits "${auth[@]}" -F "model=$model_name" \
      -F "prompt=make the red square blue" -F "image=@$tmp/a.png" -F "image=@$tmp/b.png" \
      -F num_inference_steps=3 -F seed=9 -F response_format=b64_json)
    expect "an edit with two reference images (image=@a.png image=@b.png) is 200" 200 "$code"
    expect "  ... a PNG of the first image's size with the seed asked for" "96x64 seed=9 n=1" "$(png_size)"
    first=$(field 'j["data"][0]["b64_json"]')
    # image[] (the openai clients' array form) carries the same images in the same order.
    code=$(call "$tmp/body" POST /v1/images/edits "${auth[@]}" -F "prompt=make the red square blue" \
      -F "image[]=@$tmp/a.png" -F "image[]=@$tmp/b.png" -F num_inference_steps=3 -F seed=9)
    expect "  ... image[] gives the same image" "200 same" \
      "$code $([ "$(field 'j["data"][0]["b64_json"]')" = "$first" ] && echo same || echo different)"
    code=$(call "$tmp/body" POST /v1/images/edits "${auth[@]}" -F "prompt=make the red square blue" \
      -F "image=@$tmp/b.png" -F "image=@$tmp/a.png" -F num_inference_steps=3 -F seed=9 -F size=64x64 -F n=2)
    expect "the images in the other order with size 64x64 and n 2 are 200" 200 "$code"
    expect "  ... two 64x64 PNGs" "64x64 seed=9 n=2" "$(png_size)"
    # stream=true: OpenAI's image_edit.* server-sent events.
    code=$(call "$tmp/body" POST /v1/images/edits "${auth[@]}" -F "prompt=make the red square blue" \
      -F "image=@$tmp/a.png" -F num_inference_steps=3 -F seed=9 -F stream=true -F partial_images=1)
    expect "an edit with stream=true partial_images=1 is 200 with one partial_image then completed" \
      "200 image_edit.partial_image image_edit.completed" \
      "$code $(grep '^event: ' "$tmp/body" | cut -d' ' -f2 | tr '\n' ' ' | sed 's/ $//')"
    if command -v node >/dev/null 2>&1 && [ -d "$here/openai_client/node_modules/openai" ]; then
      (cd "$here/openai_client" && node images_test.js "$base/v1" "$tmp/token" "$model_name" edits) ||
        fail "the openai client's images.edit test failed"
    else
      echo "skip the openai client's images.edit (node or openai_client/node_modules is missing)"
    fi ;;
  qwen_edits)
    # Qwen-Image-Edit-2509: 1 to 3 images, each to the text encoder and the VAE; the openai client
    # first (images_test.js qwen_edits), then curl.
    read -r max_images use <<<"$(image_inputs)"
    [ "$max_images" = 3 ] && [ "$use" = qwen_edit ] ||
      fail "$model_name's GET /v1/models says image_inputs max_images $max_images, use '$use' (expected 3, qwen_edit)"
    echo "     $model_name takes $max_images input image(s) (use $use)"
    (cd "$here/openai_client" && node images_test.js "$base/v1" "$tmp/token" "$model_name" qwen_edits) ||
      fail "the openai client's Qwen-Image-Edit test failed"
    make_png "$tmp/a.png" 96 64 200 30 30
    make_png "$tmp/b.png" 64 64 30 30 200
    qwen=(-F "model=$model_name" -F "prompt=make the red square blue" -F "negative_prompt= "
          -F true_cfg_scale=4 -F num_inference_steps=2 -F seed=5 -F response_format=b64_json)
    code=$(call "$tmp/body" POST /v1/images/edits "${auth[@]}" "${qwen[@]}" -F size=128x96)
    expect "an edit without an image is 400" 400 "$code"
    expect "  ... with param image, naming image" "image True" \
      "$(field 'j["error"]["param"], "image" in j["error"]["message"]')"
    code=$(call "$tmp/body" POST /v1/images/generations "${auth[@]}" -H 'Content-Type: application/json' \
      -d '{"model": "'"$model_name"'", "prompt": "a cat", "size": "128x96", "num_inference_steps": 2}')
    expect "a generation (no image) on the edit model is 400" 400 "$code"
    expect "  ... with param image, saying it needs at least 1 input image" "image True" \
      "$(field 'j["error"]["param"], "needs at least 1 input image" in j["error"]["message"]')"
    code=$(call "$tmp/body" POST /v1/images/edits "${auth[@]}" "${qwen[@]}" -F size=128x96 \
      -F "image[]=@$tmp/a.png" -F "image[]=@$tmp/b.png")
    expect "an edit with two images (image[]=@a.png image[]=@b.png) and size 128x96 is 200" 200 "$code"
    expect "  ... a 128x96 PNG with the seed asked for" "128x96 seed=5 n=1" "$(png_size)" ;;
esac

if [ "$mode" = edits_parity ]; then
  for call in flux2_edit_one flux2_edit_two; do
    (cd "$here/openai_client" &&
      node images_test.js "$base/v1" "$tmp/token" "$model_name" parity "$image_inputs" "$call") ||
      fail "the openai client's images.edit of $call is not diffusers' image"
  done
fi
if [ "$mode" = qwen_edits_parity ]; then
  for call in "${qwen_calls[@]}"; do
    (cd "$here/openai_client" &&
      node images_test.js "$base/v1" "$tmp/token" "$model_name" qwen_parity "$qwen_edit_dir" "$call") ||
      fail "the openai client's images.edit of $call is not diffusers' image"
  done
fi

# SIGTERM: the frontend drains (HTTP API included) and exits 0.
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=""
[ "$status" = 0 ] || fail "the frontend exited with status $status after SIGTERM"
echo "ok   the frontend drained and exited 0"
echo "PASSED ($mode)"
