#!/usr/bin/env bash
# Pop consumption throughput, Quiver against Apache RocketMQ 5.5.0 in the same run on this
# machine: a topic of 8 queues is filled with MESSAGES messages of 1 KiB (`quiver bench produce`),
# then for each consumer count a new group is switched to POP with the unchanged mqadmin
# (`setConsumeMode -m POP`) and bench/rocketmq/PopBench.java pops and acknowledges the whole topic
# with that many DefaultMQPushConsumer instances (clientRebalance=false, 20 consume threads and 32
# messages per pop each, as the 5.5.0 client defaults), then a fresh group pops it again with
# `quiver bench consume --pop` (quiver-client's pop consumer: one BATCH_ACK_MESSAGE per pop).
# Prints pop+ack messages per second and the broker's CPU seconds per 100,000 messages.
#
#   bench/pop.sh                          # 100,000 messages, 4 and 16 consumers
#   MESSAGES=20000 CONSUMERS="4" SYSTEMS=quiver bench/pop.sh
#   MESSAGES=500000 DRIVERS=quiver bench/pop.sh   # only quiver bench consume --pop
#
# Each system runs in a private network namespace holding only `lo` (needs root), as
# bench/compare.sh. Not run in CI.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
M2="$REPO/.cache/m2"
MESSAGES=${MESSAGES:-100000}
CONSUMERS=${CONSUMERS:-"4 16"}
SYSTEMS=${SYSTEMS:-"quiver rocketmq"}
DRIVERS=${DRIVERS:-"java quiver"}
TOPIC=PopBench

for tool in java javac mvn jq unshare nsenter ip; do
  command -v "$tool" >/dev/null || { echo "pop.sh: $tool is required" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "pop.sh: run as root (unshare -n needs it)" >&2; exit 2; }

WORK="$(mktemp -d /tmp/quiver-pop.XXXXXX)"
PIDS=()
SCRIPT=pop.sh
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
javac -nowarn -cp "$CP" -d "$WORK/classes" "$REPO/bench/rocketmq/PopBench.java"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ROWS="$WORK/rows.txt"
: >"$ROWS"

for system in $SYSTEMS; do
  new_namespace
  holder=$NS
  home="$WORK/$system"
  start_system "$system" "$holder" "$home" "$CP:$WORK/classes"
  create_topic "$home" "$TOPIC" 8
  mqadmin() { "${java[@]}" org.apache.rocketmq.tools.command.MQAdminStartup "$@" -n 127.0.0.1:9876; }
  echo "== $system: filling $TOPIC with $MESSAGES messages of 1 KiB"
  nsenter -t "$holder" -n "$QUIVER" bench produce -n 127.0.0.1:9876 -t "$TOPIC" -s 1024 -w 64 \
    --messages "$MESSAGES" --report-interval 5 >"$home/fill.txt" 2>&1
  for consumers in $CONSUMERS; do
    group="pop_bench_${consumers}_$RANDOM"
    mqadmin setConsumeMode -c DefaultCluster -t "$TOPIC" -g "$group" -m POP -q 0 >"$home/mode-$consumers.out" 2>&1
    grep -q success "$home/mode-$consumers.out" || { cat "$home/mode-$consumers.out" >&2; exit 1; }
    echo "== $system: $consumers pop consumers"
    if [[ " $DRIVERS " == *" java "* ]]; then
      before=$(cpu_ticks "$broker")
      "${java[@]}" -Xmx1g PopBench 127.0.0.1:9876 "$TOPIC" "$group" "$consumers" "$MESSAGES" 300 \
        >"$home/pop-$consumers.out" 2>&1
      after=$(cpu_ticks "$broker")
      line=$(grep '^consumers=' "$home/pop-$consumers.out")
      tps=$(echo "$line" | sed 's/.*tps=//')
      count=$(echo "$line" | sed 's/.*consumed=\([0-9]*\).*/\1/')
      cpu=$(awk -v t=$((after - before)) -v n="$count" -v hz="$(getconf CLK_TCK)" \
        'BEGIN { if (n > 0) printf "%.2f", t / hz / n * 100000; else print "-" }')
      echo "| $system | $consumers | Java PopBench | $line | $cpu |" | tee -a "$ROWS"
    fi
    [[ " $DRIVERS " == *" quiver "* ]] || continue
    # The same with quiver-client's pop consumer (one BATCH_ACK per pop) in a fresh group.
    group="pop_quiver_${consumers}_$RANDOM"
    before=$(cpu_ticks "$broker")
    nsenter -t "$holder" -n "$QUIVER" bench consume -n 127.0.0.1:9876 -t "$TOPIC" -g "$group" --pop \
      --pop-consumers "$consumers" --from first --messages "$MESSAGES" --report-interval 5 \
      --json "$home/quiver-pop-$consumers.json" >"$home/quiver-pop-$consumers.txt" 2>&1
    after=$(cpu_ticks "$broker")
    rate=$(jq '.summary.throughput.messages_per_s' "$home/quiver-pop-$consumers.json")
    cpu=$(awk -v t=$((after - before)) -v n="$MESSAGES" -v hz="$(getconf CLK_TCK)" \
      'BEGIN { printf "%.2f", t / hz / n * 100000 }')
    echo "| $system | $consumers | quiver bench consume --pop | tps=${rate%.*} | $cpu |" | tee -a "$ROWS"
  done
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PIDS=()
done

echo
echo "| system | consumers | driver | result | broker CPU s / 100k messages |"
echo "|---|---|---|---|---|"
cat "$ROWS"
