#!/usr/bin/env bash
# Controller mode against Apache RocketMQ 5.5.0. Each scenario starts a controller and two
# brokers of one broker set (`brokerId=-1`, `enableControllerMode=true`,
# `allAckInSyncStateSet=true`), waits for the first to be elected and the second to join its
# SyncStateSet (read with the unchanged `mqadmin getSyncStateSet` and `getControllerMetaData`),
# sends with RocketMQ's producer from 64 threads (compat/controller/Failover.java), kills the
# master with SIGKILL, and checks that the other is elected at a higher epoch, that the producer
# carries on on it, and that a new consumer group reads every acknowledged message from it. It
# prints the time from the kill to the new master's first acknowledgement. Before the kill
# `mqadmin getBrokerEpoch` must read both replicas' epochs, and after it `mqadmin
# cleanBrokerMetadata` must remove the dead broker from the controller. The scenarios:
#
#   - three `quiver controller` processes as the controller, two RocketMQ brokers, the master
#     moved to the other replica with `mqadmin electMaster` first, and then the controller's
#     leader node killed together with the master;
#   - RocketMQ's own controller (in its name server), a RocketMQ master and a Quiver replica,
#     which follows it over AutoSwitch HA and takes over;
#   - the same with a Quiver master and a RocketMQ replica;
#   - (ONLY_FIRST=1, or CONTROLLER=rocketmq for RocketMQ's controller) two RocketMQ brokers
#     under the one-node controller of `quiver namesrv -c` with `enableControllerInNamesrv`.
#
#   compat/controller.sh                      build quiver (debug) and run
#   QUIVER_BINARY=path compat/controller.sh   use that binary, build nothing
#   CONTROLLER=rocketmq compat/controller.sh  the first under Apache RocketMQ's own name server
#                                             and controller, for comparison (bench/failover.sh)
#   ONLY_FIRST=1 compat/controller.sh         only the first
#   SCENARIOS="function:folder ..."           the scenarios named
#
# The reference brokers bind their HA ports on every interface, so everything runs inside a
# private network namespace that has only `lo` (root and `unshare`); without them this prints
# why and skips. Logs of a failed run are kept in compat/target/controller-logs/.
set -euo pipefail

COMPAT="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$COMPAT")"
CLASSPATH_FILE="$COMPAT/target/reference.classpath"
KEPT_LOGS="$COMPAT/target/controller-logs"
TOPIC=FailoverTest
QUEUES=4
# Acknowledged messages wanted before the kill and after it.
ACKED_BEFORE=300
ACKED_AFTER=300
# The whole run inside the namespace; it takes about five minutes on 2 cores.
RUN_TIMEOUT_S=600
BROKER_HEAP=512m
# Threads of RocketMQ's producer sending, one message at a time each.
SENDERS="${SENDERS:-64}"
CONTROLLER="${CONTROLLER:-quiver}"

log() { echo "controller: $(date +%T) $*" >&2; }

# shellcheck source=reference-lib.sh
source "$COMPAT/reference-lib.sh"

WORK=""
PIDS=()

admin() {
    java_cmd "$WORK/admin-home"
    timeout -k 5 60 "${JAVA[@]}" -Xmx128m "${QUIET[@]}" org.apache.rocketmq.tools.command.MQAdminStartup "$@"
}

failover_tool() {
    java_cmd "$WORK/tool-home"
    timeout -k 5 150 "${JAVA[@]}" -Xmx256m "${QUIET[@]}" "$COMPAT/controller/Failover.java" "$@"
}

# Waits up to $2 seconds until getSyncStateSet, asked of the controller at $any, says broker-a's
# master is at $1 with $3 replicas in sync; leaves the last answer in $dir/sync-state-set.out.
wait_for_sync_state_set() {
    local master="$1" deadline=$((SECONDS + $2)) members="$3"
    while [ "$SECONDS" -lt "$deadline" ]; do
        if admin getSyncStateSet -a "$any" -b broker-a >"$dir/sync-state-set.out" 2>&1 &&
            grep -q "#MasterAddr[[:space:]]*$master" "$dir/sync-state-set.out" &&
            grep -q "#SyncStateSetNums[[:space:]]*$members" "$dir/sync-state-set.out"; then
            return 0
        fi
        sleep 1
    done
    log "broker-a's master is not $master with $members in sync after $2 s:"
    cat "$dir/sync-state-set.out" >&2
    return 1
}

