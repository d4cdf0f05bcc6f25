#!/usr/bin/env bash
# RocketMQ 5 timer messages, Quiver against Apache RocketMQ 5.5.0 in the same run on this
# machine, with RocketMQ's official timer benchmark (rocketmq-example 5.5.0):
# `benchmark.timer.TimerProducer` sends MESSAGES timer messages of 1 KiB whose due times start
# about two minutes ahead and spread over SLOTS seconds; `benchmark.timer.TimerConsumer` consumes
# them and prints its figures; bench/rocketmq/TimerLateness.java, a second consumer group,
# records every message's lateness (delivered to the listener minus due) and prints exact
# percentiles. The broker's resident memory is sampled every second.
#
#   bench/timer.sh                               # about 1,000,000 messages due over 60 s
#   PER_SLOT=100 SLOTS=20 bench/timer.sh         # a short try: 16 x 20 x 100 = 32,000 messages
#   SYSTEMS=quiver bench/timer.sh
#
# TimerProducer sends THREADS x SLOTS x PER_SLOT messages (each of its threads sends the whole
# schedule); due times are now + 2 min + slot seconds, so messages sent after their slot's time
# are delivered late by the tool's own design (a broker that stores slowly shows it so).
# Each system runs in a private network namespace holding only `lo` (needs root), as
# bench/compare.sh. Not run in CI.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
M2="$REPO/.cache/m2"
THREADS=${THREADS:-16}
SLOTS=${SLOTS:-60}
PER_SLOT=${PER_SLOT:-1042}
SYSTEMS=${SYSTEMS:-"quiver rocketmq"}
TOPIC=TimerTest
MESSAGES=$((THREADS * SLOTS * PER_SLOT))

for tool in java javac mvn unshare nsenter ip; do
  command -v "$tool" >/dev/null || { echo "timer.sh: $tool is required" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "timer.sh: run as root (unshare -n needs it)" >&2; exit 2; }

WORK="$(mktemp -d /tmp/quiver-timer.XXXXXX)"
PIDS=()
SCRIPT=timer.sh
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
mvn -q -f "$REPO/bench/rocketmq/pom.xml" -Dmaven.repo.local="$M2" \
  dependency:build-classpath -Dmdep.outputFile="$WORK/classpath.txt" >/dev/null
CP="$(cat "$WORK/classpath.txt")"
mkdir -p "$WORK/classes"
javac -nowarn -cp "$CP" -d "$WORK/classes" "$REPO/bench/rocketmq/TimerLateness.java"

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

SUMMARY="$WORK/summary.txt"
: >"$SUMMARY"

for system in $SYSTEMS; do
  new_namespace
  holder=$NS
  home="$WORK/$system"
  start_system "$system" "$holder" "$home" "$CP:$WORK/classes" timerWheelEnable=true
  create_topic "$home" "$TOPIC" 8

  echo "== $system: $MESSAGES timer messages ($THREADS x $SLOTS x $PER_SLOT), due over $SLOTS s from about 2 min ahead"
  "${java[@]}" -Xmx256m TimerLateness 127.0.0.1:9876 "$TOPIC" "$MESSAGES" 900 >"$home/lateness.out" 2>&1 &
  lateness=$!
  PIDS+=("$lateness")
  wait_for_line "$home/lateness.out" '^ready' 60
  "${java[@]}" -Xmx512m org.apache.rocketmq.example.benchmark.timer.TimerConsumer -t "$TOPIC" \
    >"$home/timer-consumer.out" 2>&1 &
  PIDS+=($!)
  started=$(date +%s)
  "${java[@]}" -Xmx1g org.apache.rocketmq.example.benchmark.timer.TimerProducer -t "$TOPIC" \
    -tc "$THREADS" -st "$SLOTS" -mt "$PER_SLOT" -sd 1000 -ms 1024 >"$home/timer-producer.out" 2>&1 &
  PIDS+=($!)
  peak=0
  waiting=0
  while kill -0 "$lateness" 2>/dev/null; do
    rss=$(rss_kib "$broker")
    [ "$rss" -gt "$peak" ] && peak=$rss
    # Just before the first messages fall due: everything sent so far is waiting.
    [ $(($(date +%s) - started)) -le 115 ] && waiting=$rss
    sleep 1
  done
  {
    echo "### $system"
    echo "broker RSS: peak $((peak / 1024)) MiB; at about 115 s (before the first due time) $((waiting / 1024)) MiB"
    echo "TimerLateness: $(grep -E '^received' "$home/lateness.out")"
    echo "TimerLateness: $(grep -E '^lateness' "$home/lateness.out" || echo 'no lateness line')"
    echo "TimerProducer, its line with the highest Send TPS, and its last:"
    grep 'Send TPS' "$home/timer-producer.out" | sort -t: -k2 -n | tail -1 || true
    grep 'Send TPS' "$home/timer-producer.out" | tail -1 || true
    echo "TimerConsumer, last line:"
    grep 'Consume TPS' "$home/timer-consumer.out" | tail -1 || true
    echo
  } | tee -a "$SUMMARY"
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PIDS=()
done

echo "== summary"
cat "$SUMMARY"
