#!/usr/bin/env bash
# Master/slave replication, Quiver against Apache RocketMQ 5.5.0 in the same run on this machine:
# one master and one slave in each of the four modes ASYNC_MASTER/SYNC_MASTER x
# ASYNC_FLUSH/SYNC_FLUSH, driven by RocketMQ's official benchmark Producer (rocketmq-example
# 5.5.0) with 2 KiB bodies into a topic of 8 queues, at -w 16 and -w 64.
#
#   bench/replication.sh                                   # the whole matrix, one round
#   ROUNDS=3 bench/replication.sh                          # three rounds; tables give medians
#   MODES="ASYNC_MASTER:ASYNC_FLUSH" THREADS="64" SYSTEMS="quiver" SECONDS=20 bench/replication.sh
#
# Settings (environment):
#   ROUNDS (or PAIRS)  rounds of the matrix, default 1. Within a round the two systems run
#                      back to back for each mode and thread count, Quiver first.
#   SECONDS            measured seconds per run, default 30 (MEASURE_S says the same).
#   WARMUP             seconds the Producer runs before the measured window opens, default 20:
#                      a fresh Java client needs about 20 s to reach full speed, so the first
#                      part of every run is thrown away and only the last SECONDS count.
#   MODES              "ROLE:FLUSH ..." pairs, default all four.
#   THREADS            Producer threads (-w), default "16 64".
#   SYSTEMS            "quiver rocketmq" (default) or one of them.
#   QUIVER             a quiver binary; without it this checkout is built with
#                      `flock /tmp/quiver-build.lock cargo build --release -p quiver`. If you hold
#                      that lock around this script (to keep builds away), build first and pass
#                      QUIVER=target/release/quiver, or the build waits for your own lock.
#
# Processes, per run, all fresh with their own data folders:
#   Quiver:   `quiver namesrv`, a master `quiver broker` (listenPort 10911, haListenPort 10912)
#             and a slave `quiver broker` (brokerId=1, brokerRole=SLAVE, listenPort 10921).
#   RocketMQ: NamesrvStartup, a master and a slave BrokerStartup on the same ports, each broker
#             with -Xms1g -Xmx1g -XX:MaxDirectMemorySize=1g and G1 (as bench/official.sh).
# Both get the same broker.conf lines; Quiver ignores the keys it does not use. The slave has the
# mode's flushDiskType and learns the master's HA address from the name server: a 5.5.0 slave
# given haMasterAddress never connects ("HAClient connect to master null", and it then stops
# asking the name server), so neither system gets that key. A SYNC_MASTER also gets
# totalReplicas=2 and inSyncReplicas=2: RocketMQ 5 waits for the slave only then; Quiver waits
# for it whatever they say.
#
# How each figure is taken (tools: bench/rocketmq/ReplicationProbe.java, one JVM per run):
#   stored msg/s   messages the master stored in the measured window (sum of the topic's queue
#                  max offsets, read at both ends with RocketMQ's admin API) / window length.
#   producer TPS   mean of the Producer's "Send TPS" over its report lines (-ri 1000: one a
#                  second) printed at least 9 s into the window: each line covers the 9 s
#                  before it, so none of them reaches back into the warm-up.
#   avg RT ms      the same lines' "Average RT(ms)", weighted by their TPS.
#   max RT ms      the Producer's "Max RT(ms)" on its last line. The Producer never resets it, so
#                  it covers the whole run, warm-up included; marked "w" when it was already
#                  reached before the window opened.
#   failed         "Send Failed" + "Response Failed" on the last line (whole run).
#   CPU s/100k     (utime + stime) of the master and the slave process together over the window,
#                  per 100,000 stored messages. The name server is not counted (for either).
#   RSS MiB        peak VmRSS of each broker process, sampled every 0.2 s over the whole run. A
#                  RocketMQ broker's RSS includes its 1 GiB pre-touched heap and its mapped
#                  CommitLog pages.
#   lag KiB        master's CommitLog max position minus the slave's (commitLogMaxOffset in
#                  GET_BROKER_RUNTIME_INFO, code 28, on both systems), sampled every 200 ms in the
#                  window, master first then slave; p50, p99 and max.
#
# Uses fixed ports 9876, 10911, 10912, 10921 and 10922: as root it runs inside a private network
# namespace holding only `lo` (RocketMQ's HA port binds the wildcard address). Every run ends by
# stopping its processes; the script stops whatever is left on exit. About 90 s per RocketMQ run
# and 60 s per Quiver run with the defaults: the full matrix is about 20 minutes a round. Not run
# in CI: it measures the machine it runs on, which should be quiet.
set -euo pipefail

