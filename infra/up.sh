#!/usr/bin/env bash
# Sets up and runs Halyard on this machine: installs nats-server if missing, builds the release
# binary and the web workspace (when npm is there and the build is missing or stale), and runs
# every service in one process (`halyard up`) with an embedded nats-server,
# sled read models and the default sandbox kind, all under $HALYARD_DATA_DIR (default
# ./.halyard). The default kind is Docker where an engine with the base image answers, process
# sandboxes otherwise; HALYARD_SANDBOX=docker first installs and starts dockerd and builds the
# base image.
#
# Point it at an OpenAI-compatible LLM with HALYARD_LLM_BASE_URL, HALYARD_LLM_MODEL and
# HALYARD_LLM_API_KEY. API keys come from HALYARD_API_KEYS=user:key,...; without it a single
# development key (user `dev`, an administrator) is made once, kept in the data directory and
# printed on every start.
set -euo pipefail
cd "$(dirname "$0")/.."
bash infra/install-deps.sh
if [ "${HALYARD_SANDBOX:-auto}" = docker ]; then
  bash infra/docker-up.sh
  bash infra/build-base-image.sh
fi
if [ -z "${HALYARD_NATS_SERVER:-}" ] && ! command -v nats-server >/dev/null 2>&1; then
  export HALYARD_NATS_SERVER="$(dirname "$(python3 -c 'import sys; print(sys.executable)')")/nats-server"
fi
bash infra/build-web.sh
cargo build --release -p halyard
. infra/dev-key.sh
bin="$(cd "${CARGO_TARGET_DIR:-./target}/release" && pwd)"
echo "The halyard CLI is $bin/halyard: export PATH=\"$bin:\$PATH\" (or cargo install --path services/halyard)" >&2
exec "${CARGO_TARGET_DIR:-./target}/release/halyard" up "$@"
