#!/usr/bin/env bash
# Runs Apache RocketMQ's official benchmark Producer (rocketmq-example 5.5.0) against one target
# and reports what it printed plus the broker's cost: CPU-seconds per 100,000 messages (from
# /proc/PID/stat) and peak resident memory (VmRSS sampled every 0.2 s).
#
#   bench/official.sh quiver    [ASYNC_FLUSH|SYNC_FLUSH] [SECONDS] [PRODUCER FLAGS...]
#   bench/official.sh reference [ASYNC_FLUSH|SYNC_FLUSH] [SECONDS] [PRODUCER FLAGS...]
#
# Defaults: ASYNC_FLUSH, 20 s, `-w 64 -s 1024`. Messages are counted from the broker's queue
# offsets (mqadmin topicStatus) before and after. Uses ports 9876 and 10911: as root it runs
# inside a private network namespace holding only `lo`, so nothing else on the machine is in the
# way and the reference broker's wildcard HA port stays private. Not run in CI.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
TARGET=${1:?usage: official.sh quiver|reference [FLUSH] [SECONDS] [FLAGS...]}
FLUSH=${2:-ASYNC_FLUSH}
SECONDS_RUN=${3:-20}
shift $(( $# < 3 ? $# : 3 ))
FLAGS=("$@")
[ ${#FLAGS[@]} -eq 0 ] && FLAGS=(-w 64 -s 1024)

if [ "$(id -u)" = 0 ] && [ -z "${OFFICIAL_IN_NAMESPACE:-}" ] && command -v unshare >/dev/null; then
    exec unshare -n -- env OFFICIAL_IN_NAMESPACE=1 bash -c 'ip link set lo up && exec "$0" "$@"' \
        "$0" "$TARGET" "$FLUSH" "$SECONDS_RUN" "${FLAGS[@]}"
fi

WORK="$(mktemp -d /tmp/quiver-official.XXXXXX)"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

mvn -q -o -f "$REPO/bench/rocketmq/pom.xml" -Dmaven.repo.local="$REPO/.cache/m2" \
    dependency:build-classpath -Dmdep.outputFile="$WORK/classpath.txt" >/dev/null 2>&1 ||
    mvn -q -f "$REPO/bench/rocketmq/pom.xml" -Dmaven.repo.local="$REPO/.cache/m2" \
        dependency:build-classpath -Dmdep.outputFile="$WORK/classpath.txt" >/dev/null
# Not BenchmarkTest, the Producer's default: that is a system topic, which RocketMQ 5.5.0 refuses
# to reshape (it keeps its 1024 queues) and Quiver pre-creates with 8; both accept this one.
TOPIC=OfficialBench
JAVA=(java -Duser.home="$WORK" -Drocketmq.home.dir="$WORK" -cp "$(cat "$WORK/classpath.txt")")

wait_for() { # FILE PATTERN SECONDS
    for _ in $(seq $(($3 * 10))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    echo "official.sh: no \"$2\" in $1" >&2; tail -20 "$1" >&2; exit 1
}

if [ "$TARGET" = quiver ]; then
    # QUIVER=path runs that binary instead of building this checkout's.
    if [ -z "${QUIVER:-}" ]; then
        cargo build --release -p quiver --manifest-path "$REPO/Cargo.toml" >/dev/null 2>&1
        QUIVER="$REPO/target/release/quiver"
    fi
    printf 'flushDiskType=%s\n' "$FLUSH" > "$WORK/broker.conf"
    "$QUIVER" up -c "$WORK/broker.conf" --data "$WORK/data" > "$WORK/out" 2> "$WORK/broker.log" &
    BROKER_PID=$!; PIDS+=("$BROKER_PID")
    wait_for "$WORK/out" ready 30
else
    printf 'listenPort=9876\nbindAddress=127.0.0.1\n' > "$WORK/ns.conf"
    printf '%s\n' brokerClusterName=DefaultCluster brokerName=broker-a brokerId=0 brokerIP1=127.0.0.1 \
        bindAddress=127.0.0.1 listenPort=10911 namesrvAddr=127.0.0.1:9876 autoCreateTopicEnable=true \
        "flushDiskType=$FLUSH" "storePathRootDir=$WORK/store" > "$WORK/broker.conf"
    "${JAVA[@]}" -Xms256m -Xmx256m -XX:+UseG1GC org.apache.rocketmq.namesrv.NamesrvStartup -c "$WORK/ns.conf" > "$WORK/ns.log" 2>&1 &
    PIDS+=($!)
    wait_for "$WORK/ns.log" "boot success" 60
    "${JAVA[@]}" -Xms1g -Xmx1g -XX:MaxDirectMemorySize=1g -XX:+UseG1GC org.apache.rocketmq.broker.BrokerStartup -c "$WORK/broker.conf" > "$WORK/broker.log" 2>&1 &
    BROKER_PID=$!; PIDS+=("$BROKER_PID")
    wait_for "$WORK/broker.log" "boot success" 120
fi
# The cluster is unknown to the name server until the broker's first registration, which a
# RocketMQ broker sends a few seconds after it printed "boot success": try for 30 s.
for _ in $(seq 30); do
    "${JAVA[@]}" org.apache.rocketmq.tools.command.MQAdminStartup updateTopic -n 127.0.0.1:9876 \
        -c DefaultCluster -t "$TOPIC" -r 8 -w 8 > "$WORK/update.out" 2>&1 || true
    grep -q "success" "$WORK/update.out" && break
    sleep 1
done
grep -q "success" "$WORK/update.out" || { echo "official.sh: could not create $TOPIC with 8 queues" >&2; tail -5 "$WORK/update.out" >&2; exit 1; }
sleep 2

ticks() { awk '{print $14+$15}' "/proc/$BROKER_PID/stat"; }
stored() {
    "${JAVA[@]}" org.apache.rocketmq.tools.command.MQAdminStartup topicStatus -n 127.0.0.1:9876 -t "$TOPIC" 2>/dev/null |
        awk '/^broker-a/ {s += $4} END {print s + 0}'
}
( peak=0; while kill -0 "$BROKER_PID" 2>/dev/null; do
      r=$(awk '/VmRSS/ {print $2}' "/proc/$BROKER_PID/status" 2>/dev/null || echo 0)
      [ "${r:-0}" -gt "$peak" ] && peak=$r && echo "$peak" > "$WORK/peak"
      sleep 0.2
  done ) &
PIDS+=($!)
M0=$(stored); T0=$(ticks)
timeout "$SECONDS_RUN" "${JAVA[@]}" org.apache.rocketmq.example.benchmark.Producer -n 127.0.0.1:9876 \
    -t "$TOPIC" -ri 5000 "${FLAGS[@]}" > "$WORK/producer.out" 2>&1 || true
T1=$(ticks); M1=$(stored)
echo "target=$TARGET flush=$FLUSH seconds=$SECONDS_RUN flags=${FLAGS[*]}"
grep "Send TPS" "$WORK/producer.out" || tail -5 "$WORK/producer.out"
MESSAGES=$((M1 - M0))
CPU_S=$(echo "scale=3; ($T1 - $T0) / 100" | bc)
echo "messages=$MESSAGES broker_cpu_s=$CPU_S cpu_s_per_100k=$(echo "scale=3; $CPU_S * 100000 / ($MESSAGES + 1)" | bc) broker_peak_rss_kib=$(cat "$WORK/peak")"