# SECONDS is bash's own clock; it is only in the environment when the caller set it.
MEASURE_S=${MEASURE_S:-$(printenv SECONDS || echo 30)}
export MEASURE_S

REPO="$(cd "$(dirname "$0")/.." && pwd)"
if [ "$(id -u)" = 0 ] && [ -z "${REPLICATION_IN_NAMESPACE:-}" ] && command -v unshare >/dev/null; then
    exec unshare -n -- env REPLICATION_IN_NAMESPACE=1 bash -c 'ip link set lo up && exec bash "$0" "$@"' "$0" "$@"
fi

ROUNDS=${ROUNDS:-${PAIRS:-1}}
WARMUP=${WARMUP:-20}
MODES=${MODES:-"ASYNC_MASTER:ASYNC_FLUSH ASYNC_MASTER:SYNC_FLUSH SYNC_MASTER:ASYNC_FLUSH SYNC_MASTER:SYNC_FLUSH"}
THREADS=${THREADS:-"16 64"}
SYSTEMS=${SYSTEMS:-"quiver rocketmq"}
TOPIC=ReplicationBench
BODY_BYTES=2048
NAMESRV=127.0.0.1:9876
MASTER=127.0.0.1:10911
SLAVE=127.0.0.1:10921
CLK_TCK=$(getconf CLK_TCK)

WORK="$(mktemp -d /tmp/quiver-replication.XXXXXX)"
PIDS=()
stop_pid() { # PID: SIGTERM, then SIGKILL after 20 s
    local pid=$1
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
stop_all() { # newest first: clients, then brokers, then the name server
    local i
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do stop_pid "${PIDS[$i]}"; done
    PIDS=()
}
cleanup() {
    stop_all
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() { echo "replication.sh: $*" >&2; exit 1; }
wait_for() { # FILE PATTERN SECONDS
    for _ in $(seq $(($3 * 10))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    tail -20 "$1" >&2 || true
    fail "no \"$2\" in $1 within $3 s"
}

for system in $SYSTEMS; do
    case $system in quiver | rocketmq) ;; *) fail "unknown system $system (quiver, rocketmq)" ;; esac
done
for mode in $MODES; do
    case $mode in
        ASYNC_MASTER:ASYNC_FLUSH | ASYNC_MASTER:SYNC_FLUSH | SYNC_MASTER:ASYNC_FLUSH | SYNC_MASTER:SYNC_FLUSH) ;;
        *) fail "unknown mode $mode (ROLE:FLUSH, say ASYNC_MASTER:SYNC_FLUSH)" ;;
    esac
done

if [[ " $SYSTEMS " == *" quiver "* ]] && [ -z "${QUIVER:-}" ]; then
    flock -n /tmp/quiver-build.lock true ||
        echo "replication.sh: waiting for /tmp/quiver-build.lock to build (holding it yourself? pass QUIVER=)" >&2
    (cd "$REPO" && flock /tmp/quiver-build.lock cargo build --release -p quiver >/dev/null 2>&1) ||
        fail "cargo build --release -p quiver failed"
    QUIVER="$REPO/target/release/quiver"
fi

