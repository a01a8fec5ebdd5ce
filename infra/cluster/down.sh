#!/usr/bin/env bash
# Stops what infra/cluster/up.sh started from DIR (default ./.cluster): Halyard's processes first
# (SIGTERM: they hand their runs over and drain), then the NATS nodes. Data stays in DIR.
set -uo pipefail
cd "$(dirname "$0")/../.."
DIR=$(realpath -m "${1:-.cluster}")
[ -s "$DIR/pids" ] || { echo "no cluster running from $DIR"; exit 0; }
stop() {
  local pids=("$@")
  [ ${#pids[@]} -eq 0 ] && return
  kill -TERM "${pids[@]}" 2>/dev/null
  for _ in $(seq 1 150); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive -eq 0 ] && return
    sleep 0.2
  done
  kill -KILL "${pids[@]}" 2>/dev/null
}
mapfile -t services < <(grep -v ' nats-' "$DIR/pids" | cut -d' ' -f1)
mapfile -t nodes < <(grep ' nats-' "$DIR/pids" | cut -d' ' -f1)
stop "${services[@]}"
stop "${nodes[@]}"
: > "$DIR/pids"
echo "Halyard cluster in $DIR stopped"