field() { sed -n "s/^#$1[[:space:]]*//p" "$2" | head -n 1; }

# Starts the name server and the controller: Quiver's in its name server (one node), RocketMQ's
# in its name server (CONTROLLER=rocketmq), or with 3 nodes three `quiver controller` processes
# next to a `quiver namesrv`. Sets CONTROLLERS (the brokers' controllerAddr) and, for three
# nodes, CONTROLLER_PIDS by address.
start_controllers() {
    local nodes="$1" i peers=""
    declare -gA CONTROLLER_PIDS=()
    if [ "$nodes" = 3 ]; then
        for i in 0 1 2; do
            peers+="${peers:+;}n$i-127.0.0.1:98$((7 - i))8"
        done
        printf 'listenPort=9876\n' >"$dir/namesrv.conf"
        "$QUIVER_BINARY" namesrv -c "$dir/namesrv.conf" >"$dir/namesrv.out" 2>"$dir/namesrv.log" &
        PIDS+=("$!")
        wait_for_line "$dir/namesrv.out" '^ready ' 30
        CONTROLLERS=""
        for i in 0 1 2; do
            printf 'controllerDLegerGroup=group1\ncontrollerDLegerPeers=%s\ncontrollerDLegerSelfId=n%s\ncontrollerStorePath=%s\n' \
                "$peers" "$i" "$dir/controller-$i" >"$dir/controller-$i.conf"
            "$QUIVER_BINARY" controller -c "$dir/controller-$i.conf" >"$dir/controller-$i.out" 2>"$dir/controller-$i.log" &
            PIDS+=("$!")
            CONTROLLER_PIDS["127.0.0.1:98$((7 - i))8"]=$!
            CONTROLLERS+="${CONTROLLERS:+;}127.0.0.1:98$((7 - i))8"
        done
        for i in 0 1 2; do
            wait_for_line "$dir/controller-$i.out" '^ready ' 30
        done
        return
    fi
    CONTROLLERS=127.0.0.1:9878
    cat >"$dir/namesrv.conf" <<EOF
listenPort=9876
enableControllerInNamesrv=true
controllerDLegerGroup=group1
controllerDLegerPeers=n0-127.0.0.1:9878
controllerDLegerSelfId=n0
controllerStorePath=$dir/controller
EOF
    case $CONTROLLER in
        quiver)
            "$QUIVER_BINARY" namesrv -c "$dir/namesrv.conf" >"$dir/namesrv.out" 2>"$dir/namesrv.log" &
            PIDS+=("$!")
            wait_for_line "$dir/namesrv.out" '^ready ' 30
            ;;
        rocketmq)
            echo "bindAddress=127.0.0.1" >>"$dir/namesrv.conf"
            java_cmd "$dir/namesrv-home"
            "${JAVA[@]}" -Xms256m -Xmx256m "${QUIET[@]}" org.apache.rocketmq.namesrv.NamesrvStartup \
                -c "$dir/namesrv.conf" >"$dir/namesrv.log" 2>&1 &
            PIDS+=("$!")
            wait_for_line "$dir/namesrv.log" 'boot success' 60
            ;;
        *) log "CONTROLLER is quiver or rocketmq, not $CONTROLLER"; return 1 ;;
    esac
}

