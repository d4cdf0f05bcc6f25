#!/usr/bin/env bash
# Admin work against sends: a producer's send latency at a fixed rate, alone and while a loop
# creates a topic, stores messages in every queue of it and deletes it (DELETE_TOPIC_IN_BROKER,
# as `mqadmin deleteTopic` sends it), over and over. Prints both runs' percentiles and how many
# topics the loop deleted, with the slowest deletion.
#
#   bench/admin-deletes.sh                        # 5 s warm-up, 30 s measured per run
#   RATE=2000 DURATION_S=60 bench/admin-deletes.sh
#   QUIVER=target/release/quiver bench/admin-deletes.sh   # a binary already built
#   FLUSH=SYNC_FLUSH bench/admin-deletes.sh       # the broker's flushDiskType
#   CHURN_QUEUES=1 CHURN_MESSAGES=8 bench/admin-deletes.sh   # smaller topics in the loop
#
# Runs `quiver up` on 127.0.0.1 (ports from NAMESRV_PORT, BROKER_PORT) with its data in a
# temporary folder. Needs python3 (the deletion loop speaks the remoting protocol itself, with
# JSON headers) and jq. Not run in CI: the figures depend on the machine.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
RATE=${RATE:-1000}
SENDERS=${SENDERS:-16}
WARMUP_S=${WARMUP_S:-5}
DURATION_S=${DURATION_S:-30}
QUEUES=${QUEUES:-8}
# The loop's topics: their queues, and the messages it stores in each before deleting it
# (something in every queue; 0: topics that never held a message).
CHURN_QUEUES=${CHURN_QUEUES:-8}
CHURN_MESSAGES=${CHURN_MESSAGES:-64}
FLUSH=${FLUSH:-ASYNC_FLUSH}
NAMESRV_PORT=${NAMESRV_PORT:-19876}
BROKER_PORT=${BROKER_PORT:-19911}

for tool in python3 jq; do
  command -v "$tool" >/dev/null || { echo "admin-deletes.sh: $tool is required" >&2; exit 2; }
done

WORK="$(mktemp -d /tmp/quiver-deletes.XXXXXX)"
PIDS=()
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

printf 'flushDiskType=%s\n' "$FLUSH" >"$WORK/broker.conf"
"$QUIVER" up --data "$WORK/data" -c "$WORK/broker.conf" \
  --namesrv-port "$NAMESRV_PORT" --broker-port "$BROKER_PORT" \
  >"$WORK/quiver.out" 2>"$WORK/quiver.log" &
PIDS+=($!)
for _ in $(seq 300); do
  grep -q '^ready' "$WORK/quiver.out" 2>/dev/null && break
  sleep 0.1
done
grep -q '^ready' "$WORK/quiver.out" || { echo "quiver up did not start:" >&2; tail "$WORK/quiver.log" >&2; exit 1; }

# produce NAME: one measured run of sends to the topic `Sends`; its summary in NAME.json.
produce() {
  "$QUIVER" bench produce -n "127.0.0.1:$NAMESRV_PORT" -t Sends --queues "$QUEUES" \
    -w "$SENDERS" --rate "$RATE" --warmup "$WARMUP_S" --duration "$DURATION_S" \
    --report-interval 10 --json "$WORK/$1.json" >"$WORK/$1.out"
}

# The deletion loop: create Churn-<n>, store CHURN_MESSAGES messages over its queues, delete
# it, until killed; one line per deletion (its milliseconds) in churn.log.
cat >"$WORK/churn.py" <<'PY'
import json, socket, struct, sys, time

port, queues, messages = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
sock = socket.create_connection(("127.0.0.1", port))
opaque = 0

def call(code, ext, body=b""):
    global opaque
    opaque += 1
    header = json.dumps({"code": code, "language": "JAVA", "version": 479, "opaque": opaque,
                         "flag": 0, "extFields": {k: str(v) for k, v in ext.items()}}).encode()
    sock.sendall(struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body)
    head = b""
    while len(head) < 4:
        head += sock.recv(4 - len(head))
    (length,) = struct.unpack(">i", head)
    frame = b""
    while len(frame) < length:
        frame += sock.recv(length - len(frame))
    (header_length,) = struct.unpack(">i", frame[:4])
    answer = json.loads(frame[4:4 + (header_length & 0xFFFFFF)])
    if answer.get("code") != 0:
        raise SystemExit(f"request {code} answered {answer.get('code')}: {answer.get('remark')}")

n = 0
while True:
    topic = f"Churn-{n}"
    call(17, {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues,
              "writeQueueNums": queues, "perm": 6})
    for i in range(messages):
        call(10, {"producerGroup": "churn", "topic": topic, "defaultTopic": "TBW102",
                  "defaultTopicQueueNums": queues, "queueId": i % queues, "sysFlag": 0,
                  "bornTimestamp": int(time.time() * 1000), "flag": 0, "properties": ""},
             b"x" * 128)
    started = time.monotonic()
    call(215, {"topic": topic})
    print(f"{(time.monotonic() - started) * 1000:.1f}", flush=True)
    n += 1
PY

echo "== sends alone: $RATE msg/s, $SENDERS senders, $QUEUES queues, $FLUSH"
produce alone
echo "== sends while topics are created, filled and deleted in a loop"
python3 "$WORK/churn.py" "$BROKER_PORT" "$CHURN_QUEUES" "$CHURN_MESSAGES" >"$WORK/churn.log" 2>&1 &
CHURN=$!
PIDS+=("$CHURN")
produce deleting
kill "$CHURN" 2>/dev/null || true
wait "$CHURN" 2>/dev/null || true

row() {
  jq -r --arg run "$1" '.summary | [$run, (.throughput.messages_per_s | floor),
    .latency.p50_ms, .latency.p99_ms, .latency.p999_ms, .latency.max_ms] | @tsv' "$WORK/$1.json"
}
echo
printf 'run\tmsg/s\tp50 ms\tp99 ms\tp99.9 ms\tmax ms\n'
row alone
row deleting
deletions=$(grep -cE '^[0-9.]+$' "$WORK/churn.log" || true)
slowest=$(grep -E '^[0-9.]+$' "$WORK/churn.log" | sort -n | tail -1)
echo
echo "deletions during the second run: $deletions of topics of $CHURN_QUEUES queue(s) holding" \
  "$CHURN_MESSAGES messages (slowest ${slowest:-?} ms); broker: $QUIVER"
if grep -qvE '^[0-9.]+$' "$WORK/churn.log"; then
  echo "the deletion loop stopped early:" >&2
  grep -vE '^[0-9.]+$' "$WORK/churn.log" >&2
fi
