#!/usr/bin/env bash
# What hostile and careless peers cost a well-behaved client: for no attack and each attack of
# bench/hostile_peer.py, a fresh `quiver up` with default settings, the attack running, and
# `quiver bench produce -w 8 -s 1024` on a topic of its own beside it; prints the broker's peak
# resident memory (VmRSS sampled every 0.2 s), the good client's send rate and p99, and how
# many times the broker's log said a byte budget filled; and that every message the good client
# had acknowledged is stored (the queues' offsets count at least as many).
#
#   bench/hostile.sh [QUIVER_BINARY] [SECONDS]     # defaults: target/release/quiver, 20 s
#   ATTACKS="none endless-topics" bench/hostile.sh ...  # some of them only
#
# Loopback only (ports 19876 and 20911); not run in CI.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
QUIVER=${1:-$REPO/target/release/quiver}
SECONDS_RUN=${2:-20}
NAMESRV_PORT=19876
BROKER_PORT=20911
WORK="$(mktemp -d /tmp/quiver-hostile.XXXXXX)"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

run() { # ATTACK (none, slow-pulls, frame-prefixes)
    rm -rf "$WORK/data"
    "$QUIVER" up --data "$WORK/data" --namesrv-port "$NAMESRV_PORT" \
        --broker-port "$BROKER_PORT" > "$WORK/up.log" 2>&1 &
    local broker=$!
    PIDS+=("$broker")
    for _ in $(seq 100); do grep -q '^ready' "$WORK/up.log" && break; sleep 0.1; done
    grep -q '^ready' "$WORK/up.log" || { echo "hostile.sh: quiver up did not start" >&2; exit 1; }
    (peak=0; while kill -0 "$broker" 2>/dev/null; do
        rss=$(awk '/^VmRSS/ {print $2}' "/proc/$broker/status" 2>/dev/null || echo 0)
        [ "${rss:-0}" -gt "$peak" ] && peak=$rss && echo "$peak" > "$WORK/peak"
        sleep 0.2
    done) &
    local sampler=$!
    local attacker=""
    if [ "$1" != none ]; then
        python3 "$REPO/bench/hostile_peer.py" "$1" "127.0.0.1:$BROKER_PORT" \
            "$((SECONDS_RUN + 8))" > "$WORK/attack.log" 2>&1 &
        attacker=$!
        sleep 3
    fi
    rm -f "$WORK/run.json"
    "$QUIVER" bench produce -n "127.0.0.1:$NAMESRV_PORT" -t HostileGood --queues 8 --warmup 2 \
        --duration "$SECONDS_RUN" --report-interval 60 --json "$WORK/run.json" -w 8 -s 1024 \
        > /dev/null
    [ -n "$attacker" ] && { wait "$attacker" || echo "hostile.sh: attacker: $(tail -1 "$WORK/attack.log")" >&2; }
    # Every send the good client had acknowledged is stored.
    local stored; stored=$(python3 "$REPO/bench/hostile_peer.py" stored "127.0.0.1:$BROKER_PORT" HostileGood 8)
    kill "$broker"; wait "$broker" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    local rate p99 peak acked
    rate=$(jq -r '.summary.throughput.messages_per_s | floor' "$WORK/run.json")
    acked=$(jq -r '.summary.counters.messages' "$WORK/run.json")
    p99=$(jq -r '.summary.latency.p99_ms' "$WORK/run.json")
    peak=$(cat "$WORK/peak")
    local full; full=$(grep -c 'byte budget reached' "$WORK/up.log" || true)
    echo "| $1 | $((peak / 1024)) | $rate | $p99 | $acked | $stored | $full |"
}

echo "| attack | broker peak RSS MiB | good client msg/s | good client p99 ms | acknowledged | stored | budget-full warnings |"
echo "|---|---|---|---|---|---|---|"
for attack in ${ATTACKS:-none slow-pulls frame-prefixes endless-topics client-ids}; do
    run "$attack"
done
