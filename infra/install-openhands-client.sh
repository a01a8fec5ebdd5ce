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
# With --image (once a Docker engine answers), the same tree becomes an image,
# halyard-openhands-agent-server:<agent server's version>, whose /venv/bin/agent-server is
# OpenHands' real agent server: what the Runtime API's tests start as a runtime (OpenHands'
# published agent-server images come from a registry this machine cannot reach).
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
  if ! docker image inspect "$image" >/dev/null 2>&1; then
    echo "importing: $image from $ROOT (about a minute)" >&2
    # The workspace OpenHands' runtimes run in (as uid 10001, its sandbox user).
    mkdir -p "$ROOT/workspace" && chown 10001:10001 "$ROOT/workspace"
    tar -C "$ROOT" --exclude='./proc/*' --exclude='./sys/*' --exclude='./tmp/*' --exclude=./client -c . \
      | docker import --change 'ENV PATH=/venv/bin:/usr/local/bin:/usr/bin:/bin' --change 'WORKDIR /workspace' - "$image" >/dev/null
  fi
  echo "$image"
fi
