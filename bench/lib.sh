# Shared by the bench scripts that run each system in a network namespace of its own
# (bench/non-persistent.sh, bench/timer.sh, bench/pop.sh, bench/transaction.sh). Source it after
# setting PIDS=() and SCRIPT (the script's name, for messages).

# new_namespace: starts a holder process in a fresh network namespace with only `lo` up; its
# pid lands in NS (and PIDS, for the cleanup).
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

# in_ns HOLDER CMD...: runs CMD inside HOLDER's namespace.
in_ns() { local holder=$1; shift; nsenter -t "$holder" -n "$@"; }

# wait_for_line FILE PATTERN SECONDS: returns once FILE contains PATTERN; fails the script with
# FILE's last lines after SECONDS.
wait_for_line() {
  local file=$1 pattern=$2 seconds=$3
  for _ in $(seq $((seconds * 10))); do
    grep -q "$pattern" "$file" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "$SCRIPT: no \"$pattern\" in $file after ${seconds}s:" >&2
  tail -20 "$file" >&2
  exit 1
}

# start_system SYSTEM HOLDER HOME CLASSPATH [BROKER_CONF_LINE...]: starts Quiver (`quiver up`,
# the binary in $QUIVER) or Apache RocketMQ 5.5.0 (name server and broker from CLASSPATH) in
# HOLDER's namespace on 127.0.0.1:9876 and :10911, with its files under HOME; the extra lines
# go into RocketMQ's broker.conf. Sets `java` (a JVM with CLASSPATH in the namespace, for the
# tools and drivers) and `broker` (the broker's pid, also in PIDS).
start_system() {
  local system=$1 holder=$2 home=$3 classpath=$4
  shift 4
  mkdir -p "$home"
  cat >"$home/logback.xml" <<LOGBACK
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>$home/java.log</file>
    <encoder><pattern>%d %p %c{1} - %m%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="FILE"/></root>
</configuration>
LOGBACK
  java=(nsenter -t "$holder" -n java -Duser.home="$home" -Drocketmq.home.dir="$home"
    -Dlogback.configurationFile="$home/logback.xml" -cp "$classpath")
  case $system in
    quiver)
      nsenter -t "$holder" -n "$QUIVER" up --data "$home/data" --namesrv-port 9876 --broker-port 10911 \
        >"$home/quiver.out" 2>"$home/quiver.log" &
      broker=$!
      PIDS+=("$broker")
      wait_for_line "$home/quiver.out" '^ready' 30
      ;;
    rocketmq)
      printf 'listenPort=9876\nbindAddress=127.0.0.1\n' >"$home/namesrv.conf"
      {
        printf '%s\n' brokerClusterName=DefaultCluster brokerName=broker-a brokerId=0 \
          brokerIP1=127.0.0.1 bindAddress=127.0.0.1 listenPort=10911 namesrvAddr=127.0.0.1:9876 \
          flushDiskType=ASYNC_FLUSH "storePathRootDir=$home/store"
        [ $# -gt 0 ] && printf '%s\n' "$@"
      } >"$home/broker.conf"
      "${java[@]}" -Xms256m -Xmx256m org.apache.rocketmq.namesrv.NamesrvStartup -c "$home/namesrv.conf" \
        >"$home/namesrv.out" 2>&1 &
      PIDS+=($!)
      wait_for_line "$home/namesrv.out" 'boot success' 60
      "${java[@]}" -Xms1g -Xmx1g -XX:MaxDirectMemorySize=1g -XX:+UseG1GC \
        org.apache.rocketmq.broker.BrokerStartup -c "$home/broker.conf" >"$home/broker.out" 2>&1 &
      broker=$!
      PIDS+=("$broker")
      wait_for_line "$home/broker.out" 'boot success' 120
      ;;
    *) echo "$SCRIPT: unknown system $system" >&2; exit 2 ;;
  esac
}

# create_topic HOME TOPIC QUEUES: the topic, with the unchanged mqadmin (run with `java` from
# start_system), retried while the broker has not registered with the name server yet.
create_topic() {
  local home=$1 topic=$2 queues=$3
  for _ in $(seq 60); do
    if "${java[@]}" org.apache.rocketmq.tools.command.MQAdminStartup updateTopic -n 127.0.0.1:9876 \
      -c DefaultCluster -t "$topic" -r "$queues" -w "$queues" >"$home/updateTopic.out" 2>&1 \
      && grep -q success "$home/updateTopic.out"; then
      return 0
    fi
    sleep 1
  done
  cat "$home/updateTopic.out" >&2
  exit 1
}
