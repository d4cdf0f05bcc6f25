#!/usr/bin/env bash
# Transactional sends, Quiver against Apache RocketMQ 5.5.0 in the same run on this machine,
# with RocketMQ's official benchmark `benchmark.TransactionProducer` (rocketmq-example 5.5.0):
# THREADS threads each send a half message (sendMessageInTransaction), run the local
# transaction (commit, with the tool's default rates) and end it with a oneway END_TRANSACTION.
#
#   bench/transaction.sh                     # 30 s per system, -w 32 -s 1024
#   SECONDS_RUN=10 SYSTEMS=quiver bench/transaction.sh
#
# Reported per system: the tool's own Send TPS lines (half sends acknowledged, over its 10 s
# windows), the messages committed to the topic per second (queue offsets from mqadmin
# topicStatus before and after, so a commit lost or late is not counted), the half messages
# stored, the broker's CPU-seconds per 100,000 committed messages (/proc/PID/stat) and its peak
# resident memory (sampled every 0.2 s). Both brokers run with their defaults (async flush,
# transactionTimeOut 6 s, transactionCheckInterval 30 s). Each system runs in a private network
# namespace holding only `lo` (needs root), as bench/timer.sh. Not run in CI.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
M2="$REPO/.cache/m2"
THREADS=${THREADS:-32}
SIZE=${SIZE:-1024}
SECONDS_RUN=${SECONDS_RUN:-30}
SYSTEMS=${SYSTEMS:-"quiver rocketmq"}
TOPIC=TxBench
QUEUES=8

for tool in java mvn unshare nsenter ip bc; do
  command -v "$tool" >/dev/null || { echo "transaction.sh: $tool is required" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "transaction.sh: run as root (unshare -n needs it)" >&2; exit 2; }

WORK="$(mktemp -d /tmp/quiver-transaction.XXXXXX)"
PIDS=()
SCRIPT=transaction.sh
# shellcheck source=lib.sh
source "$REPO/bench/lib.sh"
cleanup() {
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

if [ -z "${QUIVER:-}" ]; then
  echo "== building quiver (release)"
  cargo build --release -p quiver --manifest-path "$REPO/Cargo.toml" >/dev/null
  QUIVER="$REPO/target/release/quiver"
fi
cp "$QUIVER" "$WORK/quiver-bin"
QUIVER="$WORK/quiver-bin"

echo "== resolving Apache RocketMQ 5.5.0 into $M2"
mvn -q -o -f "$REPO/bench/rocketmq/pom.xml" -Dmaven.repo.local="$M2" \
  dependency:build-classpath -Dmdep.outputFile="$WORK/classpath.txt" >/dev/null 2>&1 ||
  mvn -q -f "$REPO/bench/rocketmq/pom.xml" -Dmaven.repo.local="$M2" \
    dependency:build-classpath -Dmdep.outputFile="$WORK/classpath.txt" >/dev/null
CP="$(cat "$WORK/classpath.txt")"

SUMMARY="$WORK/summary.txt"
: >"$SUMMARY"

for system in $SYSTEMS; do
  new_namespace
  holder=$NS
  home="$WORK/$system"
  start_system "$system" "$holder" "$home" "$CP"
  create_topic "$home" "$TOPIC" "$QUEUES"

  # Messages in a topic's queues on this broker, from the unchanged mqadmin.
  stored() {
    "${java[@]}" org.apache.rocketmq.tools.command.MQAdminStartup topicStatus -n 127.0.0.1:9876 -t "$1" \
      2>/dev/null | awk '/^broker-a/ {s += $4} END {print s + 0}'
  }
  ticks() { awk '{print $14+$15}' "/proc/$broker/stat"; }
  ( peak=0; while kill -0 "$broker" 2>/dev/null; do
      r=$(awk '/VmRSS/ {print $2}' "/proc/$broker/status" 2>/dev/null || echo 0)
      [ "${r:-0}" -gt "$peak" ] && peak=$r && echo "$peak" >"$home/peak"
      sleep 0.2
    done ) &
  PIDS+=($!)

  echo "== $system: TransactionProducer -w $THREADS -s $SIZE for $SECONDS_RUN s"
  m0=$(stored "$TOPIC"); h0=$(stored RMQ_SYS_TRANS_HALF_TOPIC); t0=$(ticks); s0=$(date +%s.%N)
  timeout "$SECONDS_RUN" "${java[@]}" -Xmx1g org.apache.rocketmq.example.benchmark.TransactionProducer \
    -n 127.0.0.1:9876 -t "$TOPIC" -w "$THREADS" -s "$SIZE" -ri 5000 >"$home/producer.out" 2>&1 || true
  s1=$(date +%s.%N); t1=$(ticks)
  # END_TRANSACTION is oneway: give the last ones a moment to land before counting.
  sleep 2
  m1=$(stored "$TOPIC"); h1=$(stored RMQ_SYS_TRANS_HALF_TOPIC)
  elapsed=$(echo "$s1 - $s0" | bc)
  committed=$((m1 - m0))
  cpu_s=$(echo "scale=3; ($t1 - $t0) / 100" | bc)
  {
    echo "### $system"
    echo "TransactionProducer Send TPS lines:"
    grep 'Send TPS' "$home/producer.out" || tail -5 "$home/producer.out"
    echo "committed=$committed halves=$((h1 - h0)) seconds=$elapsed" \
      "committed_tps=$(echo "scale=0; $committed / $elapsed" | bc)" \
      "broker_cpu_s=$cpu_s cpu_s_per_100k=$(echo "scale=3; $cpu_s * 100000 / ($committed + 1)" | bc)" \
      "broker_peak_rss_mib=$(( $(cat "$home/peak" 2>/dev/null || echo 0) / 1024 ))"
    echo
  } | tee -a "$SUMMARY"
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PIDS=()
done

echo "== summary"
cat "$SUMMARY"
