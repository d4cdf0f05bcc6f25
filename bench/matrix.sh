#!/usr/bin/env bash
# Runs the recorded `quiver bench produce` matrix against a running name server and prints one
# summary line per scenario (JSON files land in OUT). With BROKER_PID set, also the broker's CPU
# seconds per scenario, from /proc/PID/stat.
#
#   BROKER_PID=12345 bench/matrix.sh 127.0.0.1:9876 /tmp/matrix   # one pid: the broker process
set -euo pipefail

NAMESRV=${1:-127.0.0.1:9876}
OUT=${2:-/tmp/quiver-matrix}
QUIVER=${QUIVER:-$(cd "$(dirname "$0")/.." && pwd)/target/release/quiver}
WARMUP_S=${WARMUP_S:-3}
DURATION_S=${DURATION_S:-12}
mkdir -p "$OUT"

cpu_ticks() { [ -n "${BROKER_PID:-}" ] && awk '{print $14 + $15}' "/proc/$BROKER_PID/stat" || echo 0; }

run() {
  local name=$1; shift
  local before after
  before=$(cpu_ticks)
  "$QUIVER" bench produce -n "$NAMESRV" --warmup "$WARMUP_S" --duration "$DURATION_S" \
    --report-interval 3 --json "$OUT/$name.json" "$@" >"$OUT/$name.txt"
  after=$(cpu_ticks)
  jq -r --arg name "$name" --arg args "$*" --argjson broker_s "$(( after - before ))" '
    .summary as $s |
    "| \($name) | `\($args)` | \($s.throughput.messages_per_s|floor) | \($s.throughput.mb_per_s*100|floor/100) | \($s.latency.mean_ms*1000|floor/1000) | \($s.latency.p50_ms) | \($s.latency.p99_ms) | \($s.latency.p999_ms) | \($s.latency.max_ms) | \($s.counters.send_failed + $s.counters.response_failed) | \($s.process_cores*100|floor/100) | \($broker_s/100) |"' \
    "$OUT/$name.json"
}

echo "| run | flags | msg/s | MB/s | mean ms | p50 ms | p99 ms | p99.9 ms | max ms | failed | bench cores | broker CPU s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for queues in 8 16; do
  for size in 1024 3072; do
    for senders in 1 16 64; do
      run "w${senders}-s${size}-q${queues}" -t "Matrix$queues" --queues "$queues" -w "$senders" -s "$size"
    done
  done
done
run batch32-s128 -t Matrix8 -w 64 -s 128 --batch 32
run batch32-s1024 -t Matrix8 -w 64 -s 1024 --batch 32
run async-w16 -t Matrix8 -w 16 -s 1024 --async
run rate50k-w64 -t Matrix8 -w 64 -s 1024 --rate 50000
