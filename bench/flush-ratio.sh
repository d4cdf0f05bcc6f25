#!/usr/bin/env bash
# Measures SYNC_FLUSH against ASYNC_FLUSH Send TPS on this machine: PAIRS rounds, each starting a
# fresh `quiver up` (own data folder) with ASYNC_FLUSH and then with SYNC_FLUSH and driving it
# with `quiver bench produce -w 64 -s 1024 --queues 8`; then prints every run, the medians and
# their ratio. The two configurations alternate because throughput on a shared machine drifts by
# more than the difference being measured; compare medians, not single runs.
#
#   bench/flush-ratio.sh [PAIRS] [SECONDS] [BENCH FLAGS...]   # defaults: 5 pairs, 6 s measured
#   OFFICIAL=1 bench/flush-ratio.sh 5 30                      # RocketMQ's benchmark Producer
#                                                             # instead (bench/official.sh)
#
# Uses loopback ports 19876 and 20911 (quiver bench) and whatever bench/official.sh uses. Not run
# in CI: it takes minutes and measures the machine it runs on.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
PAIRS=${1:-5}
SECONDS_RUN=${2:-6}
shift $(( $# < 2 ? $# : 2 ))
FLAGS=("$@")
[ ${#FLAGS[@]} -eq 0 ] && FLAGS=(-w 64 -s 1024)
# QUIVER=path runs that binary instead of building this checkout's.
QUIVER="${QUIVER:-}"
NAMESRV_PORT=19876
BROKER_PORT=20911

WORK="$(mktemp -d /tmp/quiver-flush-ratio.XXXXXX)"
BROKER_PID=""
cleanup() {
    [ -n "$BROKER_PID" ] && kill "$BROKER_PID" 2>/dev/null && wait "$BROKER_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

if [ -z "$QUIVER" ]; then
    cargo build --release -p quiver --manifest-path "$REPO/Cargo.toml" >/dev/null 2>&1
    QUIVER="$REPO/target/release/quiver"
fi

# One run of quiver bench against a fresh broker; prints msg/s.
bench_run() { # FLUSH
    rm -rf "$WORK/data"
    printf 'flushDiskType=%s\n' "$1" > "$WORK/broker.conf"
    "$QUIVER" up -c "$WORK/broker.conf" --data "$WORK/data" --namesrv-port "$NAMESRV_PORT" \
        --broker-port "$BROKER_PORT" > "$WORK/up.log" 2>&1 &
    BROKER_PID=$!
    # "^ready": an error such as "Address already in use" contains "ready" too.
    for _ in $(seq 100); do grep -q '^ready' "$WORK/up.log" && break; sleep 0.1; done
    grep -q '^ready' "$WORK/up.log" || { echo "flush-ratio.sh: quiver up did not start" >&2; cat "$WORK/up.log" >&2; exit 1; }
    rm -f "$WORK/run.json"
    "$QUIVER" bench produce -n "127.0.0.1:$NAMESRV_PORT" -t FlushRatio --queues 8 --warmup 2 \
        --duration "$SECONDS_RUN" --report-interval 60 --json "$WORK/run.json" "${FLAGS[@]}" > /dev/null
    kill "$BROKER_PID"; wait "$BROKER_PID" 2>/dev/null || true
    BROKER_PID=""
    jq -r '.summary.throughput.messages_per_s | floor' "$WORK/run.json"
}

# One run of RocketMQ's benchmark Producer; prints the messages stored in the run.
official_run() { # FLUSH
    bash "$REPO/bench/official.sh" quiver "$1" "$SECONDS_RUN" "${FLAGS[@]}" |
        sed -n 's/^messages=\([0-9]*\).*/\1/p'
}

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

RUN=bench_run
UNIT="msg/s"
if [ -n "${OFFICIAL:-}" ]; then
    RUN=official_run
    UNIT="messages in ${SECONDS_RUN} s"
fi
: > "$WORK/async"; : > "$WORK/sync"
echo "| pair | ASYNC_FLUSH ($UNIT) | SYNC_FLUSH ($UNIT) | ratio |"
echo "|---|---|---|---|"
for pair in $(seq "$PAIRS"); do
    async=$($RUN ASYNC_FLUSH)
    sync=$($RUN SYNC_FLUSH)
    # A run that failed prints no figure (command substitution does not stop the script).
    if ! [[ "$async" =~ ^[0-9]+$ && "$sync" =~ ^[0-9]+$ ]]; then
        echo "flush-ratio.sh: pair $pair failed (async '$async', sync '$sync')" >&2
        exit 1
    fi
    echo "$async" >> "$WORK/async"; echo "$sync" >> "$WORK/sync"
    echo "| $pair | $async | $sync | $(awk -v s="$sync" -v a="$async" 'BEGIN {printf "%.2f", s / a}') |"
done
async=$(median < "$WORK/async"); sync=$(median < "$WORK/sync")
echo "| median | $async | $sync | $(awk -v s="$sync" -v a="$async" 'BEGIN {printf "%.2f", s / a}') |"
