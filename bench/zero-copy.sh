#!/usr/bin/env bash
# Pull consumption of large messages sent from the page cache (`sendfile`, the default) against
# copied through a buffer (`transferMsgByHeap=true`), the same binary on the same data: a topic
# of 8 queues is filled once with MESSAGES messages of SIZE bytes, then PAIRS times each mode
# restarts the broker on that data and a fresh group reads the whole topic with
# `quiver bench consume --from first`. Prints messages per second and the broker's CPU seconds
# per GiB delivered, per run, and the median of each mode.
#
#   bench/zero-copy.sh [QUIVER_BINARY]               # 20,000 messages of 64 KiB, 3 pairs
#   MESSAGES=5000 SIZE=262144 PAIRS=5 bench/zero-copy.sh
#
# Loopback only, on ports 19876 and 20911. Not run in CI.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
QUIVER=${1:-$REPO/target/release/quiver}
MESSAGES=${MESSAGES:-20000}
SIZE=${SIZE:-65536}
PAIRS=${PAIRS:-3}
TOPIC=ZeroCopy
NAMESRV=127.0.0.1:19876

for tool in jq awk; do
  command -v "$tool" >/dev/null || { echo "zero-copy.sh: $tool is required" >&2; exit 2; }
done
[ -x "$QUIVER" ] || { echo "zero-copy.sh: no quiver binary at $QUIVER" >&2; exit 2; }

WORK="$(mktemp -d /tmp/quiver-zero-copy.XXXXXX)"
broker=
cleanup() {
  [ -n "$broker" ] && kill -9 "$broker" 2>/dev/null || true
  wait 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# start BY_HEAP: the broker on the shared data, with transferMsgByHeap=BY_HEAP.
start() {
  printf 'transferMsgByHeap=%s\n' "$1" >"$WORK/broker.conf"
  "$QUIVER" up -c "$WORK/broker.conf" --data "$WORK/data" --namesrv-port 19876 \
    --broker-port 20911 >"$WORK/quiver.out" 2>>"$WORK/quiver.log" &
  broker=$!
  for _ in $(seq 300); do
    grep -q '^ready' "$WORK/quiver.out" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "zero-copy.sh: the broker did not start" >&2
  tail -20 "$WORK/quiver.log" >&2
  exit 1
}

stop() {
  kill "$broker"
  wait "$broker" 2>/dev/null || true
  broker=
}

start false
echo "== filling $TOPIC with $MESSAGES messages of $SIZE bytes"
"$QUIVER" bench produce -n "$NAMESRV" -t "$TOPIC" --queues 8 -s "$SIZE" -w 16 \
  --messages "$MESSAGES" --report-interval 10 >"$WORK/fill.txt" 2>&1
stop

ROWS="$WORK/rows.txt"
: >"$ROWS"
for pair in $(seq "$PAIRS"); do
  for by_heap in false true; do
    start "$by_heap"
    group="zero_copy_${pair}_${by_heap}"
    before=$(cpu_ticks "$broker")
    "$QUIVER" bench consume -n "$NAMESRV" -t "$TOPIC" -g "$group" --from first \
      --messages "$MESSAGES" --report-interval 10 --json "$WORK/$group.json" >"$WORK/$group.txt" 2>&1
    after=$(cpu_ticks "$broker")
    stop
    rate=$(jq '.summary.throughput.messages_per_s' "$WORK/$group.json")
    cpu=$(awk -v t=$((after - before)) -v n="$MESSAGES" -v s="$SIZE" -v hz="$(getconf CLK_TCK)" \
      'BEGIN { printf "%.3f", t / hz / (n * s / 1073741824) }')
    echo "$by_heap ${rate%.*} $cpu" >>"$ROWS"
    echo "| $pair | transferMsgByHeap=$by_heap | ${rate%.*} msg/s | $cpu CPU s/GiB |"
  done
done

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo
echo "| transferMsgByHeap | median msg/s | median broker CPU s per GiB |"
echo "|---|---|---|"
for by_heap in false true; do
  rate=$(awk -v m="$by_heap" '$1 == m { print $2 }' "$ROWS" | median)
  cpu=$(awk -v m="$by_heap" '$1 == m { print $3 }' "$ROWS" | median)
  echo "| $by_heap | $rate | $cpu |"
done
