#!/usr/bin/env bash
# Installs OpenHands' own Runtime API client (the `openhands-ai` package from PyPI, whose app
# server's RemoteSandboxService drives a Runtime API) for the Runtime API's tests, at
# /opt/halyard-openhands. `openhands-ai` needs Python 3.12 or 3.13 and this machine's Debian
# (bookworm) has 3.11, so it goes into a minimal Debian trixie tree of its own (debootstrap,
# Python 3.13, about 30 s), with a venv inside (pip, about a minute, 1.6 GB in all); the tests
# run it with `chroot`, which keeps the host's network, so it reaches Halyard on loopback:
#
#   chroot /opt/halyard-openhands /venv/bin/python /client/remote_sandbox_client.py ...
#
# tests/servers/openhands/remote_sandbox_client.py is copied in as /client/. Needs root.
#
# With --image (once a Docker engine answers), the same tree, with Chromium and git added, becomes
# an image, halyard-openhands-agent-server:<agent server's version>, also tagged as the image
# OpenHands' app server asks for by default (ghcr.io/openhands/agent-server:<version>-python),
# whose agent server is OpenHands' real one: what the Runtime API's tests start as runtimes
# (OpenHands' published images come from a registry this machine cannot reach).
# Idempotent: re-running it changes nothing once the package (and the image) are there.
set -euo pipefail

ROOT=${HALYARD_OPENHANDS_ROOT:-/opt/halyard-openhands}
VERSION=${HALYARD_OPENHANDS_VERSION:-1.11.0}
here=$(cd "$(dirname "$0")/.." && pwd)

if [ "$(id -u)" != 0 ]; then
  echo "install-openhands-client.sh needs root (debootstrap, chroot)" >&2
  exit 1
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq debootstrap >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
fi
if ! [ -x "$ROOT/usr/bin/python3" ] || ! [ -d "$ROOT/usr/lib/python3.13/venv" ]; then
  echo "installing: a Debian trixie tree with Python 3.13 at $ROOT" >&2
  rm -rf "$ROOT"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates trixie "$ROOT" http://deb.debian.org/debian >/dev/null
fi
# The host's name service and certificate authorities (the registries may be reached through a
# proxy whose authority only the host's bundle has).
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/ca-certificates.crt"
if ! chroot "$ROOT" /venv/bin/python -c "import importlib.metadata as m, sys; sys.exit(m.version('openhands-ai') != '$VERSION')" >/dev/null 2>&1; then
  echo "installing: openhands-ai $VERSION into $ROOT/venv" >&2
  chroot "$ROOT" sh -c "[ -x /venv/bin/pip ] || python3 -m venv /venv"
  # PIP_FIND_LINKS and the like name the host's paths: not the tree's.
  env -u PIP_FIND_LINKS PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    chroot "$ROOT" /venv/bin/pip install --quiet --disable-pip-version-check "openhands-ai==$VERSION" aiosqlite
fi
mkdir -p "$ROOT/client"
cp "$here/tests/servers/openhands/remote_sandbox_client.py" "$ROOT/client/"

if [ "${1:-}" = "--image" ]; then
  agent=$(chroot "$ROOT" /venv/bin/python -c "import importlib.metadata as m; print(m.version('openhands-agent-server'))")
  image="halyard-openhands-agent-server:$agent"
  # The image OpenHands' app server asks a Runtime API for by default (its default sandbox spec).
  official=$(cd "$ROOT" && OPENHANDS_SUPPRESS_BANNER=1 chroot "$ROOT" /venv/bin/python -c \
    "from openhands.app_server.sandbox.sandbox_spec_service import get_agent_server_image as i; print(i())" 2>/dev/null | tail -1)
  if ! docker image inspect "$image" >/dev/null 2>&1; then
    echo "importing: $image from $ROOT (about a minute)" >&2
    # What OpenHands' own agent-server image has and its agent needs: Chromium (its browser
    # tool is always on) and git; its user, openhands (10001), with a home; its command where
    # OpenHands' default spec runs it; a workspace its user owns.
    export DEBIAN_FRONTEND=noninteractive
    chroot "$ROOT" sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium git >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*'
    grep -q '^openhands:' "$ROOT/etc/passwd" || echo 'openhands:x:10001:10001:OpenHands:/home/openhands:/bin/bash' >>"$ROOT/etc/passwd"
    grep -q '^openhands:' "$ROOT/etc/group" || echo 'openhands:x:10001:' >>"$ROOT/etc/group"
    mkdir -p "$ROOT/home/openhands" "$ROOT/workspace/project" "$ROOT/usr/local/bin"
    ln -sf /venv/bin/agent-server "$ROOT/usr/local/bin/openhands-agent-server"
    rm -rf "$ROOT/workspace/conversations" "$ROOT/workspace/bash_events"
    chown -R 10001:10001 "$ROOT/home/openhands" "$ROOT/workspace"
    tar -C "$ROOT" --exclude='./proc/*' --exclude='./sys/*' --exclude='./tmp/*' --exclude=./client --exclude=./root -c . \
      | docker import --change 'ENV PATH=/venv/bin:/usr/local/bin:/usr/bin:/bin' --change 'WORKDIR /workspace' - "$image" >/dev/null
  fi
  if [ -n "$official" ] && ! docker image inspect "$official" >/dev/null 2>&1; then
    docker tag "$image" "$official"
  fi
  echo "$image"
fi
