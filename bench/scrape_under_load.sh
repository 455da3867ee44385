#!/usr/bin/env bash
# Cost of one Prometheus scrape of the frontend's /metrics, idle and under load (a client keeping
# the worker group busy with back-to-back generate calls), through the real binaries on the
# embedded tiny model with 2 CPU workers. Prints the median and p95 of N scrapes for each case.
# Usage: bench/scrape_under_load.sh [N=200] [MODEL_DIR=tests/fixtures/flux1-tiny]
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-200}"
model="${2:-$(pwd)/tests/fixtures/flux1-tiny}"
log=$(mktemp)
build/server/ditserve-frontend --model "$model" --spawn-workers 2 --listen 127.0.0.1:0 \
  --metrics-listen 127.0.0.1:0 > "$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 300); do grep -q "^METRICS" "$log" && grep -q "^LISTENING" "$log" && break; sleep 0.1; done
port=$(awk '/^LISTENING/ {print $2}' "$log")
mport=$(awk '/^METRICS/ {print $2}' "$log")
for _ in $(seq 600); do
  build/cli/ditserve-cli health --server "127.0.0.1:$port" > /dev/null 2>&1 && break
  sleep 0.2
done

scrapes() {  # prints median and p95 in ms of $n scrapes
  for _ in $(seq "$n"); do
    curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$mport/metrics"
  done | sort -n | awk '{ t[NR] = $1 * 1000 } END {
      printf "median %.2f ms, p95 %.2f ms over %d scrapes\n", t[int(NR / 2) + 1], t[int(NR * 0.95)], NR }'
}
series=$(curl -s "http://127.0.0.1:$mport/metrics" | grep -vc '^#')
echo "idle ($series series):       $(scrapes)"
( while true; do
    build/cli/ditserve-cli generate --server "127.0.0.1:$port" --prompt load --height 128 --width 128 \
      --steps 8 --quiet -o /dev/null > /dev/null 2>&1 || true
  done ) &
loader=$!
sleep 2
echo "under load (jobs running): $(scrapes)"
kill $loader 2>/dev/null; wait $loader 2>/dev/null || true
