#!/usr/bin/env bash
# Send throughput of a two-replica broker set in controller mode against SYNC_MASTER mode, and
# against Apache RocketMQ 5.5.0 in controller mode, in the same run on this machine:
#
#   - quiver SYNC_MASTER:  `quiver up --slaves 1` with brokerRole=SYNC_MASTER (the slave must
#                          confirm every send);
#   - quiver controller:   `quiver up --slaves 1 --controller` with allAckInSyncStateSet=true
#                          (every member of the SyncStateSet must have every send);
#   - rocketmq controller: RocketMQ's name server with its controller and two RocketMQ brokers,
#                          allAckInSyncStateSet=true.
#
# Each is driven by `quiver bench produce -w SENDERS -s 1024` for DURATION seconds after a
# WARMUP, ROUNDS times in turn; prints messages per second per run and the medians with the
# ratios the issue asks for (controller / SYNC_MASTER, Quiver / RocketMQ).
#
#   bench/controller-throughput.sh [QUIVER_BINARY]      # release build, 3 rounds of 30 s, 64 senders
#
# Runs in a private network namespace (root, unshare, Java, jq). Not run in CI.
set -euo pipefail
command -v jq >/dev/null || { echo "controller-throughput.sh: jq is required" >&2; exit 2; }

COMPAT="$(cd "$(dirname "$0")/../compat" && pwd)"
ROOT="$(dirname "$COMPAT")"
CLASSPATH_FILE="$COMPAT/target/reference.classpath"
KEPT_LOGS="$COMPAT/target/controller-throughput-logs"
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-30}
WARMUP=${WARMUP:-10}
SENDERS=${SENDERS:-64}
RUN_TIMEOUT_S=$((ROUNDS * 3 * (DURATION + WARMUP + 90) + 120))
if [ -n "${1:-}" ] && [ "$1" != --inside-namespace ]; then
    QUIVER_BINARY="$1"
fi
export QUIVER_BINARY="${QUIVER_BINARY:-$ROOT/target/release/quiver}"

log() { echo "controller-throughput: $(date +%T) $*" >&2; }

# shellcheck source=../compat/reference-lib.sh
source "$COMPAT/reference-lib.sh"

WORK=""
PIDS=()
BROKER_HEAP=1g

measure() {
    local system="$1" round="$2" topic="Throughput$round$RANDOM"
    "$QUIVER_BINARY" bench produce -n 127.0.0.1:9876 -t "$topic" --queues 8 -s 1024 -w "$SENDERS" \
        --warmup "$WARMUP" --duration "$DURATION" --report-interval 10 \
        --json "$dir/$system-$round.json" >"$dir/$system-$round.txt" 2>&1
    local rate
    rate="$(jq '.summary.throughput.messages_per_s' "$dir/$system-$round.json")"
    echo "$system ${rate%.*}" >>"$WORK/rows.txt"
    echo "| $round | $system | ${rate%.*} msg/s |"
}

run_quiver() {
    local mode="$1" round="$2"
    local data="$dir/quiver-$mode-$round"
    mkdir -p "$data"
    if [ "$mode" = sync-master ]; then
        printf 'brokerRole=SYNC_MASTER\nflushDiskType=ASYNC_FLUSH\n' >"$data/broker.conf"
        "$QUIVER_BINARY" up -c "$data/broker.conf" --slaves 1 --data "$data/data" \
            >"$data/up.out" 2>"$data/up.log" &
    else
        printf 'allAckInSyncStateSet=true\nflushDiskType=ASYNC_FLUSH\n' >"$data/broker.conf"
        "$QUIVER_BINARY" up -c "$data/broker.conf" --slaves 1 --controller --data "$data/data" \
            >"$data/up.out" 2>"$data/up.log" &
    fi
    local pid=$!
    PIDS+=("$pid")
    wait_for_line "$data/up.out" '^ready ' 60
    measure "quiver-$mode" "$round"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

run_rocketmq() {
    local round="$1" home="$dir/rocketmq-$round" n
    mkdir -p "$home"
    printf 'listenPort=9876\nbindAddress=127.0.0.1\nenableControllerInNamesrv=true\ncontrollerDLegerGroup=group1\ncontrollerDLegerPeers=n0-127.0.0.1:9878\ncontrollerDLegerSelfId=n0\ncontrollerStorePath=%s\n' \
        "$home/controller" >"$home/namesrv.conf"
    java_cmd "$home/namesrv-home"
    "${JAVA[@]}" -Xms256m -Xmx256m "${QUIET[@]}" org.apache.rocketmq.namesrv.NamesrvStartup \
        -c "$home/namesrv.conf" >"$home/namesrv.log" 2>&1 &
    local started=("$!")
    PIDS+=("$!")
    wait_for_line "$home/namesrv.log" 'boot success' 60
    for n in 1 2; do
        printf '%s\n' brokerClusterName=DefaultCluster brokerName=broker-a brokerId=-1 brokerRole=SLAVE \
            enableControllerMode=true controllerAddr=127.0.0.1:9878 allAckInSyncStateSet=true \
            namesrvAddr=127.0.0.1:9876 brokerIP1=127.0.0.1 "listenPort=3${n}911" "haListenPort=3${n}912" \
            flushDiskType=ASYNC_FLUSH "storePathRootDir=$home/store-$n" >"$home/broker-$n.conf"
        reference_broker "$home/broker-$n" "$home/broker-$n.conf"
        started+=("$BROKER_PID")
    done
    # Both replicas in the SyncStateSet before measuring.
    java_cmd "$home/admin-home"
    local deadline=$((SECONDS + 120))
    until "${JAVA[@]}" -Xmx128m "${QUIET[@]}" org.apache.rocketmq.tools.command.MQAdminStartup \
        getSyncStateSet -a 127.0.0.1:9878 -b broker-a 2>/dev/null | grep -q "#SyncStateSetNums[[:space:]]*2"; do
        [ "$SECONDS" -lt "$deadline" ] || { log "RocketMQ's SyncStateSet never reached two"; return 1; }
        sleep 1
    done
    measure rocketmq-controller "$round"
    kill "${started[@]}"
    wait "${started[@]}" 2>/dev/null || true
}

inside() {
    WORK="$(mktemp -d -t quiver-controller-throughput.XXXXXX)"
    trap cleanup EXIT
    quiet_logging
    dir="$WORK"
    : >"$WORK/rows.txt"
    local round
    for round in $(seq "$ROUNDS"); do
        run_quiver sync-master "$round"
        run_quiver controller "$round"
        run_rocketmq "$round"
    done
    median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
    local sync controller rocketmq
    sync=$(awk '$1 == "quiver-sync-master" { print $2 }' "$WORK/rows.txt" | median)
    controller=$(awk '$1 == "quiver-controller" { print $2 }' "$WORK/rows.txt" | median)
    rocketmq=$(awk '$1 == "rocketmq-controller" { print $2 }' "$WORK/rows.txt" | median)
    echo
    echo "| system | median msg/s |"
    echo "|---|---|"
    echo "| quiver SYNC_MASTER | $sync |"
    echo "| quiver controller mode | $controller |"
    echo "| rocketmq controller mode | $rocketmq |"
    awk -v s="$sync" -v c="$controller" -v r="$rocketmq" \
        'BEGIN { printf "\ncontroller / SYNC_MASTER: %.2f; quiver / rocketmq in controller mode: %.2f\n", c / s, c / r }'
}

if [ "${1:-}" = --inside-namespace ]; then
    inside
else
    run_in_namespace
fi
