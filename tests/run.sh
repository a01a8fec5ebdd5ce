#!/usr/bin/env bash
# Sets up and runs every test of Halyard: installs nats-server (and the Python client's
# packages) if missing, installs and starts a Docker engine and builds the sandbox base image
# if missing, builds the web app and installs Chromium if missing, builds the workspace, and
# runs the unit and end-to-end tests against real
# nats-server processes, the real Docker engine and real HTTP. Extra arguments go to the test
# runner.
set -euo pipefail
cd "$(dirname "$0")/.."
bash infra/install-deps.sh
bash tests/install-deps.sh
bash infra/docker-up.sh
bash infra/build-base-image.sh
# OpenHands' real agent server as an image, for the Runtime API's tests (its tree is made by
# tests/install-deps.sh).
bash infra/install-openhands-client.sh --image >/dev/null
# The browser tests: the built web app, and Debian's Chromium (infra/install-deps.sh installs
# it: the agent's browser in process sandboxes; Playwright cannot download one).
bash infra/build-web.sh --require
if [ -z "${HALYARD_NATS_SERVER:-}" ] && ! command -v nats-server >/dev/null 2>&1; then
  export HALYARD_NATS_SERVER="$(dirname "$(python3 -c 'import sys; print(sys.executable)')")/nats-server"
fi
# Format and lint first: they fail fast, and a clean tree is part of passing.
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# Same package selection for the build and the tests, so the binary the end-to-end tests run
# is built once, with the same features.
cargo build --workspace --all-targets
# Every test that starts sandboxes ends them, pass or fail: processes of sandbox uids
# (HALYARD_PROCESS_UID_BASE, 200000 and up) left running are a failure of the run. Ones that
# were there before the run are not this run's doing.
# (Zombies are not counted: they hold nothing, and init reaps them.)
sandbox_procs() { ps -eo pid=,uid=,stat=,args= | awk '$2 >= 200000 && $2 < 250000 && $3 !~ /^Z/'; }
before=$(sandbox_procs | awk '{print $1}' | sort)
status=0
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast "$@" || status=$?
else
  cargo test --workspace --no-fail-fast "$@" || status=$?
fi
sleep 1
left=$(sandbox_procs | awk -v before="$before" 'BEGIN { n = split(before, b, "\n"); for (i = 1; i <= n; i++) old[b[i]] = 1 } !($1 in old)')
if [ -n "$left" ]; then
  echo "sandbox processes left running after the tests (pid uid state command):" >&2
  echo "$left" >&2
  status=1
fi
[ "$status" = 0 ] || exit "$status"
# The load suites' smoke run (every suite once, small; about three minutes), so they cannot rot
# between the runs that measure. Its figures mean nothing and go to target/, not load/results.
if [ $# -eq 0 ]; then
  cargo run -q -p halyard-load -- --smoke --out target/load-smoke
fi
