#!/usr/bin/env bash
# Seed 000's whole study, unattended, against Quiver and against Apache RocketMQ 5.5.0 on this
# machine: `quiver bench sweep` runs the matrix of bench/seed000.plan against `quiver up`, then
# against the reference (name server and broker from Maven Central, as bench/official.sh starts
# them), each with its peak and daily plan; `quiver bench compare` puts them side by side.
#
#   bench/seed000.sh [OUT]          the full matrix: 36 points of 20 s per system, about 30 min
#   TINY=1 bench/seed000.sh OUT     two 3 s points per system, to check the script itself
#
# OUT (default bench/results/<today>-seed000) gets, per system, the sweep's JSON, HTML and
# printed table, then compare.{txt,json,html}. Both systems get ASYNC_FLUSH (FLUSH=SYNC_FLUSH
# to change), 127.0.0.1:9876 and :10911: as root everything runs inside a private network
# namespace holding only `lo`. QUIVER=path uses that binary instead of a release build; M2=dir
# the Maven repository (default .cache/m2). A sweep that is interrupted resumes when the same
# command runs again with the same OUT. Run it alone on the machine: it measures the machine.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$(mkdir -p "${1:-$REPO/bench/results/$(date +%F)-seed000}" && cd "${1:-$REPO/bench/results/$(date +%F)-seed000}" && pwd)"
FLUSH=${FLUSH:-ASYNC_FLUSH}
M2=${M2:-$REPO/.cache/m2}
PLAN_ARGS=(--plan "$REPO/bench/seed000.plan")
# The reference broker's JIT needs about 20 s of load before its figures settle.
PREWARM_S=${PREWARM_S:-20}
if [ -n "${TINY:-}" ]; then
    PLAN_ARGS+=(-w 1,10 -s 1024 --queues 8 --warmup 1 --duration 2)
    PREWARM_S=3
fi

if [ "$(id -u)" = 0 ] && [ -z "${SEED000_IN_NAMESPACE:-}" ] && command -v unshare >/dev/null; then
    exec unshare -n -- env SEED000_IN_NAMESPACE=1 bash -c 'ip link set lo up && exec "$0" "$@"' \
        "$0" "$OUT"
fi

log() { echo "seed000: $(date +%T) $*" >&2; }
WORK="$(mktemp -d /tmp/quiver-seed000.XXXXXX)"
PIDS=()
stop_all() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    PIDS=()
}
trap 'stop_all; rm -rf "$WORK"' EXIT

