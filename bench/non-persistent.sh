#!/usr/bin/env bash
# Seed 003's study on this machine: 5 producers sending 4 KiB messages at a fixed rate (5,000 and
# 8,000 msg/s) with a consumer running, on a persistent topic and on a non-persistent one
# (`persistence=memory`), against Quiver, and on a persistent topic against Apache RocketMQ 5.5.0
# (it has no non-persistent topics). Prints, per run, the send latency percentiles (from each
# message's intended send time, so stalls count) and the end-to-end ones (born to consumed).
#
#   bench/non-persistent.sh                   # 10 s warm-up, 30 s measured per run
#   WARMUP_S=5 DURATION_S=15 RATES="8000" bench/non-persistent.sh
#   BATCH=4 bench/non-persistent.sh           # every send a batch of 4 messages
#   QUIVER_CONF_EXTRA=$'flushIntervalCommitLog=10' bench/non-persistent.sh
#                                             # more broker.conf lines for Quiver
#   CLIENT_BATCH=1000 bench/non-persistent.sh # pulsar-perf's client-side batching: each producer
#                                             # sends what its senders gave it within 1 ms, up
#                                             # to 1000 messages (pulsar-perf's defaults)
#   CLIENT_BATCH=1000 CLIENT_BATCH_DELAY_MS=0.2 bench/non-persistent.sh
#                                             # a shorter batching window (pulsar-perf -bm 0.2):
#                                             # with 1 ms every message may wait up to 1 ms
#
# Each system runs in a private network namespace holding only `lo` (needs root for unshare),
# as bench/compare.sh. Not run in CI. The end-to-end figures come from `quiver bench consume`,
# which computes them from the microsecond send time `quiver bench produce` puts in each message
# (producer and consumer share the machine's clock).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
M2="$REPO/.cache/m2"
WARMUP_S=${WARMUP_S:-10}
DURATION_S=${DURATION_S:-30}
RATES=${RATES:-"5000 8000"}
BATCH=${BATCH:-1}
CLIENT_BATCH=${CLIENT_BATCH:-}
CLIENT_BATCH_DELAY_MS=${CLIENT_BATCH_DELAY_MS:-1}
# Each producer keeps up to this many sends in flight, as pulsar-perf's producers do (its
# default is 1000): with one send in flight per producer, 5 producers cap the rate at 5 per
# round trip, and a slower broker's latency would be the benchmark's queueing, not its own.
WINDOW=${WINDOW:-256}
SYSTEMS=${SYSTEMS:-"quiver rocketmq"}
QUEUES=4

for tool in java mvn jq unshare nsenter ip; do
  command -v "$tool" >/dev/null || { echo "non-persistent.sh: $tool is required" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "non-persistent.sh: run as root (unshare -n needs it)" >&2; exit 2; }

WORK="$(mktemp -d /tmp/quiver-np.XXXXXX)"
PIDS=()
SCRIPT=non-persistent.sh
# shellcheck source=lib.sh
source "$REPO/bench/lib.sh"
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

if [ -z "${QUIVER:-}" ]; then
  echo "== building quiver (release)"
  cargo build --release -p quiver --manifest-path "$REPO/Cargo.toml" >/dev/null
  QUIVER="$REPO/target/release/quiver"
fi
cp "$QUIVER" "$WORK/quiver"
QUIVER="$WORK/quiver"



ROWS="$WORK/rows.tsv"
: >"$ROWS"

# One run: a consumer of a new group from the topic's end, then the producers; both measure the
# same window.
run_one() { # HOLDER SYSTEM TOPIC_KIND TOPIC RATE
  local holder=$1 system=$2 kind=$3 topic=$4 rate=$5
  local name="$system-$kind-$rate" group="np_bench_$RANDOM"
  local sending=(--batch "$BATCH" --async --async-window "$WINDOW")
  if [ -n "$CLIENT_BATCH" ]; then
    sending=(--batch-max-messages "$CLIENT_BATCH" --batch-max-publish-delay-ms "$CLIENT_BATCH_DELAY_MS")
  fi
  echo "== $name: consumer, then 5 producers at $rate msg/s of 4 KiB (${sending[*]})"
  in_ns "$holder" "$QUIVER" bench consume -n 127.0.0.1:9876 -t "$topic" -g "$group" --from last \
    --warmup "$((WARMUP_S + 1))" --duration "$((DURATION_S - 2))" --report-interval 5 \
    --json "$WORK/$name-consume.json" >"$WORK/$name-consume.txt" 2>&1 &
  local consumer=$!
  # The consumer's first report line says it has its queues and is pulling.
  wait_for_line "$WORK/$name-consume.txt" '.' 30
  in_ns "$holder" "$QUIVER" bench produce -n 127.0.0.1:9876 -t "$topic" --producers 5 -w 5 \
    -s 4096 --rate "$rate" "${sending[@]}" --warmup "$WARMUP_S" --duration "$DURATION_S" \
    --report-interval 5 --json "$WORK/$name.json" >"$WORK/$name.txt" 2>&1
  wait "$consumer" || true
  jq -r --arg name "$name" --slurpfile c "$WORK/$name-consume.json" \
    '[$name, (.summary.throughput.messages_per_s|floor),
      .summary.latency.p50_ms, .summary.latency.p95_ms, .summary.latency.p99_ms,
      .summary.latency.p999_ms, .summary.latency.p9999_ms, .summary.latency.max_ms,
      ($c[0].summary.throughput.messages_per_s|floor),
      $c[0].summary.latency.p50_ms, $c[0].summary.latency.p95_ms, $c[0].summary.latency.p99_ms,
      $c[0].summary.latency.p999_ms, $c[0].summary.latency.p9999_ms, $c[0].summary.latency.max_ms,
      (.summary.counters.send_failed + .summary.counters.response_failed),
      ((.summary.steal.share // 0) * 1000 | round / 10),
      "\(.summary.steal.stalls // 0) (\(.summary.steal.worst_ms // 0))"] | @tsv' "$WORK/$name.json" >>"$ROWS"
}

for system in $SYSTEMS; do
  new_namespace
  holder=$NS
  case $system in
    quiver)
      cat >"$WORK/quiver.conf" <<EOF
