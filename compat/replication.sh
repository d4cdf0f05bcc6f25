#!/usr/bin/env bash
# Master/slave replication against Apache RocketMQ 5.5.0, both ways, and exits non-zero if
# either way fails:
#
#   1. a Quiver slave (`quiver broker`) follows an Apache RocketMQ master;
#   2. an Apache RocketMQ slave follows a Quiver master (`quiver up`).
#
# Each sends REPLICATION_MESSAGES (2000) messages of 1 KiB over 8 queues to the master with
# RocketMQ's own producer, through CommitLog segments of 1 MiB so that several roll over, and
# then compares the two brokers (compat/replication/Replication.java): every queue's max offset,
# every record pulled from the slave at its offset against the master's byte for byte and
# against what was sent, and the CommitLog segment files of both stores up to the master's end.
# In the first, the Quiver slave must also record the master's timer progress.
#
#   compat/replication.sh                      build quiver (debug) and run both
#   QUIVER_BINARY=path compat/replication.sh   use that binary, build nothing
#
# The reference broker binds its HA port on every interface, so everything runs inside a
# private network namespace that has only `lo` (root and `unshare`); without them this prints
# why and skips. Logs of a failed run are kept in compat/target/replication-logs/.
set -euo pipefail

COMPAT="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$COMPAT")"
CLASSPATH_FILE="$COMPAT/target/reference.classpath"
KEPT_LOGS="$COMPAT/target/replication-logs"

MESSAGES="${REPLICATION_MESSAGES:-2000}"
BODY_BYTES=1024
QUEUES=8
TOPIC=ReplicationTest
# 2,000 records of about 1.2 KiB fill two and a bit 1 MiB segments: the slave meets two
# end-of-segment markers and starts new files at the master's bases.
SEGMENT_BYTES=1048576
# Per scenario, from the first send to the last comparison. A RocketMQ 5.5.0 slave first copies
# its master's topics (and only then serves pulls of them) 60 to 63 s after it starts, then once
# a minute; 2,000 sends take about 5 s.
CHECK_DEADLINE_S=80
# The whole run inside the namespace; both scenarios take about two minutes on 2 cores.
RUN_TIMEOUT_S=330

log() { echo "replication: $(date +%T) $*" >&2; }

# shellcheck source=reference-lib.sh
source "$COMPAT/reference-lib.sh"

# ---- inside the namespace ----

WORK=""
PIDS=()

# Reference name server on 127.0.0.1:9876, in $1.
reference_namesrv() {
    local dir="$1"
    mkdir -p "$dir"
    printf 'listenPort=9876\nbindAddress=127.0.0.1\n' >"$dir/namesrv.conf"
    java_cmd "$dir/home"
    "${JAVA[@]}" -Xms256m -Xmx256m "${QUIET[@]}" org.apache.rocketmq.namesrv.NamesrvStartup -c "$dir/namesrv.conf" >"$dir/namesrv.log" 2>&1 &
    PIDS+=("$!")
    wait_for_line "$dir/namesrv.log" 'boot success' 60
}

replication_tool() {
    local dir="$1"
    shift
    java_cmd "$dir/tool-home"
    timeout -k 5 $((CHECK_DEADLINE_S + 60)) "${JAVA[@]}" -Xmx256m "${QUIET[@]}" "$COMPAT/replication/Replication.java" "$@"
}

