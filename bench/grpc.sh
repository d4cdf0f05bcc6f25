#!/usr/bin/env bash
# RocketMQ 5's gRPC clients against Quiver's own gRPC port and against Apache RocketMQ 5.5.0's
# broker behind rocketmq-proxy 5.5.0 (cluster mode), in the same run on this machine; and
# Quiver's gRPC against its own remoting protocol.
#
# For each sender count, 1 KiB bodies to a topic of 8 queues, WARMUP_S then DURATION_S measured:
#   - `quiver bench produce --protocol grpc` (quiver-client's gRPC producer),
#   - the Java gRPC client 5.2.0 (bench/rocketmq/GrpcProducerBench.java), sync sends,
#   - on Quiver only, `quiver bench produce` over remoting (the gRPC/remoting ratio);
# then `quiver bench consume --protocol grpc` drains the topic with SimpleConsumers.
# Prints, per run, messages per second, p99, and the servers' CPU (broker, and proxy for
# RocketMQ) in milliseconds per 1,000 messages, read from /proc before and after.
#
#   bench/grpc.sh                             # 16 and 64 senders, 10 s warm-up, 20 s measured
#   SENDERS="64" DURATION_S=10 bench/grpc.sh
#   QUIVER=target/release/quiver bench/grpc.sh   # a binary already built
#
# Each system runs in a private network namespace holding only `lo` (needs root), as
# bench/compare.sh. Not run in CI.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
M2="$REPO/.cache/m2"
SENDERS=${SENDERS:-"16 64"}
WARMUP_S=${WARMUP_S:-10}
DURATION_S=${DURATION_S:-20}
SYSTEMS=${SYSTEMS:-"quiver rocketmq"}
TOPIC=GrpcBench

for tool in java mvn jq bc unshare nsenter ip; do
  command -v "$tool" >/dev/null || { echo "grpc.sh: $tool is required" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "grpc.sh: run as root (unshare -n needs it)" >&2; exit 2; }

WORK="$(mktemp -d /tmp/quiver-grpc.XXXXXX)"
PIDS=()
SCRIPT=grpc.sh
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
echo "== resolving Apache RocketMQ 5.5.0 (broker, proxy) and rocketmq-client-java 5.2.0 into $M2"
mvn -q -f "$REPO/bench/rocketmq/pom.xml" -Dmaven.repo.local="$M2" \
  dependency:build-classpath -Dmdep.outputFile="$WORK/classpath.txt" >/dev/null
mvn -q -Dmaven.repo.local="$M2" dependency:copy \
  -Dartifact=org.apache.rocketmq:rocketmq-client-java:5.2.0 -DoutputDirectory="$WORK" >/dev/null
CLASSPATH_RMQ="$(cat "$WORK/classpath.txt")"
CLIENT_JAR="$WORK/rocketmq-client-java-5.2.0.jar"

# CPU seconds (user + system) the processes PIDS... have used so far.
cpu_s() {
  local total=0 pid ticks
  for pid in "$@"; do
    ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    total=$((total + ticks))
  done
  echo "scale=3; $total / $(getconf CLK_TCK)" | bc
}

# report SYSTEM DRIVER SENDERS MESSAGES TPS P99_MS CPU_S
report() {
  local per_thousand
  per_thousand=$(echo "scale=2; $7 * 1000000 / ($4 + 1)" | bc)
  printf '%-9s %-16s %4s senders: %9.0f msg/s  p99 %8.3f ms  server CPU %7s ms per 1,000 messages\n' \
    "$1" "$2" "$3" "$5" "$6" "$per_thousand" | tee -a "$WORK/results.txt"
}

# run_quiver_bench SYSTEM HOLDER PROTOCOL SENDERS SERVER_PIDS...
run_quiver_bench() {
  local system=$1 holder=$2 protocol=$3 senders=$4
  shift 4
  local json="$WORK/$system-$protocol-$senders.json" before after
  before=$(cpu_s "$@")
  in_ns "$holder" "$QUIVER" bench produce -n 127.0.0.1:9876 --protocol "$protocol" \
    --grpc-endpoint 127.0.0.1:8081 -t "$TOPIC" -w "$senders" -s 1024 --warmup "$WARMUP_S" \
    --duration "$DURATION_S" --report-interval 10 --json "$json" >"$json.txt"
  after=$(cpu_s "$@")
  # The CPU of the warm-up counts too: it is spread over the messages of the whole run.
  local all measured tps p99
  all=$(jq '[.intervals[].messages] | add' "$json")
  tps=$(jq '.summary.throughput.messages_per_s' "$json")
  p99=$(jq '.summary.latency.p99_ms' "$json")
  measured=$(jq '.summary.counters.messages' "$json")
  report "$system" "quiver-$protocol" "$senders" "$all" "$tps" "$p99" "$(echo "$after - $before" | bc)"
  : "$measured"
}