mvn -q -o -f "$REPO/bench/rocketmq/pom.xml" -Dmaven.repo.local="$REPO/.cache/m2" \
    dependency:build-classpath -Dmdep.outputFile="$WORK/classpath.txt" >/dev/null 2>&1 ||
    mvn -q -f "$REPO/bench/rocketmq/pom.xml" -Dmaven.repo.local="$REPO/.cache/m2" \
        dependency:build-classpath -Dmdep.outputFile="$WORK/classpath.txt" >/dev/null
CLASSPATH_JARS="$(cat "$WORK/classpath.txt")"
mkdir -p "$WORK/classes"
javac -nowarn -cp "$CLASSPATH_JARS" -d "$WORK/classes" "$REPO/bench/rocketmq/ReplicationProbe.java"

jvm() { # HOME_DIR: sets JVM to a java command whose logs and state stay in HOME_DIR
    mkdir -p "$1"
    JVM=(java -Duser.home="$1" -Drocketmq.home.dir="$1" -cp "$WORK/classes:$CLASSPATH_JARS")
}

write_confs() { # RUN ROLE FLUSH
    local run=$1 role=$2 flush=$3 common
    common="brokerClusterName=DefaultCluster brokerName=broker-a brokerIP1=127.0.0.1 bindAddress=127.0.0.1
namesrvAddr=$NAMESRV autoCreateTopicEnable=true flushDiskType=$flush"
    printf '%s\n' $common brokerId=0 "brokerRole=$role" listenPort=10911 haListenPort=10912 \
        "storePathRootDir=$run/master" > "$run/master.conf"
    [ "$role" = SYNC_MASTER ] && printf '%s\n' totalReplicas=2 inSyncReplicas=2 >> "$run/master.conf"
    printf '%s\n' $common brokerId=1 brokerRole=SLAVE listenPort=10921 haListenPort=10922 \
        "storePathRootDir=$run/slave" > "$run/slave.conf"
    printf 'listenPort=9876\nbindAddress=127.0.0.1\n' > "$run/namesrv.conf"
}

start_quiver() { # RUN
    local run=$1
    "$QUIVER" namesrv --listen "$NAMESRV" > "$run/namesrv.out" 2> "$run/namesrv.log" &
    PIDS+=($!)
    wait_for "$run/namesrv.out" '^ready' 30
    "$QUIVER" broker -c "$run/master.conf" > "$run/master.out" 2> "$run/master.log" &
    MASTER_PID=$!; PIDS+=("$MASTER_PID")
    "$QUIVER" broker -c "$run/slave.conf" > "$run/slave.out" 2> "$run/slave.log" &
    SLAVE_PID=$!; PIDS+=("$SLAVE_PID")
    wait_for "$run/master.out" '^ready' 30
    wait_for "$run/slave.out" '^ready' 30
}

start_rocketmq() { # RUN
    local run=$1 broker_jvm=(-Xms1g -Xmx1g -XX:MaxDirectMemorySize=1g -XX:+UseG1GC)
    jvm "$run/home-namesrv"
    "${JVM[@]}" -Xms256m -Xmx256m -XX:+UseG1GC org.apache.rocketmq.namesrv.NamesrvStartup \
        -c "$run/namesrv.conf" > "$run/namesrv.out" 2>&1 &
    PIDS+=($!)
    wait_for "$run/namesrv.out" "boot success" 60
    jvm "$run/home-master"
    "${JVM[@]}" "${broker_jvm[@]}" org.apache.rocketmq.broker.BrokerStartup \
        -c "$run/master.conf" > "$run/master.out" 2>&1 &
    MASTER_PID=$!; PIDS+=("$MASTER_PID")
    jvm "$run/home-slave"
    "${JVM[@]}" "${broker_jvm[@]}" org.apache.rocketmq.broker.BrokerStartup \
        -c "$run/slave.conf" > "$run/slave.out" 2>&1 &
    SLAVE_PID=$!; PIDS+=("$SLAVE_PID")
    wait_for "$run/master.out" "boot success" 120
    wait_for "$run/slave.out" "boot success" 120
}

