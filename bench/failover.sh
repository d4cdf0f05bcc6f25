#!/usr/bin/env bash
# Failover in controller mode, Quiver (two Quiver brokers under Quiver's controller) against
# Apache RocketMQ 5.5.0 (two RocketMQ brokers under RocketMQ's controller), in the same run on
# this machine: compat/controller.sh's scenario (allAckInSyncStateSet, RocketMQ's producer
# sending from SENDERS threads (64), SIGKILL of the master), PAIRS times each, alternating. Prints per run the time from the
# kill to the first acknowledgement by the new master, the sends that failed meanwhile, and
# whether every acknowledged message was read back; then the medians.
#
#   bench/failover.sh [QUIVER_BINARY]      # 3 pairs, debug build unless a binary is given
#
# Needs what compat/controller.sh needs (root, unshare, Java). Not run in CI.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
export QUIVER_BINARY="${1:-${QUIVER_BINARY:-$REPO/target/release/quiver}}"
PAIRS=${PAIRS:-3}
ROWS="$(mktemp /tmp/quiver-failover.XXXXXX)"
trap 'rm -f "$ROWS"' EXIT

# Each system whole: Quiver's brokers under Quiver's controller, RocketMQ's under RocketMQ's.
declare -A SCENARIO=(
  [quiver]=quiver_brokers_fail_over_under_quivers_controller:quiver-brokers
  [rocketmq]=rocketmq_brokers_fail_over_under_a_controller:reference-brokers
)
for pair in $(seq "$PAIRS"); do
  for controller in quiver rocketmq; do
    out="$(CONTROLLER=$controller SCENARIOS="${SCENARIO[$controller]}" "$REPO/compat/controller.sh" 2>&1)" ||
      { echo "$out" | tail -30 >&2; echo "failover.sh: the $controller run failed" >&2; exit 1; }
    first_ms="$(echo "$out" | sed -n 's/.*first acknowledgement \([0-9]*\) ms after the kill.*/\1/p')"
    failed="$(echo "$out" | sed -n 's/^acknowledged [0-9]*, failed \([0-9]*\),.*/\1/p' | head -n 1)"
    missing="$(echo "$out" | sed -n 's/.*acknowledged and missing \([0-9]*\).*/\1/p')"
    echo "$controller $first_ms $failed $missing" >>"$ROWS"
    echo "| $pair | $controller | ${first_ms} ms | $failed failed sends | $missing acknowledged and missing |"
  done
done

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo
echo "| system | median ms from kill to the new master's first acknowledgement | median failed sends |"
echo "|---|---|---|"
for controller in quiver rocketmq; do
  ms=$(awk -v c="$controller" '$1 == c { print $2 }' "$ROWS" | median)
  failed=$(awk -v c="$controller" '$1 == c { print $3 }' "$ROWS" | median)
  echo "| $controller | $ms | $failed |"
done