# run_java_bench SYSTEM HOLDER SENDERS SERVER_PIDS...
run_java_bench() {
  local system=$1 holder=$2 senders=$3
  shift 3
  local out="$WORK/$system-java-$senders.txt" before after
  before=$(cpu_s "$@")
  in_ns "$holder" java -Xms1g -Xmx1g -cp "$CLIENT_JAR" "$REPO/bench/rocketmq/GrpcProducerBench.java" \
    127.0.0.1:8081 "$TOPIC" "$senders" 1024 "$WARMUP_S" "$DURATION_S" >"$out" 2>"$out.log"
  after=$(cpu_s "$@")
  local sent tps p99
  sent=$(awk '/^sent/ {print $2}' "$out")
  tps=$(awk '/^sent/ {print $4}' "$out")
  p99=$(awk '/^sent/ {print $8}' "$out")
  # The measured messages are those of DURATION_S; the whole run sent about that many per
  # second over the warm-up too.
  local all
  all=$(echo "$tps * ($WARMUP_S + $DURATION_S)" | bc | cut -d. -f1)
  report "$system" "java-grpc-5.2.0" "$senders" "$all" "$tps" "$p99" "$(echo "$after - $before" | bc)"
  : "$sent"
}

start_proxy() {
  local holder=$1 home=$2
  cat >"$home/rmq-proxy.json" <<EOF
{"rocketMQClusterName": "DefaultCluster", "namesrvAddr": "127.0.0.1:9876", "grpcServerPort": 8081,
 "remotingListenPort": 8080, "proxyMode": "cluster"}
EOF
  nsenter -t "$holder" -n java -Xms1g -Xmx1g -XX:+UseG1GC -Duser.home="$home" -Drocketmq.home.dir="$home" \
    -Dlogback.configurationFile="$home/logback.xml" -Drmq.logback.configurationFile="$home/logback.xml" \
    -cp "$CLASSPATH_RMQ" org.apache.rocketmq.proxy.ProxyStartup -pc "$home/rmq-proxy.json" -pm cluster \
    >"$home/proxy.out" 2>&1 &
  proxy=$!
  PIDS+=("$proxy")
  for _ in $(seq 120); do
    in_ns "$holder" bash -c 'exec 3<>/dev/tcp/127.0.0.1/8081' 2>/dev/null && return 0
    sleep 0.5
  done
  echo "grpc.sh: the proxy did not listen on 8081:" >&2
  tail -20 "$home/proxy.out" >&2
  exit 1
}

for system in $SYSTEMS; do
  new_namespace
  holder=$NS
  home="$WORK/$system"
  start_system "$system" "$holder" "$home" "$CLASSPATH_RMQ"
  servers=("$broker")
  if [ "$system" = rocketmq ]; then
    start_proxy "$holder" "$home"
    servers+=("$proxy")
  fi
  create_topic "$home" "$TOPIC" 8
  echo "== $system"
  for senders in $SENDERS; do
    run_quiver_bench "$system" "$holder" grpc "$senders" "${servers[@]}"
    run_java_bench "$system" "$holder" "$senders" "${servers[@]}"
    if [ "$system" = quiver ]; then
      run_quiver_bench "$system" "$holder" remoting "$senders" "${servers[@]}"
    fi
  done
  # SimpleConsumers receive from the topic the runs above filled (far more than they take in
  # the time: they are never starved), acknowledging every receive.
  before=$(cpu_s "${servers[@]}")
  in_ns "$holder" timeout 300 "$QUIVER" bench consume -n 127.0.0.1:9876 --protocol grpc \
    --grpc-endpoint 127.0.0.1:8081 -t "$TOPIC" -g grpc_bench_consumer --receivers 8 \
    --warmup 5 --duration "$DURATION_S" --report-interval 10 --json "$WORK/$system-consume.json" \
    >"$WORK/$system-consume.txt"
  after=$(cpu_s "${servers[@]}")
  consumed=$(jq '[.intervals[].messages] | add' "$WORK/$system-consume.json")
  report "$system" "quiver-grpc-recv" 8 "$consumed" \
    "$(jq '.summary.throughput.messages_per_s' "$WORK/$system-consume.json")" 0 "$(echo "$after - $before" | bc)"
  for pid in "${servers[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  sleep 2
done

echo "== results"
cat "$WORK/results.txt"
