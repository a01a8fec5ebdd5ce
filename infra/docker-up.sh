#!/usr/bin/env bash
# Docker sandboxes need an engine: installs Debian's docker.io and debootstrap if they are
# missing, and starts dockerd (log in /var/log/halyard-dockerd.log) unless one is running.
# Idempotent. Needs root (as on these machines).
set -euo pipefail
if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io debootstrap >/dev/null
fi
if [ -S /var/run/docker.sock ] && docker version >/dev/null 2>&1; then
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