create_topic() { # RUN: the cluster is unknown to the name server until the master's first
    # registration, a few seconds after a RocketMQ broker printed "boot success": try for 30 s.
    local run=$1
    jvm "$run/home-admin"
    for _ in $(seq 30); do
        "${JVM[@]}" org.apache.rocketmq.tools.command.MQAdminStartup updateTopic -n "$NAMESRV" \
            -c DefaultCluster -t "$TOPIC" -r 8 -w 8 > "$run/update.out" 2>&1 || true
        grep -q success "$run/update.out" && return 0
        sleep 1
    done
    tail -5 "$run/update.out" >&2
    fail "could not create $TOPIC with 8 queues"
}

sample_rss() { # PID FILE: peak VmRSS in KiB, rewritten whenever it grows
    local pid=$1 file=$2 peak=0 r
    echo 0 > "$file"
    while kill -0 "$pid" 2>/dev/null; do
        r=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
        if [ -n "$r" ] && [ "$r" -gt "$peak" ]; then peak=$r; echo "$peak" > "$file"; fi
        sleep 0.2
    done
}

# Each Producer line on arrival, prefixed with the epoch time in ms.
stamp_lines() {
    local line now
    while IFS= read -r line; do
        now=${EPOCHREALTIME/[.,]/}
        printf '%s %s\n' "${now:0:-3}" "$line"
    done
}