# An operator moves the master by hand: `mqadmin electMaster` names the other replica, the
# controller elects it at a higher epoch, and the old master follows it into its SyncStateSet.
# Swaps master and other, and updates epoch, master_id and master_pid (fail_over's locals).
move_master_by_hand() {
    local other_id moved_epoch
    other_id="$(sed -n "s/.*brokerId=\([0-9]*\), brokerAddress='$other'.*/\1/p" "$dir/sync-state-set.out" | head -n 1)"
    [ -n "$other_id" ] || { log "no id for $other in:"; cat "$dir/sync-state-set.out" >&2; return 1; }
    admin electMaster -a "$leader" -c DefaultCluster -bn broker-a -b "$other_id" >"$dir/elect.out" 2>&1 ||
        { log "electMaster:"; cat "$dir/elect.out" >&2; return 1; }
    wait_for_sync_state_set "$other" 60 2 || return 1
    moved_epoch="$(field MasterEpoch "$dir/sync-state-set.out")"
    [ "$moved_epoch" -gt "$epoch" ] || { log "electMaster left epoch $moved_epoch, not above $epoch"; return 1; }
    log "electMaster moved the master to $other (id $other_id) at epoch $moved_epoch"
    epoch="$moved_epoch"
    master_id="$other_id"
    other="$master"
    master="$(field MasterAddr "$dir/sync-state-set.out")"
    if [ "$master" = 127.0.0.1:31911 ]; then
        master_pid="${pids[0]}"
    else
        master_pid="${pids[1]}"
    fi
}