# Runs the check, then compares the CommitLog segment files of both stores up to the master's
# end (also when a later step of the check failed, so a report says how far replication got).
# $1 scenario folder, $2 master address, $3 slave address, $4 and $5 the stores.
check_replication() {
    local dir="$1" master="$2" slave="$3" master_store="$4" slave_store="$5" status=0 end base file copy length compared=0
    replication_tool "$dir" replicate 127.0.0.1:9876 broker-a "$master" "$slave" "$TOPIC" "$QUEUES" \
        "$MESSAGES" "$BODY_BYTES" "$CHECK_DEADLINE_S" | tee "$dir/check.out" || status=1
    end="$(sed -n 's/^end position \([0-9]*\)$/\1/p' "$dir/check.out")"
    [ -n "$end" ] || return 1
    for file in "$master_store"/commitlog/*; do
        base=$((10#$(basename "$file")))
        [ "$base" -lt "$end" ] || continue
        length=$((end - base < SEGMENT_BYTES ? end - base : SEGMENT_BYTES))
        copy="$slave_store/commitlog/$(basename "$file")"
        [ -f "$copy" ] || { log "segment $(basename "$file") is missing on the slave"; return 1; }
        # A Quiver segment file ends where its last write ended (after an end-of-segment marker,
        # before the marker's padding); RocketMQ's are always SEGMENT_BYTES long. Past a file's
        # end the log reads as zeros, so that is what each file is compared with.
        if [ "$(stat -c %s "$file")" != "$(stat -c %s "$copy")" ]; then
            log "segment $(basename "$file"): $(stat -c %s "$file") bytes on the master, $(stat -c %s "$copy") on the slave"
        fi
        if ! cmp -n "$length" <(cat "$file" /dev/zero) <(cat "$copy" /dev/zero); then
            log "segment $(basename "$file") differs within its first $length bytes"
            return 1
        fi
        compared=$((compared + 1))
    done
    log "$compared CommitLog segments identical on both stores up to position $end"
    [ "$compared" -ge 3 ] || { log "expected at least 3 segments below position $end"; return 1; }
    return "$status"
}

# 1. A Quiver slave follows an Apache RocketMQ master.
quiver_follows_reference() {
    local dir="$WORK/quiver-slave"
    mkdir -p "$dir"
    log "1. Quiver slave, Apache RocketMQ 5.5.0 master"
    reference_namesrv "$dir/namesrv"
    cat >"$dir/master.conf" <<EOF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
brokerRole=ASYNC_MASTER
brokerIP1=127.0.0.1
bindAddress=127.0.0.1
listenPort=10911
haListenPort=10912
namesrvAddr=127.0.0.1:9876
autoCreateTopicEnable=true
flushDiskType=ASYNC_FLUSH
mappedFileSizeCommitLog=$SEGMENT_BYTES
storePathRootDir=$dir/master-store
EOF
    reference_broker "$dir/master" "$dir/master.conf"
    log "reference master up"
    cat >"$dir/slave.conf" <<EOF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=1
brokerRole=SLAVE
listenPort=10921
namesrvAddr=127.0.0.1:9876
mappedFileSizeCommitLog=$SEGMENT_BYTES
storePathRootDir=$dir/slave-store
EOF
    "$QUIVER_BINARY" broker -c "$dir/slave.conf" -n 127.0.0.1:9876 \
        >"$dir/quiver.out" 2>"$dir/quiver.log" &
    PIDS+=("$!")
    wait_for_line "$dir/quiver.out" '^ready ' 60
    log "quiver slave up"
    replication_tool "$dir" create-topic 127.0.0.1:9876 127.0.0.1:10911 "$TOPIC" "$QUEUES" >"$dir/create-topic.out" 2>&1 ||
        { cat "$dir/create-topic.out" >&2; return 1; }
    check_replication "$dir" 127.0.0.1:10911 127.0.0.1:10921 "$dir/master-store" "$dir/slave-store" ||
        return 1
    # The slave also takes the master's timer progress (GET_TIMER_CHECK_POINT, RocketMQ's
    # 56-byte answer) once its log holds the master's end, into its own timer checkpoint.
    local progress="$dir/slave-store/config/timerCheckpoint.json" until_s=$((SECONDS + 30))
    until grep -Eq '"masterReadMs":[1-9]' "$progress" 2>/dev/null; do
        [ "$SECONDS" -lt "$until_s" ] ||
            { log "the slave did not record the master's timer progress in 30 s"; return 1; }
        sleep 0.2
    done
    log "the slave recorded the master's timer progress: $(cat "$progress")"
}

# 2. An Apache RocketMQ slave follows a Quiver master.
reference_follows_quiver() {
    local dir="$WORK/reference-slave"
    mkdir -p "$dir"
    log "2. Apache RocketMQ 5.5.0 slave, Quiver master"
    cat >"$dir/master.conf" <<EOF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
brokerRole=ASYNC_MASTER
listenPort=10911
haListenPort=10912
autoCreateTopicEnable=true
mappedFileSizeCommitLog=$SEGMENT_BYTES
storePathRootDir=$dir/master-store
EOF
    "$QUIVER_BINARY" up -c "$dir/master.conf" --namesrv-port 9876 \
        >"$dir/quiver.out" 2>"$dir/quiver.log" &
    PIDS+=("$!")
    wait_for_line "$dir/quiver.out" '^ready ' 60
    # The slave copies its master's topics 10 s after it starts and then once a minute: the
    # topic must exist on the master by then for the slave to serve pulls of it in time.
    replication_tool "$dir" create-topic 127.0.0.1:9876 127.0.0.1:10911 "$TOPIC" "$QUEUES" >"$dir/create-topic.out" 2>&1 ||
        { cat "$dir/create-topic.out" >&2; return 1; }
    cat >"$dir/slave.conf" <<EOF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=1
brokerRole=SLAVE
slaveReadEnable=true
brokerIP1=127.0.0.1
bindAddress=127.0.0.1
listenPort=10921
haListenPort=10922
namesrvAddr=127.0.0.1:9876
flushDiskType=ASYNC_FLUSH
mappedFileSizeCommitLog=$SEGMENT_BYTES
storePathRootDir=$dir/slave-store
EOF
    reference_broker "$dir/slave" "$dir/slave.conf"
    log "reference slave up"
    check_replication "$dir" 127.0.0.1:10911 127.0.0.1:10921 "$dir/master-store" "$dir/slave-store"
}

inside() {
    WORK="$(mktemp -d -t quiver-replication.XXXXXX)"
    run_scenarios "both directions" quiver_follows_reference:quiver-slave reference_follows_quiver:reference-slave
}

if [ "${1:-}" = --inside-namespace ]; then
    inside
else
    run_in_namespace
fi