# One run; appends one tab-separated row to $WORK/results.tsv.
run_one() { # SYSTEM ROLE FLUSH THREADS ROUND
    local system=$1 role=$2 flush=$3 threads=$4 round=$5
    local run="$WORK/run" probe_timeout=$((WARMUP + MEASURE_S + 150))
    rm -rf "$run"; mkdir -p "$run"
    echo "replication.sh: $system $role $flush -w $threads round $round" >&2
    write_confs "$run" "$role" "$flush"
    "start_$system" "$run"
    sample_rss "$MASTER_PID" "$run/rss.master" & PIDS+=($!)
    sample_rss "$SLAVE_PID" "$run/rss.slave" & PIDS+=($!)
    create_topic "$run"

    jvm "$run/home-probe"
    timeout "$probe_timeout" "${JVM[@]}" -Xmx128m -XX:+UseSerialGC ReplicationProbe "$NAMESRV" \
        "$TOPIC" "$MASTER" "$SLAVE" "$WARMUP" "$MEASURE_S" "$run/lag" "$MASTER_PID" "$SLAVE_PID" \
        > "$run/probe.out" 2> "$run/probe.log" &
    local probe_pid=$!; PIDS+=("$probe_pid")
    for _ in $(seq 1000); do
        grep -q '^ready' "$run/probe.out" && break
        kill -0 "$probe_pid" 2>/dev/null || break
        sleep 0.1
    done
    grep -q '^ready' "$run/probe.out" || { tail -20 "$run/probe.log" >&2; fail "$system: the slave never caught up"; }

    mkfifo "$run/producer.fifo"
    stamp_lines < "$run/producer.fifo" > "$run/producer.out" & PIDS+=($!)
    jvm "$run/home-producer"
    timeout "$probe_timeout" "${JVM[@]}" org.apache.rocketmq.example.benchmark.Producer \
        -n "$NAMESRV" -t "$TOPIC" -w "$threads" -s "$BODY_BYTES" -ri 1000 > "$run/producer.fifo" 2>&1 &
    local producer_pid=$!; PIDS+=("$producer_pid")
    wait "$probe_pid" || { tail -20 "$run/probe.log" >&2; fail "$system: the probe failed"; }
    stop_all

    local window_start window_end stored0 stored1 ticks0 ticks1
    eval "$(grep -E '^(window_start_ms|window_end_ms|stored0|stored1|ticks0|ticks1)=[0-9]+$' "$run/probe.out" |
        sed 's/_ms=/=/')"
    awk -v ws="$window_start" -v we="$window_end" -v sys="$system" -v role="$role" -v flush="$flush" \
        -v threads="$threads" -v round="$round" -v stored="$((stored1 - stored0))" \
        -v ticks="$((ticks1 - ticks0))" -v hz="$CLK_TCK" \
        -v rss_m="$(cat "$run/rss.master")" -v rss_s="$(cat "$run/rss.slave")" \
        -v lag="$(awk '{d = $2 - $3; print (d < 0 ? 0 : d)}' "$run/lag" | sort -n | tr '\n' ' ')" '
        function pct(p,   i) { if (nlag == 0) return "-"; i = int(p * nlag + 0.999999); if (i < 1) i = 1; return sprintf("%.0f", l[i] / 1024) }
        /Send TPS/ {
            split($0, f, "|")
            for (k in f) {
                if (f[k] ~ /Send TPS/) tps = f[k]
                if (f[k] ~ /Max RT/) max = f[k]
                if (f[k] ~ /Average RT/) avg = f[k]
                if (f[k] ~ /Send Failed/) sf = f[k]
                if (f[k] ~ /Response Failed/) rf = f[k]
            }
            gsub(/[^0-9.]/, "", tps); sub(/.*:/, "", max); gsub(/[^0-9]/, "", max)
            sub(/.*:/, "", avg); gsub(/[^0-9.]/, "", avg)
            gsub(/[^0-9]/, "", sf); gsub(/[^0-9]/, "", rf)
            t = $1
            if (t <= ws + 500) max_before = max
            last_max = max; failed = sf + rf
            if (t >= ws + 9000 && t <= we + 1000) { n++; sum_tps += tps; sum_rt += tps * avg }
        }
        END {
            nlag = split(lag, l, " ")
            secs = (we - ws) / 1000
            printf "%s\t%s\t%s\t%s\t%s", sys, role ":" flush, threads, round, (secs > 0 ? sprintf("%.0f", stored / secs) : "-")
            printf "\t%s\t%s", (n ? sprintf("%.0f", sum_tps / n) : "-"), (sum_tps > 0 ? sprintf("%.3f", sum_rt / sum_tps) : "-")
            printf "\t%s%s\t%s", (last_max == "" ? "-" : last_max), (last_max != "" && max_before == last_max ? "w" : ""), (failed == "" ? "-" : failed)
            printf "\t%s", (stored > 0 ? sprintf("%.2f", ticks / hz * 100000 / stored) : "-")
            printf "\t%.0f\t%.0f\t%s\t%s\t%s\t%d\n", rss_m / 1024, rss_s / 1024, pct(0.5), pct(0.99), pct(1), nlag
        }' "$run/producer.out" >> "$WORK/results.tsv"
    tail -1 "$WORK/results.tsv" >&2
    mkdir -p "$WORK/kept"
    cp "$run/producer.out" "$WORK/kept/$system-${role}-${flush}-w$threads-r$round.producer" 2>/dev/null || true
    rm -rf "$run"
}

: > "$WORK/results.tsv"
for round in $(seq "$ROUNDS"); do
    for mode in $MODES; do
        for threads in $THREADS; do
            for system in $SYSTEMS; do
                run_one "$system" "${mode%%:*}" "${mode##*:}" "$threads" "$round"
            done
        done
    done
done

