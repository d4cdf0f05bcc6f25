#!/usr/bin/env bash
# Runs Apache RocketMQ's own Java client (5.5.0 and 4.9.7), mqadmin and the benchmark tools
# against a server started here, and against `quiver up` also RocketMQ 5's gRPC clients (Java,
# Python, Go, Node.js; compat/grpc), and exits non-zero if any test fails.
#
#   compat/run.sh               build quiver (debug), start `quiver up` on free ports, test it
#   compat/run.sh --release     the same with a release build
#   compat/run.sh --reference   test Apache RocketMQ 5.5.0 (name server and broker from Maven
#                               Central) instead, inside a private network namespace (root)
#   COMPAT_TEST=PushConsumerTest compat/run.sh   only the matching tests (Surefire's -Dtest)
#   COMPAT_KEEP=1 compat/run.sh                  keep the work folder (broker logs) at the end
#
# Jars come from Maven Central into .cache/m2 at the repository root (git-ignored, shared with
# other tooling that needs the reference jars).
set -euo pipefail

COMPAT="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$COMPAT")"
M2="$ROOT/.cache/m2"
TARGET="reference-or-quiver"
PROFILE=debug
INSIDE_NAMESPACE=false
for arg in "$@"; do
    case "$arg" in
        --reference) TARGET=reference ;;
        --release) PROFILE=release ;;
        --inside-namespace) INSIDE_NAMESPACE=true ;;
        *) echo "usage: $0 [--release] [--reference]" >&2; exit 2 ;;
    esac
done
[ "$TARGET" = reference ] || TARGET=quiver

# Test messageDelayLevel: level 2 waits 2 s (the delay test), the retry levels 3, 4, ... 1 s.
DELAY_LEVELS="1s 2s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s"

# Transaction checks (TransactionTest): a half undecided for 5 s is checked, every second.
TRANSACTION_CHECKS=$'transactionTimeOut=5000\ntransactionCheckInterval=1000'
# RocketMQ also needs its op records written sooner than its next check: it batches them for up
# to transactionOpBatchInterval (3 s), and a check round that runs before a commit's op record
# is written asks the producer again, and commits a second copy (seen with the defaults here).
REFERENCE_TRANSACTION_OPS='transactionOpBatchInterval=100'

log() { echo "compat: $*" >&2; }

# shellcheck source=ensure-tools.sh
source "$COMPAT/ensure-tools.sh"

# A test that fails is run once more and reported as a flake when the second run passes: the
# retry-to-dead-letter case has timed out once under a fully loaded 2-core machine, and one
# timing miss should not hide every other result. A test failing twice fails the run.
MVN=(mvn -B -q "-Dmaven.repo.local=$M2" -Dsurefire.rerunFailingTestsCount=1)
$INSIDE_NAMESPACE && MVN+=(-o)

# Runs Maven quietly; on failure prints what it said (compile errors, unresolved jars) and fails.
quiet_mvn() {
    local output
    if ! output="$("${MVN[@]}" "$@" 2>&1)"; then
        log "mvn $* failed:"
        printf '%s\n' "$output" | grep -v '^\s*$' | tail -n 60 >&2
        return 1
    fi
}

# Resolves every jar the run needs (online), compiles the tests against both clients, and
# writes the tools' class path.
resolve() {
    mkdir -p "$COMPAT/target"
    local reference_profile=()
    [ "$TARGET" = reference ] && reference_profile=(-Preference)
    quiet_mvn -f "$COMPAT/tools/pom.xml" "${reference_profile[@]}" dependency:build-classpath \
        "-Dmdep.outputFile=$COMPAT/target/tools.classpath"
    # Running no test still resolves the test class path and Surefire's JUnit provider, so a
    # later offline run (inside the namespace) has everything.
    local none=(test -Dtest=NoSuchTest -Dsurefire.failIfNoSpecifiedTests=false)
    quiet_mvn -f "$COMPAT/pom.xml" "${none[@]}"
    quiet_mvn -f "$COMPAT/pom.xml" -P client-4 "${none[@]}"
    if [ "$TARGET" = quiver ]; then
        quiet_mvn -f "$COMPAT/grpc/pom.xml" "${none[@]}"
        # RocketMQ's gRPC clients for Python, Go and Node.js, into .cache/grpc-clients.
        "$COMPAT/grpc/clients.sh" install
    fi
}

WORK=""
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    if [ -n "$WORK" ] && [ -n "${COMPAT_KEEP:-}" ]; then
        log "kept $WORK"
    elif [ -n "$WORK" ]; then
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

# Waits up to 60 s for a line matching $2 in file $1.
wait_for_line() {
    local file="$1" pattern="$2" i
    for i in $(seq 1 600); do
        if grep -q "$pattern" "$file" 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    log "no '$pattern' in $file within 60 s:"
    tail -n 50 "$file" >&2 || true
    return 1
}