nonPersistentTopics=NonPersistentTest
defaultTopicQueueNums=$QUEUES
${QUIVER_CONF_EXTRA:-}
EOF
      nsenter -t "$holder" -n "$QUIVER" up -c "$WORK/quiver.conf" --data "$WORK/quiver-data" \
        --namesrv-port 9876 --broker-port 10911 >"$WORK/quiver.out" 2>"$WORK/quiver.log" &
      PIDS+=($!)
      wait_for_line "$WORK/quiver.out" '^ready' 30
      topics="persistent:PersistentTest non-persistent:NonPersistentTest"
      ;;
    rocketmq)
      RHOME="$WORK/rocketmq"
      mkdir -p "$RHOME/store"
      echo "== resolving Apache RocketMQ 5.5.0 into $M2"
      mvn -q -f "$REPO/bench/rocketmq/pom.xml" -Dmaven.repo.local="$M2" \
        dependency:build-classpath -Dmdep.outputFile="$WORK/classpath.txt" >/dev/null
      printf 'listenPort=9876\nbindAddress=127.0.0.1\n' >"$RHOME/namesrv.conf"
      cat >"$RHOME/broker.conf" <<EOF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
brokerIP1=127.0.0.1
bindAddress=127.0.0.1
listenPort=10911
namesrvAddr=127.0.0.1:9876
autoCreateTopicEnable=true
flushDiskType=ASYNC_FLUSH
storePathRootDir=$RHOME/store
EOF
      cat >"$RHOME/logback.xml" <<EOF
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>$RHOME/rocketmq.log</file>
    <encoder><pattern>%d %p %c{1} - %m%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="FILE"/></root>
</configuration>
EOF
      java_common=(-Duser.home="$RHOME" -Drocketmq.home.dir="$RHOME" -Dlogback.configurationFile="$RHOME/logback.xml" -cp "$(cat "$WORK/classpath.txt")")
      nsenter -t "$holder" -n java -Xms256m -Xmx256m "${java_common[@]}" \
        org.apache.rocketmq.namesrv.NamesrvStartup -c "$RHOME/namesrv.conf" >"$RHOME/namesrv.out" 2>&1 &
      PIDS+=($!)
      wait_for_line "$RHOME/namesrv.out" 'boot success' 60
      nsenter -t "$holder" -n java -Xms1g -Xmx1g -XX:MaxDirectMemorySize=1g -XX:+UseG1GC "${java_common[@]}" \
        org.apache.rocketmq.broker.BrokerStartup -c "$RHOME/broker.conf" >"$RHOME/broker.out" 2>&1 &
      PIDS+=($!)
      wait_for_line "$RHOME/broker.out" 'boot success' 120
      topics="persistent:PersistentTest"
      ;;
    *) echo "non-persistent.sh: unknown system $system" >&2; exit 2 ;;
  esac
  # Create the persistent topic (a short run; its messages are not measured).
  in_ns "$holder" "$QUIVER" bench produce -n 127.0.0.1:9876 -t PersistentTest --queues "$QUEUES" \
    --messages 10 -w 1 >/dev/null
  for rate in $RATES; do
    for entry in $topics; do
      run_one "$holder" "$system" "${entry%%:*}" "${entry#*:}" "$rate"
    done
  done
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PIDS=()
done

echo
echo "| run | sent msg/s | send p50 | p95 | p99 | p99.9 | p99.99 | max | consumed msg/s | e2e p50 | p95 | p99 | p99.9 | p99.99 | max | failed | steal % | stalls (worst ms) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
sed 's/\t/ | /g; s/^/| /; s/$/ |/' "$ROWS"
echo
echo "latencies in ms; send: from intended send time to answer; e2e: from the send time the producer"
echo "put in the message (microseconds) to consumed"
echo "steal: CPU time the hypervisor took from this machine while the producers measured; stalls:"
echo "100 ms windows in which a CPU lost 30 ms or more (the machine stopped, whatever it ran)"
