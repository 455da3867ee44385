# Sourced by the HTTP e2e scripts (http_api_e2e.sh, playground/playground_e2e.sh): a real
# ditserve-frontend with --http-listen on a free port and a bearer token, cleaned up at exit.
#
#   http_frontend_start BUILD_DIR NAME [FRONTEND ARGS...]
#       makes $tmp (removed at exit, the frontend killed with it), writes a random token to
#       $tmp/token ($token), starts BUILD_DIR/server/ditserve-frontend with --listen
#       127.0.0.1:0 --metrics-listen "" --http-listen 127.0.0.1:0 --api-token-file $tmp/token
#       --log-level info and the ARGS (stdout $tmp/stdout, log $tmp/log; $pid), and waits for its
#       "HTTP <port>" line: $port, $base = http://127.0.0.1:$port.
#   fail MESSAGE...     prints it and the log's last 40 lines, exits 1.
#   expect WHAT WANT GOT  "ok   WHAT" when WANT = GOT, else fail.
#   http_frontend_wait_serving  waits (180 s) until GET /health is 200.

fail() {
  echo "FAIL: $*"
  echo "--- frontend log (last 40 lines) ---"; tail -n 40 "$tmp/log" || true
  exit 1
}

expect() {  # expect WHAT WANT GOT
  if [ "$2" = "$3" ]; then echo "ok   $1"; else fail "$1: want '$2', got '$3'"; fi
}

http_frontend_cleanup() {
  if [ -n "${pid:-}" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}

http_frontend_start() {
  local build=$1 name=$2; shift 2
  tmp=$(mktemp -d "/tmp/ditserve-$name.XXXXXX")
  pid=""
  trap http_frontend_cleanup EXIT
  token="e2e-$RANDOM$RANDOM"
  echo "$token" >"$tmp/token"
  # Made here, not by the background job's redirections: those open in the child after the fork,
  # and a first read below that came sooner failed (sed: no such file) and, under set -e, ended
  # the test at once (0.02 s, about one run in six).
  : >"$tmp/stdout"
  : >"$tmp/log"
  "$build/server/ditserve-frontend" --listen 127.0.0.1:0 --metrics-listen "" \
    --http-listen 127.0.0.1:0 --api-token-file "$tmp/token" --log-level info "$@" \
    >"$tmp/stdout" 2>"$tmp/log" &
  pid=$!
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
}

http_frontend_wait_serving() {
  for _ in $(seq 1800); do  # 180 s
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$base/health" || true)" = 200 ] && return 0
    kill -0 "$pid" 2>/dev/null || fail "the frontend exited while loading"
    sleep 0.1
  done
  fail "never SERVING within 180 s"
}