# The scenario: $1 controller nodes (1 or 3); with $2 = leader-too, the controller's leader node
# is killed together with the master; $3 and $4 what the two brokers are, `rocketmq` (the
# default) or `quiver`, started in that order (the first is elected).
fail_over() {
    local nodes="$1" also="${2:-}" kinds=("${3:-rocketmq}" "${4:-rocketmq}")
    start_controllers "$nodes"
    local n pids=()
    for n in 1 2; do
        cat >"$dir/broker-$n.conf" <<EOF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=-1
brokerRole=SLAVE
enableControllerMode=true
controllerAddr=$CONTROLLERS
allAckInSyncStateSet=true
namesrvAddr=127.0.0.1:9876
brokerIP1=127.0.0.1
listenPort=3${n}911
haListenPort=3${n}912
flushDiskType=ASYNC_FLUSH
storePathRootDir=$dir/store-$n
EOF
        if [ "${kinds[$((n - 1))]}" = quiver ]; then
            mkdir -p "$dir/broker-$n"
            "$QUIVER_BINARY" broker -c "$dir/broker-$n.conf" >"$dir/broker-$n/broker.out" \
                2>"$dir/broker-$n/broker.log" &
            PIDS+=("$!")
            pids+=("$!")
            wait_for_line "$dir/broker-$n/broker.out" '^ready ' 30
        else
            reference_broker "$dir/broker-$n" "$dir/broker-$n.conf"
            pids+=("$BROKER_PID")
        fi
        # The first is elected before the second starts.
        if [ "$n" = 1 ]; then
            local any="${CONTROLLERS%%;*}"
            wait_for_sync_state_set 127.0.0.1:31911 90 1
        fi
    done
    local any="${CONTROLLERS%%;*}"
    # The first to register is elected; the other follows it and joins the SyncStateSet.
    local deadline=$((SECONDS + 90)) master=""
    while [ "$SECONDS" -lt "$deadline" ] && [ -z "$master" ]; do
        admin getSyncStateSet -a "$any" -b broker-a >"$dir/sync-state-set.out" 2>&1 || true
        if grep -q "#SyncStateSetNums[[:space:]]*2" "$dir/sync-state-set.out"; then
            master="$(field MasterAddr "$dir/sync-state-set.out")"
        else
            sleep 1
        fi
    done
    [ -n "$master" ] || { log "no SyncStateSet of two within 90 s:"; cat "$dir/sync-state-set.out" >&2; return 1; }
    local epoch master_id
    epoch="$(field MasterEpoch "$dir/sync-state-set.out")"
    master_id="$(field MasterBrokerId "$dir/sync-state-set.out")"
    log "master $master (id $master_id) at epoch $epoch, both replicas in sync"
    admin getControllerMetaData -a "$any" >"$dir/metadata.out" 2>&1
    local leader
    leader="$(field ControllerLeaderAddress "$dir/metadata.out")"
    [ -n "$leader" ] || { cat "$dir/metadata.out" >&2; return 1; }
    log "controller leader $leader"
    local other master_pid
    if [ "$master" = 127.0.0.1:31911 ]; then
        other=127.0.0.1:32911
    else
        other=127.0.0.1:31911
    fi
    if [ "$master" = 127.0.0.1:31911 ]; then
        master_pid="${pids[0]}"
    else
        master_pid="${pids[1]}"
    fi
    if [ "$also" = leader-too ]; then
        move_master_by_hand || return 1
    fi
    failover_tool create-topic 127.0.0.1:9876 "$master" "$TOPIC" "$QUEUES" >"$dir/topic.out" 2>&1 ||
        { cat "$dir/topic.out" >&2; return 1; }
    failover_tool create-topic 127.0.0.1:9876 "$other" "$TOPIC" "$QUEUES" >>"$dir/topic.out" 2>&1 ||
        { cat "$dir/topic.out" >&2; return 1; }

    local acked="$dir/acked.txt" stop="$dir/stop"
    : >"$acked"
    failover_tool send 127.0.0.1:9876 "$TOPIC" "$acked" "$stop" 120 "$SENDERS" >"$dir/send.out" 2>&1 &
    local sender=$!
    deadline=$((SECONDS + 60))
    until [ "$(wc -l <"$acked")" -ge "$ACKED_BEFORE" ]; do
        [ "$SECONDS" -lt "$deadline" ] || { log "not $ACKED_BEFORE acknowledged in 60 s"; cat "$dir/send.out" >&2; return 1; }
        sleep 0.1
    done
    # Both replicas hold the same epochs now, each starting at the same offset: each answers
    # GET_BROKER_EPOCH_CACHE (mqadmin getBrokerEpoch asks every replica of the set). RocketMQ
    # records no epoch that starts where the one before it does, so a master moved on an empty
    # log writes on under the epoch it had.
    admin getBrokerEpoch -n 127.0.0.1:9876 -b broker-a >"$dir/epochs.out" 2>&1
    local epochs_held
    epochs_held="$(grep -o '#Epoch: EpochEntry{epoch=[0-9]*, startOffset=[0-9]*' "$dir/epochs.out" | sort | uniq -c)"
    [ -n "$epochs_held" ] && ! grep -qv '^ *2 ' <<<"$epochs_held" ||
        { log "getBrokerEpoch:"; cat "$dir/epochs.out" >&2; return 1; }
    local killed_ms before
    before="$(wc -l <"$acked")"
    killed_ms="$(date +%s%3N)"
    if [ "$also" = leader-too ]; then
        kill -9 "${CONTROLLER_PIDS[$leader]}" "$master_pid"
        log "killed the controller leader $leader and the master $master after $before acknowledgements"
        any="${CONTROLLERS/$leader/}"
        any="${any#;}"
        any="${any%%;*}"
    else
        kill -9 "$master_pid"
        log "killed the master $master after $before acknowledgements"
    fi
    wait_for_sync_state_set "$other" 60 1
    local new_epoch
    new_epoch="$(field MasterEpoch "$dir/sync-state-set.out")"
    [ "$new_epoch" -gt "$epoch" ] || { log "the new master's epoch $new_epoch is not above $epoch"; return 1; }
    log "$other elected at epoch $new_epoch"
    deadline=$((SECONDS + 90))
    until [ "$(wc -l <"$acked")" -ge $((before + ACKED_AFTER)) ]; do
        [ "$SECONDS" -lt "$deadline" ] ||
            { log "not $ACKED_AFTER more acknowledged within 90 s of the failover"; cat "$dir/send.out" >&2; return 1; }
        sleep 0.1
    done
    touch "$stop"
    wait "$sender" || { cat "$dir/send.out" >&2; return 1; }
    cat "$dir/send.out"
    local first_after
    # The first message the new master stored: sends the old one acknowledged just before it
    # died may still be answered after the kill.
    first_after="$(awk -v k="$killed_ms" -v a="$other" '$2 > k && $3 == a { print $2; exit }' "$acked")"
    [ -n "$first_after" ] || { log "no acknowledgement from $other"; return 1; }
    log "first acknowledgement $((first_after - killed_ms)) ms after the kill" \
        "($(awk -v k="$killed_ms" '$2 > k' "$acked" | wc -l) acknowledged since)"
    failover_tool check 127.0.0.1:9876 "$TOPIC" "$acked" 60 | tee "$dir/check.out"
    # The killed broker is no longer alive: its id can be cleaned from the controller.
    admin cleanBrokerMetadata -a "$any" -bn broker-a -b "$master_id" -c DefaultCluster \
        >"$dir/clean.out" 2>&1
    grep -q "success" "$dir/clean.out" || { log "cleanBrokerMetadata:"; cat "$dir/clean.out" >&2; return 1; }
    wait_for_sync_state_set "$other" 30 1
    if grep -q "brokerId=$master_id," "$dir/sync-state-set.out"; then
        log "broker $master_id is still a replica after cleanBrokerMetadata:"
        cat "$dir/sync-state-set.out" >&2
        return 1
    fi
    log "cleanBrokerMetadata removed broker $master_id"
}