wait_for() { # FILE PATTERN SECONDS
    for _ in $(seq $(($3 * 10))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    log "no \"$2\" in $1"; tail -20 "$1" >&2; exit 1
}

if [ -z "${QUIVER:-}" ]; then
    log "building quiver (release)"
    cargo build --release -p quiver --manifest-path "$REPO/Cargo.toml" >/dev/null 2>&1
    QUIVER="${CARGO_TARGET_DIR:-$REPO/target}/release/quiver"
fi

# Waits until the cluster at 127.0.0.1:9876 takes a send: the first registration of a
# RocketMQ broker comes a few seconds after its "boot success".
wait_for_cluster() {
    for _ in $(seq 60); do
        "$QUIVER" bench produce -n 127.0.0.1:9876 -t SeedWarm --queues 8 -w 1 --messages 1 \
            >"$WORK/probe.out" 2>&1 && return 0
        sleep 1
    done
    log "the cluster never took a send"; cat "$WORK/probe.out" >&2; exit 1
}

sweep() { # LABEL BROKER_PID
    log "$1: pre-warm ${PREWARM_S}s"
    "$QUIVER" bench produce -n 127.0.0.1:9876 -t SeedWarm -w 16 -s 1024 --duration "$PREWARM_S" \
        --report-interval "$PREWARM_S" >"$WORK/prewarm-$1.out" 2>&1
    log "$1: sweep (progress in $OUT/$1-sweep.txt)"
    "$QUIVER" bench sweep -n 127.0.0.1:9876 "${PLAN_ARGS[@]}" --label "$1" --broker-pid "$2" \
        --json "$OUT/$1-sweep.json" --html "$OUT/$1-sweep.html" | tee "$OUT/$1-sweep.txt"
}

log "Quiver ($FLUSH)"
printf 'flushDiskType=%s\n' "$FLUSH" >"$WORK/quiver.conf"
"$QUIVER" up -c "$WORK/quiver.conf" --data "$WORK/quiver-data" --namesrv-port 9876 \
    --broker-port 10911 >"$WORK/quiver.out" 2>"$WORK/quiver.log" &
BROKER_PID=$!; PIDS+=("$BROKER_PID")
wait_for "$WORK/quiver.out" ready 60
wait_for_cluster
sweep quiver "$BROKER_PID"
stop_all
rm -rf "$WORK/quiver-data"

log "Apache RocketMQ 5.5.0 ($FLUSH)"
mvn -q -o -f "$REPO/bench/rocketmq/pom.xml" -Dmaven.repo.local="$M2" \
    dependency:build-classpath -Dmdep.outputFile="$WORK/classpath.txt" >/dev/null 2>&1 ||
    mvn -q -f "$REPO/bench/rocketmq/pom.xml" -Dmaven.repo.local="$M2" \
        dependency:build-classpath -Dmdep.outputFile="$WORK/classpath.txt" >/dev/null
JAVA=(java -Duser.home="$WORK" -Drocketmq.home.dir="$WORK" -cp "$(cat "$WORK/classpath.txt")")
printf 'listenPort=9876\nbindAddress=127.0.0.1\n' >"$WORK/ns.conf"
printf '%s\n' brokerClusterName=DefaultCluster brokerName=broker-a brokerId=0 brokerIP1=127.0.0.1 \
    bindAddress=127.0.0.1 listenPort=10911 namesrvAddr=127.0.0.1:9876 autoCreateTopicEnable=true \
    "flushDiskType=$FLUSH" "storePathRootDir=$WORK/store" >"$WORK/broker.conf"
"${JAVA[@]}" -Xms256m -Xmx256m -XX:+UseG1GC org.apache.rocketmq.namesrv.NamesrvStartup \
    -c "$WORK/ns.conf" >"$WORK/ns.log" 2>&1 &
PIDS+=($!)
wait_for "$WORK/ns.log" "boot success" 60
"${JAVA[@]}" -Xms1g -Xmx1g -XX:MaxDirectMemorySize=1g -XX:+UseG1GC \
    org.apache.rocketmq.broker.BrokerStartup -c "$WORK/broker.conf" >"$WORK/broker.log" 2>&1 &
BROKER_PID=$!; PIDS+=("$BROKER_PID")
wait_for "$WORK/broker.log" "boot success" 120
wait_for_cluster
sweep rocketmq-5.5.0 "$BROKER_PID"
stop_all

log "comparing"
"$QUIVER" bench compare "$OUT/quiver-sweep.json" "$OUT/rocketmq-5.5.0-sweep.json" \
    --json "$OUT/compare.json" --html "$OUT/compare.html" | tee "$OUT/compare.txt"
# The note for bench/results: the tables and verdicts the runs printed, and where the reports are.
{
    echo "# Seed 000's matrix: Quiver against Apache RocketMQ 5.5.0"
    echo
    echo "\`bench/seed000.sh\` on $(date +%F), $FLUSH${TINY:+, TINY (two short points per system)};" \
        "plan \`bench/seed000.plan\`; machine: $(nproc) CPUs ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo))," \
        "$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo). Clients, brokers and name" \
        "servers share the machine. Reports (self-contained, open offline): \`quiver-sweep.html\`," \
        "\`rocketmq-5.5.0-sweep.html\`, \`compare.html\`; every point's figures in the JSON files."
    for label in quiver rocketmq-5.5.0; do
        echo
        echo "## $label"
        echo
        grep -E '^\||^(Peak|Knee|Plan|Read from|Points limited)|: limited by the disk' "$OUT/$label-sweep.txt" |
            sed -E 's/^(Peak|Knee|Plan|Read from)/\n\1/'
    done
    echo
    echo "## Scenario by scenario"
    echo
    grep '^|' "$OUT/compare.txt"
} > "$OUT/README.md"
log "done: $OUT"
