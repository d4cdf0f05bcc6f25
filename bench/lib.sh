# Shared by the bench scripts that run each system in a network namespace of its own
# (bench/non-persistent.sh, bench/timer.sh, bench/pop.sh). Source it after setting PIDS=() and
# SCRIPT (the script's name, for messages).

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
