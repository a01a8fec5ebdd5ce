#!/usr/bin/env bash
# Docker sandboxes need an engine: installs Debian's docker.io, debootstrap and gVisor (runsc)
# if they are missing, registers runsc with dockerd (as `runsc`), and starts dockerd (log in
# /var/log/halyard-dockerd.log) unless one is running. Idempotent. Needs root (as on these
# machines).
#
# gVisor runs with `--network=host`: gVisor's own network stack (netstack) cannot set itself up
# on these machines with Debian's runsc (2022-12: "cannot run with network enabled in root
# network namespace"), so network calls go to the kernel, inside the network namespace Docker
# made for the container (its network, and Halyard's rules on it, still apply). Every other
# system call is still gVisor's.
set -euo pipefail
if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1 || ! command -v runsc >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io debootstrap runsc >/dev/null
fi
# Registers runsc, keeping whatever else daemon.json says.
mkdir -p /etc/docker
changed=0
python3 - <<'PY' || changed=1
import json, os, sys
path = "/etc/docker/daemon.json"
conf = json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else {}
want = {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=host"]}
if conf.get("runtimes", {}).get("runsc") != want:
    conf.setdefault("runtimes", {})["runsc"] = want
    json.dump(conf, open(path, "w"), indent=2)
    print("registered runsc in", path)
    sys.exit(1)
PY
if [ -S /var/run/docker.sock ] && docker version >/dev/null 2>&1; then
  # A running engine reads its runtimes again on SIGHUP.
  if [ "$changed" = 1 ]; then
    kill -HUP "$(pidof dockerd)"
    sleep 1
  fi
  echo "dockerd already running" >&2
  exit 0
fi
nohup dockerd >/var/log/halyard-dockerd.log 2>&1 &
for _ in $(seq 1 120); do
  if [ -S /var/run/docker.sock ] && docker version >/dev/null 2>&1; then
    echo "dockerd is up" >&2
    exit 0
  fi
  sleep 0.5
done
echo "dockerd did not start; see /var/log/halyard-dockerd.log" >&2
tail -20 /var/log/halyard-dockerd.log >&2 || true
exit 1