rocketmq_brokers_fail_over_under_a_controller() {
    dir="$WORK/reference-brokers"
    mkdir -p "$dir"
    log "Apache RocketMQ 5.5.0 brokers under the $CONTROLLER controller"
    fail_over 1
}

a_quiver_replica_takes_over_from_a_rocketmq_master() {
    local CONTROLLER=rocketmq
    dir="$WORK/quiver-after-rocketmq"
    mkdir -p "$dir"
    log "an Apache RocketMQ 5.5.0 master and a Quiver replica under the $CONTROLLER controller"
    fail_over 1 "" rocketmq quiver
}

# Not in the default list (crates/cli/tests/controller_failover.rs covers it): for
# bench/failover.sh, Quiver's brokers under Quiver's controller.
quiver_brokers_fail_over_under_quivers_controller() {
    local CONTROLLER=quiver
    dir="$WORK/quiver-brokers"
    mkdir -p "$dir"
    log "Quiver brokers under the quiver controller"
    fail_over 1 "" quiver quiver
}

a_rocketmq_replica_takes_over_from_a_quiver_master() {
    local CONTROLLER=rocketmq
    dir="$WORK/rocketmq-after-quiver"
    mkdir -p "$dir"
    log "a Quiver master and an Apache RocketMQ 5.5.0 replica under the $CONTROLLER controller"
    fail_over 1 "" quiver rocketmq
}

rocketmq_brokers_fail_over_when_the_controller_leader_dies_with_the_master() {
    dir="$WORK/three-controllers"
    mkdir -p "$dir"
    log "Apache RocketMQ 5.5.0 brokers under three Quiver controller nodes; the leader node dies with the master"
    fail_over 3 leader-too
}

inside() {
    WORK="$(mktemp -d -t quiver-controller.XXXXXX)"
    # The first, RocketMQ brokers under the one-node controller of `quiver namesrv`, is left to
    # CONTROLLER=rocketmq and bench/failover.sh: the three-node one covers Quiver's controller
    # with RocketMQ's brokers, and crates/cli/tests/controller_failover.rs its namesrv mode.
    local scenarios=(
        rocketmq_brokers_fail_over_when_the_controller_leader_dies_with_the_master:three-controllers
        a_quiver_replica_takes_over_from_a_rocketmq_master:quiver-after-rocketmq
        a_rocketmq_replica_takes_over_from_a_quiver_master:rocketmq-after-quiver
    )
    if [ "$CONTROLLER" != quiver ] || [ "${ONLY_FIRST:-0}" = 1 ]; then
        scenarios=(rocketmq_brokers_fail_over_under_a_controller:reference-brokers)
    fi
    if [ -n "${SCENARIOS:-}" ]; then
        read -r -a scenarios <<<"$SCENARIOS"
    fi
    run_scenarios "controller mode" "${scenarios[@]}"
}

if [ "${1:-}" = --inside-namespace ]; then
    inside
else
    run_in_namespace
fi
