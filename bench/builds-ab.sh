#!/usr/bin/env bash
# Compares two builds of quiver on the send path: for ASYNC_FLUSH and SYNC_FLUSH, PAIRS rounds
# that alternate the builds, each run against a fresh `quiver up`, with `quiver bench produce
# -w 64 -s 1024` (msg/s) and with RocketMQ's benchmark Producer `-w 64 -s 1024` (messages stored
# in SECONDS); beside each figure, the broker's CPU-seconds per 100,000 messages (user + system,
# from /proc/PID/stat over the measured part). Then prints every run and the medians. Builds
# alternate because throughput on a shared machine drifts by more than the difference being
# measured.
#
#   bench/builds-ab.sh BEFORE_BINARY AFTER_BINARY [PAIRS] [SECONDS]   # defaults: 5 pairs, 10 s
#   TOOLS=official bench/builds-ab.sh ...                             # one tool only (bench, official)
#
# The bench tool of each build drives its own broker. Uses loopback ports 19876 and 20911 (quiver
# bench) and whatever bench/official.sh uses. Not run in CI: it takes many minutes.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
BEFORE=${1:?usage: builds-ab.sh BEFORE_BINARY AFTER_BINARY [PAIRS] [SECONDS]}
AFTER=${2:?usage: builds-ab.sh BEFORE_BINARY AFTER_BINARY [PAIRS] [SECONDS]}
PAIRS=${3:-5}
SECONDS_RUN=${4:-10}
WARMUP_S=2
NAMESRV_PORT=19876
BROKER_PORT=20911
WORK="$(mktemp -d /tmp/quiver-builds-ab.XXXXXX)"
BROKER_PID=""
cleanup() {
    [ -n "$BROKER_PID" ] && kill "$BROKER_PID" 2>/dev/null && wait "$BROKER_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ticks() { awk '{print $14 + $15}' "/proc/$BROKER_PID/stat"; }

# quiver bench against a fresh broker of BINARY: "MSG_PER_S CPU_S_PER_100K". The CPU is counted
# from the end of the warm-up to the end of the run, over the messages sent in it.
bench_run() { # FLUSH BINARY
    rm -rf "$WORK/data"
    printf 'flushDiskType=%s\n' "$1" > "$WORK/broker.conf"
    "$2" up -c "$WORK/broker.conf" --data "$WORK/data" --namesrv-port "$NAMESRV_PORT" \
        --broker-port "$BROKER_PORT" > "$WORK/up.log" 2>&1 &
    BROKER_PID=$!
    # "^ready": an error such as "Address already in use" contains "ready" too.
    for _ in $(seq 100); do grep -q '^ready' "$WORK/up.log" && break; sleep 0.1; done
    grep -q '^ready' "$WORK/up.log" || { echo "builds-ab.sh: quiver up did not start" >&2; cat "$WORK/up.log" >&2; exit 1; }
    rm -f "$WORK/run.json"
    "$2" bench produce -n "127.0.0.1:$NAMESRV_PORT" -t BuildsAb --queues 8 --warmup "$WARMUP_S" \
        --duration "$SECONDS_RUN" --report-interval 60 --json "$WORK/run.json" -w 64 -s 1024 \
        > /dev/null &
    local bench=$!
    sleep "$WARMUP_S"
    local t0; t0=$(ticks)
    wait "$bench"
    local t1; t1=$(ticks)
    kill "$BROKER_PID"; wait "$BROKER_PID" 2>/dev/null || true
    BROKER_PID=""
    local rate; rate=$(jq -r '.summary.throughput.messages_per_s | floor' "$WORK/run.json")
    awk -v r="$rate" -v d="$SECONDS_RUN" -v t="$((t1 - t0))" -v hz="$(getconf CLK_TCK)" \
        'BEGIN {printf "%d %.3f\n", r, (t / hz) / (r * d + 1) * 100000}'
}

# RocketMQ's benchmark Producer: "MESSAGES_STORED CPU_S_PER_100K".
official_run() { # FLUSH BINARY
    QUIVER="$2" bash "$REPO/bench/official.sh" quiver "$1" "$SECONDS_RUN" -w 64 -s 1024 |
        sed -n 's/^messages=\([0-9]*\).* cpu_s_per_100k=\([0-9.]*\).*/\1 \2/p'
}

check() { # FIGURE...
    for figure in "$@"; do
        [[ "$figure" =~ ^[0-9.]+$ ]] || { echo "builds-ab.sh: a run failed ('$*')" >&2; exit 1; }
    done
}

summary() { # TOOL FLUSH FILE (lines: before after before_cpu after_cpu)
    local b a bc ac
    b=$(awk '{print $1}' "$3" | median); a=$(awk '{print $2}' "$3" | median)
    bc=$(awk '{print $3}' "$3" | median); ac=$(awk '{print $4}' "$3" | median)
    echo "| $1 | $2 | median | $b | $a (x$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", a / b}')) | $bc | $ac |"
}

TOOLS=${TOOLS:-bench official}
echo "| tool | flush | pair | before | after | before CPU s/100k | after CPU s/100k |"
echo "|---|---|---|---|---|---|---|"
for tool in bench official; do
    [[ " $TOOLS " == *" $tool "* ]] || continue
    name=$([ "$tool" = bench ] && echo "quiver bench" || echo "Java Producer")
    for flush in ASYNC_FLUSH SYNC_FLUSH; do
        : > "$WORK/$tool-$flush"
        for pair in $(seq "$PAIRS"); do
            read -r before before_cpu <<< "$("${tool}_run" "$flush" "$BEFORE")"
            read -r after after_cpu <<< "$("${tool}_run" "$flush" "$AFTER")"
            check "$before" "$after" "$before_cpu" "$after_cpu"
            echo "$before $after $before_cpu $after_cpu" >> "$WORK/$tool-$flush"
            echo "| $name | $flush | $pair | $before | $after | $before_cpu | $after_cpu |"
        done
        summary "$name" "$flush" "$WORK/$tool-$flush"
    done
done