NAMESRV=""
# Where `quiver up` serves gRPC clients; the reference has no gRPC port without its proxy.
GRPC=""
start_quiver() {
    local binary="$ROOT/target/$PROFILE/quiver"
    # Registrations every 2 s: tests that change routes on the name server see one happen.
    # SQL92 subscriptions (SqlFilterTest) are off by default, as in RocketMQ; the trace topic
    # exists from the start, as on the reference (TraceTest).
    printf 'messageDelayLevel=%s\nregisterNameServerPeriod=2000\nenablePropertyFilter=true\ntraceTopicEnable=true\n%s\n' \
        "$DELAY_LEVELS" "$TRANSACTION_CHECKS" >"$WORK/broker.conf"
    "$binary" up -c "$WORK/broker.conf" --data "$WORK/data" --namesrv-port 0 --broker-port 0 \
        >"$WORK/quiver.out" 2>"$WORK/quiver.log" &
    PIDS+=("$!")
    wait_for_line "$WORK/quiver.out" '^ready '
    NAMESRV="$(sed -n 's/^ready namesrv=\([^ ]*\).*/\1/p' "$WORK/quiver.out")"
    GRPC="$(sed -n 's/^ready .*grpc=\([^ ]*\).*/\1/p' "$WORK/quiver.out")"
    log "quiver up: $(cat "$WORK/quiver.out")"
}

# A free TCP port on 127.0.0.1.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts Apache RocketMQ's gRPC proxy 5.5.0 in cluster mode in front of the server under test;
# once it listens, PROXY is its gRPC endpoint.
PROXY=""
start_proxy() {
    local grpc remoting classpath
    grpc="$(free_port)"
    remoting="$(free_port)"
    classpath="$(cat "$COMPAT/target/tools.classpath")"
    mkdir -p "$WORK/proxy"
    printf '{"rocketMQClusterName": "DefaultCluster", "namesrvAddr": "%s", "grpcServerPort": %s, "remotingListenPort": %s, "proxyMode": "cluster"}\n' \
        "$NAMESRV" "$grpc" "$remoting" >"$WORK/proxy/rmq-proxy.json"
    java -Duser.home="$WORK/proxy" -Drocketmq.home.dir="$WORK/proxy" -Xms256m -Xmx512m -cp "$classpath" \
        org.apache.rocketmq.proxy.ProxyStartup -pc "$WORK/proxy/rmq-proxy.json" -pm cluster \
        >"$WORK/proxy/proxy.log" 2>&1 &
    PIDS+=("$!")
    local i
    for i in $(seq 1 600); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$grpc") 2>/dev/null; then
            PROXY="127.0.0.1:$grpc"
            return 0
        fi
        sleep 0.1
    done
    log "rocketmq-proxy did not listen on $grpc within 60 s:"
    tail -n 30 "$WORK/proxy/proxy.log" >&2
    return 1
}

start_reference() {
    local classpath
    classpath="$(cat "$COMPAT/target/tools.classpath")"
    mkdir -p "$WORK/home" "$WORK/store"
    cat >"$WORK/logback.xml" <<'EOF'
<configuration>
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d %-5level %logger{20} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="OUT"/></root>
</configuration>
EOF
    printf 'listenPort=9876\nbindAddress=127.0.0.1\n' >"$WORK/namesrv.conf"
    cat >"$WORK/broker.conf" <<EOF
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
brokerIP1=127.0.0.1
bindAddress=127.0.0.1
listenPort=10911
namesrvAddr=127.0.0.1:9876
autoCreateTopicEnable=true
flushDiskType=ASYNC_FLUSH
storePathRootDir=$WORK/store
messageDelayLevel=$DELAY_LEVELS
enablePropertyFilter=true
$TRANSACTION_CHECKS
$REFERENCE_TRANSACTION_OPS
traceTopicEnable=true
EOF
    local jvm=(java -Duser.home="$WORK/home" -Drocketmq.home.dir="$WORK/home"
        -Dlogback.configurationFile="$WORK/logback.xml" -Drmq.logback.configurationFile="$WORK/logback.xml"
        -XX:+UseG1GC -cp "$classpath")
    "${jvm[@]}" -Xms256m -Xmx256m org.apache.rocketmq.namesrv.NamesrvStartup -c "$WORK/namesrv.conf" \
        >"$WORK/namesrv.log" 2>&1 &
    PIDS+=("$!")
    wait_for_line "$WORK/namesrv.log" 'boot success'
    "${jvm[@]}" -Xms1g -Xmx1g -XX:MaxDirectMemorySize=1g org.apache.rocketmq.broker.BrokerStartup \
        -c "$WORK/broker.conf" >"$WORK/broker.log" 2>&1 &
    PIDS+=("$!")
    wait_for_line "$WORK/broker.log" 'boot success'
    NAMESRV=127.0.0.1:9876
    log "Apache RocketMQ 5.5.0 up: name server $NAMESRV, broker 127.0.0.1:10911"
}

