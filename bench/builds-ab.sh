#!/usr/bin/env bash
# Compares two builds of quiver on the send path: for ASYNC_FLUSH and SYNC_FLUSH, PAIRS rounds
# that alternate the builds, each run against a fresh `quiver up`, with `quiver bench produce
# -w 64 -s 1024` (msg/s) and with RocketMQ's benchmark Producer `-w 64 -s 1024` (messages stored
# in SECONDS); then prints every run and the medians. Builds alternate because throughput on a
# shared machine drifts by more than the difference being measured.
#
#   bench/builds-ab.sh BEFORE_BINARY AFTER_BINARY [PAIRS] [SECONDS]   # defaults: 5 pairs, 10 s
#   TOOLS=official bench/builds-ab.sh ...                             # one tool only (bench, official)
#
# The bench tool of each build drives its own broker. Not run in CI: it takes many minutes.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
BEFORE=${1:?usage: builds-ab.sh BEFORE_BINARY AFTER_BINARY [PAIRS] [SECONDS]}
AFTER=${2:?usage: builds-ab.sh BEFORE_BINARY AFTER_BINARY [PAIRS] [SECONDS]}
PAIRS=${3:-5}
SECONDS_RUN=${4:-10}
WORK="$(mktemp -d /tmp/quiver-builds-ab.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# quiver bench against a fresh broker in each mode (flush-ratio.sh, one pair): "ASYNC SYNC" msg/s.
bench_pair() { # BINARY
    QUIVER="$1" bash "$REPO/bench/flush-ratio.sh" 1 "$SECONDS_RUN" -w 64 -s 1024 |
        awk -F'|' '$2 ~ /^ 1 $/ {gsub(/ /, ""); print $3, $4}'
}

# RocketMQ's benchmark Producer: messages stored in the run.
official_run() { # FLUSH BINARY
    QUIVER="$2" bash "$REPO/bench/official.sh" quiver "$1" "$SECONDS_RUN" -w 64 -s 1024 |
        sed -n 's/^messages=\([0-9]*\).*/\1/p'
}

check() { # FIGURE...
    for figure in "$@"; do
        [[ "$figure" =~ ^[0-9]+$ ]] || { echo "builds-ab.sh: a run failed ('$*')" >&2; exit 1; }
    done
}

TOOLS=${TOOLS:-bench official}
echo "| tool | flush | pair | before | after |"
echo "|---|---|---|---|---|"
: > "$WORK/bench"
for pair in $(seq "$PAIRS"); do
    [[ " $TOOLS " == *" bench "* ]] || break
    read -r before_async before_sync <<< "$(bench_pair "$BEFORE")"
    read -r after_async after_sync <<< "$(bench_pair "$AFTER")"
    check "$before_async" "$before_sync" "$after_async" "$after_sync"
    echo "$before_async $after_async $before_sync $after_sync" >> "$WORK/bench"
    echo "| quiver bench | ASYNC_FLUSH | $pair | $before_async | $after_async |"
    echo "| quiver bench | SYNC_FLUSH | $pair | $before_sync | $after_sync |"
done
summary() { # TOOL FLUSH BEFORE_FILE AFTER_FILE
    local b a
    b=$(median < "$3"); a=$(median < "$4")
    echo "| $1 | $2 | median | $b | $a (x$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", a / b}')) |"
}
if [ -s "$WORK/bench" ]; then
    awk '{print $1}' "$WORK/bench" > "$WORK/b"; awk '{print $2}' "$WORK/bench" > "$WORK/a"
    summary "quiver bench" ASYNC_FLUSH "$WORK/b" "$WORK/a"
    awk '{print $3}' "$WORK/bench" > "$WORK/b"; awk '{print $4}' "$WORK/bench" > "$WORK/a"
    summary "quiver bench" SYNC_FLUSH "$WORK/b" "$WORK/a"
fi
[[ " $TOOLS " == *" official "* ]] || exit 0
for flush in ASYNC_FLUSH SYNC_FLUSH; do
    : > "$WORK/b"; : > "$WORK/a"
    for pair in $(seq "$PAIRS"); do
        before=$(official_run "$flush" "$BEFORE")
        after=$(official_run "$flush" "$AFTER")
        check "$before" "$after"
        echo "$before" >> "$WORK/b"; echo "$after" >> "$WORK/a"
        echo "| Java Producer | $flush | $pair | $before | $after |"
    done
    summary "Java Producer" "$flush" "$WORK/b" "$WORK/a"
done
