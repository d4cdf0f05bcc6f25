# Sourced by the compat scripts that run Apache RocketMQ 5.5.0 servers next to Quiver inside a
# private network namespace (compat/replication.sh, compat/controller.sh). The sourcing script
# sets COMPAT, CLASSPATH_FILE, KEPT_LOGS, RUN_TIMEOUT_S and defines `log`; it keeps the pids of
# what it starts in PIDS and its scratch folder in WORK.

# shellcheck source=ensure-tools.sh
source "$COMPAT/ensure-tools.sh"

# The same jars as `compat/run.sh --reference` (name server, broker, controller, mqadmin,
# client) from Maven Central into .cache/m2; the class path goes to its own file, so a
# concurrent run.sh keeps its own.
resolve() {
    mkdir -p "$COMPAT/target"
    mvn -B -q "-Dmaven.repo.local=$ROOT/.cache/m2" -f "$COMPAT/tools/pom.xml" -Preference dependency:build-classpath \
        "-Dmdep.outputFile=$CLASSPATH_FILE" >/dev/null
}

# Outside the namespace: checks for root, unshare and ip (else prints why and exits 0), builds
# quiver unless QUIVER_BINARY is set, resolves the jars, and runs "$0 --inside-namespace" in a
# fresh namespace with only `lo`, for at most RUN_TIMEOUT_S.
run_in_namespace() {
    if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null 2>&1 || ! command -v ip >/dev/null 2>&1; then
        log "SKIPPED: needs root, unshare and ip for a private network namespace (the reference" \
            "broker's HA port binds every interface)"
        exit 0
    fi
    ensure_tools
    if [ -z "${QUIVER_BINARY:-}" ]; then
        (cd "$ROOT" && cargo build -p quiver --locked)
        QUIVER_BINARY="$ROOT/target/debug/quiver"
    fi
    [ -x "$QUIVER_BINARY" ] || { log "no quiver binary at $QUIVER_BINARY"; exit 1; }
    export QUIVER_BINARY
    resolve
    # timeout signals its whole process group, so every server started inside goes too.
    exec timeout -k 15 "$RUN_TIMEOUT_S" unshare -n -- \
        bash -c 'ip link set lo up && exec "$0" --inside-namespace' "$0"
}

stop_all() {
    local pid deadline
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    deadline=$((SECONDS + 10))
    for pid in "${PIDS[@]}"; do
        while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
            sleep 0.2
        done
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    PIDS=()
}

keep_logs() {
    local scenario="$1" target="$KEPT_LOGS/$1"
    rm -rf "$target"
    mkdir -p "$target"
    (cd "$WORK/$scenario" &&
        find . \( -name '*.log' -o -name '*.out' -o -name '*.conf' \) -exec cp --parents {} "$target" \;)
    log "logs of $scenario kept in $target"
}

cleanup() {
    stop_all
    [ -n "$WORK" ] && rm -rf "$WORK"
}

# Waits up to $3 seconds for a line matching $2 in file $1.
wait_for_line() {
    local file="$1" pattern="$2" deadline=$((SECONDS + $3))
    while [ "$SECONDS" -lt "$deadline" ]; do
        if grep -q "$pattern" "$file" 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    log "no '$pattern' in $file within $3 s:"
    tail -n 30 "$file" >&2 || true
    return 1
}

java_cmd() {
    local home="$1"
    mkdir -p "$home"
    JAVA=(java -Duser.home="$home" -Drocketmq.home.dir="$home" -XX:+UseG1GC -cp "$(cat "$CLASSPATH_FILE")")
}

# Warnings and errors on the console: for the name server (the jars carry no logging
# configuration for it) and the check's client, whose default file logging says nothing useful.
quiet_logging() {
    cat >"$WORK/logback.xml" <<'EOF'
<configuration>
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d %-5level %logger{20} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="OUT"/></root>
</configuration>
EOF
    QUIET=(-Dlogback.configurationFile="$WORK/logback.xml" -Drmq.logback.configurationFile="$WORK/logback.xml")
}

# Reference broker from config $2 (its own logs under $1/home/logs/rocketmqlogs) with a heap of
# BROKER_HEAP (1g); its pid goes to PIDS and to BROKER_PID.
reference_broker() {
    local dir="$1" conf="$2"
    java_cmd "$dir/home"
    local heap="${BROKER_HEAP:-1g}"
    "${JAVA[@]}" "-Xms$heap" "-Xmx$heap" "-XX:MaxDirectMemorySize=$heap" org.apache.rocketmq.broker.BrokerStartup \
        -c "$conf" >"$dir/broker.out" 2>&1 &
    BROKER_PID=$!
    PIDS+=("$BROKER_PID")
    wait_for_line "$dir/broker.out" 'boot success' 90
}

# Runs each "function:folder" scenario in a subshell that stops its own servers, with -e in
# force (it would be ignored in an `if`), keeps the logs of those that fail, and exits 1 if any
# did. $1 names the whole run in the last line.
run_scenarios() {
    local what="$1" started=$SECONDS began status scenario folder
    shift
    trap cleanup EXIT
    trap 'exit 143' TERM INT
    rm -rf "$KEPT_LOGS"
    quiet_logging
    local failed=()
    for scenario in "$@"; do
        folder="${scenario#*:}"
        scenario="${scenario%%:*}"
        began=$SECONDS
        set +e
        (
            trap stop_all EXIT
            trap 'exit 143' TERM INT
            set -e
            "$scenario"
        )
        status=$?
        set -e
        if [ "$status" = 0 ]; then
            log "$scenario: passed in $((SECONDS - began)) s"
        else
            log "$scenario: FAILED after $((SECONDS - began)) s"
            failed+=("$scenario")
            keep_logs "$folder"
        fi
    done
    if [ "${#failed[@]}" != 0 ]; then
        log "FAILED: ${failed[*]} ($((SECONDS - started)) s)"
        exit 1
    fi
    log "$what passed ($((SECONDS - started)) s)"
}