run_tests() {
    local failed=0 common=("-Dcompat.namesrv=$NAMESRV" "-Dcompat.toolsClasspath=$COMPAT/target/tools.classpath")
    # FailoverTest starts its own name server, master and slave from this binary and kills the
    # master; without the property (a --reference run) it is skipped.
    if [ "$TARGET" = quiver ]; then
        common+=("-Dcompat.quiverBinary=$ROOT/target/$PROFILE/quiver")
    fi
    # COMPAT_TEST=Class[#method] runs only the matching tests (Surefire's -Dtest).
    if [ -n "${COMPAT_TEST:-}" ]; then
        common+=("-Dtest=$COMPAT_TEST" -Dsurefire.failIfNoSpecifiedTests=false)
    fi
    log "rocketmq-client 5.5.0, mqadmin and benchmark tools"
    "${MVN[@]}" -f "$COMPAT/pom.xml" test "${common[@]}" || failed=1
    log "rocketmq-client 4.9.7"
    "${MVN[@]}" -f "$COMPAT/pom.xml" -P client-4 test "${common[@]}" || failed=1
    if [ -n "$GRPC" ]; then
        log "gRPC at $GRPC: rocketmq-client-java 5.2.0, and the Python, Go and Node.js clients"
        "${MVN[@]}" -f "$COMPAT/grpc/pom.xml" test "${common[@]}" "-Dcompat.grpc=$GRPC" \
            -Dcompat.grpcClients=true || failed=1
        if start_proxy; then
            log "rocketmq-client-java 5.2.0 through rocketmq-proxy 5.5.0 (cluster mode) at $PROXY"
            "${MVN[@]}" -f "$COMPAT/grpc/pom.xml" test "${common[@]}" "-Dcompat.grpc=$PROXY" \
                -Dcompat.grpcViaProxy=true -Dcompat.grpcReports=grpc-proxy \
                || failed=1
        else
            failed=1
        fi
    fi
    local report
    for report in "$COMPAT"/target/surefire-reports-*/*.txt; do
        grep -h "Tests run" "$report" | sed "s|^|$(basename "$(dirname "$report")" | sed 's/surefire-reports-//'): |" >&2
    done
    if [ "$failed" != 0 ]; then
        log "FAILED (server log: see above)"
        [ -f "$WORK/quiver.log" ] && tail -n 40 "$WORK/quiver.log" >&2
        return 1
    fi
    log "all compatibility tests passed against $TARGET"
    # One plain summary line over every Surefire report, so a reader (or CI) sees the count.
    # The XML reports list each test once, with the failed first attempt of a test that passed
    # on Surefire's rerun marked flaky; the text reports count such a class oddly.
    local passed rerun
    passed=$(cat "$COMPAT"/target/surefire-reports-*/TEST-*.xml 2>/dev/null | grep -c '<testcase ' || true)
    rerun=$(cat "$COMPAT"/target/surefire-reports-*/TEST-*.xml 2>/dev/null |
        awk '/<testcase /{name=$0} /<flaky(Failure|Error)/{if (name != seen) {n++; seen=name}} END {print n + 0}')
    echo "compat: $passed passed ($rerun of them on a rerun), 0 failed"
}

main() {
    ensure_tools
    if [ "$TARGET" = reference ] && ! $INSIDE_NAMESPACE; then
        resolve
        if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null 2>&1 && command -v ip >/dev/null 2>&1; then
            # The reference broker binds its HA port on every interface; a namespace with only
            # `lo` keeps it (and everything else) on loopback and off the fixed ports outside.
            exec unshare -n -- bash -c 'ip link set lo up && exec "$0" --reference --inside-namespace' "$0"
        fi
        log "not root or no unshare/ip: running the reference on 127.0.0.1:9876/10911 in this namespace"
    fi
    if [ "$TARGET" = quiver ]; then
        local cargo_args=(build -p quiver --locked)
        [ "$PROFILE" = release ] && cargo_args+=(--release)
        (cd "$ROOT" && cargo "${cargo_args[@]}")
        resolve
    fi
    rm -rf "$COMPAT"/target/surefire-reports-*
    WORK="$(mktemp -d -t quiver-compat.XXXXXX)"
    if [ "$TARGET" = reference ]; then
        start_reference
    else
        start_quiver
    fi
    run_tests
}

main