echo "replication: 1 master + 1 slave, Producer -s $BODY_BYTES, topic of 8 queues, warm-up ${WARMUP} s, measured ${MEASURE_S} s, $ROUNDS round(s), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
awk -F'\t' -v rounds="$ROUNDS" '
    function median(key, col,   n, i, j, v, t, c) {
        n = 0
        for (i = 1; i <= rows; i++) if (k[i] == key && cell[i, col] != "-") v[++n] = cell[i, col] + 0
        if (n == 0) return "-"
        for (i = 2; i <= n; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
        return (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    function ratio(a, b) { return (a == "-" || b == "-" || b == 0) ? "-" : sprintf("%.2f", a / b) }
    {
        rows++; k[rows] = $1 SUBSEP $2 SUBSEP $3
        for (c = 1; c <= NF; c++) cell[rows, c] = $c
        if (!(($1) in seen_system)) { seen_system[$1] = 1; systems[++nsystems] = $1 }
        if (!(($2 SUBSEP $3) in seen_case)) { seen_case[$2 SUBSEP $3] = 1; cases[++ncases] = $2 SUBSEP $3 }
    }
    END {
        for (s = 1; s <= nsystems; s++) {
            printf "\n### %s\n\n", systems[s]
            print "| mode | -w | round | stored msg/s | producer TPS | avg RT ms | max RT ms | failed | CPU s/100k msg (master+slave) | master RSS MiB | slave RSS MiB | lag p50 KiB | lag p99 KiB | lag max KiB | lag samples |"
            print "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
            for (i = 1; i <= rows; i++) {
                if (cell[i, 1] != systems[s]) continue
                line = "|"
                for (c = 2; c <= 16; c++) line = line " " cell[i, c] " |"
                print line
            }
            if (rounds > 1) for (j = 1; j <= ncases; j++) {
                split(cases[j], m, SUBSEP); key = systems[s] SUBSEP m[1] SUBSEP m[2]
                printf "| %s | %s | median | %s | %s | %s | | | %s | %s | %s | | %s | | |\n", m[1], m[2],
                    median(key, 5), median(key, 6), median(key, 7), median(key, 10), median(key, 11), median(key, 12), median(key, 14)
            }
        }
        if (("quiver" in seen_system) && ("rocketmq" in seen_system)) {
            print "\n### Quiver / RocketMQ (medians over rounds)\n"
            print "| mode | -w | stored msg/s | producer TPS | avg RT | CPU s/100k msg | master RSS | slave RSS | lag p99 |"
            print "|---|---|---|---|---|---|---|---|---|"
            for (j = 1; j <= ncases; j++) {
                split(cases[j], m, SUBSEP); q = "quiver" SUBSEP m[1] SUBSEP m[2]; r = "rocketmq" SUBSEP m[1] SUBSEP m[2]
                line = "| " m[1] " | " m[2] " |"
                split("5 6 7 10 11 12 14", cols, " ")
                for (c = 1; c <= 7; c++) line = line " " ratio(median(q, cols[c]), median(r, cols[c])) " |"
                print line
            }
        }
        header = 0
        for (s = 1; s <= nsystems; s++) for (j = 1; j <= ncases; j++) {
            split(cases[j], m, SUBSEP)
            if (m[1] !~ /^SYNC_MASTER:/) continue
            flush = m[1]; sub(/^SYNC_MASTER:/, "", flush)
            a = systems[s] SUBSEP "ASYNC_MASTER:" flush SUBSEP m[2]; y = systems[s] SUBSEP m[1] SUBSEP m[2]
            if (median(a, 5) == "-") continue
            if (!header) {
                print "\n### SYNC_MASTER / ASYNC_MASTER (medians over rounds)\n"
                print "| system | flush | -w | stored msg/s | producer TPS | avg RT | CPU s/100k msg |"
                print "|---|---|---|---|---|---|---|"
                header = 1
            }
            printf "| %s | %s | %s | %s | %s | %s | %s |\n", systems[s], flush, m[2], ratio(median(y, 5), median(a, 5)),
                ratio(median(y, 6), median(a, 6)), ratio(median(y, 7), median(a, 7)), ratio(median(y, 10), median(a, 10))
        }
        print "\nmax RT ms: the Producer never resets it, so it covers the whole run; \"w\" = already reached before the measured window opened."
    }' "$WORK/results.tsv"
