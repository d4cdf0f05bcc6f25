#!/usr/bin/env bash
# Runs the same `quiver bench produce` scenario against Quiver and against Apache RocketMQ 5.5.0,
# one after the other on this machine, and prints both and the ratio.
#
#   bench/compare.sh                      # -w 64 -s 1024 --queues 8, 10 s warm-up, 20 s measured
#   bench/compare.sh -w 16 -s 3072        # flags are passed to `quiver bench produce`
#   OFFICIAL=1 bench/compare.sh           # also RocketMQ's own benchmark Producer against RocketMQ
#
# RocketMQ's jars come from Maven Central into the git-ignored $REPO/.cache/m2 (shared with
# compat/). Each system runs inside its own private network namespace holding only `lo`
# (`unshare -n` for a holder process, `nsenter` for the servers and the load generator): the
# RocketMQ broker binds its HA port on the wildcard address whatever bindAddress says, and the
# namespaces also keep the runs clear of anything else listening on this machine's 9876/10911.
# Needs root (for unshare), Java 17, Maven, jq. Not run in CI: it takes a few minutes and
# measures the machine it runs on.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
M2="$REPO/.cache/m2"
TOPIC=CompareTest
WARMUP_S=${WARMUP_S:-10}
DURATION_S=${DURATION_S:-20}
SCENARIO=("$@")
if [ ${#SCENARIO[@]} -eq 0 ]; then
  SCENARIO=(-w 64 -s 1024)
fi
BENCH_FLAGS=(-t "$TOPIC" --queues 8 --warmup "$WARMUP_S" --duration "$DURATION_S" --report-interval 5 "${SCENARIO[@]}")

for tool in java mvn jq unshare nsenter ip; do
  command -v "$tool" >/dev/null || { echo "compare.sh: $tool is required" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "compare.sh: run as root (unshare -n needs it)" >&2; exit 2; }

WORK="$(mktemp -d /tmp/quiver-compare.XXXXXX)"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

echo "== building quiver (release)"
cargo build --release -p quiver --manifest-path "$REPO/Cargo.toml" >/dev/null
QUIVER="$WORK/quiver"
cp "$REPO/target/release/quiver" "$QUIVER"

echo "== resolving Apache RocketMQ 5.5.0 into $M2"
mvn -q -f "$REPO/bench/rocketmq/pom.xml" -Dmaven.repo.local="$M2" \
  dependency:build-classpath -Dmdep.outputFile="$WORK/classpath.txt" >/dev/null
CLASSPATH_RMQ="$(cat "$WORK/classpath.txt")"

# A holder process owns a fresh network namespace (its pid lands in NS); `in_ns PID cmd...`
# runs cmd inside it. Servers started in the background call nsenter directly, so that `$!` is
# the server itself (nsenter execs it) and not a subshell that a kill would miss.
new_namespace() {
  unshare -n sleep infinity >/dev/null 2>&1 &
  NS=$!
  PIDS+=("$NS")
  for _ in $(seq 50); do
    [ "$(readlink "/proc/$NS/ns/net")" != "$(readlink /proc/self/ns/net)" ] && break
    sleep 0.05
  done
  nsenter -t "$NS" -n ip link set lo up
}
in_ns() { local holder=$1; shift; nsenter -t "$holder" -n "$@"; }

# Waits until FILE contains PATTERN, or fails after SECONDS.
wait_for_line() {
  local file=$1 pattern=$2 seconds=$3
  for _ in $(seq $((seconds * 10))); do
    grep -q "$pattern" "$file" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "compare.sh: no \"$pattern\" in $file after ${seconds}s:" >&2
  tail -20 "$file" >&2
  exit 1
}

run_bench() {
  local holder=$1 name=$2
  echo "== quiver bench produce ${BENCH_FLAGS[*]}  against $name"
  in_ns "$holder" "$QUIVER" bench produce -n 127.0.0.1:9876 "${BENCH_FLAGS[@]}" \
    --json "$WORK/$name.json" | tee "$WORK/$name.txt"
  # The consumer side on the same system: read back everything that was sent.
  local sent
  sent="$(jq '[.intervals[].messages] | add' "$WORK/$name.json")"
  echo "== quiver bench consume --from first --messages $sent  against $name"
  in_ns "$holder" timeout 120 "$QUIVER" bench consume -n 127.0.0.1:9876 -t "$TOPIC" \
    -g compare_consumer --from first --messages "$sent" --report-interval 5 \
    --json "$WORK/$name-consume.json"
}

# --- Quiver -----------------------------------------------------------------------------------
new_namespace
QNS=$NS
nsenter -t "$QNS" -n "$QUIVER" up --data "$WORK/quiver-data" --namesrv-port 9876 --broker-port 10911 \
  >"$WORK/quiver.out" 2>"$WORK/quiver.log" &
PIDS+=($!)
QUIVER_PID=$!
wait_for_line "$WORK/quiver.out" '^ready' 30
run_bench "$QNS" quiver
kill -TERM "$QUIVER_PID"
wait "$QUIVER_PID" 2>/dev/null || true

# --- Apache RocketMQ 5.5.0 ----------------------------------------------------------------------
new_namespace
RNS=$NS
RHOME="$WORK/rocketmq"
mkdir -p "$RHOME/store"
cat >"$RHOME/namesrv.conf" <<EOF
listenPort=9876
bindAddress=127.0.0.1
EOF
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
JAVA_COMMON=(-Duser.home="$RHOME" -Drocketmq.home.dir="$RHOME" -Dlogback.configurationFile="$RHOME/logback.xml" -cp "$CLASSPATH_RMQ")
nsenter -t "$RNS" -n java -Xms256m -Xmx256m "${JAVA_COMMON[@]}" \
  org.apache.rocketmq.namesrv.NamesrvStartup -c "$RHOME/namesrv.conf" >"$RHOME/namesrv.out" 2>&1 &
PIDS+=($!)
wait_for_line "$RHOME/namesrv.out" 'boot success' 60
nsenter -t "$RNS" -n java -Xms1g -Xmx1g -XX:MaxDirectMemorySize=1g -XX:+UseG1GC "${JAVA_COMMON[@]}" \
  org.apache.rocketmq.broker.BrokerStartup -c "$RHOME/broker.conf" >"$RHOME/broker.out" 2>&1 &
PIDS+=($!)
wait_for_line "$RHOME/broker.out" 'boot success' 120
run_bench "$RNS" rocketmq

if [ -n "${OFFICIAL:-}" ]; then
  echo "== RocketMQ's benchmark Producer against RocketMQ (${WARMUP_S}+${DURATION_S} s)"
  in_ns "$RNS" timeout $((WARMUP_S + DURATION_S)) java -Xms512m -Xmx512m "${JAVA_COMMON[@]}" \
    org.apache.rocketmq.example.benchmark.Producer -t "$TOPIC" -n 127.0.0.1:9876 -ri 5000 \
    "${SCENARIO[@]}" 2>&1 | grep --line-buffered 'Send TPS' | tee "$WORK/official.txt" || true
fi

# --- Both, and the ratio ----------------------------------------------------------------------
summary() {
  jq -r '.summary | "\(.throughput.messages_per_s|floor) msg/s  p50 \(.latency.p50_ms) ms  p99 \(.latency.p99_ms) ms  p99.9 \(.latency.p999_ms) ms  max \(.latency.max_ms) ms  bench CPU \(.process_cores*100|floor)% of a core"' "$1"
}
Q_TPS="$(jq '.summary.throughput.messages_per_s' "$WORK/quiver.json")"
R_TPS="$(jq '.summary.throughput.messages_per_s' "$WORK/rocketmq.json")"
echo
echo "== scenario: quiver bench produce ${BENCH_FLAGS[*]}"
echo "Quiver:          $(summary "$WORK/quiver.json")"
echo "RocketMQ 5.5.0:  $(summary "$WORK/rocketmq.json")"
if [ -s "$WORK/official.txt" ]; then
  echo "RocketMQ's own Producer against RocketMQ, last lines:"
  tail -3 "$WORK/official.txt"
fi
jq -n --argjson q "$Q_TPS" --argjson r "$R_TPS" \
  'if $r > 0 then "Quiver / RocketMQ send TPS: \($q / $r * 100 | floor / 100)x" else "RocketMQ sent nothing" end' -r
